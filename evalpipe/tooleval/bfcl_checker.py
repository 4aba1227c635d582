"""The Berkeley Function Calling Leaderboard's AST checker semantics for Python, written here.

Reference: gorilla `berkeley-function-call-leaderboard/bfcl_eval/eval_checker/ast_eval/ast_checker.py`,
`eval_runner.py` (relevance and AST runners), `model_handler/utils.py` (the Python-call decoder) and
`utils.py` (output format checks). The verdict of every rule is the reference's; the code and messages are our
own. A call is `{function_name: {param: value}}`; an answer is `{function_name: {param: [acceptable values]}}`
(BFCL's possible-answer `ground_truth` is a list of those).

Rules (see docs/metrics.md, bfcl_ast):
- simple categories: exactly one call, checked against the first function doc and the first answer;
- `multiple`: exactly as many calls as answers (one), checked against the doc of the answer's function;
- `parallel` / `parallel_multiple` (any category containing "parallel"): same count, and each answer in turn is
  matched to the first not-yet-matched call that passes it (any order);
- `irrelevance` / `live_irrelevance`: passes when the output decodes to no call; `live_relevance`: passes
  when it decodes to at least one call;
- per call: the name matches; every required parameter is present; every given parameter is in the function's
  doc and in the answer; its type is the doc's type (int accepted for float; a tuple for tuple) or the type of
  the answer's values (BFCL's "variable" case); its value is among the acceptable ones: strings after
  standardization (spaces and `,./-_*^` removed, lowercased, `'` -> `"`), lists element-wise with their string
  elements standardized and order kept, dicts key by key (missing keys allowed only when `""` is acceptable),
  lists of dicts position by position; an answer parameter left out must have `""` among its values.
"""
from __future__ import annotations

import ast
import json
import operator
import re
from dataclasses import dataclass, field
from typing import Any

# BFCL's Python type names -> the Python type a value must have. `tuple` values arrive as lists (JSON),
# `any` is checked as a string, as the reference does.
PY_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
                             "tuple": list, "dict": dict, "any": str}
NESTED_TYPES = ("array", "tuple")  # types whose items are type-checked one level deep
_STANDARDIZE = re.compile(r"[ ,./\-_*^]")


@dataclass
class Verdict:
    valid: bool
    error_type: str = ""
    error: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return "ok" if self.valid else f"{self.error_type}: {self.error}"


OK = Verdict(True)


def _bad(error_type: str, error: str, **details: Any) -> Verdict:
    return Verdict(False, error_type, error, details)


def standardize_string(s: str) -> str:
    """BFCL's string normalization: drop spaces and `,./-_*^`, lowercase, single quotes -> double quotes."""
    return _STANDARDIZE.sub("", s).lower().replace("'", '"')


def _std(v: Any) -> Any:
    return standardize_string(v) if type(v) is str else v


def _answer_type(options: list) -> type | None:
    """The type of the first acceptable value that is not `""` (the optional marker)."""
    for o in options:
        if o != "":
            return type(o)
    return None


# ---- type checking ----------------------------------------------------------------------------------------------
def _check_type(param: str, value: Any, options: list, type_name: str, expected: type | None,
                nested: type | None) -> tuple[Verdict, bool]:
    """(verdict, is_variable). `is_variable`: the answer's values are of another type than the doc says (BFCL
    then treats the value as a variable name and compares it as is)."""
    ans_type = _answer_type(options)
    is_variable = ans_type is not None and ans_type is not expected
    if type(value) is expected:
        if nested is None:
            return OK, is_variable
        for opt in options:
            good = True
            if type(opt) is list:
                for item in value:
                    sub, _ = _check_type(param, item, opt, nested.__name__, nested, None)
                    if not sub.valid:
                        good = False
                        break
            if good:
                return OK, is_variable
        # the reference falls through here with the nested failure; it stays a failure either way
        return _bad("type_error:nested", f"parameter {param!r}: items of {value!r} are not all "
                                         f"{nested.__name__} ({type_name})"), is_variable
    if ans_type is not None and type(value) is ans_type:
        return OK, True
    return _bad("type_error:simple", f"parameter {param!r} should be {type_name}, got "
                                     f"{type(value).__name__} {value!r}"), is_variable


