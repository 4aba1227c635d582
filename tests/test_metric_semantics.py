"""Metric semantics (issue 20, "Scoring"): in every normalizer a sign, a decimal point, a percent sign, a unicode
minus and an exponent are meaning, never punctuation. Each normalizer is checked on the hand-written table of
docs/metrics.md ("Normalizer rules") and property-tested, over seeded random numbers and renderings, against small
re-implementations (written here, from their documented rules) of the references that define the semantics:
lm-evaluation-harness' `exact_match` (HF evaluate's), Inspect AI's `match`/`includes`, the official GAIA scorer and
DABench's closed-form scorer. (hypothesis is not installed in the venv: the generation is seeded `random`.)"""
import asyncio
import math
import random
import re
import string
from pathlib import Path

import pytest

from evalpipe.benchmarks.gaia_scorer import question_scorer
from evalpipe.metrics import JudgeInput, build_metric
from evalpipe.metrics.list_match import is_equal
from evalpipe.metrics.numbers import parse_number, read_quantity

MINUS = "\u2212"  # the unicode minus sign


# ---- the references, re-implemented from their documented rules ---------------------------------------------------
def lmeval_exact_match(pred, ref, regexes_to_ignore=(), ignore_case=False, ignore_punctuation=False,
                       ignore_numbers=False):
    """lm-eval's `exact_match` (HF evaluate's): each regex deleted from both sides, then lowercase, then every ASCII
    punctuation character deleted, then every ASCII digit deleted (each when asked), then string equality."""
    for rx in regexes_to_ignore:
        pred, ref = re.sub(rx, "", pred), re.sub(rx, "", ref)
    if ignore_case:
        pred, ref = pred.lower(), ref.lower()
    if ignore_punctuation:
        pred, ref = (s.translate({ord(c): None for c in string.punctuation}) for s in (pred, ref))
    if ignore_numbers:
        pred, ref = (s.translate({ord(c): None for c in string.digits}) for s in (pred, ref))
    return pred == ref


GSM8K_IGNORE = (",", r"\$", r"(?s).*#### ", r"\.$")  # lm-eval's gsm8k task: ignore_case true, punctuation kept


def _inspect_number(s):
    s = s.replace(MINUS, "-")
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _inspect_strip_numeric(s):
    # currency signs, thousands commas and markdown markers go; a "." goes unless a digit follows it
    return re.sub(r"\.(?=\s|$|\D)", "", re.sub(r"[$£€*_,]", "", s))


_EDGE = "!?:;()[]{}'\"`~<=>@#^&|"  # sentence/enclosing punctuation Inspect strips from a number token ("%" is not)


def _inspect_token_number(tok):
    v = _inspect_number(tok)
    if v is None:
        v = _inspect_number(tok.strip(_EDGE))
    return None if v is None else format(v, ".5g")


def inspect_match_numeric(value, target, location="any"):
    """Inspect AI's `match(location, numeric=True)` when the target is a number: both sides lose `$ £ € * _ ,` and
    sentence dots, the reply is split on whitespace, tokens (edge punctuation tolerated) are read as numbers, and
    numbers compare as their 5-significant-digit renderings; the sign is part of the number."""
    t = _inspect_number(_inspect_strip_numeric(target.strip().casefold()))
    assert t is not None, "only number targets take the numeric path"
    t = format(t, ".5g")
    words = re.split(r"\s+", _inspect_strip_numeric(value.strip().casefold()))
    numbers = [n for n in map(_inspect_token_number, words) if n is not None]
    if location == "any":
        return t in numbers
    if location == "exact":
        return _inspect_token_number(" ".join(words)) == t
    pick = numbers[:1] if location == "begin" else numbers[-1:]
    return pick == [t]


def inspect_includes(value, target, ignore_case=True):
    """Inspect AI's `includes()`: casefolded substring."""
    if ignore_case:
        value, target = value.casefold(), target.casefold()
    return target in value


