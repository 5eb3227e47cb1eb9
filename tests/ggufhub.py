"""A loopback server that answers like the Hugging Face hub for a GGUF repo: the tree listing and
file downloads with HTTP Range requests; it records every byte range it served."""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class GgufHub(BaseHTTPRequestHandler):
    files: dict[str, dict[str, bytes]] = {}  # repo -> path -> bytes
    served: list[tuple[str, int, int]] = []  # (path, start, end exclusive)

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _json(self, status: int, obj: object, headers: dict | None = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)", path)
        if m:
            repo = m.group(1)
            if repo not in self.files:
                return self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            listing = [
                {"type": "file", "path": p, "size": len(b), "oid": "0" * 40}
                for p, b in sorted(self.files[repo].items())
            ]
            return self._json(200, listing)
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if not m or m.group(1) not in self.files or m.group(3) not in self.files[m.group(1)]:
            return self._json(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"})
        data = self.files[m.group(1)][m.group(3)]
        rng = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not rng:
            start, end, status = 0, len(data), 200
        else:
            start, end, status = int(rng.group(1)), min(int(rng.group(2)) + 1, len(data)), 206
            if start >= len(data):
                return self._json(416, {"error": "Range Not Satisfiable"})
        type(self).served.append((m.group(3), start, end))
        self.send_response(status)
        self.send_header("Content-Length", str(end - start))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        self.end_headers()
        self.wfile.write(data[start:end])


def start(files: dict[str, dict[str, bytes]]) -> tuple[ThreadingHTTPServer, str]:
    GgufHub.files, GgufHub.served = files, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), GgufHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
