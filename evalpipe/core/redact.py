"""Secret redaction, applied on every write path (warehouse, journal, artifacts, asset metadata, logs).

One compiled regex finds, in any string:
- token-like values: `sk-...`, `hf_...`, `jina_...`, `pplx-...`, `AIza...`, `Bearer ...`;
- the value part of `api_key=...`, `"password": "..."`, `Authorization: ...` style pairs;
- the literal values of secret environment variables: every `api_key_env` a model names, and every variable
  whose name says it holds a secret (`*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, ...);
- the user's own regexes: `redact_patterns` in the config and `EVALS_REDACT_PATTERNS` (what
  `evalpipe --redact-pattern` sets, one regex per line);
- the credential values written in the config (`secrets_in_config`).
What the config says (its secrets, `api_key_env` names, `redact_patterns`) is handed in by whoever builds the
project: `install_secret_source` (evalpipe/project/redaction.py; every entry point installs one).
In mappings, every value under a key whose name says "secret" (`redact_obj`) is replaced whole.

PII (opt-in, the config's `pii: {entities: [email, phone, ...]}`, handed in by the source like the secrets):
scrubadub's detectors (regexes and libphonenumber, offline) find the entities, each replaced by `[EMAIL]`,
`[PHONE]`, ... in the same places secrets are masked, except what gets scored (`SCORED_FIELDS`, the model's
own output `GENERATED_FIELDS`) and identifiers (`sample_id`, fingerprints), which stay as written.

The regex is rebuilt only when one of its inputs changes (a cheap signature check per call), so redacting a
short string costs one `re.sub` call.
"""
from __future__ import annotations

import functools
import logging
import os
import re
import threading
from typing import Any, Hashable, Iterable, Protocol

from evalpipe.core.errors import ConfigError

MASK = "[REDACTED]"
PATTERNS_ENV = "EVALS_REDACT_PATTERNS"

# Provider key shapes. Lengths are lower bounds that keep ordinary words ("sk-learn", "hf_hub") untouched.
TOKEN_PATTERNS = [
    r"\bsk-[A-Za-z0-9_\-]{16,}",
    r"\bhf_[A-Za-z0-9]{16,}",
    r"\bjina_[A-Za-z0-9_\-]{16,}",
    r"\bpplx-[A-Za-z0-9_\-]{16,}",
    r"\bAIza[0-9A-Za-z_\-]{20,}",
    r"(?i:\bbearer)\s+[A-Za-z0-9._~+/=\-]{8,}",
]
# `name = value` / `"name": "value"` inside free text (JSON strings, URLs, error messages). The value is masked,
# the name kept so the text stays readable.
_PAIR_NAMES = r"(?i:[A-Za-z0-9_\-]*(?:api[_\-]?key|apikey|access[_\-]?key|secret|password|passwd|auth[_\-]?token|access[_\-]?token|authorization)[A-Za-z0-9_\-]*|token)"
# Credentials inside URLs: the password of `scheme://user:password@host`, and query parameters whose name says key,
# token, secret or signature (`?key=...`, `&sig=...`, `?subscription-key=...`).
# Stored JSON text (messages, metadata, events) is redacted as text, where a pair's quotes are escaped
# (`api_key = \"...\"`): the separator takes an escaped quote too, and a value takes a backslash only with the
# character after it, never before a quote (masking the backslash alone would leave an unescaped quote: invalid JSON).
_URL_USERINFO = r"(?P<upre>://[^\s/:@?#]+:)(?P<upw>(?:[^\s/@?#\"\\]|\\[^\s/@?#\"])+)(?=@)"
_URL_QUERY = r"(?P<qpre>[?&](?i:key|sig|signature|code|[A-Za-z0-9_\-]*(?:key|token|secret|password))=)(?P<qval>(?!\[REDACTED\])(?:[^&\s#\"'<>\\]|\\[^&\s#\"'<>])+)"
_PAIR = rf"""\b(?P<pname>{_PAIR_NAMES})(?<![_\-]env)(?P<psep>(?:\\?["'])?\s*[:=]\s*(?:\\?["'])?)(?P<pval>(?:(?i:bearer|basic|token)\s+)?(?!\[REDACTED\])(?:[^\s"'&,;{{}}<>\\]|\\[^\s"']){{4,}})"""