def gaia_official(model_answer, ground_truth):
    """The GAIA leaderboard's question_scorer: the ground truth picks the branch (float / list on , ; / string)."""
    def is_float(x):
        try:
            float(x)
            return True
        except ValueError:
            return False

    def number(x):
        for ch in "$%,":
            x = x.replace(ch, "")
        try:
            return float(x)
        except ValueError:
            return float("inf")

    def norm(x, punct=True):
        x = re.sub(r"\s", "", x).lower()
        return x.translate(str.maketrans("", "", string.punctuation)) if punct else x

    if is_float(ground_truth):
        return number(model_answer) == float(ground_truth)
    if any(c in ground_truth for c in ",;"):
        g, p = re.split("[,;]", ground_truth), re.split("[,;]", model_answer)
        if len(g) != len(p):
            return False
        return all((number(pe) == float(ge)) if is_float(ge) else norm(pe, False) == norm(ge, False)
                   for pe, ge in zip(p, g))
    return norm(model_answer) == norm(ground_truth)


def dabench_is_equal(response, label):
    """DABench's closed-form comparison: equal strings, or float() of both within 1e-6."""
    if response == label:
        return True
    try:
        return abs(float(response) - float(label)) < 1e-6
    except ValueError:
        return False


# ---- generated numbers and their renderings ------------------------------------------------------------------------
def random_value(rng):
    """A nonzero number with at most 5 significant digits (so Inspect's 5-digit normal form is exact)."""
    digits = rng.randint(1, 5)
    mantissa = rng.randint(10 ** (digits - 1), 10 ** digits - 1)
    return mantissa / 10 ** rng.randint(0, min(3, digits))


def plain(x):
    """The shortest decimal text of x ("3", "2.5", "0.125", "-3")."""
    return f"{x:.6f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def renderings(x, rng):
    """Texts that state exactly the number x, sign kept (never a percentage)."""
    s = plain(abs(x))
    neg = x < 0
    sign = "-" if neg else ""
    out = [sign + s, (MINUS if neg else "+") + s, sign + s + ".0" if "." not in s else sign + s + "0",
           f"{x:e}", f"{x:E}".replace("E+0", "E"), sign + "$" + s, "$" + sign + s, f"({sign}{s})", sign + s + ".",
           f" {sign}{s} "]
    if abs(x) >= 1000:
        out.append(sign + f"{abs(x):,}".rstrip("0").rstrip(".") if abs(x) != int(abs(x)) else sign + f"{int(abs(x)):,}")
    if 0 < abs(x) < 1:
        out.append(sign + s[1:])  # ".5"
    return out


def numbers(n, seed):
    rng = random.Random(seed)
    return [(rng.choice([-1, 1]) * random_value(rng), rng) for _ in range(n)]


def em(pred, gold, **settings):
    return build_metric({"name": "exact_match", **settings}).score(JudgeInput("s", "q", gold, pred))


def lenient(name, raw, target, **settings):
    return build_metric({"name": name, **settings}).score(
        JudgeInput("s", "q", target, raw, raw_output=raw))


# ---- exact_match: the documented table -----------------------------------------------------------------------------
EXACT_MATCH_TABLE = [
    ("-3", "3", False), ("-2.5", "2.5", False), ("3", "-3", False), ("1.5 × 10^3", "1500", True),
    ("2x10^-3", "0.002", True), ("1.5e3", "1500.0", True), (f"{MINUS}3", "-3", True),
    (f"{MINUS}3", "3", False), ("+3", "3", True), ("3%", "3", False), ("3%", "3 %", True), ("3%", "0.03", False),
    ("1e3", "1000", True), ("1E3", "1,000", True), ("5.", "5", True), (".5", "0.5", True), ("-.5", "-0.5", True),
    ("$-3", "-3", True), ("-$3", "-3", True), ("$-3", "3", False), ("$3", "3", True), ("1,000", "1000", True),
    ("1 000", "1000", True), ("1 2", "12", False), ("1,2", "12", False), ("(-3)", "-3", True), ("(-3)", "3", False),
    ("-(3)", "3", False), ("The answer is -3.", "The answer is 3.", False), ("-inf", "inf", False),
    ("- 3", "3", False), ("Paris.", "paris", True), ("- Paris", "paris", True), ("3.14.", "3.14", True),
    ("-0", "0", True), ("45%.", "45%", True),
]


