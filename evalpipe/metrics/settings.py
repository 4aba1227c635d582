"""The settings of every built-in metric, typed and ranged (issue 30): one pydantic model per metric, its
`option_schema`. A config entry's settings are checked against it by `evalpipe validate` and whenever the config is
loaded (evalpipe/project/schema.py), and `build_metric` checks the settings it is handed (the judge resource's
overrides, `evaluate(metrics=...)`) the same way: all before the first model call.

Each field's `description` is the expected form, so an error reads as one line:
`metric 'code_execution': setting memory_mb must be a whole number of MB >= 0 (0: no limit), got 'lots'`.
Fields default to None ("not given"): the metric's constructor keeps its own default, documented in docs/metrics.md.
Types are strict (no "10" for 10, no 1.0 for a whole number, no "true" for true): settings come from YAML or Python,
which both write the real type.
"""
from __future__ import annotations

import math
import re
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from evalpipe.core.errors import ConfigError

FIELD = "raw_output (the whole reply) or prediction (the extracted answer)"


class MetricSettings(BaseModel):
    """Base of the settings models: unknown names are reported by the caller (with a did-you-mean)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    @field_validator("*", mode="after")
    @classmethod
    def _finite(cls, v: Any) -> Any:  # nan and inf pass `ge=0`; no setting means either
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError("nan and inf are not allowed")
        return v


def _tolerance(what: str = "a number >= 0") -> Any:
    return Field(None, ge=0, description=what)


def _flag(default: str) -> Any:
    return Field(None, description=f"true or false (default {default})")


class _Field(MetricSettings):
    field: Optional[Literal["raw_output", "prediction"]] = Field(None, description=FIELD)


class ExactMatchSettings(MetricSettings):
    case_sensitive: Optional[bool] = _flag("false")
    numeric: Optional[bool] = _flag("true")
    rel_tol: Optional[float] = _tolerance("a number >= 0 (a relative tolerance, e.g. 0.01)")
    abs_tol: Optional[float] = _tolerance("a number >= 0 (an absolute tolerance)")
    numeric_tolerance: Optional[float] = _tolerance("a number >= 0 (DSGym's relative tolerance, e.g. 0.03)")
    list: Optional[bool] = _flag("false")
    ordered: Optional[bool] = _flag("false")
    separators: Optional[str] = Field(None, min_length=1, description='a non-empty string of characters (e.g. ",;")')


class DsgymExactMatchSettings(MetricSettings):
    numeric_tolerance: Optional[float] = _tolerance("a number >= 0 (DSGym's relative tolerance, e.g. 0.03)")


class GaiaSettings(MetricSettings):
    numeric_tolerance: Optional[float] = _tolerance("a number >= 0 (e.g. 0.001)")
    fractions: Optional[bool] = _flag("false")


class ListMatchSettings(MetricSettings):
    skip_empty: Optional[bool] = _flag("false")


class IncludesSettings(_Field):
    ignore_case: Optional[bool] = _flag("true")
    whole_word: Optional[bool] = _flag("false")


class ChoiceSettings(_Field):
    pass


class RegexSettings(_Field):
    pattern: str = Field(description="a regular expression, e.g. 'answer: (\\S+)'", min_length=1)
    group: Optional[Union[int, str]] = Field(None, description="a group number >= 0 or a group name")
    which: Optional[Literal["first", "last"]] = Field(None, description="first or last (default last)")
    ignore_case: Optional[bool] = _flag("true")
    rel_tol: Optional[float] = _tolerance()
    abs_tol: Optional[float] = _tolerance()

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"does not compile: {exc}") from None
        return v

    @field_validator("group")
    @classmethod
    def _group(cls, v: Any) -> Any:
        if isinstance(v, int) and v < 0:
            raise ValueError("a group number is >= 0")
        return v


class LastNumberSettings(_Field):
    rel_tol: Optional[float] = _tolerance()
    abs_tol: Optional[float] = _tolerance()


JudgeSpec = Union[str, dict[str, Any]]


class ModelGradedSettings(MetricSettings):
    """The settings every model-graded metric takes: its judge(s) and how calls are made."""

    judge: Optional[JudgeSpec] = Field(None, description="a name under 'judges:' or a mapping with runner and model")
    judges: Optional[list[JudgeSpec]] = Field(None, min_length=1, description="a non-empty list of judge names or "
                                                                               "mappings")
    concurrency: Optional[int] = Field(None, ge=1, description="a whole number >= 1")
    timeout_s: Optional[float] = Field(None, gt=0, description="a number of seconds > 0")
    max_retries: Optional[int] = Field(None, ge=0, description="a whole number >= 0")


class LLMJudgeSettings(ModelGradedSettings):
    prompt: Optional[str] = Field(None, description="a template string ({input} {target} {prediction} {raw_output})")
    system: Optional[str] = Field(None, description="a string")
    combine: Optional[Literal["majority", "mean", "unanimous"]] = Field(None, description="majority, mean or "
                                                                                          "unanimous")


class LLMScoreSettings(LLMJudgeSettings):
    numeric_shortcut: Optional[bool] = _flag("false")
    rel_tol: Optional[float] = _tolerance("a number >= 0 (default 0.01)")


class HMSSettings(ModelGradedSettings):
    pair_text: Optional[Literal["full", "sub"]] = Field(None, description="full or sub")
    judge_params: Optional[Literal["official", "judge"]] = Field(None, description="official or judge")
    lenient_json: Optional[bool] = _flag("false")
    strict_replies: Optional[bool] = _flag("false")


class SemanticSimilaritySettings(MetricSettings):
    model: Optional[str] = Field(None, min_length=1, description="a sentence-transformers model name or folder")
    threshold: Optional[float] = Field(None, ge=-1, le=1, description="a cosine similarity between -1 and 1")
    batch_size: Optional[int] = Field(None, ge=1, description="a whole number >= 1")


class DabstepSettings(MetricSettings):
    rule: Optional[Literal["official", "dsgym"]] = Field(None, description="official or dsgym")


class KaggleSettings(MetricSettings):
    base_dir: Optional[str] = Field(None, min_length=1, description="a folder path")


class CodeExecutionSettings(MetricSettings):
    timeout_s: Optional[float] = Field(None, gt=0, description="a number of seconds > 0 (default 10)")
    memory_mb: Optional[int] = Field(None, ge=1, description="a whole number of MB >= 1 (default 1024)")
    disk_mb: Optional[int] = Field(None, ge=0, description="a whole number of MB >= 0 (0: no quota)")
    concurrency: Optional[int] = Field(None, ge=1, description="a whole number >= 1")
    pass_at_k: Optional[list[int]] = Field(None, min_length=1, description="a non-empty list of whole numbers >= 1 "
                                                                            "(e.g. [1, 10])")
    prepend_prompt: Optional[bool] = _flag("true")
    mode: Optional[Literal["tests", "runs_without_error"]] = Field(None, description="tests or runs_without_error")
    sandbox: Optional[Literal["auto", "bwrap", "docker", "process"]] = Field(
        None, description="auto, bwrap, docker or process")

    @field_validator("pass_at_k")
    @classmethod
    def _positive(cls, v: Optional[list[int]]) -> Optional[list[int]]:
        if v is not None and any(k < 1 for k in v):
            raise ValueError("every k must be >= 1")
        return v


class ToolIntegrationSettings(MetricSettings):
    min_eligible_for_gates: Optional[int] = Field(None, ge=1, description="a whole number >= 1")


class LmEvalSettings(MetricSettings):
    task: Optional[str] = Field(None, min_length=1, description="an lm-evaluation-harness task name")
    include_path: Optional[Union[str, list[str]]] = Field(None, description="a folder path or a list of them")


class QrdataSettings(MetricSettings):
    strip_markup: Optional[bool] = _flag("false")


class NoSettings(MetricSettings):
    """A metric without settings (bfcl_ast)."""


def _expected(schema: type[BaseModel], key: str) -> str:
    field = schema.model_fields.get(key)
    return (field.description if field is not None and field.description else "of another form")


def setting_problems(metric: str, schema: Any, settings: dict[str, Any]) -> list[tuple[str, str]]:
    """(setting, one-line message) for each declared setting of `settings` that `schema` (a settings model) refuses;
    unknown names are left to the caller. [] when `schema` is not a pydantic model."""
    if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
        return []
    own = {k: v for k, v in settings.items() if k in schema.model_fields}
    try:
        schema.model_validate(own)
    except ValidationError as exc:
        out, seen = [], set()
        for err in exc.errors(include_url=False):
            key = str(err["loc"][0]) if err["loc"] else ""
            if key in seen:  # a union reports one error per alternative: one line per setting
                continue
            seen.add(key)
            if err["type"] == "missing":
                out.append((key, f"metric {metric!r} needs a {key!r} setting: {_expected(schema, key)}"))
                continue
            why = err["msg"].removeprefix("Value error, ") if err["type"] == "value_error" else ""
            out.append((key, f"metric {metric!r}: setting {key} must be {_expected(schema, key)}, got "
                             f"{own.get(key)!r}{f' ({why})' if why else ''}"))
        return out
    return []


def check_settings(metric: str, schema: Any, settings: dict[str, Any]) -> None:
    """Raise the first problem of `setting_problems` as a ConfigError."""
    problems = setting_problems(metric, schema, settings)
    if problems:
        raise ConfigError(problems[0][1])