# Every token pattern and pair name contains one of these (lower-cased) substrings.
# "token" only right before a separator: usage counts ("prompt_tokens") are everywhere in API replies and must
# not send every reply down the slow path.
_TRIGGERS = ("sk-", "hf_", "jina_", "pplx-", "aiza", "bearer", "key", "secret", "passw", "authorization",
             'token"', "token'", "token=", "token:", "token :")

# Key names whose values are secrets (for mappings and env var names): names containing one of these words ...
_SECRET_WORDS = ("key", "token", "secret", "passw", "authorization", "credential", "api_key")
_SECRET_NAME = re.compile("(?i)" + "|".join(_SECRET_WORDS))
# ... except these, which hold names, ids or counts, not secrets.
_NOT_SECRET_NAME = re.compile(
    r"(?i)^(key|keys|keyword|keywords|[a-z_.]*[_.]key|[a-z_.]*[_.]keys|[a-z_.]*tokens?_?(count|used)?|[a-z_.]*_env|tokenizer[a-z_.]*)$")
_SECRET_SUFFIX = re.compile(r"(?i)(api_?key|access_?key|secret_?key|private_?key|auth_?key)$")


@functools.lru_cache(maxsize=4096)  # key names repeat (every row has the same columns): decide each once
def is_secret_name(name: str) -> bool:
    """True for names like `api_key`, `OPENAI_API_KEY`, `password`, `Authorization`, `hf_token`;
    False for `key`, `partition_key`, `max_tokens`, `input_tokens`, `api_key_env`."""
    n = str(name)
    if not _SECRET_NAME.search(n):
        return False
    if _SECRET_SUFFIX.search(n):
        return True
    if _NOT_SECRET_NAME.match(n) and not re.search(r"(?i)(^|_)token$", n):
        return False
    return True


def _env_secret_values(key_env_names: Iterable[str] = ()) -> tuple[str, ...]:
    """Values of env vars that hold secrets: named by a model's `api_key_env`, or with a secret-like name."""
    names = set(key_env_names)
    vals = set()
    for k, v in os.environ.items():
        if not v or len(v) < 6:
            continue  # too short to be a key; masking it would mangle ordinary text
        if k in names or is_secret_name(k):
            vals.add(v)
    return tuple(sorted(vals, key=lambda s: (-len(s), s)))  # longest first: a key containing another wins


# Header values are credentials unless the header is one of these (they carry formats and versions).
_PLAIN_HEADERS = frozenset({"content-type", "accept", "accept-encoding", "accept-language", "user-agent",
                            "anthropic-version", "anthropic-beta", "openai-beta", "api-version", "x-title",
                            "http-referer", "referer", "connection", "cache-control", "x-stainless-lang"})
_HEADER_KEYS = frozenset({"headers", "extra_headers", "default_headers", "http_headers"})
# URL query parameters that carry versions and formats, not credentials.
_PLAIN_QUERY = frozenset({"api-version", "api_version", "version", "v", "model", "deployment", "format", "alt",
                          "region", "lang", "locale", "stream", "timeout"})
_MIN_SECRET = 6  # shorter values are not treated as literal secrets: masking them would mangle ordinary text


# A config key whose value is registered as a literal secret must say so at its end (`api_key`, `x-api-key`,
# `password`, `client_secret`, `auth_token`): `key_prefix`, `tokens_per_minute` or `password_file` hold no secret.
_CONFIG_SECRET_KEY = re.compile(
    r"(?i)(^|[_\-.])(api[_\-]?key|apikey|access[_\-]?key|secret([_\-]?key)?|private[_\-]?key|password|passwd|"
    r"token|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token|bearer|authorization|credentials?|"
    r"subscription[_\-]?key|key)$")


