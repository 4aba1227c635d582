"""The driver's check that a finished row needs no redaction (`_plain_row`): wherever it says so, redacting the row
field by field (what the driver does otherwise) gives the very same row; conversations' nested tool-call records
included, so they no longer go field by field every time."""
import itertools

import pytest

from evalpipe.core.redact import GENERATED_FIELDS, Redactor
from evalpipe.runners.driver import _plain_row

REDACTOR = Redactor(literals=["lit-secret-value-42"])


def redact_row(row):
    return {k: (REDACTOR.redact_generated(v) if k in GENERATED_FIELDS else REDACTOR.redact_obj(v, k))
            for k, v in row.items()}


def tool_row(**changes):
    record = {"turn": 0, "call_index": 0, "name": "web.search", "arguments": '{"q": "x"}', "arguments_valid": True,
              "normalized_key": "web.search|q=x", "result": {"ok": True, "results": ["2 plus 2 is 4"]},
              "fixture_hit": True, "error": None, "latency_s": 0.001}
    record.update(changes)
    return {"sample_id": "s1", "fingerprint": "ab" * 16, "status": "ok", "error": None, "raw_output": "4",
            "raw_response": '{"choices": []}', "finish_reason": "stop", "latency_s": 0.3, "input_tokens": 10,
            "output_tokens": 2, "cost": 0.0, "attempts": 1, "trajectory": '[{"role": "user"}]', "turns": 2,
            "tool_calls": 1, "invalid_args": 0, "fixture_misses": 0, "stop_reason": "final", "tool_trace": [record]}


def test_a_conversation_row_without_secrets_is_plain():
    row = tool_row()
    assert _plain_row(row, REDACTOR)
    assert redact_row(row) == row


@pytest.mark.parametrize("changes", [
    {"result": {"ok": True, "results": ["key sk-abcdefghijklmnopqrstuvwxyz"]}},  # a provider key shape, nested
    {"arguments": "lit-secret-value-42"},  # a configured literal
    {"result": {"api_key": "short"}},  # a secret-looking key: its value is masked whole
    {"result": {"token": 12345}},  # ... numbers too
    {"result": ("a", "b")},  # a tuple: redaction rebuilds it as a list
    {"result": {1: "x"}},  # a key that is not a string
])
def test_what_redaction_would_change_is_not_plain(changes):
    row = tool_row(**changes)
    assert not _plain_row(row, REDACTOR)


def test_plain_means_redaction_changes_nothing():
    # every combination of nested shapes and strings (secret or not): where the check says plain, redacting field
    # by field gives an equal row with values of the same types (elsewhere it may be cautious: "key" is a trigger)
    strings = ["plain text", "Bearer abcdefghijk123", "see https://u:pw@host/x", "lit-secret-value-42", "key"]
    keys = ["q", "password", "normalized_key", "input_tokens"]
    shapes = [lambda s, k: s, lambda s, k: [s, 1], lambda s, k: {k: s}, lambda s, k: [{k: [s, None]}],
              lambda s, k: {k: {"inner": s}}, lambda s, k: (s,)]
    plain = 0
    for s, k, shape in itertools.product(strings, keys, shapes):
        row = tool_row(result=shape(s, k))
        if _plain_row(row, REDACTOR):
            plain += 1
            redacted = redact_row(row)
            assert redacted == row, (s, k)
            assert type(redacted["tool_trace"][0]["result"]) is type(row["tool_trace"][0]["result"])
    assert plain >= 10  # the plain shapes do take the fast way


def test_nested_keys_decided_once_per_set_of_keys_still_exact():
    # the secret-name check of a nested dict's keys is remembered per tuple of keys; a key that only compares equal
    # to a remembered one (a str subclass: redaction would rebuild the dict) must not ride on that answer
    class Name(str):
        pass

    assert _plain_row(tool_row(result={"alpha": "x", "beta": "y"}), REDACTOR)
    assert not _plain_row(tool_row(result={Name("alpha"): "x", "beta": "y"}), REDACTOR)
    assert not _plain_row(tool_row(result={"alpha": "x", "password": "y"}), REDACTOR)
    assert _plain_row(tool_row(result={"alpha": "x", "beta": "y"}), REDACTOR)


def test_nested_key_check_calls_the_secret_name_rule_once_per_set_of_keys(monkeypatch):
    from evalpipe.runners import driver

    seen = []
    monkeypatch.setattr(driver, "is_secret_name", lambda k: seen.append(k) or False)
    monkeypatch.setattr(driver, "_PLAIN_KEYS", {})
    for _ in range(3):
        assert _plain_row(tool_row(result={"gamma": "x"}), REDACTOR)
    assert seen.count("gamma") == 1 and seen.count("turn") == 1
