"""The web viewer: server-rendered pages over the warehouse (Starlette + Jinja2), each with a JSON twin
(`/samples` and `/samples.json`). It reads through an in-memory DuckDB connection over the Parquet files per
request (`Warehouse.connect()`), never the warehouse's DuckDB file; its one write is a review (reviews.py): a new
partition file of the append-only `reviews` table.

Safety: bound to 127.0.0.1 by default; requests whose Host header is not one of the allowed hosts are refused
(DNS rebinding); every value is autoescaped by Jinja (model outputs are untrusted text); charts are separate SVG
images; a Content-Security-Policy forbids scripts and anything not from this server. Writes (POST) come from this
viewer's own pages only: the browser's Origin (or Sec-Fetch-Site) must be this server, and the form must carry the
token of its SameSite=Strict cookie (double submit). The reviewer is named by a configured header (an
authenticating proxy's) or asked once and kept in a cookie.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlencode

from evalpipe.viewer import charts, queries
from evalpipe.viewer import reviews as rv

HERE = Path(__file__).parent
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
MISSING = "-"  # how every page (and the CLI) prints a missing value
CSP = "default-src 'self'; script-src 'none'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"


def fmt(v: Any, spec: str = ".3f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)) and spec:
        return format(v, spec) if isinstance(v, float) else str(v)
    return str(v)


def _fmt_kind(v: Any, kind: str | None) -> str:
    from evalpipe.metrics.aggregate import format_value

    return format_value(v, kind, ".3f")


def ci(lo: Any, hi: Any) -> str:
    if fmt(lo) == MISSING or fmt(hi) == MISSING:
        return MISSING
    return f"{lo:.3f}-{hi:.3f}"


def _json_default(o: Any) -> Any:
    if hasattr(o, "isoformat"):
        return o.isoformat()
    if hasattr(o, "item"):
        return o.item()
    return str(o)


def _safe_json(obj: Any) -> Any:
    """NaN -> null, numpy scalars -> Python, dataclasses -> dicts."""
    return json.loads(json.dumps(obj, default=_json_default, allow_nan=True).replace("NaN", "null"))


REVIEWER_COOKIE, CSRF_COOKIE = "evalpipe_reviewer", "evalpipe_csrf"
MAX_FORM_BYTES = 64 * 1024


def create_app(warehouse, allowed_hosts: list[str] | None = None, title: str = "evalpipe",
               reviews: "rv.ReviewSettings | None" = None):
    """The Starlette app. `warehouse`: an evalpipe Warehouse. `allowed_hosts`: Host header values accepted
    (default: loopback names only). `reviews`: the config's `reviews:` settings (rubric, identity header, ...)."""
    from jinja2 import Environment, FileSystemLoader, select_autoescape
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["fmt"] = fmt
    env.filters["fmtk"] = _fmt_kind  # a count without decimals
    env.filters["pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str) \
        if not isinstance(v, str) else v
    env.globals.update(ci=ci, MISSING=MISSING, title=title, qs=lambda **kw: urlencode({k: v for k, v in kw.items()
                                                                                         if v not in (None, "")}))

    def page(name: str, build: Callable[[Request, Any], dict[str, Any]]):
        async def endpoint(request: Request) -> Response:
            from starlette.concurrency import run_in_threadpool

            as_json = request.url.path.endswith(".json")
            try:
                ctx = await run_in_threadpool(_build, request, build)
            except ValueError as exc:
                msg = str(exc).splitlines()[0]
                if as_json:
                    return JSONResponse({"error": msg}, status_code=400)
                return HTMLResponse(env.get_template("error.html").render(error=msg), status_code=400)
            if ctx is None:
                if as_json:
                    return JSONResponse({"error": "not found"}, status_code=404)
                return HTMLResponse(env.get_template("error.html").render(error="not found"), status_code=404)
            if as_json:
                return JSONResponse(_safe_json(ctx))
            return HTMLResponse(env.get_template(name).render(**ctx, request=request))

        return endpoint

    def _build(request, build):
        con = warehouse.connect()
        try:
            return build(request, con)
        finally:
            con.close()

    def svg(build: Callable[[Request, Any], bytes]):
        async def endpoint(request: Request) -> Response:
            from starlette.concurrency import run_in_threadpool

            try:
                body = await run_in_threadpool(_build, request, build)
            except ValueError as exc:
                return Response(str(exc).splitlines()[0], status_code=400, media_type="text/plain")
            return Response(body, media_type="image/svg+xml", headers={"Cache-Control": "no-store"})

        return endpoint

    settings = reviews or rv.ReviewSettings()
    held = rv.Reservations(settings.reserve_s, rv.reservations_path(warehouse))
    review_routes = _review_routes(env, warehouse, settings, held, _build, page)
    routes = []
    for path, template, build in (("/", "index.html", _index), ("/samples", "samples.html", _samples),
                                  ("/sample", "sample.html", _sample), ("/compare", "compare.html", _compare),
                                  ("/charts", "charts.html", _charts), ("/calibration", "calibration.html", _calibration),
                                  ("/ranking", "ranking.html", lambda r, con: _ranking(r, con, settings)),
                                  ("/matrix", "matrix.html", _matrix), ("/reviews", "reviews.html", _reviews),
                                  ("/rubric", "rubric.html", lambda r, con: _rubric(r, con, settings))):
        routes.append(Route(path, page(template, build)))
        routes.append(Route(("/index" if path == "/" else path) + ".json", page(template, build)))
    routes += review_routes
    routes += [Route("/chart/heatmap.svg", svg(lambda r, con: charts.heatmap_svg(
                   queries.heatmap(con, include_tries=_tries(r))))),
               Route("/chart/slices.svg", svg(_slices_svg)), Route("/chart/cost.svg", svg(_cost_svg)),
               Route("/chart/ranking.svg", svg(lambda r, con: charts.ranking_svg(_ranking_rows(r, con, settings)))),
               Route("/favicon.ico", lambda request: Response(status_code=204)),
               Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")]
    hosts = list(allowed_hosts or LOCAL_HOSTS)
    return Starlette(routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts),
                                                Middleware(_SecurityHeaders)])


