"""`adapter: tau2`: tau2-bench (sierra-research/tau2-bench, MIT) — an agent serves a simulated user under a written
policy with tools over a domain database, judged by the official evaluation (docs/benchmarks.md, tau2-bench).

    tau2:
      adapter: tau2
      splits:
        retail: {domain: retail}                 # every task of the file
        retail_test: {domain: retail, task_split: test}
      options:
        path: data/tau2                          # <path>/<domain>/{tasks.json, split_tasks.json, db.json, policy.md}
        user_simulator: {runner: litellm, model: gpt-4.1}   # a model entry, as under `judges:`
        max_steps: 100                           # official defaults
        max_errors: 10
      metrics: [{name: tau2_reward, judge: grader}]   # grader under judges: (tasks with NL assertions)

Domains: airline, retail and telecom (full toolkits; telecom's user acts on their own phone with the user's tools,
and the environment syncs the two sides as the official one does).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Literal, Optional

from pydantic import BaseModel, Field

from evalpipe.benchmarks.base import Adapter, files_version, register_adapter
from evalpipe.benchmarks.tau2.data import guidelines, load_domain
from evalpipe.benchmarks.tau2.airline import AirlineTools
from evalpipe.benchmarks.tau2.retail import RetailTools
from evalpipe.benchmarks.tau2.telecom import TelecomTools, TelecomUserTools, sync as telecom_sync
from evalpipe.benchmarks.tau2.toolkit import Toolkit
from evalpipe.core.config import ModelConfig
from evalpipe.core.errors import ConfigError
from evalpipe.core.types import Sample

TOOLKITS: dict[str, type[Toolkit]] = {"airline": AirlineTools, "retail": RetailTools, "telecom": TelecomTools}
# Domains where the user acts too (dual control): the user's toolkit and the environment's sync of the two sides.
USER_SIDES: dict[str, tuple[type[Toolkit], Any]] = {"telecom": (TelecomUserTools, telecom_sync)}
DOMAINS = ("airline", "retail", "telecom")
DEFAULT_PATH = "data/tau2"

# The agent's instructions around the domain policy (the official agent's layout: instructions, then the policy).
AGENT_INSTRUCTION = (
    "You are a customer service agent. Help the user as the policy below says. Each turn, either write a message to "
    "the user or make one tool call, never both. Follow the policy, and write valid JSON in tool calls.")


class Tau2Options(BaseModel):
    path: Optional[str] = None
    domain: Optional[Literal["airline", "retail", "telecom"]] = None
    task_split: Optional[str] = None
    user_simulator: Optional[dict[str, Any]] = None
    max_steps: Optional[int] = Field(default=None, ge=1)
    max_errors: Optional[int] = Field(default=None, ge=1)
    max_file_mb: Optional[float] = None
    max_turns: Optional[int] = None
    max_tool_calls: Optional[int] = None
    tool_timeout_s: Optional[float] = None
    slice_by: Optional[list[str]] = None


def toolkit_for(domain: str, where: str) -> type[Toolkit]:
    kit = TOOLKITS.get(domain)
    if kit is None:
        raise ConfigError(f"{where}: tau2 domain {domain!r} has no toolkit in this evalpipe yet (available: "
                          f"{', '.join(sorted(TOOLKITS))}); see docs/benchmarks.md (tau2-bench)")
    return kit


def user_side(domain: str, dom: dict[str, Any], where: str) -> dict[str, Any]:
    """The user's toolkit, database and sync of a dual-control domain ({} for the others)."""
    if domain not in USER_SIDES:
        return {}
    kit, sync = USER_SIDES[domain]
    if dom.get("user_db") is None:
        raise ConfigError(f"{where}: tau2 domain {domain!r} needs user_db.json (the user's phone) beside db.json; "
                          f"copy it from data/tau2/{domain}/ or make it with scripts/tau2_official_verdicts.py "
                          f"{domain}-db")
    return {"user_toolkit": kit, "user_db": dom["user_db"], "sync": sync}


def user_model(raw: Any, where: str) -> ModelConfig:
    """The `user_simulator:` model entry, checked before any model call (its key variable must be set)."""
    if not isinstance(raw, dict) or not raw.get("runner"):
        raise ConfigError(f"{where}: tau2 needs 'user_simulator:' (a model entry with at least 'runner:', like a "
                          f"judge's) under the split's options")
    model = ModelConfig.from_dict("user_simulator", raw)
    if model.api_key_env and not model.api_key():
        raise ConfigError(f"{where}: user_simulator: environment variable {model.api_key_env} is not set; export it "
                          f"or change 'api_key_env'")
    return model


