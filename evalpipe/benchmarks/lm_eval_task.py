"""`adapter: lm_eval`: an lm-evaluation-harness task, prompted and scored by lm-eval itself (docs/interop.md).

Options: `task` (a task name), `include_path` (a folder of custom task YAMLs; relative to the config file),
`num_fewshot` (overrides the task's, unless the task's config says 0: lm-eval's rule), `fewshot_seed` (default 1234, as lm_eval.simple_evaluate),
`apply_chat_template` (default true: lm-eval's chat path builds the messages: the description as the system turn,
then the few-shot examples and the question; each runner applies its model's chat template),
`fewshot_as_multiturn` (few-shot examples as alternating user/assistant turns; default: `apply_chat_template`,
as lm-eval's own default; true without a chat template is refused, as lm-eval refuses it), `system_instruction`;
`slice_by` names fields of the doc. The chat is rendered as lm-eval's API chat models render it (`JsonChatStr`,
the messages' JSON), so the requests' arguments and prompt hashes are lm-eval's.

lm-eval's TaskManager builds the requests (`task.build_all_requests`: doc_to_text, doc_to_target, few-shot with its
seed, description, target delimiter). One sample per doc: id = the doc id; metadata `lm_eval` = the task, doc id,
output type, doc, target, the requests' arguments; a log-likelihood task also sets `loglikelihood_requests`
([[context, continuation], ...], read by runners with a `loglikelihood` method: the local runner, endpoints with
prompt logprobs); a `loglikelihood_rolling` (perplexity) task sets them as [[text]] with `loglikelihood_rolling: true`
(read by runners with a `loglikelihood_rolling` method: the text's log-likelihood over rolling windows of the
model's max length, as lm-eval computes it). Scoring: the metric `lm_eval` (evalpipe/metrics/lm_eval_scoring.py).
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from evalpipe.benchmarks.base import Adapter, files_version, register_adapter
from evalpipe.core.errors import ConfigError
from evalpipe.core.file_caps import DEFAULT_CAP, OPTION, FileCap, read_text, split_cap
from evalpipe.core.types import Sample
from evalpipe.metrics.lm_eval_scoring import DEFAULT_FEWSHOT_SEED, LOGLIKELIHOOD_TYPES, load_task, load_tasks, task_names


def _json_safe(value: Any) -> Any:
    """The doc as stored JSON (datasets may hold tuples, numpy values): what `process_results` gets back later."""
    return json.loads(json.dumps(value, default=str))


def _data_files(yaml_file: Any, cap: FileCap = DEFAULT_CAP) -> list[str]:
    """The `dataset_kwargs.data_files` paths a task YAML (read under `cap`) names (lm-eval's `!function` tags are
    skipped)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    try:
        doc = yaml.load(read_text(yaml_file, cap), Loader=Loader) or {}
    except (OSError, yaml.YAMLError):
        return []
    files = ((doc.get("dataset_kwargs") or {}).get("data_files") if isinstance(doc, dict) else None) or []
    values = files.values() if isinstance(files, dict) else [files]
    return [str(f) for v in values for f in ([v] if isinstance(v, str) else v or []) if isinstance(f, str)]