@pytest.mark.parametrize("pred,gold,ok", EXACT_MATCH_TABLE)
def test_exact_match_table(pred, gold, ok):
    assert em(pred, gold).correct is ok
    assert em(gold, pred).correct is ok  # the verdict does not depend on which side is the reference


@pytest.mark.parametrize("settings", [{"numeric": False}, {"case_sensitive": True}])
def test_exact_match_signs_hold_without_numbers_too(settings):
    assert em("-3", "3", **settings).correct is False
    assert em("5%", "5", **settings).correct is False
    assert em("-3.", "-3", **settings).correct is True


def test_exact_match_property_signs_and_equivalences():
    for x, rng in numbers(400, seed=20):
        mine, other, flipped = renderings(x, rng), renderings(x, rng), renderings(-x, rng)
        p, g, f = rng.choice(mine), rng.choice(other), rng.choice(flipped)
        assert em(p, g).correct is True, (p, g)
        assert em(p, f).correct is False, (p, f)
        if not any(t.strip().startswith("(") for t in (p, g)):
            assert em(p.rstrip(".") + "%", g.rstrip(".") + "%").correct is True, (p, g)
        assert em(p, plain(x) + "%").correct is False, p
        for tol in ({"rel_tol": 0.5}, {"numeric_tolerance": rng.uniform(0.01, 1.99)}, {"abs_tol": abs(x)}):
            assert em(p, f, **tol).correct is False, (p, f, tol)  # within any tolerance below a sign flip


def test_exact_match_agrees_with_lm_eval_gsm8k_rules_on_integers():
    """lm-eval's gsm8k exact_match (ignore_case, regexes `,` `\\$` `.*#### ` `\\.$`) keeps signs: on integer answers
    written plainly, with thousands separators, `$` or a final period, our verdict is its verdict."""
    rng = random.Random(7)
    for _ in range(500):
        a, b = rng.randint(-20000, 20000), rng.choice([None, -1, 1])
        b = a * b if b else rng.randint(-20000, 20000)
        forms = lambda v: [str(v), f"{v:,}", ("-$" if v < 0 else "$") + f"{abs(v):,}", f"{v}."]
        p, g = rng.choice(forms(a)), rng.choice(forms(b))
        assert em(p, g).correct is lmeval_exact_match(p, g, GSM8K_IGNORE, ignore_case=True), (p, g)


def test_exact_match_accepts_whatever_lm_eval_literal_match_accepts_and_words_agree():
    """Literal equality (lm-eval with ignore_case) is never refused; on words (no digits, outer punctuation only),
    our outer-punctuation stripping agrees with lm-eval's ignore_punctuation."""
    rng = random.Random(11)
    words = ["paris", "Paris", "PARIS", "new york", "yes", "no", "x"]
    punct = ["", ".", "!", "?", "'", '"', "(", ")", "...", "- ", "*"]
    for _ in range(1000):
        p = rng.choice(punct) + rng.choice(words) + rng.choice(punct)
        g = rng.choice(punct) + rng.choice(words) + rng.choice(punct)
        if lmeval_exact_match(p, g, ignore_case=True):
            assert em(p, g).correct is True
        # lm-eval's ignore_punctuation deletes the punctuation, ours also collapses the whitespace runs it leaves
        squeeze = lambda t: " ".join(t.lower().translate({ord(c): " " for c in string.punctuation}).split())
        want = lmeval_exact_match(squeeze(p), squeeze(g), ignore_case=True, ignore_punctuation=True)
        assert em(p, g).correct is want, (p, g)
    # the fact that makes lm-eval's ignore_punctuation unfit as a default: it deletes the sign
    assert lmeval_exact_match("-3", "3", ignore_punctuation=True) and not em("-3", "3").correct


def test_exact_match_agrees_with_inspect_numeric_match():
    """Inspect's match(location="exact", numeric=True) on number targets: same verdicts on ASCII renderings."""
    for x, rng in numbers(300, seed=5):
        for p in [rng.choice(renderings(x, rng)), rng.choice(renderings(-x, rng))]:
            if MINUS in p or "+" in p.replace("e+", "").replace("E+", ""):
                continue
            g = plain(x)
            assert em(p, g).correct is inspect_match_numeric(p, g, "exact"), (p, g)


