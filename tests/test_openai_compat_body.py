"""The fast path's tool-turn request body: the loop's conversation is encoded incrementally (only what is new each
turn), and every body is byte for byte the body of the whole conversation encoded at once."""
import asyncio
import json

from evalpipe.core.config import ModelConfig
from evalpipe.runners.openai_compat import OpenAICompatRunner, compact_json
from evalpipe.runners.tool_loop import WireMessages

TOOLS = [{"type": "function", "function": {"name": "web_search", "parameters": {"type": "object"}}}]
REPLY = json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()


class Capture:
    closed = False

    def __init__(self):
        self.bodies = []

    def post(self, url, data):
        self.bodies.append(data)
        return self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False

    status, headers = 200, {}

    async def read(self):
        return REPLY


def test_incremental_bodies_equal_the_whole_conversation_encoded_at_once():
    runner = OpenAICompatRunner(ModelConfig(key="m", runner="litellm", model="openai/m", api_base="http://h/v1",
                                            params={"max_tokens": 8}))
    growth = [[{"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {
        "name": "web_search", "arguments": '{"q": "ünï \\"x\\""}'}}]}, {"role": "tool", "tool_call_id": "c0",
                                                                        "content": '{"ok": true}'}],
              [{"role": "assistant", "content": "done"}]]

    async def go():
        capture = Capture()
        runner._session, runner._loop = capture, asyncio.get_running_loop()  # the pooled session, stood in for
        incremental, plain = WireMessages([{"role": "user", "content": "hi ✓"}]), [{"role": "user", "content": "hi ✓"}]
        expected = []
        for new in [[], *growth]:
            incremental.extend(new)
            plain.extend(new)
            await runner.chat(incremental, TOOLS)
            await runner.chat(list(plain), TOOLS)  # a plain list: encoded whole
            expected.append(runner._body_head + compact_json(plain) + b',"tools":'
                            + json.dumps(TOOLS, ensure_ascii=False, separators=(",", ":")).encode() + b"}")
        return capture.bodies, expected

    bodies, expected = asyncio.run(go())
    assert bodies[0::2] == expected and bodies[1::2] == expected
    assert json.loads(bodies[-2])["messages"][-1] == {"role": "assistant", "content": "done"}
