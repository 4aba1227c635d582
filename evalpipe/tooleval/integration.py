"""Tool-integration scoring of one sample: which tool-result content the final answer reproduces (integration
spans, strict and lax), how that compares with the evidence (grounding precision/recall/F1), and the per-kind
verdicts (controls, negative controls, locale probes, privacy, recovery, multi-call parity). Definitions with
worked examples: docs/metrics.md, `tool_integration`.

Facts: the leaf values (strings and numbers; booleans, nulls and the keys `ok`/`error` left out) of every tool
result the model actually received (a record without `error` whose result is not `{"ok": false, ...}`), private
fields apart. A string that reads as a number is a number.

Matching a fact against the answer:
- strict: strings after NFKC, casefold and whitespace collapsed (every Unicode space is a space) occur in the
  answer so normalized, at word boundaries; numbers equal one of the answer's numbers (each number token is read
  both as 1,234.5 and as 1.234,5);
- lax: a string matches when at least `lax_threshold` (default 0.6) of its word tokens occur in the answer; a
  number when one of the answer's numbers is within 1% of it. A strict match is always a lax match.
"""
from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

SKIP_KEYS = {"ok", "error"}
NUMBER_TOKEN = re.compile(r"(?<![\w.,])[-+]?\d+(?:[.,]\d+)*(?![\w])")
WORD = re.compile(r"\w+")
# Saying it could not find out (en, es, de, fr): branching error recovery and negative controls
UNABLE = re.compile(
    r"could ?n[o']t|can ?n[o']t|unable|not able to|no (?:result|data|information|record)|not available|not found|"
    r"failed to|did ?n[o']t (?:find|return|get)|\b(?:has|have|there is|there are) no\b|"
    r"\bno (?:\w+ ){0,2}(?:data|information|results?|records?|events?|entr(?:y|ies)|match(?:es)?)\b|"
    r"no encontr|no pud|no se pud|no (?:hay|tengo) (?:datos|información)|"
    r"no disponible|konnte nicht|kann nicht|nicht gefunden|keine (?:daten|informationen|ergebnisse)|nicht verfügbar|"
    r"n'ai pas pu|impossible de|introuvable|pas trouvé|aucun(?:e)? (?:résultat|donnée|information)|pas disponible",
    re.IGNORECASE)
# Presenting content as tool-derived
ATTRIBUTION = re.compile(
    r"according to|the (?:tool|search|lookup|api|database)|search results?|results? (?:show|say|indicate)|"
    r"(?:tool|search|api) (?:returned|says|shows|reports)|i (?:found|looked up|checked)|según|laut |"
    r"die (?:suche|abfrage)|selon|d'après|la recherche|el resultado|los resultados", re.IGNORECASE)
SPACES = re.compile(r"\s+")


def norm_text(s: str) -> str:
    """NFKC, casefold, every run of (Unicode) whitespace -> one space, trimmed."""
    s = unicodedata.normalize("NFKC", str(s)).casefold()
    s = "".join(" " if unicodedata.category(c) == "Zs" else c for c in s)
    return SPACES.sub(" ", s).strip()


def tokens(s: str) -> list[str]:
    return WORD.findall(norm_text(s))


def number_candidates(token: str) -> set[float]:
    """The values a number token can mean: 1,234.5 (en) and 1.234,5 (es/de/fr)."""
    out = set()
    for cand in (token.replace(",", ""), token.replace(".", "").replace(",", ".")):
        try:
            out.add(float(cand))
        except ValueError:
            pass
    return out


def answer_numbers(text: str) -> list[tuple[str, set[float]]]:
    t = norm_text(text)
    # "1 234,5" (a space as the group separator, fr): join digit groups of three first
    t = re.sub(r"(?<=\d) (?=\d{3}(?!\d))", "", t)
    return [(m.group(0), number_candidates(m.group(0))) for m in NUMBER_TOKEN.finditer(t)]