def _render_chat(messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> Any:
    """The chat as lm-eval's API chat models render it (`TemplateAPI.apply_chat_template`): a JsonChatStr of the
    messages' JSON, which lm-eval's logs write as `[json]` and hash as the JSON text."""
    from lm_eval.models.api_models import JsonChatStr

    return JsonChatStr(json.dumps(messages, ensure_ascii=False))


def request_params(gen_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """A generate_until request's settings as lm-eval's API chat models send them (its own
    `LocalChatCompletion._create_payload`, called here on a copy): max_gen_toks (default 256) as max_tokens,
    temperature (default 0), `until` as stop (its first 4), seed 1234 (lm-eval's API models' default), any other
    key as it is; do_sample is dropped."""
    import copy
    from types import SimpleNamespace

    from lm_eval.models.openai_completions import LocalChatCompletion

    payload = LocalChatCompletion._create_payload(SimpleNamespace(model=None, _max_gen_toks=256), [], generate=True,
                                                  gen_kwargs=copy.deepcopy(dict(gen_kwargs or {})))
    return {k: v for k, v in payload.items() if k not in ("messages", "model")}


# runners that generate nothing (scripted replies, recorded outputs): no generation setting to honour
NON_GENERATING = frozenset({"echo", "replay"})


@register_adapter("lm_eval")
class LmEvalAdapter(Adapter):
    name = "lm_eval"
    option_schema = {"task", "tasks", "include_path", "num_fewshot", "fewshot_seed", "apply_chat_template",
                     "fewshot_as_multiturn", "system_instruction", OPTION}

    def __init__(self, split):
        super().__init__(split)
        self.names = task_names(self.options.get("tasks") or self.options.get("task"))
        if not self.names:
            raise ConfigError(f"{split.key}: adapter lm_eval needs `task: <lm-eval task name>` (or `tasks: [names]`)")
        self.task_name = ",".join(self.names)
        inc = self.options.get("include_path")
        self.include_path = str(split.resolve(inc)) if inc else None
        chat = bool(self.options.get("apply_chat_template", True))
        multiturn = self.options.get("fewshot_as_multiturn")
        if multiturn and not chat:
            raise ConfigError(f"{split.key}: fewshot_as_multiturn: true needs apply_chat_template: true (as in "
                              "lm-eval); drop one of them")

    def build_settings(self, output_type: str) -> dict[str, Any]:
        """How the requests are built, lm-eval's defaults filled in: chat only for generate_until tasks here,
        few-shot as multi-turn when chat unless set (lm_eval's EvaluationConfig default)."""
        chat = bool(self.options.get("apply_chat_template", True)) and output_type == "generate_until"
        multiturn = self.options.get("fewshot_as_multiturn")
        return {"apply_chat_template": chat, "fewshot_as_multiturn": chat if multiturn is None else bool(multiturn),
                "system_instruction": self.options.get("system_instruction"),
                "num_fewshot": self.options.get("num_fewshot"),
                "fewshot_seed": int(self.options.get("fewshot_seed", DEFAULT_FEWSHOT_SEED))}

    def metrics(self) -> list[Any]:
        own = {"name": "lm_eval", "task": self.task_name, "include_path": self.include_path}
        if self.split.metrics is None:
            return [own]
        # `lm_eval` in the config (a name, or a mapping without `task`) gets the split's task
        return [own if m == "lm_eval" else {**own, **m} if isinstance(m, dict) and m.get("name") == "lm_eval" else m
                for m in self.split.metrics]

    def leaves(self) -> dict[str, Any]:
        """{task name: lm-eval task} for the named tasks and groups' tasks (lm-eval's TaskManager resolves them)."""
        if len(self.names) == 1:
            try:
                return {self.names[0]: load_task(self.names[0], self.include_path)}
            except ConfigError as exc:
                if "is a group" not in str(exc):
                    raise
        return load_tasks(self.names, self.include_path)[0]

    def task(self) -> Any:
        return next(iter(self.leaves().values()))

    def output_type(self) -> str:
        return self.task().OUTPUT_TYPE

    def source_version(self) -> str | None:
        """The task YAMLs under include_path and the local data files they name (`dataset_kwargs.data_files`),
        read without lm-eval (loading a task takes seconds). None for lm-eval's bundled tasks."""
        if not self.include_path:
            return None
        from pathlib import Path

        yamls = sorted(Path(self.include_path).rglob("*.yaml"))
        cap = split_cap(self.split.key, self.options)
        return files_version([*yamls, *sorted({f for y in yamls for f in _data_files(y, cap)})])

    def generation_settings(self) -> dict[str, Any]:
        """The task's `generation_kwargs` as lm-eval's API chat models send them (`request_params`)."""
        return request_params(self.task().config.generation_kwargs)

    def check_runner(self, runner: Any) -> None:
        """Each task of the split (a group's tasks too), checked as one task (`_check_one`)."""
        for task in self.leaves().values():
            self._check_one(task, runner)

    def _check_one(self, task: Any, runner: Any) -> None:
        """Called before any model call: a log-likelihood task needs a runner that computes log-likelihoods; a
        generating one must take the task's generation settings per request (RolloutRequest.params: sent merged
        over the model's `params:`); echo and replay generate nothing and ignore them by design."""
        output_type = task.OUTPUT_TYPE
        if output_type not in LOGLIKELIHOOD_TYPES:
            if runner.name in NON_GENERATING:
                return
            want = request_params(task.config.generation_kwargs)
            takes = getattr(runner, "request_params_problem", None)
            problem = takes(want) if callable(takes) else \
                f"runner {runner.name!r} takes no generation settings per request: use runner: litellm or local"
            if problem:
                sent = ", ".join(f"{k} {json.dumps(v)}" for k, v in want.items())
                raise ConfigError(f"{self.split.key}: lm_eval task {task.config.task!r} generates with {sent} (its "
                                  f"generation_kwargs, as lm-eval sends them); {problem}")
            return
        if output_type == "loglikelihood_rolling":  # one text per request, scored over rolling windows
            if not callable(getattr(runner, "loglikelihood_rolling", None)):
                raise ConfigError(f"{self.split.key}: lm_eval task {task.config.task!r} is loglikelihood_rolling "
                                  f"(perplexity, scored by log-likelihoods); runner {runner.name!r} can't compute "
                                  "them: use runner: local, or runner: litellm with an OpenAI-compatible api_base "
                                  "that returns prompt logprobs")
            problem = getattr(runner, "loglikelihood_rolling_problem", lambda: None)()
            if problem:
                raise ConfigError(f"{self.split.key}: lm_eval task {task.config.task!r} is loglikelihood_rolling "
                                  f"(perplexity): {problem}")
            return
        if not callable(getattr(runner, "loglikelihood", None)):
            raise ConfigError(f"{self.split.key}: lm_eval task {task.config.task!r} is {output_type} (scored by "
                              f"log-likelihoods); runner {runner.name!r} can't compute them: use runner: local, or "
                              "runner: litellm with an OpenAI-compatible api_base that returns prompt logprobs")
        problem = getattr(runner, "loglikelihood_problem", lambda: None)()
        if problem:
            raise ConfigError(f"{self.split.key}: lm_eval task {task.config.task!r} is {output_type}: {problem}")

    def load(self) -> Iterable[Sample]:
        leaves = self.leaves()
        if len(leaves) == 1:
            return self._load_one(self.task_name, next(iter(leaves.values())), "")
        # several tasks: sample ids `<task>/<doc id>`, each sample scored by its own task
        return [s for name, task in leaves.items() for s in self._load_one(name, task, f"{name}/")]

    def _load_one(self, name: str, task: Any, prefix: str) -> list[Sample]:
        # lm-eval's rule (simple_evaluate): the option overrides the task's count unless the task's config says 0
        if self.options.get("num_fewshot") is not None and task.get_config("num_fewshot") != 0:
            task.set_config(key="num_fewshot", value=int(self.options["num_fewshot"]))
        output_type = task.OUTPUT_TYPE
        settings = self.build_settings(output_type)
        task.set_fewshot_seed(seed=settings["fewshot_seed"])
        chat = settings["apply_chat_template"]
        task.build_all_requests(
            apply_chat_template=chat, fewshot_as_multiturn=settings["fewshot_as_multiturn"],
            system_instruction=settings["system_instruction"],
            # lm-eval's chat path renders the messages through the model's template; we keep them as messages
            # (each runner applies its own chat template) rendered as lm-eval's API chat models render them
            chat_template=_render_chat if chat else None)
        by_doc: dict[int, list[Any]] = {}
        for inst in task.instances:
            by_doc.setdefault(inst.doc_id, []).append(inst)
        samples = []
        for doc_id, insts in sorted(by_doc.items()):
            insts.sort(key=lambda i: i.idx)
            doc = insts[0].doc
            target = task.doc_to_target(doc)
            context = insts[0].arguments[0]
            context = getattr(context, "prompt", context)  # a JsonChatStr: the chat's JSON
            info: dict[str, Any] = {"task": name, "doc_id": doc_id, "output_type": output_type,
                                    "doc": _json_safe(doc), "target": _json_safe(target),
                                    "arguments": _json_safe([list(i.arguments) for i in insts]),
                                    "settings": {**settings, "num_fewshot": task.get_config("num_fewshot") or 0}}
            meta: dict[str, Any] = {"lm_eval": info}
            if output_type == "loglikelihood_rolling":  # one text per request: the document's log-likelihood
                info["requests"] = meta["loglikelihood_requests"] = [[str(i.arguments[0])] for i in insts]
                meta["loglikelihood_rolling"] = True  # runners read the requests as texts over rolling windows
                messages = [{"role": "user", "content": str(insts[0].arguments[0]),
                             "loglikelihood_rolling": info["requests"]}]
                choices, text_target = None, str(target)
            elif output_type in LOGLIKELIHOOD_TYPES:
                info["requests"] = meta["loglikelihood_requests"] = [list(i.arguments[:2]) for i in insts]
                # the requests ride in the message too: the prompt's fingerprint covers the messages only, and a
                # changed choice must not reuse a journaled answer (runners that compute log-likelihoods read metadata)
                messages = [{"role": "user", "content": context, "loglikelihood_requests": info["requests"]}]
                choices = [str(i.arguments[1]) for i in insts]
                text_target = choices[target] if isinstance(target, int) and output_type == "multiple_choice" \
                    and 0 <= target < len(choices) else str(target)
            else:
                info["gen_kwargs"] = _json_safe(insts[0].arguments[1])
                # sent with the request, merged over the model's params (RolloutRequest.params)
                meta["request_params"] = _json_safe(request_params(insts[0].arguments[1]))
                messages = json.loads(context) if chat else [{"role": "user", "content": context}]
                choices, text_target = None, str(target)
            user = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), str(context))
            samples.append(Sample(id=f"{prefix}{doc_id}", input=user, target=text_target, metadata=meta, choices=choices,
                                  messages=messages))
        return samples

    def slices(self, sample: Sample) -> dict[str, str]:
        """`slice_by` names fields of the lm-eval doc (e.g. a subject column)."""
        doc = (sample.metadata.get("lm_eval") or {}).get("doc") or {}
        keys = self.options.get("slice_by") or []
        return {k: str(doc[k]) for k in keys if isinstance(doc, dict) and doc.get(k) is not None}

    def build_messages(self, sample: Sample) -> list[dict[str, Any]]:
        return [dict(m) for m in sample.messages] if sample.messages else super().build_messages(sample)

    def extract_answer(self, output: str | None) -> str | None:
        return output  # the task's filters and process_results read the whole output (metric lm_eval)
