"""A loopback OpenAI-compatible chat-completions server for tests and the speed benchmark.

Fixed latency, deterministic answers, and scripted failures, so clients can be tested against real HTTP:
- the reply to a prompt is `answers[prompt]` if given, else `"answer: <prompt>"`; usage counts words;
- `script[prompt]` is a list of responses served in order before the normal reply, each `(status, headers, body)`
  (e.g. `(429, {"Retry-After": "1"}, "slow down")`), or `"hang"` to sleep past any client timeout;
- `counts[prompt]` counts requests per prompt; `bodies` keeps the request bodies and `last_headers` the last
  request's headers (when `keep_bodies`).
The prompt is the last user message of the request.

Tool calls (docs/tools.md): `tool_script[prompt]` is a list of assistant turns, turn k (k = assistant messages
already in the request) answered with `{"content": ..., "tool_calls": [{"name", "arguments"}]}` (names as the
provider sees them; arguments as a dict or JSON text); past the end, the normal reply. `tool_turns=N` answers any
request that offers tools with a call to its first tool for N-1 turns, then the normal reply (the benchmark).
Like OpenAI, a request whose tool names are not `^[a-zA-Z0-9_-]{1,64}$` is refused with HTTP 400.
`log` keeps (prompt, turn) per request.

In a test: `with serve_in_thread(MockLLM(latency=0)) as (mock, base_url): ...`.
As a process (the benchmark, so its CPU isn't counted as the client's):
`python -m benchmarks.mock_server --latency 0.1` prints `port <n>` and serves until killed; `GET /stats` returns
the counts as JSON.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import threading
import time
from collections import Counter
from typing import Any, Iterator

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 429: "Too Many Requests",
            500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable"}


class MockLLM:
    def __init__(self, latency: float = 0.0, answers: dict[str, str] | None = None, keep_bodies: bool = True):
        self.latency = latency
        self.answers = dict(answers or {})
        self.script: dict[str, list[Any]] = {}
        self.counts: Counter[str] = Counter()
        self.bodies: list[dict[str, Any]] = []
        self.keep_bodies = keep_bodies
        self.requests = 0
        self.last_headers: dict[str, str] = {}
        self.tool_script: dict[str, list[dict[str, Any]]] = {}
        self.tool_turns = 0
        self.log: list[tuple[str, int]] = []
        self.times: list[float] = []  # time.time() of each chat request as received (rate-limit tests count these)

    def answer_for(self, prompt: str) -> str:
        """The reply to a prompt (a test's subclass may compute it from the prompt)."""
        return self.answers.get(prompt, f"answer: {prompt}")

    def handle(self, method: str, path: str, body: bytes) -> tuple[int, dict[str, str], str] | None:
        """(status, headers, body) for one request, or None to never answer it ("hang")."""
        if method == "GET" and path.endswith("/stats"):
            return 200, {"Content-Type": "application/json"}, json.dumps(
                {"requests": self.requests, "counts": dict(self.counts), "times": self.times})
        if method != "POST" or not path.endswith("/chat/completions"):
            return 404, {}, "not found"
        try:
            req = json.loads(body)
        except ValueError:
            return 400, {}, json.dumps({"error": {"message": "body is not JSON"}})
        self.requests += 1
        self.times.append(time.time())
        if self.keep_bodies:
            self.bodies.append(req)
        messages = req.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        prompt = str(users[-1]["content"]) if users else ""
        self.counts[prompt] += 1
        queue = self.script.get(prompt)
        if queue:
            step = queue.pop(0)
            if step == "hang":
                return None
            return step
        answer = self.answer_for(prompt)
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        finish = "stop"
        tools = req.get("tools")
        if tools is not None:
            bad = [t.get("function", {}).get("name") for t in tools
                   if not _TOOL_NAME.match(str(t.get("function", {}).get("name")))]
            if bad:
                return 400, {}, json.dumps({"error": {"message": f"Invalid 'tools[].function.name': {bad[0]!r} does "
                                                                 "not match '^[a-zA-Z0-9_-]{1,64}$'"}})
            turn = sum(1 for m in messages if m.get("role") == "assistant")
            self.log.append((prompt, turn))
            script = self.tool_script.get(prompt)
            step = None
            if script is not None and turn < len(script):
                step = script[turn]
            elif script is None and self.tool_turns and turn < self.tool_turns - 1 and tools:
                step = {"content": None, "tool_calls": [{"name": tools[0]["function"]["name"], "arguments": {"q": prompt}}]}
            if step is not None:
                calls = [{"id": f"call_{turn}_{i}", "type": "function", "function": {
                    "name": c["name"], "arguments": c["arguments"] if isinstance(c.get("arguments"), str)
                    else json.dumps(c.get("arguments", {}))}} for i, c in enumerate(step.get("tool_calls") or [])]
                message = {"role": "assistant", "content": step.get("content")}
                if calls:
                    message["tool_calls"] = calls
                    finish = "tool_calls"
                answer = step.get("content") or ""
        n_in = sum(len(str(m.get("content", "")).split()) for m in messages)
        n_out = len(answer.split())
        reply = {
            "id": f"chatcmpl-{self.requests}", "object": "chat.completion", "created": 0,
            "model": req.get("model", "mock"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out},
        }
        return 200, {"Content-Type": "application/json"}, json.dumps(reply)


class _Http(asyncio.Protocol):
    """Minimal HTTP/1.1 with keep-alive. A plain protocol rather than aiohttp.web: at 1000 requests/s a full
    framework server would use a whole core and become the bottleneck the benchmark measures instead of the client."""

    def __init__(self, mock: MockLLM):
        self.mock = mock
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            end = head_end + 4 + length
            if len(self.buf) < end:
                return
            body, self.buf = self.buf[head_end + 4:end], self.buf[end:]
            method, path = head[0].split(" ")[:2]
            if self.mock.keep_bodies:
                self.mock.last_headers = {k.strip().lower(): v.strip() for k, _, v in
                                          (line.partition(":") for line in head[1:])}
            result = self.mock.handle(method, path, body)
            if result is None:
                continue  # hang: never answer; the client's timeout ends it
            delay = self.mock.latency if path.endswith("/chat/completions") else 0
            if delay:
                asyncio.get_running_loop().call_later(delay, self._send, *result)
            else:
                self._send(*result)

    def _send(self, status: int, headers: dict[str, str], text: str) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        payload = text.encode()
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", f"Content-Length: {len(payload)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload)

    def connection_lost(self, exc) -> None:
        self.transport = None


async def _start(mock: MockLLM, host: str, port: int) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: _Http(mock), host, port, backlog=2048)