def test_exact_match_lists_keep_signs():
    assert em("-1, 2", "1, 2", list=True).correct is False
    assert em(f"{MINUS}1; 2", "-1, 2", list=True).correct is True
    assert em("2, -1", "-1, 2", list=True).correct is True
    assert em("2, -1", "-1, 2", list=True, ordered=True).correct is False


def test_batch_path_gives_the_row_verdicts_on_signed_numbers():
    metric = build_metric("exact_match")
    cases = []
    for x, rng in numbers(300, seed=3):
        cases.append((rng.choice(renderings(x, rng)), rng.choice(renderings(rng.choice([x, -x]), rng))))
        cases.append((rng.choice(renderings(x, rng)) + "%", plain(x)))
    columns = metric.score_columns([g for _, g in cases], [p for p, _ in cases])
    items = [JudgeInput(f"s{i}", "q", g, p) for i, (p, g) in enumerate(cases)]
    rows = [metric.score(i) for i in items]
    assert [columns.row(k) for k in range(len(cases))] == rows == asyncio.run(metric.ascore_many(items))
    assert sum(r.correct for r in rows) > 50  # the cases hold matches as well as mismatches


def test_no_punctuation_around_a_number_flips_its_sign():
    """Sentence, markdown and enclosing punctuation around a rendering of x (no sign added) never makes any
    normalizer read it as -x (this search found "...-3", "_-3_" and "-$3" cases)."""
    rng = random.Random(37)
    wrappers = list(".,!?;:()[]\"'*_# $") + ["", "", "**", "...", " is", "so "]
    choice = build_metric("choice")
    for _ in range(1500):
        x = rng.choice([-1, 1]) * random_value(rng)
        w = rng.choice(wrappers) + rng.choice(renderings(x, rng)).strip() + rng.choice(wrappers)
        t = rng.choice(renderings(-x, rng)).strip()
        assert em(w, t).correct is False, (w, t)
        assert lenient("includes", f"ok {w} end", t).correct is False, (w, t)
        assert lenient("last_number", f"0.000123 then {w}", t).correct is False, (w, t)
        assert lenient("regex", f"answer: {w}", t, pattern=r"answer: (.+)$").correct is False, (w, t)
        assert question_scorer(w, plain(-x)) is False
        assert gaia_metric("gaia_strict", w + " km", plain(-x) + " km") is False  # the official string branch drops signs
        options = [plain(-x), plain(x)]
        got = choice.score(JudgeInput("s", "q", "A", f"I think {w}", raw_output=f"I think {w}", choices=options))
        assert got.normalized_prediction != "A", (w, options)


# ---- parse_number / read_quantity -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text,value", [
    ("-3", (-3.0, False)), (f"{MINUS}3", (-3.0, False)), ("+3", (3.0, False)), ("3%", (3.0, True)),
    ("-3 %", (-3.0, True)), ("1e3", (1000.0, False)), ("5.", (5.0, False)), (".5", (0.5, False)),
    ("$-3", (-3.0, False)), ("-$3", (-3.0, False)), ("1,234.5", (1234.5, False)), ("1 234", (1234.0, False)),
    ("1.5×10^3", (1500.0, False)), ("3 * 10**2", (300.0, False)), (f"10^{MINUS}2", None), ("1 2", None),
    ("1,2", None), ("- 3", None), ("--3", None), ("-$-3", None), ("1,000 000", None),
    ("inf", None), ("nan", None), ("", None), ("abc", None), ("$", None), ("%", None), ("-", None),
])
def test_read_quantity(text, value):
    assert read_quantity(text) == value


def test_parse_number_is_a_plain_number_only():
    assert parse_number("-3") == -3.0 and parse_number(f"{MINUS}2.5") == -2.5
    assert parse_number("45%") is None  # a percentage is not the plain number 45 (nor 0.45)


def test_parse_number_property_sign_kept():
    for x, rng in numbers(500, seed=9):
        for text in renderings(x, rng):
            if text.strip().startswith("(") or text.endswith("."):
                continue  # enclosing and sentence punctuation are the normalizer's business
            assert parse_number(text) == pytest.approx(x, rel=1e-12), text