# ---- value checking ---------------------------------------------------------------------------------------------
def _check_string(param: str, value: str, options: list) -> Verdict:
    if _std(value) in [standardize_string(o) for o in options if type(o) is str]:
        return OK
    return _bad("value_error:string", f"parameter {param!r}: {value!r} is not one of {options} "
                                      f"(compared after BFCL string standardization)")


def _check_list(param: str, value: list, options: list) -> Verdict:
    got = [_std(v) for v in value]
    # an option that is "" iterates to nothing, i.e. becomes [] (as in the reference)
    if got in [[_std(o) for o in opt] for opt in options if isinstance(opt, (list, tuple, str))]:
        return OK
    return _bad("value_error:list/tuple", f"parameter {param!r}: {value!r} is not one of {options}")


def _check_dict(param: str, value: Any, options: list) -> Verdict:
    last = _bad("dict_checker:unclear", f"parameter {param!r}: no acceptable dict to compare {value!r} with")
    if not isinstance(value, dict):
        return _bad("value_error:dict_value", f"parameter {param!r}: {value!r} is not a dict")
    for opt in options:
        if opt == "":
            continue
        good = True
        for k, v in value.items():
            if k not in opt:
                last, good = _bad("value_error:dict_key", f"parameter {param!r}: unexpected key {k!r}"), False
                break
            if _std(v) not in [_std(o) for o in opt[k]]:
                last, good = _bad("value_error:dict_value", f"parameter {param!r}: key {k!r} = {v!r} is not "
                                                            f"one of {opt[k]}"), False
                break
        if good:
            for k, acceptable in opt.items():
                if k not in value and "" not in acceptable:
                    last, good = _bad("value_error:dict_key", f"parameter {param!r}: missing key {k!r}"), False
                    break
        if good:
            return OK
    return last


def _check_list_of_dicts(param: str, value: list, options: list) -> Verdict:
    last = _bad("list_dict_checker:unclear", f"parameter {param!r}: nothing to compare {value!r} with")
    for opt in options:
        if not isinstance(opt, (list, tuple, str)) or len(value) != len(opt):
            last = _bad("value_error:list_dict_count", f"parameter {param!r}: {len(value)} dicts, expected {len(opt)}")
            continue
        good = True
        for item, expected in zip(value, opt):
            last = _check_dict(param, item, [expected])
            if not last.valid:
                good = False
                break
        if good:
            return OK
    return last


def _type_of(spec: dict, param: str) -> tuple[str, type | None, type | None]:
    type_name = spec.get("type", "")
    expected = PY_TYPES.get(type_name)
    nested = None
    if type_name in NESTED_TYPES:
        nested = PY_TYPES.get((spec.get("items") or {}).get("type", ""))
    return type_name, expected, nested


