"""A loopback OpenAI-compatible pairwise judge (the model-server edge): prefers the answer that says 42 and, on a
pair without one, whichever it was shown first (position bias); "hard to say" when an answer says garble."""
import json
from contextlib import contextmanager


@contextmanager
def pair_judge_server():
    """(the judge as an inline mapping for `judge:`, the mock server with `.bodies`)."""
    from benchmarks.mock_server import MockLLM, serve_in_thread

    class PairJudge(MockLLM):
        def answer_for(self, p: str) -> str:
            first = p.split("Answer 1:\n", 1)[1].split("\n\nAnswer 2:", 1)[0]
            second = p.split("Answer 2:\n", 1)[1].split("\n\nReply", 1)[0]
            if "garble" in first + second:
                return "hard to say"
            winner = "1" if "42" in first else "2" if "42" in second else "1"
            return json.dumps({"rationale": "r", "winner": winner})

    with serve_in_thread(PairJudge()) as (mock, url):
        yield {"runner": "litellm", "model": "openai/pair-judge", "api_base": url, "options": {"fast_path": True}}, mock