def _is_config_secret_key(name: str) -> bool:
    return is_secret_name(name) and bool(_CONFIG_SECRET_KEY.search(str(name)))


def secrets_in_config(obj: Any, key: str | None = None, out: set[str] | None = None) -> set[str]:
    """Every value in a config structure that can carry a credential: values under secret-looking keys (api_key,
    password, ...), header values (`extra_headers`, except format/version headers), and the userinfo and query
    parameter values of URLs (`api_base: https://h/v1?key=...`). They are masked as literals on every write path."""
    from urllib.parse import parse_qsl, urlsplit

    out = set() if out is None else out
    if isinstance(obj, dict):
        for k, v in obj.items():
            if str(k).lower() in _HEADER_KEYS and isinstance(v, dict):
                for hk, hv in v.items():
                    if str(hk).lower() not in _PLAIN_HEADERS and isinstance(hv, (str, int)) and len(str(hv)) >= _MIN_SECRET:
                        out.add(str(hv))
                        if isinstance(hv, str) and " " in hv.strip():  # "Bearer xyz", "Basic xyz": the token too
                            tail = hv.strip().split()[-1]
                            if len(tail) >= _MIN_SECRET:
                                out.add(tail)
            secrets_in_config(v, str(k), out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            secrets_in_config(v, key, out)
    elif isinstance(obj, (str, int)) and not isinstance(obj, bool):
        text = str(obj)
        if key is not None and _is_config_secret_key(key) and len(text) >= _MIN_SECRET:
            out.add(text)
        if isinstance(obj, str) and "://" in text:
            try:
                u = urlsplit(text.strip())
                if u.password and len(u.password) >= 4:
                    out.add(u.password)
                for name, value in parse_qsl(u.query, keep_blank_values=False):
                    if name.lower() not in _PLAIN_QUERY and len(value) >= _MIN_SECRET:
                        out.add(value)
            except ValueError:
                pass
    return out


# ---- PII ----------------------------------------------------------------------------------------------------------
# scrubadub's detectors that work offline (text_blob_name needs NLTK corpora downloaded; tagged/user_supplied are
# for its own evaluation). The config schema checks `pii.entities` against this list.
PII_ENTITIES = ("credential", "credit_card", "date_of_birth", "drivers_licence", "email",
                "national_insurance_number", "phone", "postalcode", "skype", "social_security_number",
                "tax_reference_number", "twitter", "url", "vehicle_licence_plate")
PII_DEFAULT_LOCALE = "en_US"  # phone numbers without a +country prefix are read as this locale's
# Fields a metric compares with the model's output: PII in them is kept, or an answer that is an e-mail address
# could never match. (The model's own output, GENERATED_FIELDS, is kept as written too.)
SCORED_FIELDS = frozenset({"target", "normalized_target", "choices"})
# Identifiers join tables and runs: a digit run in a sample id must not become `[PHONE]`.
_IDENTIFIER_NAME = re.compile(r"(?i)(^|_)(id|ids|fingerprint|fingerprints|sha256|hash|index)$|"
                              r"^(model|benchmark|benchmark_split|split|status|partition)$")
# JSON escapes (`\n`, `\"`, `\u00e9`) in stored JSON text: read as blanks when detecting, so "call:\n415..."
# is found as in the plain text, and a masked span never cuts an escape in half.
_JSON_ESCAPE = re.compile(r"\\(?:u[0-9a-fA-F]{4}|.)")


# Cheap tests that rule text out before scrubadub runs (~0.2 ms a string with `phone`), as regexes both Python and
# RE2 (`could_match_cells`) read: an entity listed here can't be in a text its regex does not match. Phone and card
# numbers have 5+ digits, a few separators apart.
_DIGITS = r"\d(?:\D{0,4}\d){4}"
_PII_HINTS = {"email": "@", "twitter": "@", "phone": _DIGITS, "credit_card": _DIGITS}


def _keeps_pii(key: str | None) -> bool:
    return key is not None and (key in SCORED_FIELDS or key in GENERATED_FIELDS or bool(_IDENTIFIER_NAME.search(key)))


class PiiMasker:
    """Finds PII entities in text with scrubadub and replaces each with `[ENTITY]`."""

    def __init__(self, entities: Iterable[str], locale: str | None = None):
        self.entities = tuple(sorted(set(entities)))
        self.locale = locale or PII_DEFAULT_LOCALE
        unknown = [e for e in self.entities if e not in PII_ENTITIES]
        if unknown:
            raise ConfigError(f"pii.entities: unknown {unknown}; known: {', '.join(PII_ENTITIES)}")
        try:
            import scrubadub
        except ImportError:
            raise ConfigError("pii masking needs scrubadub: pip install scrubadub "
                              "(or remove 'pii' from the config)") from None
        import warnings

        with warnings.catch_warnings():  # "detector does not support the locale": it still runs, locale-free
            warnings.simplefilter("ignore")
            self._scrubber = scrubadub.Scrubber(detector_list=list(self.entities), locale=self.locale)
        # None: some entity has no cheap test, scrubadub looks at every text
        hints = sorted({_PII_HINTS.get(e) for e in self.entities}, key=str)
        self.hint_pattern = None if None in hints else "|".join(hints)
        self._hint = re.compile(self.hint_pattern) if self.hint_pattern else None

    def could_hold(self, text: str) -> bool:
        """False only where no configured entity can be (the cheap regexes; JSON escapes don't hide digits or @)."""
        return self._hint is None or self._hint.search(text) is not None

    def mask(self, text: str) -> str:
        if not text:
            return text
        shadow = _JSON_ESCAPE.sub(lambda m: " " * len(m.group()), text) if "\\" in text else text
        if self._hint is not None and not self._hint.search(shadow):
            return text
        spans = sorted((f.beg, f.end, f.type) for f in self._scrubber.iter_filth(shadow, run_post_processors=False))
        if not spans:
            return text
        out, pos = [], 0
        for beg, end, kind in spans:
            if end <= pos:  # inside a span already masked (two detectors, one text)
                continue
            out.append(text[pos:max(beg, pos)])
            out.append(f"[{kind.upper()}]")
            pos = end
        out.append(text[pos:])
        return "".join(out)


@functools.lru_cache(maxsize=8)  # building a scrubber costs ~ms; the same spec comes back on every rebuild
def pii_masker(entities: tuple[str, ...], locale: str | None = None) -> PiiMasker:
    return PiiMasker(entities, locale)


def pii_spec(value: Any) -> tuple[tuple[str, ...], str | None] | None:
    """The config's `pii:` value as (entities, locale); None when off (absent, empty, or `enabled: false`)."""
    if not isinstance(value, dict) or value.get("enabled") is False:
        return None
    entities = value.get("entities") or ()
    entities = (entities,) if isinstance(entities, str) else tuple(str(e) for e in entities)
    return (tuple(sorted(set(entities))), value.get("locale")) if entities else None


class SecretSource(Protocol):
    """What the project knows that is secret, handed down by whoever builds the project (evalpipe.project.
    redaction installs one at each entry point): this module reads no config itself (core is the lowest floor)."""

    def signature(self, env_key: int) -> Hashable:
        """Cheap; changes whenever what `inputs` returns would (e.g. a config file's mtime). `env_key` changes
        with the process environment (a source may cache what it derives from the env under it)."""

    def inputs(self) -> tuple[Iterable[str], Iterable[str], Iterable[str]]:
        """(literal secret values, names of env vars holding secrets (`api_key_env`), `redact_patterns`)."""

    # Optional: `pii(self) -> Any`, the config's `pii:` value (see `pii_spec`); a source without it masks no PII.


_source: SecretSource | None = None


def install_secret_source(source: SecretSource | None) -> None:
    """Mask what `source` names from now on, in this process (None: env values and built-in rules only)."""
    global _source, _cached
    with _lock:
        _source, _cached = source, None


def _source_inputs() -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    if _source is None:
        return (), (), ()
    try:
        literals, names, patterns = _source.inputs()
    except Exception:  # an unreadable config: the key-name and shape rules still apply
        return (), (), ()
    if isinstance(patterns, str):
        patterns = [patterns]
    return tuple(literals), tuple(names), tuple(str(p) for p in patterns)


def _source_pii() -> tuple[tuple[str, ...], str | None] | None:
    reader = getattr(_source, "pii", None)
    if reader is None:
        return None
    try:
        return pii_spec(reader())
    except Exception:  # an unreadable config: no PII settings to read
        return None


def _env_patterns() -> tuple[str, ...]:
    return tuple(p for p in os.environ.get(PATTERNS_ENV, "").splitlines() if p.strip())


class Redactor:
    """One compiled regex over every rule; `redact` masks matches in a string."""

    def __init__(self, literals: Iterable[str] = (), patterns: Iterable[str] = (), pii: PiiMasker | None = None):
        self.pii = pii
        alts = [rf"(?P<pair>{_PAIR})", rf"(?P<userinfo>{_URL_USERINFO})", rf"(?P<query>{_URL_QUERY})"]
        for i, p in enumerate(patterns):
            try:
                re.compile(p)
            except re.error as exc:
                raise ConfigError(f"redact pattern {p!r} is not a valid regex ({exc}); fix it in "
                                  f"'redact_patterns' or --redact-pattern") from None
            alts.append(f"(?:{p})")
        alts += TOKEN_PATTERNS
        self.literals = tuple(literals)
        alts += [re.escape(v) for v in self.literals]
        self.regex = re.compile("|".join(alts))
        # What a model wrote (answers, tool-call arguments) is data that gets scored: a BFCL call
        # `login(password="abc")` must reach the checker as written. There only the secrets we know of are masked
        # (configured and env values, provider key shapes, the user's patterns), never `name: value` guesses.
        generated = [f"(?:{p})" for p in patterns] + TOKEN_PATTERNS + [re.escape(v) for v in self.literals]
        self.generated_regex = re.compile("|".join(generated))
        # Python's regex engine tries every alternative at every position (~0.3 ms for 600 chars), so most
        # strings are ruled out first by substring checks done in C: a fixed trigger word, or a literal secret.
        self.always = bool(list(patterns))
        self._re2: tuple[str, str] | None = None  # (plain, JSON text) patterns of `could_match_cells`, made on first use

    def _sub(self, m: re.Match) -> str:
        if m.group("pair") is not None:
            return f"{m.group('pname')}{m.group('psep')}{MASK}"
        if m.group("userinfo") is not None:
            return f"{m.group('upre')}{MASK}"
        if m.group("query") is not None:
            return f"{m.group('qpre')}{MASK}"
        return MASK

    def could_match(self, text: str) -> bool:
        """False only where `redact` would change nothing (with PII on: True for every text)."""
        return (self.pii is not None and self.pii.could_hold(text)) or self._could_hold_secret(text)

    def _could_hold_secret(self, text: str) -> bool:
        if self.always:
            return True
        if len(text) >= _LONG_TEXT:  # one RE2 pass instead of ~20 substring scans
            try:
                return bool(self._secret_cells([text])[0])
            except UnicodeEncodeError:  # a lone surrogate: not UTF-8, so the substring scans below
                pass
        low = text.lower()
        return any(t in low for t in _TRIGGERS) or any(v in text for v in self.literals) or (
            "://" in text and ("@" in text or "sig=" in low or "code=" in low))

    def could_match_cells(self, cells: Any, json_text: bool = False) -> Any:
        """For each cell of a text column (a pyarrow string array, or a list of str/None), False only where nothing
        in it can be masked: a numpy bool array, from one RE2 scan of the whole column in C (pyarrow.compute).

        Plain cells: True wherever `could_match(cell)` is (a superset: RE2's case folding matches at least what
        `str.lower()` does). `json_text=True`, cells holding JSON text: True also wherever `redact_obj(json.loads(
        cell))` could change anything: a trigger or literal spelled as JSON escapes it, any `\\u`/`\\/` escape (which
        could hide one), an object key containing a secret word (`is_secret_name`). Nulls are False.
        With PII on, True also wherever the entities' cheap regexes match (every cell when an entity has none)."""
        if self.pii is not None:
            if self.pii.hint_pattern is None:
                return self._ones(cells)
            return self._secret_cells(cells, json_text, extra=self.pii.hint_pattern)
        return self._secret_cells(cells, json_text)

    @staticmethod
    def _ones(cells: Any) -> Any:
        import numpy as np

        return np.ones(len(cells), dtype=bool)

    def _secret_cells(self, cells: Any, json_text: bool = False, extra: str | None = None) -> Any:
        """`could_match_cells` for the secret rules (and `extra`, an RE2 pattern, besides)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if not isinstance(cells, (pa.Array, pa.ChunkedArray)):
            cells = pa.array(cells, type=pa.string())
        if self.always:
            return np.ones(len(cells), dtype=bool)
        if self._re2 is None:
            self._re2 = _re2_patterns(self.literals)
        pattern = self._re2[json_text] + (f"|{extra}" if extra else "")
        chunks = cells.chunks if isinstance(cells, pa.ChunkedArray) else [cells]
        out = [np.zeros(len(c), dtype=bool) if _nothing_in(c, pattern)
               else pc.match_substring_regex(c, pattern).fill_null(False).to_numpy(zero_copy_only=False)
               for c in chunks]
        return np.concatenate(out) if out else np.zeros(0, dtype=bool)

    def redact_secrets(self, text: Any) -> Any:
        """Secrets only, PII kept (scored fields, identifiers)."""
        if not isinstance(text, str) or not text or not self._could_hold_secret(text):
            return text
        return self.regex.sub(self._sub, text)

    def redact(self, text: Any) -> Any:
        text = self.redact_secrets(text)
        if self.pii is not None and isinstance(text, str):
            text = self.pii.mask(text)
        return text

    def for_field(self, name: str) -> Any:
        """How a column or top-level field named `name` is masked: `redact_generated` for model output, secrets
        only for scored fields and identifiers, else `redact`."""
        if name in GENERATED_FIELDS:
            return self.redact_generated
        return self.redact_secrets if _keeps_pii(name) else self.redact

    def redact_generated(self, obj: Any) -> Any:
        """Model-written content (see `generated_regex`): known secrets masked, key names not consulted."""
        if isinstance(obj, str):
            if not obj or not self._could_hold_secret(obj):
                return obj
            return self.generated_regex.sub(MASK, obj)
        if isinstance(obj, dict):
            return {k: self.redact_generated(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.redact_generated(v) for v in obj]
        return obj

    def redact_obj(self, obj: Any, key: str | None = None, keep_pii: bool = False) -> Any:
        """Strings anywhere in a JSON-like structure; whole values under secret-looking keys. PII is kept under
        scored and identifier keys (`target`, `sample_id`, ...) and everything inside them (`keep_pii`)."""
        keep_pii = keep_pii or (self.pii is not None and _keeps_pii(key))
        if isinstance(obj, str):
            if key is not None and obj and is_secret_name(key):
                return MASK
            return self.redact_secrets(obj) if keep_pii else self.redact(obj)
        if key is not None and isinstance(obj, (int, float)) and not isinstance(obj, bool) and is_secret_name(key):
            return MASK
        if isinstance(obj, dict):
            return {k: self.redact_obj(v, str(k), keep_pii) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.redact_obj(v, None, keep_pii) for v in obj]
        return obj


_LONG_TEXT = 32_768  # from this length on, one RE2 scan (~0.5 ms to set up, then faster) beats substring scans
_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def _nothing_in(cells: Any, pattern: str) -> bool:
    """True when `pattern` matches nowhere in a string array: one RE2 search over all its cells' bytes end to end
    (a zero-copy view of the array's data; RE2 pays ~0.3 us per cell searched one by one). A match that spans two
    cells only sends the array to the cell-by-cell search; a match inside a cell is a match in the whole."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if cells.type != pa.string() or not len(cells):
        return False
    offsets = np.frombuffer(cells.buffers()[1], dtype=np.int32, count=len(cells) + 1, offset=cells.offset * 4)
    start, end = int(offsets[0]), int(offsets[-1])
    data = cells.buffers()[2]
    whole = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(np.array([0, end - start], dtype=np.int32)),
                                                    data.slice(start, end - start) if data is not None else None])
    return not pc.match_substring_regex(whole, pattern)[0].as_py()


