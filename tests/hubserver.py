"""A loopback HTTP server that answers like the Hugging Face hub for config.json downloads."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = "hf_kvcalc_test_token"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 4,
    "hidden_size": 256,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "torch_dtype": "bfloat16",
}


class HubHandler(BaseHTTPRequestHandler):
    requests: list[tuple[str, str, str | None]] = []

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _answer(self, send_body: bool) -> None:
        type(self).requests.append((self.command, self.path, self.headers.get("authorization")))
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) != 5 or parts[2] != "resolve":
            return self._error(404, "RepoNotFound", "Repository not found")
        org, name, _, revision, filename = parts
        repo = f"{org}/{name}"
        if repo == "acme/missing":
            return self._error(404, "RepoNotFound", "Repository Not Found")
        if revision == "no-such-branch":
            return self._error(404, "RevisionNotFound", "Invalid rev id: no-such-branch")
        if repo == "acme/noconfig" or filename != "config.json":
            return self._error(404, "EntryNotFound", "Entry not found")
        if repo == "acme/gated" and self.headers.get("authorization") != f"Bearer {TOKEN}":
            return self._error(401, "GatedRepo", "Access to model acme/gated is restricted.")
        body = json.dumps(CONFIG).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", '"kvcalc-test-etag"')
        self.send_header("X-Repo-Commit", COMMIT)
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(send_body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(send_body=True)


def start() -> tuple[ThreadingHTTPServer, str]:
    HubHandler.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), HubHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