# ---- includes -------------------------------------------------------------------------------------------------------
INCLUDES_TABLE = [
    ("the answer is -3", "3", False), ("the answer is -3", "-3", True), (f"it is {MINUS}3", "-3", True),
    ("it is 3.", "3", True), ("it is 3.5", "3", False), ("it is 3.0", "3", True), ("in 2023 it was", "3", False),
    ("it was 3,000", "3", False), ("45% of them", "45", False), ("45% of them", "45%", True), ("1e3 m", "1000", True),
    ("loss of $-3", "-3", True), ("loss of -$3", "$3", False), ("(-3)", "3", False), ("x = 3", "3", True),
    ("Windows 100", "Windows 10", False), ("Windows 10.", "Windows 10", True), ("Paris, France", "paris", True),
    ("COVID-19 cases", "covid-19", True), ("COVID-19 cases", "19", False), ("COVID-19 cases", "-19", False),
    ("so...-3", "3", False), ("_-0.5_", "0.5", False), ("5-3", "3", True),
]


@pytest.mark.parametrize("raw,target,ok", INCLUDES_TABLE)
def test_includes_table(raw, target, ok):
    assert lenient("includes", raw, target).correct is ok


def test_includes_property_agrees_with_inspect_numeric_match_any():
    """For a number target, `includes` finds it exactly when Inspect's match(location="any", numeric=True) does."""
    rng = random.Random(21)
    fillers = ["the", "answer", "is", "so", "km", "and", "then", "x", "2023", "or"]
    for _ in range(1500):
        x = rng.choice([-1, 1]) * random_value(rng)
        pool = [x, -x, x * 10, x + 1, abs(x)]
        tokens = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.5:
                tokens.append(rng.choice(fillers))
            else:
                v = rng.choice(pool)
                tok = rng.choice([plain(v), f"{v:e}", plain(v) + rng.choice(["", ".", "!", ")", "%", ","])])
                tokens.append(("(" if tok.endswith(")") else "") + tok)
        reply, target = " ".join(tokens), plain(x)
        assert lenient("includes", reply, target).correct is inspect_match_numeric(reply, target, "any"), \
            (reply, target)


def test_includes_property_words_agree_with_inspect_includes():
    rng = random.Random(4)
    words = ["paris", "France", "new", "york", "the", "a", "gold", "Au", "au"]
    for _ in range(1000):
        reply = " ".join(rng.choice(words) for _ in range(rng.randint(0, 6))) + rng.choice(["", ".", "!"])
        target = " ".join(rng.choice(words) for _ in range(rng.randint(1, 2)))
        assert lenient("includes", reply, target).correct is inspect_includes(reply, target), (reply, target)


# ---- choice, regex, last_number ------------------------------------------------------------------------------------
def test_choice_numeric_options_keep_signs():
    options = ["-3", "3", "30", "3%"]
    m = build_metric("choice")
    for reply, letter in [("The value is -3.", "A"), ("The value is 3.", "B"), ("It is 30", "C"),
                          ("about 3%", "D"), (f"It is {MINUS}3", "A")]:
        got = m.score(JudgeInput("s", "q", letter, reply, raw_output=reply, choices=options))
        assert got.correct is True and got.normalized_prediction == letter, (reply, got)
    assert m.score(JudgeInput("s", "q", "-3", "ANSWER: B", raw_output="ANSWER: B", choices=options)).correct is False


def test_regex_and_last_number_keep_signs_percent_and_exponents():
    rx = {"pattern": r"answer: (\S+)"}
    assert lenient("regex", "answer: -3", "3", **rx).correct is False
    assert lenient("regex", f"answer: {MINUS}3", "-3", **rx).correct is True
    assert lenient("regex", "answer: 3%", "3", **rx).correct is False
    assert lenient("regex", "answer: 1e3", "1000", **rx).correct is True
    assert lenient("last_number", f"so it is {MINUS}12", "12").correct is False
    assert lenient("last_number", f"so it is {MINUS}12", "-12").correct is True
    assert lenient("last_number", "so it is 1e3", "1000").correct is True
    assert lenient("last_number", "so it is 1e3", "3").correct is False
    assert lenient("last_number", "about 45% of them", "45").correct is False
    assert lenient("last_number", "about 45% of them", "45%").correct is True
    assert lenient("last_number", "it ends at 5.", "5").correct is True
    assert lenient("last_number", "a loss of $-3", "-3").correct is True
    assert lenient("last_number", "from 2020-2021", "2021").correct is True  # a range dash is not a sign