def _re2_literal(text: str) -> str:
    """`text` as a literal in RE2 syntax (pyarrow.compute's regex engine)."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in text)


def _re2_any_case(words: Any) -> str:
    """Any of `words`, in any case. RE2's `(?i)` folds k with the Kelvin sign and s with the long s, as Python does,
    but not i with İ and ı, which Python's `re.IGNORECASE` matches: those are spelled out."""
    alts = ("".join("[iIİı]" if c in "iI" else _re2_literal(c) for c in w) for w in words)
    return f"(?i:{'|'.join(alts)})"


def _re2_patterns(literals: tuple[str, ...]) -> tuple[str, str]:
    """The RE2 patterns of `Redactor.could_match_cells`: (for plain text, for JSON text)."""
    from json import dumps

    def escaped(text: str) -> str:  # how JSON text (ensure_ascii=False, as every writer here uses) spells a string
        return dumps(text, ensure_ascii=False)[1:-1]

    def utf8(text: str) -> bool:  # (a lone surrogate can't be in a pyarrow string, nor in an RE2 pattern)
        try:
            text.encode("utf-8")
            return True
        except UnicodeEncodeError:
            return False

    lits = [v for v in literals if utf8(v)]
    url = "(?s:://.*(?:@|(?i:sig=|code=))|(?:@|(?i:sig=|code=)).*://)"  # "://" with "@", "sig=" or "code="
    plain = [_re2_any_case(_TRIGGERS), *(_re2_literal(v) for v in lits), url]
    in_json = [_re2_any_case(escaped(t) for t in _TRIGGERS if escaped(t) != t),
               *(_re2_literal(escaped(v)) for v in lits if escaped(v) != v),
               r"\\u", r"\\/",  # escapes the writers never make: a trigger or literal could hide behind them
               # an object key (a string followed by ':') containing a secret word
               rf'"(?:[^"\\]|\\.)*{_re2_any_case(_SECRET_WORDS)}(?:[^"\\]|\\.)*"\s*:']
    return "|".join(plain), "|".join(plain + in_json)