class _SecurityHeaders:
    """ASGI middleware: a strict Content-Security-Policy and no MIME sniffing on every response."""

    HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
               (b"referrer-policy", b"no-referrer")]

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": list(message.get("headers", [])) + self.HEADERS}
            await send(message)

        await self.app(scope, receive, send_with_headers)


# ---- pages: each returns the context of its template, which is also its JSON twin --------------------------------
def _arg(request, name: str, required: bool = False) -> str | None:
    v = request.query_params.get(name)
    v = v.strip() if isinstance(v, str) else None
    if required and not v:
        raise ValueError(f"missing query parameter {name!r}")
    return v or None


def _int(request, name: str, default: int, lo: int | None = None, hi: int | None = None) -> int:
    """A whole-number query parameter within [lo, hi]; anything else is a ValueError (a 400 with its message),
    never a clamp nor a value handed to SQL that overflows there (page 10^25 was a 500)."""
    v = request.query_params.get(name)
    if v in (None, ""):
        return default
    shown = v if len(v) <= 40 else v[:37] + "..."
    try:
        n = int(v)
    except ValueError:  # (also a text of more than 4300 digits: int() refuses it)
        raise ValueError(f"{name} must be a whole number, got {shown!r}") from None
    if (lo is not None and n < lo) or (hi is not None and n > hi):
        raise ValueError(f"{name} must be between {lo} and {hi}, got {shown!r}")
    return n


def _tries(request) -> bool:
    """`tries=1`: also show try runs (`adhoc:*`, `@limit<N>`, `@<experiment>` keys); `limited=1` is its old name."""
    return "1" in (request.query_params.get("tries"), request.query_params.get("limited"))


def _pickable(all_models: list[str], tries: bool, *chosen: str | None) -> tuple[list[str], int]:
    """A picker's models (try runs left out unless asked, a chosen one always kept) and how many were left out."""
    shown = queries.shown_models(all_models, tries)
    picker = [m for m in all_models if m in shown or m in chosen]
    return picker, len(all_models) - len(shown)


def _ids(request) -> list[str] | None:
    """`ids=a,b,c`: only these samples (a failed gate links to the samples that failed it)."""
    v = _arg(request, "ids")
    return [i.strip() for i in v.split(",") if i.strip()] if v else None


def _index(request, con) -> dict[str, Any]:
    tries = _tries(request)
    rows = queries.partitions(con, include_tries=tries)
    hidden = 0 if tries else len({r["model"] for r in queries.partitions(con)} - {r["model"] for r in rows})
    pairwise = rv.stored_ranking(con)
    return {"partitions": rows, "splits": queries.splits(con), "models": queries.models(con),
            "show_tries": tries, "hidden_try_models": hidden, "pairwise": pairwise,
            "pairwise_splits": list(dict.fromkeys(r["benchmark_split"] for r in pairwise))}


