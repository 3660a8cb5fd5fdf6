"""The llm mutator: asks an OpenAI-compatible model for SEARCH/REPLACE edits (or a full rewrite).

Settings come from KERNELSMITH_LLM_BASE_URL / _MODEL / _API_KEY (falling back to OPENAI_BASE_URL /
OPENAI_API_KEY), or a yaml file named by KERNELSMITH_LLM_CONFIG (keys: base_url, model, api_key,
timeout_s, max_retries, temperature, max_tokens, wait_note_s); the environment wins over the file.
Timeouts, 429s, 5xx and dropped connections are retried a bounded number of times with backoff; an
answer that cannot be used (no edits, SEARCH text not found, not Python) is recorded as a malformed
proposal and the model gets one chance to fix it. The requests go through the LLM broker
(broker.py), the one process that holds the key and imports the `openai` package.

The run's deadline (`--minutes`, `stop_at`) bounds every request: a request's timeout and its
retries shrink to the time left, none starts once it is spent, and a request the deadline cut is a
failed proposal like any other. While requests wait, a line says so every `wait_note_s` seconds.
"""

from __future__ import annotations

import ast
import random
import threading
import time

from kernelsmith.pysource import entry_def, parse
from kernelsmith.search.edits import EditError, parse_proposal
from kernelsmith.search.mutators import Proposal
from kernelsmith.search.mutators.llm_settings import LLMSettings
from kernelsmith.search.prompt import build_messages, render_prompt, retry_message

MAX_DEAD_CALLS = 3  # consecutive requests that fail after every retry: the model is unreachable
MIN_REQUEST_S = 1.0  # with less of the run's time left no request starts (it could not be answered)


def _defines(code: str, name: str) -> bool:
    tree = parse(code)
    if "." in name:  # `Class.method`, `Function.apply`: the class and the def it runs
        return entry_def(tree, name) is not None
    # A class counts too: a KernelBench task's entry is the ModelNew class.
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
               for n in tree.body)


def _no_answer(log: list[dict]) -> str:
    """The error of a proposal whose request got no answer, from its failed attempts."""
    if log and log[-1]["error"] == "deadline":
        earlier = "; ".join(x["error"] for x in log[:-1])
        return (f"the model did not answer before the run's time budget (--minutes) ran out: "
                f"{log[-1]['detail']}" + (f" (earlier attempts: {earlier})" if earlier else ""))
    why = "; ".join(f"{x['error']}" for x in log) or "no answer"
    return f"the model did not answer ({why})"