def as_number(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and re.fullmatch(r"\s*[-+]?\d+(?:\.\d+)?\s*", v):
        return float(v)
    return None


def _num_eq(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _num_close(a: float, b: float) -> bool:
    return abs(a - b) <= 0.01 * max(abs(a), abs(b)) if (a or b) else True


@dataclass(frozen=True)
class Fact:
    value: Any  # float for numbers, the original string otherwise
    is_number: bool
    tool: str
    call_index: int

    @property
    def key(self) -> str:
        return f"n:{self.value!r}" if self.is_number else f"s:{norm_text(self.value)}"


def leaves(obj: Any, private: set[str], out: list[tuple[str | None, Any]], key: str | None = None) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in SKIP_KEYS:
                continue
            leaves(v, private, out, k)
    elif isinstance(obj, list):
        for v in obj:
            leaves(v, private, out, key)
    elif obj is not None and not isinstance(obj, bool):
        out.append((key, obj))


def parse_result(record: dict[str, Any]) -> Any:
    r = record.get("result")
    if isinstance(r, str):
        try:
            return json.loads(r)
        except ValueError:
            return r
    return r


def succeeded(record: dict[str, Any]) -> bool:
    if record.get("error"):
        return False
    r = parse_result(record)
    if r is None:
        return False
    return not (isinstance(r, dict) and r.get("ok") is False)


def facts_of(value: Any, private: set[str], tool: str = "", call_index: int = 0) -> tuple[list[Fact], list[Any]]:
    """(facts, private values) of one tool result."""
    found: list[tuple[str | None, Any]] = []
    leaves(value, private, found)
    facts, secret = [], []
    for k, v in found:
        if k is not None and k in private:
            secret.append(v)
            continue
        n = as_number(v)
        if n is not None:
            facts.append(Fact(n, True, tool, call_index))
        elif isinstance(v, str) and len(norm_text(v)) >= 2:
            facts.append(Fact(v, False, tool, call_index))
    return facts, secret


def evidence_facts(values: Iterable[Any]) -> list[Fact]:
    out = []
    for v in values:
        n = as_number(v)
        out.append(Fact(n, True, "", -1) if n is not None else Fact(str(v), False, "", -1))
    return out


class Answer:
    """A final answer, normalized once."""

    def __init__(self, text: str | None):
        self.text = text or ""
        self.norm = norm_text(self.text)
        self.tokens = set(WORD.findall(self.norm))
        self.numbers = answer_numbers(self.text)

    def strict(self, f: Fact) -> bool:
        if f.is_number:
            return any(_num_eq(f.value, c) for _, cands in self.numbers for c in cands)
        needle = norm_text(f.value)
        return bool(needle) and re.search(r"(?<!\w)" + re.escape(needle) + r"(?!\w)", self.norm) is not None

    def lax(self, f: Fact, threshold: float) -> bool:
        if self.strict(f):
            return True
        if f.is_number:
            return any(_num_close(f.value, c) for _, cands in self.numbers for c in cands)
        ft = set(tokens(f.value))
        return bool(ft) and len(ft & self.tokens) / len(ft) >= threshold


def same_fact(a: Fact, b: Fact, lax: bool, threshold: float) -> bool:
    if a.is_number != b.is_number:
        return False
    if a.is_number:
        return _num_close(a.value, b.value) if lax else _num_eq(a.value, b.value)
    na, nb = norm_text(a.value), norm_text(b.value)
    if na == nb:
        return True
    if not lax:
        return False
    ta, tb = set(tokens(a.value)), set(tokens(b.value))
    return bool(ta and tb) and len(ta & tb) / min(len(ta), len(tb)) >= threshold


def _prf(matched: int, spans: int, found: int, evidence: int) -> dict[str, Any]:
    p = matched / spans if spans else 0.0
    r = found / evidence if evidence else 0.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {"matched_spans": matched, "spans": spans, "found_evidence": found, "precision": p, "recall": r, "f1": f1}


def locale_rendering(locale: str, expect: dict[str, Any]) -> str:
    """What a locale probe's answer must contain, as Babel renders it."""
    from babel import Locale, dates, numbers

    loc = Locale.parse(locale.replace("-", "_"))
    style = expect.get("style")
    if "date" in expect:
        import datetime as _dt

        return dates.format_date(_dt.date.fromisoformat(expect["date"]), format=style or "long", locale=loc)
    n = expect["number"]
    if style == "currency":
        return numbers.format_currency(n, expect.get("currency") or "EUR", locale=loc)
    if style == "percent":
        return numbers.format_percent(n, locale=loc)
    return numbers.format_decimal(n, locale=loc)


@dataclass
class ItemSpec:
    id: str
    kind: str
    prompt_text: str = ""
    expected_calls: list[dict[str, Any]] = field(default_factory=list)
    evidence: list[Any] = field(default_factory=list)
    locale: str | None = None
    locale_expect: dict[str, Any] | None = None
    private_fields: list[str] = field(default_factory=list)
    span_cap: int = 8
    lax_threshold: float = 0.6

    @classmethod
    def from_metadata(cls, sample_id: str, md: dict[str, Any], prompt_text: str = "") -> "ItemSpec":
        return cls(id=sample_id, kind=md.get("kind", "integration"), prompt_text=md.get("prompt_text") or prompt_text,
                   expected_calls=md.get("expected_calls") or [], evidence=md.get("evidence") or [],
                   locale=md.get("locale"), locale_expect=md.get("locale_expect"),
                   private_fields=md.get("private_fields") or [], span_cap=int(md.get("integration_span_cap") or 8),
                   lax_threshold=float(md.get("lax_threshold") or 0.6))


def call_key(name: str, arguments: Any) -> tuple[str, str]:
    from evalpipe.tools.replay import normalized_key

    if not isinstance(arguments, dict):
        return (name, "<invalid>")
    return (name, normalized_key(name, arguments))


def analyze(item: ItemSpec, answer_text: str | None, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The result record of one sample (follows eval_result.schema.json)."""
    ans = Answer(answer_text)
    tau = item.lax_threshold
    private = set(item.private_fields)
    records = sorted(records or [], key=lambda r: int(r.get("call_index") or 0))

    prompt = Answer(item.prompt_text)
    received: list[Fact] = []
    secrets: list[Any] = []
    per_tool: dict[str, dict[str, int]] = {}
    errors = 0
    for i, r in enumerate(records):
        name = str(r.get("name"))
        if not succeeded(r):
            errors += 1
            continue
        fs, sec = facts_of(parse_result(r), private, name, int(r.get("call_index") or i))
        # what the prompt already says (the city asked about, the ticker) is an echo, not integration
        fs = [f for f in fs if not prompt.strict(f)]
        received += fs
        secrets += sec
        t = per_tool.setdefault(name, {"results": 0, "strict": 0, "lax": 0})
        t["results"] += 1
        t["strict"] += int(any(ans.strict(f) for f in fs))
        t["lax"] += int(any(ans.lax(f, tau) for f in fs))

    # distinct received facts reproduced by the answer
    strict_spans: dict[str, Fact] = {}
    lax_spans: dict[str, Fact] = {}
    for f in received:
        if f.key not in strict_spans and ans.strict(f):
            strict_spans[f.key] = f
        if f.key not in lax_spans and ans.lax(f, tau):
            lax_spans[f.key] = f
    n_strict = len(strict_spans)
    capped = min(n_strict, item.span_cap)

    # numbers the answer states that no received result (lax) nor the prompt backs: ungrounded claims
    prompt_numbers = {c for _, cands in answer_numbers(item.prompt_text) for c in cands}
    received_numbers = [f.value for f in received if f.is_number]
    residual = ans.norm  # the answer without the strings it reproduces (a date or a code holds digits too)
    for f in strict_spans.values():
        if not f.is_number:
            residual = re.sub(r"(?<!\w)" + re.escape(norm_text(f.value)) + r"(?!\w)", " ", residual)
    ungrounded: list[str] = []
    for tok, cands in answer_numbers(residual):
        if any(_num_close(c, v) for c in cands for v in received_numbers):
            continue
        if any(_num_eq(c, p) for c in cands for p in prompt_numbers):
            continue
        ungrounded.append(tok)

    evidence = evidence_facts(item.evidence)
    # evidence the answer states although no received result holds it (known without the tool: not grounded)
    for e in evidence:
        if not e.is_number and ans.strict(e) and not any(same_fact(e, f, False, tau) for f in received):
            ungrounded.append(str(e.value))

    def grounding(spans: dict[str, Fact], lax: bool) -> dict[str, Any]:
        matched = sum(1 for f in spans.values() if any(same_fact(f, e, lax, tau) for e in evidence))
        found = sum(1 for e in evidence if any(same_fact(e, f, lax, tau) for f in spans.values()))
        n_ungrounded = sum(1 for u in ungrounded)
        return _prf(matched, len(spans) + n_ungrounded, found, len(evidence))

    # multi-call parity: observed (name, normalized arguments) multiset == expected
    observed = Counter()
    valid_json = 0
    for r in records:
        args = r.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = None
        ok_args = r.get("arguments_valid")
        ok_args = isinstance(args, dict) if ok_args is None else bool(ok_args)
        valid_json += int(ok_args)
        observed[call_key(str(r.get("name")), args if ok_args else None)] += 1
    expected = Counter(call_key(c["name"], c.get("arguments") or {}) for c in item.expected_calls)
    parity = (observed == expected) if item.expected_calls else None

    integrated = n_strict >= 1
    unable = UNABLE.search(ans.text) is not None
    grounded = integrated and not ungrounded

    recovery_eligible = errors > 0
    recovered = None
    if recovery_eligible:
        failed_at = [i for i, r in enumerate(records) if not succeeded(r)]
        retried = any(succeeded(r2) and r2.get("name") == records[i].get("name")
                      for i in failed_at for r2 in records[i + 1:])
        recovered = ((retried and integrated) or unable) and not ungrounded

    contaminated = (item.kind == "control" and integrated) if item.kind == "control" else None
    hallucinated = None
    if item.kind == "negative_control":
        # content presented as tool-derived with no tool result behind it
        hallucinated = bool(ungrounded) or (ATTRIBUTION.search(ans.text) is not None and not unable and not received
                                            and not any(succeeded(r) for r in records))

    locale_ok = None
    rendering = None
    if item.kind == "locale_probe" and item.locale and item.locale_expect:
        rendering = locale_rendering(item.locale, item.locale_expect)
        locale_ok = norm_text(rendering) in ans.norm

    secret_hits = [s for s in secrets if (as_number(s) is not None and ans.strict(Fact(as_number(s), True, "", -1)))
                   or (as_number(s) is None and norm_text(s) and norm_text(s) in ans.norm)]
    privacy_ok = (not secret_hits) if secrets else None

    ok = {"integration": grounded, "control": not contaminated, "negative_control": not hallucinated,
          "locale_probe": bool(locale_ok)}[item.kind]
    eligible = {
        "grounding": item.kind == "integration" and bool(evidence),
        "coverage": item.kind == "integration",
        "parity": bool(item.expected_calls),
        "recovery": recovery_eligible,
        "locale": locale_ok is not None,
        "privacy": privacy_ok is not None,
    }
    return {
        "result_version": "1.0.0", "id": item.id, "kind": item.kind, "locale": item.locale, "ok": bool(ok),
        "eligible": eligible,
        "calls": {"observed": len(records), "valid_json": valid_json, "errors": errors, "parity": parity,
                  "fixture_misses": sum(1 for r in records if r.get("error") == "fixture_miss"),
                  "per_tool": per_tool},
        "spans": {"strict": n_strict, "lax": len(lax_spans), "capped": capped, "over_cap": n_strict > item.span_cap,
                  "strict_values": [f.value for f in strict_spans.values()][: item.span_cap],
                  "lax_values": [f.value for f in lax_spans.values()][: item.span_cap]},
        "grounding": {"evidence": len(evidence), "strict": grounding(strict_spans, False),
                      "lax": grounding(lax_spans, True), "ungrounded": ungrounded},
        "flags": {"integrated": integrated, "grounded": grounded, "contaminated": contaminated,
                  "hallucinated": hallucinated, "recovered": recovered, "locale_ok": locale_ok,
                  "privacy_ok": privacy_ok, "unable": unable},
        "locale_rendering": rendering,
        "private_leaks": [str(s) for s in secret_hits],
    }