def check_call(doc: dict | None, call: dict, answer: dict) -> Verdict:
    """One model call `{name: {param: value}}` against one function doc and one answer `{name: {param: [..]}}`."""
    if not doc:
        name = next(iter(answer), "?")
        return _bad("simple_function_checker:missing_doc", f"function {name!r} of the answer is not among the "
                                                           f"question's function docs")
    options_by_param: dict[str, list] = next(iter(answer.values()))
    name = doc["name"]
    if name not in call:
        got = ", ".join(repr(k) for k in call) or "nothing"
        return _bad("simple_function_checker:wrong_func_name", f"expected a call to {name!r}, got {got}")
    params = call[name]
    properties = (doc.get("parameters") or {}).get("properties") or {}
    for req in (doc.get("parameters") or {}).get("required") or []:
        if req not in params:
            return _bad("simple_function_checker:missing_required", f"missing required parameter {req!r}")
    for param, value in params.items():
        if param not in properties or param not in options_by_param:
            return _bad("simple_function_checker:unexpected_param", f"unexpected parameter {param!r}")
        options = options_by_param[param]
        type_name, expected, nested = _type_of(properties[param], param)
        if expected is None:
            return _bad("type_error:unsupported", f"parameter {param!r} has type {type_name!r}, which BFCL's "
                                                  f"Python checker does not know")
        if type_name == "tuple" and type(value) is tuple:
            value = list(value)
        if type_name == "float" and type(value) is int:  # Python's int -> float promotion
            value = float(value)
        verdict, is_variable = _check_type(param, value, options, type_name, expected, nested)
        if not verdict.valid:
            return verdict
        if not is_variable:
            if expected is dict:
                verdict = _check_dict(param, value, options)
            elif expected is list and nested is dict:
                verdict = _check_list_of_dicts(param, value, options)
            elif expected is str:
                verdict = _check_string(param, value, options)
            elif expected is list:
                verdict = _check_list(param, value, options)
            else:
                verdict = None
            if verdict is not None:
                if not verdict.valid:
                    return verdict
                continue
        if value not in options:
            return _bad("value_error:others", f"parameter {param!r}: {value!r} is not one of {options}")
    for param, options in options_by_param.items():
        if param not in params and "" not in options:
            return _bad("simple_function_checker:missing_optional",
                        f"parameter {param!r} left out but the answer does not mark it optional (\"\")")
    return OK


def find_doc(docs: list[dict] | dict, name: str) -> dict | None:
    if isinstance(docs, dict):
        return docs
    return next((d for d in docs if d.get("name") == name), None)


def check_calls(docs: list[dict], calls: list[dict], answers: list[dict], category: str) -> Verdict:
    """The AST check of a whole (decoded) output for one test category."""
    if "parallel" in category:
        if len(calls) != len(answers):
            return _bad("parallel_function_checker_no_order:wrong_count",
                        f"{len(calls)} call(s), expected {len(answers)}")
        matched: set[int] = set()
        for i, answer in enumerate(answers):
            doc = find_doc(docs, next(iter(answer)))
            last = None
            for j, call in enumerate(calls):
                if j in matched:
                    continue
                last = check_call(doc, call, answer)
                if last.valid:
                    matched.add(j)
                    break
            if last is None or not last.valid:
                return _bad("parallel_function_checker_no_order:cannot_find_match",
                            f"no call matches expected call {i} ({next(iter(answer))}); closest failure: "
                            f"{last.reason if last else 'none left'}")
        return OK
    if "multiple" in category:
        if len(calls) != len(answers):
            return _bad("multiple_function_checker:wrong_count", f"{len(calls)} call(s), expected {len(answers)}")
        return check_call(find_doc(docs, next(iter(answers[0]))), calls[0], answers[0])
    if len(calls) != 1:
        return _bad("simple_function_checker:wrong_count", f"{len(calls)} call(s), expected 1")
    return check_call(docs[0] if docs else None, calls[0], answers[0])


# ---- decoding model output ---------------------------------------------------------------------------------------
class DecodeError(ValueError):
    pass


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}