class LLMMutator:
    """Proposals from a chat model; every answer (usable or not) becomes one Proposal."""

    name = "llm"

    def __init__(self, task, settings: LLMSettings, *, device: str = "cuda", note=None):
        self.task = task
        self.settings = settings
        self.device_hint = "an NVIDIA GPU" if device == "cuda" else "an NVIDIA GPU (checked here on CPU)"
        self.note = note  # the run's log (Progress.note): the waiting line goes there
        self.deadline: float | None = None  # time.time() when the run's --minutes end (stop_at)
        self.dead_calls = 0
        self._noted = float("-inf")  # when the last waiting line was printed
        self._note_lock = threading.Lock()
        self.stats = {
            "requests": 0,
            "retries": 0,
            "timeouts": 0,
            "rate_limited": 0,
            "server_errors": 0,
            "connection_errors": 0,
            "failed": 0,
            "deadline": 0,
        }

    @property
    def dead(self) -> bool:
        """True once the endpoint failed MAX_DEAD_CALLS times in a row (after retries)."""
        return self.dead_calls >= MAX_DEAD_CALLS

    def sync(self, rows: list[dict]) -> None:
        """Nothing to learn from the archive beyond what the prompt shows."""

    def broker(self):
        """The process that calls the model and alone holds the key (started on first use when
        `optimize` did not start one; the key then leaves these settings)."""
        if self.settings.broker is None:
            from kernelsmith.search.mutators.broker import broker_for

            self.settings.broker = broker_for(self.settings.base_url, self.settings.api_key)
            self.settings.api_key = None
        return self.settings.broker

    def stop_at(self, when: float | None) -> None:
        """The run's deadline (time.time()): no request outlasts it (the loop's `--minutes`)."""
        self.deadline = when

    def time_left(self) -> float | None:
        """Seconds left before the run's deadline (None: no deadline)."""
        return None if self.deadline is None else self.deadline - time.time()

    def out_of_time(self) -> bool:
        """True when so little of the run's time is left that no request starts (the loop's stop reason)."""
        left = self.time_left()
        return left is not None and left < MIN_REQUEST_S

    def _waiting(self) -> None:
        """Print the waiting line through the run's log, at most every `wait_note_s` seconds, once
        the oldest request in flight has waited that long (the broker counts every caller's)."""
        if self.note is None:
            return
        n, oldest = self.broker().in_flight()
        every = self.settings.wait_note_s
        with self._note_lock:
            now = time.monotonic()
            if n == 0 or oldest < every or now - self._noted < every:
                return
            self._noted = now
        self.note(f"waiting for the LLM endpoint ({n} request{'s' if n != 1 else ''}, oldest {oldest:.0f} s)")

    def _cut(self, log: list[dict], attempt: int, detail: str) -> None:
        """Record that the run's deadline ended this call."""
        self.stats["deadline"] += 1
        log.append({"attempt": attempt, "error": "deadline", "detail": detail})

    def chat(self, messages: list[dict], rng: random.Random) -> tuple[str | None, list[dict]]:
        """(answer text or None, log of failed attempts) with bounded retries on transient errors,
        all within the run's deadline."""
        from kernelsmith.search.mutators.broker import LLMCallError

        log: list[dict] = []
        for attempt in range(self.settings.max_retries + 1):
            if self.out_of_time():
                self._cut(log, attempt + 1, "no request started: the run's time budget was spent")
                break
            self.stats["requests"] += 1
            t0 = time.monotonic()
            try:
                text = self.broker().complete(
                    model=self.settings.model,
                    messages=messages,
                    temperature=self.settings.temperature,
                    max_tokens=self.settings.max_tokens,
                    seed=rng.randrange(1 << 31),
                    timeout_s=self.settings.timeout_s,
                    ends_at=self.deadline,
                    on_wait=self._waiting,
                )
                self.dead_calls = 0
                return text, log
            except LLMCallError as e:
                kind, retry, err = e.kind, e.retry, e.detail
                if e.stat:
                    self.stats[e.stat] += 1
            if kind == "timeout" and self.out_of_time():
                # The run's end cut it (or came with it): no retry could be answered.
                self._cut(log, attempt + 1, f"no answer in the {time.monotonic() - t0:.0f} s it waited")
                break
            log.append({"attempt": attempt + 1, "error": kind, "detail": err[:300]})
            if not retry or attempt == self.settings.max_retries:
                break
            pause = self.settings.backoff_s * (2**attempt) * (0.5 + rng.random())
            left = self.time_left()
            if left is not None and left - pause < MIN_REQUEST_S:
                self._cut(log, attempt + 2, "no retry: the run's time budget ends before one is answered")
                break
            self.stats["retries"] += 1
            time.sleep(pause)
        self.stats["failed"] += 1
        if not (log and log[-1]["error"] == "deadline"):  # a call cut short says nothing of the endpoint
            self.dead_calls += 1
        return None, log

    def propose(
        self,
        parent: dict,
        inspirations: list[dict],
        rng: random.Random,
        known: set[str] | None = None,
        max_answers: int | None = None,
    ) -> list[Proposal]:
        """Ask for one improvement of `parent`; a malformed answer is followed by one fix request."""
        if self.dead:
            return []
        parent_code = parent.get("code") or self.task.base_code
        messages = build_messages(
            self.task, parent, inspirations, parent.get("feedback"), device_hint=self.device_hint
        )
        insp_ids = [r["id"] for r in inspirations]
        limit = 1 + self.settings.fix_attempts if max_answers is None else max(1, max_answers)
        out: list[Proposal] = []
        while len(out) < limit:
            if self.out_of_time():
                return out  # nothing asked: no proposal (the loop stops at the deadline)
            answer, log = self.chat(messages, rng)
            meta = {"model": self.settings.model, "failed_attempts": log}
            prompt = render_prompt(messages)
            if answer is None:
                out.append(
                    Proposal(
                        self.name,
                        parent["id"],
                        None,
                        prompt=prompt,
                        params=meta,
                        inspiration_ids=insp_ids,
                        error=_no_answer(log),
                    )
                )
                return out
            try:
                code, kind = parse_proposal(answer, parent_code)
                if not _defines(code, self.task.operator.entry):
                    raise EditError(f"the file no longer defines the entry {self.task.operator.entry!r}")
            except EditError as e:
                out.append(
                    Proposal(
                        self.name,
                        parent["id"],
                        None,
                        prompt=prompt,
                        response=answer,
                        params={**meta, "problem": str(e)},
                        inspiration_ids=insp_ids,
                        error=f"unusable answer: {e}",
                    )
                )
                messages = messages + [{"role": "assistant", "content": answer}, retry_message(str(e))]
                continue
            out.append(
                Proposal(
                    self.name,
                    parent["id"],
                    code,
                    prompt=prompt,
                    response=answer,
                    params={**meta, "kind": kind},
                    inspiration_ids=insp_ids,
                )
            )
            return out
        return out
