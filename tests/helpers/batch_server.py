"""A loopback OpenAI batch API (files + batches) in front of the priced mock chat server, for batch-mode tests.

- `POST /v1/files` (multipart: purpose, file) stores a JSONL file; `GET /v1/files/<id>/content` returns one;
- `POST /v1/batches` {input_file_id, endpoint, completion_window} creates a batch (`validating`);
- `GET /v1/batches/<id>`: the batch; after `polls_to_finish` looks it completes: each line's body is answered by
  the chat mock (so `served`, usage and prices are counted as for live requests) into an output file of
  {custom_id, response: {status_code, body}, error} lines. `hold = True` keeps batches in progress.
`batches_created` counts submissions (a resumed run must not submit again)."""
from __future__ import annotations

import json
from email.parser import BytesParser
from email.policy import HTTP

from tests.helpers.priced import PricedMock


class BatchMock(PricedMock):
    def __init__(self, polls_to_finish: int = 2, **kw):
        super().__init__(**kw)
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict] = {}
        self.polls: dict[str, int] = {}
        self.polls_to_finish = polls_to_finish
        self.batches_created = 0
        self.hold = False
        self.latency = 0.0

    def _reply(self, obj, status: int = 200):
        return status, {"Content-Type": "application/json"}, json.dumps(obj)

    def handle(self, method: str, path: str, body: bytes):
        parts = path.split("?")[0].rstrip("/").split("/")
        if method == "POST" and parts[-1] == "files":
            ctype = self.last_headers.get("content-type", "")
            msg = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {ctype}\r\n\r\n".encode() + body)
            fields = {p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
                      for p in msg.iter_parts()}
            if fields.get("purpose") != b"batch" or not fields.get("file"):
                return self._reply({"error": {"message": "purpose batch and a file are required"}}, 400)
            fid = f"file-{len(self.files)}"
            self.files[fid] = fields["file"]
            return self._reply({"id": fid, "object": "file", "purpose": "batch"})
        if method == "GET" and len(parts) >= 3 and parts[-3] == "files" and parts[-1] == "content":
            data = self.files.get(parts[-2])
            return (200, {"Content-Type": "application/jsonl"}, data.decode()) if data is not None else \
                self._reply({"error": {"message": "no such file"}}, 404)
        if method == "POST" and parts[-1] == "batches":
            req = json.loads(body)
            if req.get("input_file_id") not in self.files or req.get("endpoint") != "/v1/chat/completions":
                return self._reply({"error": {"message": "bad input_file_id or endpoint"}}, 400)
            bid = f"batch-{len(self.batches)}"
            self.batches[bid] = {"id": bid, "object": "batch", "status": "validating", "endpoint": req["endpoint"],
                                 "input_file_id": req["input_file_id"], "output_file_id": None}
            self.batches_created += 1
            return self._reply(self.batches[bid])
        if method == "GET" and len(parts) >= 2 and parts[-2] == "batches":
            batch = self.batches.get(parts[-1])
            if batch is None:
                return self._reply({"error": {"message": "no such batch"}}, 404)
            self.polls[batch["id"]] = self.polls.get(batch["id"], 0) + 1
            if batch["status"] != "completed" and not self.hold:
                if self.polls[batch["id"]] >= self.polls_to_finish:
                    self._finish(batch)
                else:
                    batch["status"] = "in_progress"
            return self._reply(batch)
        return super().handle(method, path, body)

    def _finish(self, batch: dict) -> None:
        out = []
        for line in self.files[batch["input_file_id"]].decode().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            status, _, text = super().handle("POST", item["url"], json.dumps(item["body"]).encode())
            out.append({"id": f"req-{len(out)}", "custom_id": item["custom_id"],
                        "response": {"status_code": status, "body": json.loads(text)}, "error": None})
        fid = f"file-{len(self.files)}"
        self.files[fid] = "".join(json.dumps(o) + "\n" for o in out).encode()
        batch.update(status="completed", output_file_id=fid)