def test_regex_and_last_number_property():
    for x, rng in numbers(300, seed=13):
        p, f = rng.choice(renderings(x, rng)).strip(), rng.choice(renderings(-x, rng)).strip()
        g = plain(x)
        assert lenient("regex", f"answer: {p}", g, pattern=r"answer: (.+)$").correct is True, p
        assert lenient("regex", f"answer: {f}", g, pattern=r"answer: (.+)$").correct is False, f
        assert lenient("last_number", f"work 12 then {p}", g).correct is True, p
        assert lenient("last_number", f"work 12 then {f}", g).correct is False, f


# ---- list_match (DABench's official comparison) ---------------------------------------------------------------------
def test_list_match_is_dabench_and_never_loses_a_sign():
    for x, rng in numbers(300, seed=17):
        for p in renderings(x, rng) + renderings(-x, rng) + ["abc", ""]:
            g = plain(x)
            assert is_equal(p, g) is dabench_is_equal(p, g), (p, g)
            if is_equal(p, g):
                assert float(p) == pytest.approx(x)
        assert is_equal(plain(-x), plain(x)) is False
    m = build_metric("list_match")
    for raw, ok in [("@v[-3]", False), ("@v[3]", True), ("@v[3.0000001]", True), (f"@v[{MINUS}3]", False)]:
        assert m.score(JudgeInput("s", "q", "@v[3]", raw, raw_output=raw)).correct is ok, raw


# ---- gaia ------------------------------------------------------------------------------------------------------------
def gaia_metric(name, pred, truth):
    return build_metric(name).score(JudgeInput("s", "q", truth, pred)).correct


GAIA_TABLE = [
    # (prediction, ground truth, official (`gaia`), the variant `gaia_strict`)
    ("-3", "3", False, False), ("3", "-3", False, False), ("$-3", "-3", True, True), ("3%", "3", True, True),
    ("1e3", "1000", True, True), ("5.", "5", True, True), (".5", "0.5", True, True), ("1,000", "1000", True, True),
    (f"{MINUS}3", "-3", False, False),  # float() does not read the unicode minus: officially wrong, kept
    # the string branch: the official scorer deletes every punctuation character, a sign and a decimal point included;
    # the variant keeps them
    ("-3 km", "3 km", True, False), ("-$3 km", "$3 km", True, False), ("3 km", "-3 km", True, False),
    ("- 3 km", "3 km", True, False), ("3.5 km", "35 km", True, False), ("3.5 million", "35 million", True, False),
    ("12.30", "12:30", True, False), ("v3.5", "v35", True, False), ("from -3 to 5", "from 3 to 5", True, False),
    ("COVID-19", "covid 19", True, True), ("U.S.", "US", True, True), ("5% rise", "5 rise", True, True),
    ("-3, 4", "3, 4", False, False), ("-3, 4", "-3, 4", True, True), ("3 - 2", "3-2", True, True),
    ("1.5 × 10^3", "1500", False, False), ("3.5 km", "3.5 km", True, True),
]


@pytest.mark.parametrize("pred,truth,official,strict", GAIA_TABLE)
def test_gaia_table(pred, truth, official, strict):
    assert gaia_official(pred, truth) is official  # the reference re-implementation agrees with the table
    assert question_scorer(pred, truth) is official
    assert gaia_metric("gaia", pred, truth) is official
    assert gaia_metric("gaia_strict", pred, truth) is strict


def test_gaia_property_numbers_are_official_and_signs_kept():
    rng = random.Random(23)
    for x, _ in numbers(400, seed=29):
        for p in renderings(x, rng) + renderings(-x, rng) + [plain(x) + "%", "$" + plain(x)]:
            g = rng.choice([plain(x), f"{x:e}", plain(x) + ", 7", "7; " + plain(x)])
            assert question_scorer(p, g) is gaia_official(p, g), (p, g)
            assert gaia_metric("gaia_strict", p, g) is gaia_official(p, g), (p, g)  # the variant's numbers are official
        unit = rng.choice([" km", " m/s", "°C", " people"])
        assert gaia_metric("gaia_strict", plain(-x) + unit, plain(x) + unit) is False
        assert question_scorer(plain(x) + unit, plain(x) + unit) is True