def _samples(request, con) -> dict[str, Any]:
    split = _arg(request, "split") or next(iter(queries.splits(con)), None)
    if split is None:
        return {"page": None, "split": None, "splits": [], "models": [], "metrics": [], "slices": [],
                "outcomes": queries.OUTCOMES, "sorts": list(queries.SORTS)}
    tries, model = _tries(request), _arg(request, "model")
    all_models = queries.models(con, split)
    picker, hidden = _pickable(all_models, tries, model)
    shown = queries.shown_models(all_models, tries)
    f = queries.SampleFilter(split=split, metric=_arg(request, "metric"), model=model,
                             outcome=_arg(request, "outcome"), slice=_arg(request, "slice"), q=_arg(request, "q"),
                             tool=_arg(request, "tool"), fixture_miss=request.query_params.get("fixture_miss") == "1",
                             stop=_arg(request, "stop"), models=None if len(shown) == len(all_models) else shown,
                             ids=_ids(request),
                             sort=_arg(request, "sort") or "index", page=_int(request, "page", 1, 1, queries.MAX_PAGE),
                             page_size=_int(request, "page_size", queries.DEFAULT_PAGE_SIZE, 1, queries.MAX_PAGE_SIZE))
    page = queries.samples(con, f)
    filters = {**page.filters, "tries": 1 if tries else None}
    return {"page": {"rows": page.rows, "total": page.total, "page": page.page, "pages": page.pages,
                     "page_size": page.page_size, "metric": page.metric}, "filters": filters, "split": split,
            "splits": queries.splits(con), "models": picker, "hidden_try_models": hidden,
            "metrics": queries.metric_names(con, split), "slices": queries.slice_values(con, split),
            "tools": queries.tool_names(con, split), "stop_reasons": queries.stop_reasons(con, split),
            "outcomes": queries.OUTCOMES, "sorts": list(queries.SORTS)}


def _sample(request, con) -> dict[str, Any] | None:
    return queries.sample(con, _arg(request, "split", True), _arg(request, "model", True),
                          _arg(request, "id", True), full=request.query_params.get("full") == "1")


def _compare(request, con) -> dict[str, Any]:
    split = _arg(request, "split") or next(iter(queries.splits(con)), None)
    tries = _tries(request)
    all_models = queries.models(con, split) if split else []
    a, b = _arg(request, "a"), _arg(request, "b")
    picker, hidden = _pickable(all_models, tries, a, b)
    if split and not a:  # a bare /compare: the first two models that are not try runs
        shown = queries.shown_models(all_models, tries)
        if len(shown) >= 2:
            a, b = shown[0], shown[1]
    result = None
    if split and a and b:
        if a not in all_models or b not in all_models:
            raise ValueError(f"both models need results on {split}; available: {', '.join(all_models) or 'none'}")
        result = queries.compare(con, split, a, b, _arg(request, "metric"))
    return {"split": split, "splits": queries.splits(con), "models": picker, "a": a, "b": b, "show_tries": tries,
            "hidden_try_models": hidden, "metrics": queries.metric_names(con, split) if split else [],
            "result": result}


def _charts(request, con) -> dict[str, Any]:
    split = _arg(request, "split") or next(iter(queries.splits(con)), None)
    metric = _arg(request, "metric") or (queries.primary_metric(con, split) if split else None)
    tries = _tries(request)
    return {"split": split, "metric": metric, "splits": queries.splits(con), "show_tries": tries,
            "metrics": queries.metric_names(con, split) if split else [],
            "heatmap": queries.heatmap(con, include_tries=tries),
            "slices": queries.slice_bars(con, split, metric, include_tries=tries) if split else [],
            "cost": queries.cost_accuracy(con, split, metric, include_tries=tries) if split else []}


def _split_metric(request, con) -> tuple[str, str]:
    split = _arg(request, "split", True)
    return split, _arg(request, "metric") or queries.primary_metric(con, split) or ""


def _slices_svg(request, con) -> bytes:
    split, metric = _split_metric(request, con)
    hib, kind = queries.direction(con, split, metric)
    return charts.slice_bars_svg(queries.slice_bars(con, split, metric, include_tries=_tries(request)), metric,
                                 higher_is_better=hib, kind=kind)


def _cost_svg(request, con) -> bytes:
    split, metric = _split_metric(request, con)
    hib, kind = queries.direction(con, split, metric)
    return charts.cost_accuracy_svg(queries.cost_accuracy(con, split, metric, include_tries=_tries(request)), metric,
                                    higher_is_better=hib, kind=kind)