def _arith(node: ast.AST) -> Any:
    """Constant arithmetic (what BFCL evaluates for a BinOp), without evaluating code."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_arith(e) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_arith(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _arith(node.left), _arith(node.right)
        if type(node.op) is ast.Pow and isinstance(right, (int, float)) and abs(right) > 1000:
            raise DecodeError("exponent too large")
        return _BINOPS[type(node.op)](left, right)
    raise DecodeError(f"cannot evaluate {ast.unparse(node)!r}")


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        # the reference negates the operand's constant whatever the operator (so `+5` reads as -5)
        if not isinstance(node.operand, ast.Constant):
            raise DecodeError(f"unsupported operand in {ast.unparse(node)!r}")
        return -node.operand.value
    if isinstance(node, ast.List):
        return [_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.BinOp):
        try:
            return _arith(node)
        except DecodeError:
            raise
        except Exception as exc:  # 1/0, "a" - 1 ...
            raise DecodeError(f"cannot evaluate {ast.unparse(node)!r}: {exc}") from None
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Call):
        return _call(node) if node.keywords else ast.unparse(node)
    if isinstance(node, ast.Tuple):
        return tuple(_value(v) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return f"{ast.unparse(node.value)}[{ast.unparse(node.slice)}]"
    raise DecodeError(f"unsupported expression {type(node).__name__}: {ast.unparse(node)!r}")


def _call(node: ast.Call) -> dict:
    parts = []
    func = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    args = {}
    for kw in node.keywords:  # positional arguments are ignored, as in the reference
        args[kw.arg] = _value(kw.value)
    return {".".join(reversed(parts)): args}


def decode_python_calls(text: str) -> list[dict]:
    """BFCL's default decoding of a prompted model's answer: `[func(a=1), mod.g(b="x")]` (brackets added when
    missing; backticks, newlines and spaces trimmed at both ends) -> `[{"func": {"a": 1}}, ...]`."""
    s = text.strip("`\n ")
    if not s.startswith("["):
        s = "[" + s
    if not s.endswith("]"):
        s = s + "]"
    s = s.strip().strip("'")
    try:
        tree = ast.parse(s, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise DecodeError(f"not a Python list of calls ({type(exc).__name__}: {exc})") from None
    try:
        return _decode_body(tree.body)
    except DecodeError:
        raise
    except Exception as exc:  # e.g. `-"a"`: the reference's decoder fails there too
        raise DecodeError(f"cannot decode the calls ({type(exc).__name__}: {exc})") from None


def _decode_body(body: ast.AST) -> list[dict]:
    if isinstance(body, ast.Call):
        return [_call(body)]
    elts = getattr(body, "elts", None)
    if elts is None:
        raise DecodeError(f"not a Python list of calls: {type(body).__name__}")
    out = []
    for e in elts:
        if not isinstance(e, ast.Call):
            raise DecodeError(f"list item {ast.unparse(e)!r} is not a call")
        out.append(_call(e))
    return out


def decode_tool_calls(records: list[dict]) -> list[dict]:
    """Tool-call records (docs/interfaces.md) -> `[{name: arguments}]`, as BFCL's FC handlers decode them
    (`json.loads` of the arguments text; a failure fails the whole output)."""
    out = []
    for r in records:
        args = r.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError as exc:
                raise DecodeError(f"arguments of {r.get('name')!r} are not JSON ({exc})") from None
        out.append({r.get("name"): args if args is not None else {}})
    return out


def is_call_list(decoded: Any) -> bool:
    """A list of one-key dicts whose value is a dict (`[]` included)."""
    return isinstance(decoded, list) and all(
        isinstance(d, dict) and len(d) == 1 and isinstance(next(iter(d.values())), dict) for d in decoded)


def is_empty(decoded: Any) -> bool:
    """BFCL's relevance notion of "no call": not a call list, `[]`, or `[{}]`."""
    return (not is_call_list(decoded)) or len(decoded) == 0 or (len(decoded) == 1 and len(decoded[0]) == 0)


def category_of(sample_id: str) -> str:
    """`simple_python_12` -> `simple_python`, `live_multiple_3-2-1` -> `live_multiple`."""
    return str(sample_id).split(":")[0].rsplit("_", 1)[0]


def is_relevance_category(category: str) -> bool:
    return "relevance" in category  # also matches irrelevance / live_irrelevance


def score_output(category: str, docs: list[dict], answers: list[dict] | None, decoded: list[dict] | None,
                 decode_error: str | None) -> Verdict:
    """The verdict of one sample, given its decoded output (or the decoding error)."""
    if is_relevance_category(category):
        has_call = decode_error is None and not is_empty(decoded)
        if "irrelevance" in category:
            return OK if not has_call else _bad("irrelevance_error:decoder_success",
                                                "a function was called where none should be")
        return OK if has_call else _bad("relevance_error:decoder_failed",
                                        f"no function call where one was expected{': ' + decode_error if decode_error else ''}")
    if decode_error is not None:
        return _bad("ast_decoder:decoder_failed", decode_error)
    if not is_call_list(decoded):
        return _bad("ast_decoder:decoder_wrong_output_format", f"output is not a list of calls: {decoded!r}"[:300])
    return check_calls(docs, decoded, answers or [], category)