def mutate(text, rng):
    """`text` with one punctuation character, sign or decimal point inserted, deleted or swapped, or its case or
    spacing changed: near misses, where the string branch's treatment of punctuation decides."""
    i = rng.randint(0, len(text))
    kind = rng.randrange(5)
    if kind == 0:
        return text[:i] + rng.choice("-.:'") + text[i:]
    if kind == 1 and text:
        return text[:min(i, len(text) - 1)] + text[min(i, len(text) - 1) + 1:]
    if kind == 2:
        return text.replace(".", rng.choice(":-"), 1) if "." in text else text.replace(":", ".", 1)
    if kind == 3:
        return text.upper()
    return text[:i] + " " + text[i:]


def test_gaia_property_strings_are_official_with_signed_and_decimal_numbers_too():
    """`gaia` is the official scorer on every string, signed and decimal numbers in it included; the variant differs
    only where a sign or a decimal point of a number is at stake."""
    rng = random.Random(31)
    alphabet = list("abcAB xyz-.'!?()/&:$%") + ["19", "3.5", "-3", "- 3", "12:30", "v3.5", "co-op", "St.", "e.g.",
                                                "\u2212", "\u00a0", "\t", "1,5", ";"]
    differ = 0
    for _ in range(4000):
        g = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8)))
        p = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) if rng.random() < 0.3 else mutate(g, rng)
        assert question_scorer(p, g) is gaia_official(p, g), (p, g)
        if g.strip() == "?":
            continue  # GAIA's hidden answer: the metrics leave it unscored
        assert gaia_metric("gaia", p, g) is gaia_official(p, g), (p, g)
        strict = gaia_metric("gaia_strict", p, g)
        if strict is not gaia_official(p, g):
            differ += 1
            assert re.search(r"-\s*\$?\s*\.?\d|\d\.\d", p + " " + g), (p, g)  # only a sign or a decimal point
            assert strict is False  # the variant is stricter, never more lenient
        if not any(re.search(r"^\s*-\s*\$?\s*\.?\d|(?<![^\W_])-\$?\.?\d|\d\.\d", t) for t in (p, g)):
            assert strict is gaia_official(p, g), (p, g)
    assert differ > 20  # the generated strings do exercise the difference


# ---- docs/metrics.md: every row of the "Normalizer rules" tables is the code's verdict ------------------------------
def doc_rows():
    text = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    section = text.split("### Normalizer rules", 1)[1].split("\n### ", 1)[0]
    rows = []
    for block in section.split("#### `")[1:]:
        name = block.split("`", 1)[0]
        for line in block.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4 and cells[2] in ("right", "wrong"):
                rows.append((name, cells[0].strip("`"), cells[1].strip("`"), cells[2] == "right"))
    return rows


CHOICE_OPTIONS = ["-3", "3", "30", "3%"]


def doc_verdict(name, pred, target):
    if name in ("gaia", "gaia_strict"):
        return gaia_metric(name, pred, target)
    if name == "numeric_tolerance":
        return em(pred, target, numeric_tolerance=0.5).correct
    settings = {"regex": {"pattern": r"answer: (\S+)"}}.get(name, {})
    item = JudgeInput("s", "q", target, pred, raw_output=pred, choices=CHOICE_OPTIONS if name == "choice" else None)
    return build_metric({"name": name, **settings}).score(item).correct


def test_docs_tables_are_the_verdicts():
    rows = doc_rows()
    assert {r[0] for r in rows} == {"exact_match", "numeric_tolerance", "includes", "choice", "regex", "last_number",
                                    "list_match", "gaia", "gaia_strict"} and len(rows) > 70
    wrong = [(name, p, t, ok) for name, p, t, ok in rows if doc_verdict(name, p, t) is not ok]
    assert not wrong, wrong