def serve(warehouse, host: str = "127.0.0.1", port: int = 8585, allowed_hosts: list[str] | None = None,
          reviews: "rv.ReviewSettings | None" = None) -> None:
    """Run the viewer with uvicorn until Ctrl-C."""
    import uvicorn

    hosts = list(allowed_hosts or LOCAL_HOSTS)
    if host not in hosts and host not in ("0.0.0.0", "::"):
        hosts.append(host)
    uvicorn.run(create_app(warehouse, allowed_hosts=hosts, reviews=reviews), host=host, port=port,
                log_level="warning")


# ---- reviews: people's verdicts and preferences, calibration, ranking, the matrix -----------------------------------
def _calibration(request, con) -> dict[str, Any]:
    return rv.calibration_page(con, _arg(request, "split"))


def _ranking(request, con, settings) -> dict[str, Any]:
    return rv.ranking_page(con, settings, _arg(request, "split"), _arg(request, "source"))


def _ranking_rows(request, con, settings) -> list[dict[str, Any]]:
    """The chart's rows: computed now from the reviews, or with `stored=1` the ranking the `reviews` asset wrote
    (the runs page's, `split` required)."""
    if request.query_params.get("stored") == "1":
        split = _arg(request, "split", True)
        return [r for r in rv.stored_ranking(con, split, _arg(request, "source") or "all")
                if r["strength"] is not None]
    return _ranking(request, con, settings)["rows"]


def _rubric(request, con, settings) -> dict[str, Any]:
    return rv.rubric_page(con, settings, _arg(request, "split"))


def _matrix(request, con) -> dict[str, Any]:
    split = _arg(request, "split") or next(iter(queries.splits(con)), None)
    if split is None:
        return {"split": None, "splits": [], "rows": [], "models": [], "metrics": [], "summary": [], "total": 0}
    return rv.matrix_page(con, split, _arg(request, "metric"), _arg(request, "baseline"), _arg(request, "show"),
                          include_tries=_tries(request))


def _reviews(request, con) -> dict[str, Any]:
    return {"split": _arg(request, "split"), "reviews": rv.export(con, _arg(request, "split"))}


