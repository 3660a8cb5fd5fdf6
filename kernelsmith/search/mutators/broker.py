"""The LLM broker: the one process that holds the model's API key (`python -m ...broker`).

`optimize` starts it first, before anything runs target code (setup, harnesses, candidates), and
hands it the key over a pipe, never through an environment; the key then leaves the optimize
process's environment and its /proc/self/environ (kernelsmith.sandbox.drop_secrets_from_environ).
The llm mutator sends each chat request as one JSON line and gets the answer, or the failure
classified, back. The openai client lives only in this process, which is non-dumpable and started
with a scrubbed environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

_BROKERS: dict[tuple, Broker] = {}
_DEFAULT: list[Broker] = []
_LOCK = threading.Lock()


class LLMCallError(Exception):
    """One request failed: `kind` ("timeout", "429", "503", "connection", ...), whether a retry
    may help, and which mutator counter it adds to."""

    def __init__(self, kind: str, retry: bool, detail: str, stat: str | None = None):
        super().__init__(detail)
        self.kind, self.retry, self.detail, self.stat = kind, retry, detail, stat


def classify(e: Exception) -> tuple[str, bool, str | None]:
    """(kind, retry, counter) for an exception of the openai client."""
    import openai

    if isinstance(e, openai.APITimeoutError):
        return "timeout", True, "timeouts"
    if isinstance(e, openai.RateLimitError):
        return "429", True, "rate_limited"
    if isinstance(e, openai.InternalServerError):
        return f"{e.status_code}", True, "server_errors"
    if isinstance(e, openai.APIConnectionError):
        return "connection", True, "connection_errors"
    if isinstance(e, openai.APIStatusError):  # 400, 401, 404...: asking again will not help
        return f"{e.status_code}", False, None
    return type(e).__name__, False, None


class Broker:
    """The parent's handle: one request at a time, answers matched by request id."""

    def __init__(self, base_url: str | None, api_key: str | None):
        from ...pycmd import module_argv, python_path
        from ...sandbox import scrubbed_env

        env = scrubbed_env()
        pkg_parent = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = python_path(pkg_parent, env.get("PYTHONPATH"))
        self.proc = subprocess.Popen(module_argv("kernelsmith.search.mutators.broker"),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     start_new_session=True)
        self._send({"base_url": base_url, "api_key": api_key})
        self._lock = threading.Lock()
        self._next = 0
        self._buf = b""

    def _send(self, msg: dict) -> None:
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def _read_line(self, deadline: float) -> bytes | None:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise LLMCallError("broker", False, "the LLM broker process exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def complete(self, *, model: str, messages: list[dict], temperature: float, max_tokens: int,
                 seed: int, timeout_s: float) -> str:
        """The model's answer text; LLMCallError when the request failed."""
        with self._lock:
            self._next += 1
            rid = self._next
            try:
                self._send({"id": rid, "model": model, "messages": messages, "temperature": temperature,
                            "max_tokens": max_tokens, "seed": seed, "timeout_s": timeout_s})
            except (BrokenPipeError, OSError):
                raise LLMCallError("broker", False, "the LLM broker process exited") from None
            deadline = time.monotonic() + timeout_s + 30.0
            while True:
                line = self._read_line(deadline)
                if line is None:
                    raise LLMCallError("timeout", True, "the LLM broker did not answer in time", "timeouts")
                reply = json.loads(line)
                if reply.get("id") == rid:
                    break  # an earlier request's late answer is dropped
        if reply.get("ok"):
            return reply.get("content") or ""
        raise LLMCallError(reply["kind"], bool(reply["retry"]), reply.get("detail", ""), reply.get("stat"))

    def close(self) -> None:
        """Stop the broker."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def broker_for(base_url: str | None, api_key: str | None) -> Broker:
    """The running broker for this endpoint and key, started if needed."""
    key = (base_url, hashlib.sha256((api_key or "").encode()).hexdigest())
    with _LOCK:
        b = _BROKERS.get(key)
        if b is None or b.proc.poll() is not None:
            b = _BROKERS[key] = Broker(base_url, api_key)
        return b


def default() -> Broker | None:
    """The broker the command started (llm_settings.start_from_environment), if any."""
    return _DEFAULT[0] if _DEFAULT else None


def stop_default() -> None:
    """Stop the broker the command started (the end of the command)."""
    with _LOCK:
        for b in _DEFAULT:
            b.close()
            for k in [k for k, v in _BROKERS.items() if v is b]:
                del _BROKERS[k]
        _DEFAULT.clear()


def set_default(b: Broker) -> None:
    """Make `b` the command's broker (what `default` returns)."""
    with _LOCK:
        _DEFAULT[:] = [b]


def _serve() -> int:
    from ...sandbox import hide_environ

    hide_environ()  # the key is in this process's memory: no other process of this user may read it
    first = sys.stdin.readline()
    if not first:
        return 0
    cfg = json.loads(first)
    from openai import OpenAI

    client = OpenAI(base_url=cfg.get("base_url"), api_key=cfg.get("api_key") or "none", max_retries=0)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            resp = client.chat.completions.create(
                model=req["model"], messages=req["messages"], temperature=req["temperature"],
                max_tokens=req["max_tokens"], seed=req["seed"], timeout=req["timeout_s"])
            choice = resp.choices[0] if resp.choices else None
            reply = {"ok": True, "content": (choice.message.content or "") if choice is not None else ""}
        except Exception as e:  # noqa: BLE001 - every failure is classified for the mutator
            kind, retry, stat = classify(e)
            reply = {"ok": False, "kind": kind, "retry": retry, "stat": stat, "detail": str(e)[:1000]}
        reply["id"] = req.get("id")
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
