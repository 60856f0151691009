"""An OpenAI-compatible chat-completions server in its own process, for killing mid-consolidation.

Run as ``python openai_stub_server.py HANG_AFTER``; prints ``port P`` once listening. Every
completion is the same consolidation answer (n0 caused by n1); request number HANG_AFTER+1
and later are held open without an answer, so a test can kill -9 the server while the
consolidation LLM call is in flight. Each request received is announced as ``request N``.
"""
from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = json.dumps({"causal": [{"cause": "n1", "effect": "n0", "confidence": 0.9}], "entities": [], "supersedes": []})


def main() -> None:
    hang_after = int(sys.argv[1])
    count, lock, never = [0], threading.Lock(), threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send({"data": [{"id": "stub"}]})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                count[0] += 1
                n = count[0]
            print(f"request {n}", flush=True)
            if n > hang_after:
                never.wait()
            self._send({"choices": [{"message": {"content": ANSWER}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 10}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