_lock = threading.RLock()
_busy = threading.local()  # set while redacting a log record: a record logged meanwhile is not re-entered
_cached: tuple[tuple, Redactor] | None = None


def _inputs_signature() -> tuple:
    """Cheap (~10 us): changes whenever the env or the installed source's inputs change."""
    env_data = getattr(os.environ, "_data", None)  # CPython's raw mapping: hashing it is 10x faster
    env_hash = hash(frozenset((env_data if env_data is not None else os.environ).items()))
    source = _source
    return (env_hash, id(source), source.signature(env_hash) if source is not None else None)


def get_redactor() -> Redactor:
    """The redactor for the current config, env and CLI patterns (rebuilt only when they change)."""
    global _cached
    sig = _inputs_signature()
    cached = _cached
    if cached is not None and cached[0] == sig:
        return cached[1]
    with _lock:
        secrets, key_env_names, patterns = _source_inputs()
        literals = sorted(set(_env_secret_values(key_env_names)) | set(secrets), key=lambda v: (-len(v), v))
        spec = _source_pii()
        r = Redactor(literals=literals, patterns=patterns + _env_patterns(), pii=pii_masker(*spec) if spec else None)
        _cached = (sig, r)
        return r


def redact(text: Any) -> Any:
    return get_redactor().redact(text)