def _same_origin(request) -> bool:
    """A write comes from this viewer's own page. Browsers say so in Sec-Fetch-Site (which no page can set):
    `same-origin` is required where it is sent. Without it, the Origin header must name this very host (the
    Referrer-Policy here is no-referrer, so a browser sends `Origin: null` with a form: only Sec-Fetch-Site
    tells). A request with neither is refused."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    return bool(origin) and origin == f"{request.url.scheme}://{request.headers.get('host')}"


def _review_routes(env, warehouse, settings, held, build_ctx, page):
    """The pages that know the reviewer: the review form, the queues, who-am-I, and their POSTs."""
    import hmac
    import random
    import secrets
    from urllib.parse import parse_qsl

    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, RedirectResponse, Response
    from starlette.routing import Route

    rng = random.SystemRandom()

    def reviewer_of(request: Request) -> str | None:
        if settings.identity_header:
            v = request.headers.get(settings.identity_header)
            return rv.check_name(v) if v else None
        v = request.cookies.get(REVIEWER_COOKIE)
        try:
            return rv.check_name(v) if v else None
        except ValueError:
            return None

    def fail(msg: str, status: int = 400) -> Response:
        return HTMLResponse(env.get_template("error.html").render(error=msg), status_code=status)

    def render(request: Request, name: str, ctx: dict[str, Any]) -> Response:
        token = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(24)
        resp = HTMLResponse(env.get_template(name).render(**ctx, csrf=token, request=request))
        if request.cookies.get(CSRF_COOKIE) != token:
            resp.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path="/")
        resp.headers["cache-control"] = "no-store"
        return resp

    def who_first(request: Request) -> Response:
        if settings.identity_header:
            return fail(f"no reviewer: this viewer takes the reviewer's name from the {settings.identity_header} "
                        "header (reviews.identity_header), and the request has none", 403)
        return RedirectResponse("/whoami?" + urlencode({"next": str(request.url.path) + (
            "?" + request.url.query if request.url.query else "")}), status_code=303)

    async def form_of(request: Request) -> dict[str, str]:
        """The POSTed form, once it passed the cross-site checks; ValueError with the reason otherwise."""
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise ValueError("form too large")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            raise ValueError("a review is sent by the viewer's form (application/x-www-form-urlencoded)")
        form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        cookie, sent = request.cookies.get(CSRF_COOKIE), form.get("csrf", "")
        if not _same_origin(request) or not cookie or not hmac.compare_digest(cookie, sent):
            raise PermissionError("cross-site request refused: send the form from this viewer's own page "
                                  "(reload it and try again)")
        return form

    def safe_next(v: str | None) -> str:
        return v if v and v.startswith("/") and not v.startswith("//") and "\\" not in v else "/"

    async def whoami(request: Request) -> Response:
        if request.method == "POST":
            try:
                form = await form_of(request)
                name = rv.check_name(form.get("name"))
            except PermissionError as exc:
                return fail(str(exc), 403)
            except ValueError as exc:
                return fail(str(exc))
            resp = RedirectResponse(safe_next(form.get("next")), status_code=303)
            resp.set_cookie(REVIEWER_COOKIE, name, httponly=True, samesite="strict", path="/",
                            max_age=365 * 24 * 3600)
            return resp
        return render(request, "whoami.html", {"next": safe_next(request.query_params.get("next")),
                                               "reviewer": reviewer_of(request),
                                               "header": settings.identity_header})

    async def review(request: Request) -> Response:
        who = reviewer_of(request)
        if who is None:
            return who_first(request)
        if request.method == "POST":
            try:
                form = await form_of(request)
                row = rv.verdict_row(settings, who, form)
                await run_in_threadpool(rv.record, warehouse, row)
            except PermissionError as exc:
                return fail(str(exc), 403)
            except ValueError as exc:
                return fail(str(exc).splitlines()[0])
            held.release(("verdict", row["benchmark_split"], row["model"], row["sample_id"]), who)
            target = "/review/next?" + urlencode({"split": row["benchmark_split"], "saved": row["review_id"]}) \
                if form.get("then") == "next" else "/review?" + urlencode(
                    {"split": row["benchmark_split"], "model": row["model"], "id": row["sample_id"],
                     "saved": row["review_id"]})
            return RedirectResponse(target, status_code=303)
        try:
            split, model, sid = (_arg(request, k, True) for k in ("split", "model", "id"))
            ctx = await run_in_threadpool(build_ctx, request, lambda r, con: rv.review_page(con, settings, split, model, sid))
        except ValueError as exc:
            return fail(str(exc).splitlines()[0])
        if ctx is None:
            return fail("not found", 404)
        return render(request, "review.html", {**ctx, "reviewer": who, "saved": _arg(request, "saved")})

    async def review_next(request: Request) -> Response:
        who = reviewer_of(request)
        if who is None:
            return who_first(request)

        def pick(r, con):
            split = _arg(r, "split") or next(iter(queries.splits(con)), None)
            return split, (rv.next_sample(con, settings, held, who, split, _arg(r, "model")) if split else None)

        split, found = await run_in_threadpool(build_ctx, request, pick)
        if found is None:
            return render(request, "queue_done.html", {"split": split, "reviewer": who, "what": "samples to review",
                                                       "saved": _arg(request, "saved")})
        return RedirectResponse("/review?" + urlencode({"split": split, "model": found[0], "id": found[1]}),
                                status_code=303)

    async def pairwise(request: Request) -> Response:
        who = reviewer_of(request)
        if who is None:
            return who_first(request)
        if request.method == "POST":
            try:
                form = await form_of(request)
                shown = held.take_pair(form.get("item", ""), who)
                if shown is None:
                    raise ValueError("this pair is no longer open (answered, or its reservation ran out): "
                                     "open the pairwise page again")
                row = rv.pairwise_row(who, shown, form.get("choice", ""), form.get("comment"))
                await run_in_threadpool(rv.record, warehouse, row)
            except PermissionError as exc:
                return fail(str(exc), 403)
            except ValueError as exc:
                return fail(str(exc).splitlines()[0])
            held.release(("pairwise", shown["split"], shown["sample_id"], shown["a"], shown["b"]), who)
            return RedirectResponse("/pairwise?" + urlencode({"split": shown["split"], "saved": row["review_id"]}),
                                    status_code=303)

        def pick(r, con):
            split = _arg(r, "split") or next(iter(queries.splits(con)), None)
            return split, (rv.next_pair(con, settings, held, who, split, rng) if split else None)

        try:
            split, item = await run_in_threadpool(build_ctx, request, pick)
        except ValueError as exc:
            return fail(str(exc).splitlines()[0])
        if item is None:
            return render(request, "queue_done.html", {"split": split, "reviewer": who, "what": "pairs to compare",
                                                       "saved": _arg(request, "saved")})
        return render(request, "pairwise.html", {**item, "reviewer": who, "saved": _arg(request, "saved")})

    return [Route("/whoami", whoami, methods=["GET", "POST"]), Route("/review", review, methods=["GET", "POST"]),
            Route("/review/next", review_next), Route("/pairwise", pairwise, methods=["GET", "POST"])]
