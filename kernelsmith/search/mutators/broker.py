"""The LLM broker: the one process that holds the model's API key (`python -m ...broker`).

`optimize` starts it first, before anything runs target code (setup, harnesses, candidates), and
hands it the key over a pipe, never through an environment; the key then leaves the optimize
process's environment and its /proc/self/environ (kernelsmith.sandbox.drop_secrets_from_environ).
The llm mutator sends each chat request as one JSON line and gets the answer, or the failure
classified, back, matched by request id: the broker serves every request in a thread of its own,
so the requests of one generation reach the endpoint at once. The openai client lives only in this
process, which is non-dumpable, started with a scrubbed environment, and dies with its parent
(PR_SET_PDEATHSIG on Linux, a watch on the parent's pid, and the end of its request pipe).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time

_BROKERS: dict[tuple, Broker] = {}
_DEFAULT: list[Broker] = []
_LOCK = threading.Lock()
GRACE_S = 30.0  # how long past a request's own timeout the caller waits (a broker still starting)
DEADLINE_GRACE_S = 5.0  # how long past the run's deadline the caller waits for the broker's answer
TICK_S = 1.0  # how often a waiting caller runs its on_wait callback (the waiting line)
PARENT_POLL_S = 0.5  # how often the broker checks that its parent is alive


class LLMCallError(Exception):
    """One request failed: `kind` ("timeout", "429", "503", "connection", ...), whether a retry
    may help, and which mutator counter it adds to."""

    def __init__(self, kind: str, retry: bool, detail: str, stat: str | None = None):
        super().__init__(detail)
        self.kind, self.retry, self.detail, self.stat = kind, retry, detail, stat


def classify(e: Exception) -> tuple[str, bool, str | None]:
    """(kind, retry, counter) for an exception of the openai client."""
    import openai

    if isinstance(e, (openai.APITimeoutError, TimeoutError)):
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


class _Pending:
    """One request sent and not answered yet."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.done = threading.Event()
        self.reply: dict | None = None