def redact_obj(obj: Any) -> Any:
    return get_redactor().redact_obj(obj)


# Columns and row fields holding what the model produced, and what is derived from it for scoring: masked by
# `Redactor.redact_generated` (known secrets only), so a tool call's `password="..."` argument is scored as sent.
GENERATED_FIELDS = frozenset({"raw_output", "raw_response", "trajectory", "tool_trace", "prediction",
                              "normalized_prediction", "arguments", "normalized_key"})


def redact_frame(df):
    """A copy of a DataFrame with every string cell redacted (the warehouse's write hook)."""
    r = get_redactor()
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object:
            out[col] = out[col].map(r.for_field(str(col)))
    return out


def add_patterns(patterns: Iterable[str]) -> None:
    """Add user regexes for this process and its children (the CLI's `--redact-pattern`)."""
    pats = [p for p in patterns if p]
    if not pats:
        return
    Redactor(patterns=pats)  # validate now: one clear error instead of a failure deep in a run
    current = _env_patterns()
    os.environ[PATTERNS_ENV] = "\n".join(list(current) + [p for p in pats if p not in current])


# ---- logs ---------------------------------------------------------------------------------------------------------
class RedactingFilter(logging.Filter):
    """A logging filter that redacts the formatted message; attach it to any handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        _redact_record(record)
        return True


def _redact_record(record: logging.LogRecord) -> None:
    if getattr(record, "_evals_redacted", False) or getattr(_busy, "on", False):
        return
    _busy.on = True
    try:
        msg = record.getMessage()
        clean = redact(msg)
        if clean != msg:
            record.msg, record.args = clean, None
        record._evals_redacted = True
    except Exception as exc:  # logging must not fail, nor leak: withhold the message (e.g. an invalid user regex)
        record.msg, record.args = f"[log message withheld: redaction failed: {type(exc).__name__}]", None
    finally:
        _busy.on = False


_installed = False
_errors_installed = False


def install_error_redaction() -> None:
    """Redact the errors Dagster stores: a step failure's message and stack (its event log, the UI, the CLI) are
    built by `SerializableErrorInfo.from_traceback`, which is wrapped here so every message and frame of the
    chain passes through `redact` first (e.g. a provider error that echoes a header)."""
    global _errors_installed
    if _errors_installed:
        return
    try:
        from dagster._utils.error import SerializableErrorInfo
    except Exception:  # no Dagster in this process: nothing to wrap
        return
    original = SerializableErrorInfo.from_traceback.__func__

    def from_traceback(cls, tb):  # noqa: ANN001
        info = original(cls, tb)
        try:
            return cls(message=redact(info.message), stack=[redact(line) for line in info.stack],
                       cls_name=info.cls_name, cause=info.cause, context=info.context)
        except Exception:  # never lose the error itself
            return info

    SerializableErrorInfo.from_traceback = classmethod(from_traceback)
    _errors_installed = True


def install_log_redaction(dagster_errors: bool = True) -> None:
    """Redact every log record made in this process, including those Dagster stores in its event log.

    A record factory (not a handler filter) because Dagster attaches its own handlers per run: wrapping the
    factory covers them all, and records are redacted before any handler or storage sees them. `dagster_errors`
    False: leave Dagster's error records alone (`install_error_redaction` imports Dagster, ~1 s; a process that
    only reads results never runs it)."""
    global _installed
    if dagster_errors:
        install_error_redaction()
    if _installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        if isinstance(record.msg, str):
            _redact_record(record)
        return record

    logging.setLogRecordFactory(factory)
    _installed = True
