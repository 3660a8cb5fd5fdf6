"""The llm mutator: asks an OpenAI-compatible model for SEARCH/REPLACE edits (or a full rewrite).

Settings come from KERNELSMITH_LLM_BASE_URL / _MODEL / _API_KEY (falling back to OPENAI_BASE_URL /
OPENAI_API_KEY), or a yaml file named by KERNELSMITH_LLM_CONFIG (keys: base_url, model, api_key,
timeout_s, max_retries, temperature, max_tokens); the environment wins over the file. Timeouts,
429s, 5xx and dropped connections are retried a bounded number of times with backoff; an answer
that cannot be used (no edits, SEARCH text not found, not Python) is recorded as a malformed
proposal and the model gets one chance to fix it. The requests go through the LLM broker
(broker.py), the one process that holds the key and imports the `openai` package.
"""

from __future__ import annotations

import ast
import random
import time

from ...pysource import parse
from ..edits import EditError, parse_proposal
from ..prompt import build_messages, render_prompt, retry_message
from . import Proposal
from .llm_settings import LLMSettings, llm_settings  # noqa: F401 (the mutator's settings, named here too)

MAX_DEAD_CALLS = 3  # consecutive requests that fail after every retry: the model is unreachable


def _defines(code: str, name: str) -> bool:
    tree = parse(code)
    # A class counts too: a KernelBench task's entry is the ModelNew class.
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
               for n in tree.body)


class LLMMutator:
    """Proposals from a chat model; every answer (usable or not) becomes one Proposal."""

    name = "llm"

    def __init__(self, task, settings: LLMSettings, *, device: str = "cuda"):
        self.task = task
        self.settings = settings
        self.device_hint = "an NVIDIA GPU" if device == "cuda" else "an NVIDIA GPU (checked here on CPU)"
        self.dead_calls = 0
        self.stats = {
            "requests": 0,
            "retries": 0,
            "timeouts": 0,
            "rate_limited": 0,
            "server_errors": 0,
            "connection_errors": 0,
            "failed": 0,
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
            from .broker import broker_for

            self.settings.broker = broker_for(self.settings.base_url, self.settings.api_key)
            self.settings.api_key = None
        return self.settings.broker

    def chat(self, messages: list[dict], rng: random.Random) -> tuple[str | None, list[dict]]:
        """(answer text or None, log of failed attempts) with bounded retries on transient errors."""
        from .broker import LLMCallError

        log: list[dict] = []
        for attempt in range(self.settings.max_retries + 1):
            self.stats["requests"] += 1
            try:
                text = self.broker().complete(
                    model=self.settings.model,
                    messages=messages,
                    temperature=self.settings.temperature,
                    max_tokens=self.settings.max_tokens,
                    seed=rng.randrange(1 << 31),
                    timeout_s=self.settings.timeout_s,
                )
                self.dead_calls = 0
                return text, log
            except LLMCallError as e:
                kind, retry, err = e.kind, e.retry, e.detail
                if e.stat:
                    self.stats[e.stat] += 1
            log.append({"attempt": attempt + 1, "error": kind, "detail": err[:300]})
            if not retry or attempt == self.settings.max_retries:
                break
            self.stats["retries"] += 1
            time.sleep(self.settings.backoff_s * (2**attempt) * (0.5 + rng.random()))
        self.stats["failed"] += 1
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
            answer, log = self.chat(messages, rng)
            meta = {"model": self.settings.model, "failed_attempts": log}
            prompt = render_prompt(messages)
            if answer is None:
                why = "; ".join(f"{x['error']}" for x in log) or "no answer"
                out.append(
                    Proposal(
                        self.name,
                        parent["id"],
                        None,
                        prompt=prompt,
                        params=meta,
                        inspiration_ids=insp_ids,
                        error=f"the model did not answer ({why})",
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
