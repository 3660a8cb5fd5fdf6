"""A scripted OpenAI-compatible chat server on 127.0.0.1 for tests.

Each POST /v1/chat/completions takes the next step of the script:
  {"content": "..."}                       200 with that answer
  {"status": 429} / {"status": 503}        an error status (with a JSON error body)
  {"sleep": 3.0, "content": "..."}         answer late (client timeouts)
  {"hang": True}                           never answer (until the server stops)
  callable(request_json) -> step           decide from the request (e.g. echo the prompt)
When the script runs out, `default` is used. Every request is recorded (headers, JSON body and `at`,
its time.monotonic() of arrival), and `max_active` is the most requests the server held at once
(requests sent in parallel overlap).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedLLM:
    """Context manager: `.base_url` (with /v1), `.requests` (recorded), `.script` (remaining steps)."""

    def __init__(self, script: list | None = None, default: dict | None = None):
        self.script = list(script or [])
        self.default = default or {"status": 500}
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.active = 0
        self.max_active = 0
        self.stopping = threading.Event()  # releases the hanging requests
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with owner.lock:
                    owner.requests.append({"path": self.path, "headers": dict(self.headers), "json": body,
                                           "at": time.monotonic()})
                    step = owner.script.pop(0) if owner.script else owner.default
                    owner.active += 1
                    owner.max_active = max(owner.max_active, owner.active)
                try:
                    self.answer(body, step)
                finally:
                    with owner.lock:
                        owner.active -= 1

            def answer(self, body, step):
                if callable(step):
                    step = step(body)
                if step.get("hang"):
                    owner.stopping.wait()
                    return
                if step.get("sleep"):
                    time.sleep(step["sleep"])
                status = step.get("status", 200)
                if status != 200:
                    payload = {"error": {"message": f"scripted {status}", "type": "scripted", "code": status}}
                else:
                    payload = {
                        "id": f"chatcmpl-{len(owner.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "scripted"),
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": step.get("content", "")},
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 64  # the loop sends up to 8 requests at once; never refuse one

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The OpenAI base URL of this server (includes /v1)."""
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ScriptedLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