@contextlib.contextmanager
def serve_in_thread(mock: MockLLM, host: str = "127.0.0.1") -> Iterator[tuple[MockLLM, str]]:
    """Serve `mock` on a random free port from a background thread; yields (mock, base_url ending in /v1)."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def start() -> None:
        state["server"] = await _start(mock, host, 0)
        state["port"] = state["server"].sockets[0].getsockname()[1]
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("mock server did not start")
    try:
        yield mock, f"http://{host}:{state['port']}/v1"
    finally:
        async def stop() -> None:
            state["server"].close()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def start_subprocess(latency: float) -> tuple[Any, str]:
    """This server in its own process (so its CPU is not the client's): (process, base URL of its /v1)."""
    import subprocess
    import sys
    from pathlib import Path

    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.mock_server", "--latency", str(latency)],
                            cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip()  # "port <n>"
    if not line.startswith("port "):
        proc.kill()
        raise SystemExit(f"mock server failed to start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}/v1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--tool-turns", type=int, default=0, help="answer requests offering tools with a tool call "
                    "for N-1 turns, then the final answer")
    args = ap.parse_args()
    mock = MockLLM(latency=args.latency, keep_bodies=False)
    mock.tool_turns = args.tool_turns

    async def serve() -> None:
        server = await _start(mock, args.host, args.port)
        print(f"port {server.sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