class Broker:
    """The parent's handle: requests from any number of threads at once, answers matched by id
    by one reader thread."""

    def __init__(self, base_url: str | None, api_key: str | None):
        from kernelsmith.sandbox import scrubbed_env
        from kernelsmith.sandbox.spawn import start_python

        # PR_SET_PDEATHSIG fires when the thread that started the child ends: only the main
        # thread's end is the process's (a lazy start in a proposal thread relies on the watch).
        main = "1" if threading.current_thread() is threading.main_thread() else "0"
        # No sandbox profile: the broker is trusted (it holds the key) and runs no untrusted code.
        self.proc = start_python("kernelsmith.search.mutators.broker", [str(os.getpid()), main], None,
                                 env=scrubbed_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._lock = threading.Lock()  # the request pipe, the id counter and the pending table
        self._next = 0
        self._pending: dict[int, _Pending] = {}
        self._gone: str | None = None  # why the broker cannot answer any more
        self._send({"base_url": base_url, "api_key": api_key})
        threading.Thread(target=self._read_replies, name="llm-broker-replies", daemon=True).start()

    def _send(self, msg: dict) -> None:
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()

    def _read_replies(self) -> None:
        for line in self.proc.stdout:
            try:
                reply = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                p = self._pending.pop(reply.get("id"), None)
            if p is not None:  # else an answer its caller stopped waiting for
                p.reply = reply
                p.done.set()
        with self._lock:
            self._gone = "the LLM broker process exited"
            pending, self._pending = list(self._pending.values()), {}
        for p in pending:
            p.done.set()

    def in_flight(self) -> tuple[int, float]:
        """(requests waiting for an answer, seconds the oldest of them has waited)."""
        with self._lock:
            starts = [p.started for p in self._pending.values()]
        return len(starts), (time.monotonic() - min(starts)) if starts else 0.0

    def complete(self, *, model: str, messages: list[dict], temperature: float, max_tokens: int,
                 seed: int, timeout_s: float, ends_at: float | None = None, on_wait=None) -> str:
        """The model's answer text; LLMCallError when the request failed or no answer came within
        `timeout_s` of its start, or by `ends_at` (time.time(), the run's deadline; each with a
        grace). `on_wait()` runs about every TICK_S seconds while it waits."""
        p = _Pending()
        with self._lock:
            if self._gone:
                raise LLMCallError("broker", False, self._gone)
            self._next += 1
            rid = self._next
            self._pending[rid] = p
            try:
                # The deadline as a time, not a length: a broker slow to start a request (busy, or
                # still importing openai) gives it only what is left of the run.
                self._send({"id": rid, "model": model, "messages": messages, "temperature": temperature,
                            "max_tokens": max_tokens, "seed": seed, "timeout_s": timeout_s,
                            "ends_at": ends_at})
            except (BrokenPipeError, OSError, ValueError):
                del self._pending[rid]
                raise LLMCallError("broker", False, "the LLM broker process exited") from None
        end = p.started + timeout_s + GRACE_S
        if ends_at is not None:
            end = min(end, p.started + ends_at - time.time() + DEADLINE_GRACE_S)
        while not p.done.wait(max(0.0, min(TICK_S, end - time.monotonic()))):
            if time.monotonic() >= end:
                with self._lock:
                    self._pending.pop(rid, None)
                if p.done.is_set():  # the answer came as the wait ended
                    break
                raise LLMCallError("timeout", True, "the LLM broker did not answer in time", "timeouts")
            if on_wait is not None:
                on_wait()
        reply = p.reply
        if reply is None:
            raise LLMCallError("broker", False, self._gone or "the LLM broker process exited")
        if reply.get("ok"):
            return reply.get("content") or ""
        raise LLMCallError(reply["kind"], bool(reply["retry"]), reply.get("detail", ""), reply.get("stat"))

    def close(self) -> None:
        """Stop the broker (it exits at the end of its request pipe, requests in flight or not)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


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


def _die_with_parent(parent: int, pdeathsig: bool) -> None:
    """End this process as soon as `parent` dies, however it dies (kill -9 included)."""
    if pdeathsig and sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watch below still ends it, within PARENT_POLL_S

    def watch() -> None:
        # A dead parent's children are handed to another process: the parent pid changes.
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    if os.getppid() != parent:  # it died before the signal was armed
        os._exit(0)
    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _serve(parent: int | None = None, pdeathsig: bool = False) -> int:
    from kernelsmith.sandbox import hide_environ

    if parent is not None:
        _die_with_parent(parent, pdeathsig)
    hide_environ()  # the key is in this process's memory: no other process of this user may read it
    first = sys.stdin.readline()
    if not first:
        return 0
    cfg = json.loads(first)
    from openai import OpenAI

    client = OpenAI(base_url=cfg.get("base_url"), api_key=cfg.get("api_key") or "none", max_retries=0)
    out = threading.Lock()

    def answer(req: dict) -> None:
        try:
            left = req["timeout_s"] if req.get("ends_at") is None else min(req["timeout_s"],
                                                                           req["ends_at"] - time.time())
            if left <= 0:
                raise TimeoutError("the run's time was spent before the request could start")
            resp = client.chat.completions.create(
                model=req["model"], messages=req["messages"], temperature=req["temperature"],
                max_tokens=req["max_tokens"], seed=req["seed"], timeout=left)
            choice = resp.choices[0] if resp.choices else None
            reply = {"ok": True, "content": (choice.message.content or "") if choice is not None else ""}
        except Exception as e:  # noqa: BLE001 - every failure is classified for the mutator
            kind, retry, stat = classify(e)
            reply = {"ok": False, "kind": kind, "retry": retry, "stat": stat, "detail": str(e)[:1000]}
        reply["id"] = req.get("id")
        with out:
            try:
                sys.stdout.write(json.dumps(reply) + "\n")
                sys.stdout.flush()
            except (BrokenPipeError, OSError):
                os._exit(0)  # the parent is gone

    # One thread per request: the caller bounds how many are in flight (one per proposal).
    for line in sys.stdin:
        threading.Thread(target=answer, args=(json.loads(line),), daemon=True).start()
    # The end of the request pipe: the parent closed it or died. Requests in flight are dropped.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(_serve(int(args[0]), args[1:2] == ["1"]) if args else _serve())