@register_adapter("tau2")
class Tau2Adapter(Adapter):
    name = "tau2"
    default_metrics = ["tau2_reward"]
    option_schema = Tau2Options

    def _root(self) -> Path:
        return self.split.resolve(str(self.options.get("path") or DEFAULT_PATH))

    def _domain_name(self) -> str:
        d = self.options.get("domain") or self.split.split
        if d not in DOMAINS:
            raise ConfigError(f"{self.split.key}: tau2 'domain:' must be one of {', '.join(DOMAINS)}, got {d!r}")
        return d

    def domain(self) -> dict[str, Any]:
        return load_domain(self._root(), self._domain_name())

    def tasks(self) -> list[dict[str, Any]]:
        dom = self.domain()
        tasks = dom["tasks"]
        name = self.options.get("task_split")
        if name:
            if name not in dom["splits"]:
                raise ConfigError(f"{self.split.key}: task_split {name!r} not in split_tasks.json (has: "
                                  f"{', '.join(sorted(dom['splits'])) or 'none'})")
            keep = {str(i) for i in dom["splits"][name]}
            tasks = [t for t in tasks if str(t["id"]) in keep]
        return tasks

    def source_version(self) -> str | None:
        folder = self._root() / self._domain_name()
        return files_version(sorted(folder.glob("*"))) if folder.is_dir() else None

    def load(self) -> Iterable[Sample]:
        kit = toolkit_for(self._domain_name(), self.split.key)
        dom = self.domain()
        schemas = kit.schemas()
        system = f"<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{dom['policy']}\n</policy>"
        from evalpipe.benchmarks.tau2.env import GREETING

        out = []
        for t in self.tasks():
            messages = [{"role": "system", "content": system}, {"role": "assistant", "content": GREETING}]
            md = {"domain": self._domain_name(), "task": t, "data_path": str(self._root()),
                  "reward_basis": list((t.get("evaluation_criteria") or {}).get("reward_basis") or [])}
            out.append(Sample(id=str(t["id"]), input=str(t["id"]), target=None, metadata=md, system=system,
                              tools=schemas, messages=messages))
        return out

    def build_messages(self, sample: Sample) -> list[dict[str, Any]]:
        return [dict(m) for m in sample.messages or []]

    def slices(self, sample: Sample) -> dict[str, str]:
        return {"domain": str(sample.metadata.get("domain")), **super().slices(sample)}

    def check_judge(self, tasks: Iterable[dict[str, Any]]) -> None:
        """Tasks whose reward basis holds NL_ASSERTION (with assertions to grade) need `tau2_reward`'s `judge:`:
        refused before any model call without one (the official reward could not be computed)."""
        from evalpipe.benchmarks.tau2.metric import judge_spec

        needing = [str(t["id"]) for t in tasks if "NL_ASSERTION" in ((t.get("evaluation_criteria") or {})
                                                                    .get("reward_basis") or [])
                   and (t.get("evaluation_criteria") or {}).get("nl_assertions")]
        metrics = self.split.metrics if self.split.metrics is not None else self.default_metrics
        if not needing or not any(s == "tau2_reward" or (isinstance(s, dict) and s.get("name") == "tau2_reward")
                                  for s in metrics):
            return
        spec = judge_spec(metrics)
        if spec is None:
            raise ConfigError(f"{self.split.key}: tau2 task(s) {', '.join(needing[:5])}"
                              f"{' ...' if len(needing) > 5 else ''} are scored with natural-language assertions, "
                              f"which need a judge: set it on the metric (metrics: [{{name: tau2_reward, judge: "
                              f"<a name under judges:>}}]), or choose a task_split without them")
        if isinstance(spec, dict):
            judge = ModelConfig.from_dict("judge", {k: v for k, v in spec.items() if k != "name"})
            if judge.api_key_env and not judge.api_key():
                raise ConfigError(f"{self.split.key}: tau2_reward judge: environment variable {judge.api_key_env} "
                                  f"is not set; export it or change 'api_key_env'")

    def tool_env(self, mode: str | None = None) -> Any:
        """The split's tool layer: the domain's tools and the simulated user (built now: a bad user_simulator entry
        stops the run before any model call)."""
        from evalpipe.benchmarks.tau2.env import Tau2ToolEnv
        from evalpipe.runners.base import build_runner
        from evalpipe.runners.user_sim import UserSimulator
        from evalpipe.benchmarks.tau2.env import USER_STOPS

        model = user_model(self.options.get("user_simulator"), self.split.key)
        kit = toolkit_for(self._domain_name(), self.split.key)
        tasks = {str(t["id"]): t for t in self.tasks()}
        self.check_judge(tasks.values())
        side = user_side(self._domain_name(), self.domain(), self.split.key)
        user = UserSimulator(build_runner(model), USER_STOPS)
        return Tau2ToolEnv(self.split, self.domain(), kit, tasks, user,
                           guidelines(self._root(), with_tools=bool(side)), mode=mode, **side)


from evalpipe.benchmarks.tau2 import metric  # noqa: E402,F401  (registers tau2_reward)
