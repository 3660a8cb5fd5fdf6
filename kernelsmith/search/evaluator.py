"""Evaluation across GPUs: one Referee (one isolated worker process) per device, one thread each.

Every candidate gets the referee's full correctness and integrity checks; only the timing depth
is staged: a quick "screen" for all, then the full interleaved measurement with its A/A control
for contenders (within 2% of the best so far, or better). Each verdict is written to the archive
as soon as it exists, so a kill loses at most the evaluation in flight.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable

from .archive import Archive

CONTENDER_MARGIN = 0.98


class Evaluator:
    """Runs archive rows through the referees; `run(rows)` blocks until they are done."""

    def __init__(
        self,
        task,
        archive: Archive,
        *,
        device: str,
        gpus: list[int | None],
        seed: int,
        referee_factory: Callable | None = None,
        precompiler=None,
        on_verdict: Callable[[dict, dict, str], None] | None = None,
    ):
        from ..referee import Referee

        factory = referee_factory or Referee
        self.task = task
        self.archive = archive
        self.device = device
        self.timed = device == "cuda"
        self.referees = [factory(task, device=device, gpu=g, seed=seed) for g in gpus]
        self.lock = threading.Lock()
        self.precompiler = precompiler
        self.on_verdict = on_verdict
        self.best = 1.0  # best full-measured, non-noisy geomean so far (the base is 1.0)
        self.deadline: float | None = None
        self.device_info: dict | None = None

    def close(self) -> None:
        """Stop every worker."""
        for ref in self.referees:
            ref.close()
        if self.precompiler is not None:
            self.precompiler.close()

    def note_best(self, rows: list[dict]) -> None:
        """Seed the contender threshold from rows already in the archive (on resume)."""
        for r in rows:
            v = r.get("verdict") or {}
            if r.get("accepted") and r.get("timing") == "full" and not (v.get("timing") or {}).get("noisy"):
                self.best = max(self.best, r.get("speedup") or 0.0)

    def run(self, rows: list[dict]) -> int:
        """Evaluate `rows` (pending, or awaiting their full measurement); returns how many ran."""
        if not rows:
            return 0
        if self.precompiler is not None:
            for r in rows:
                if r.get("code") and r["mutator"] != "base":
                    self.precompiler.submit(r["id"], r["code"])
        jobs: queue.Queue = queue.Queue()
        for r in rows:
            jobs.put(r)
        done = [0]
        errors: list[BaseException] = []

        def worker(i: int) -> None:
            while True:
                if self.deadline is not None and time.time() > self.deadline:
                    return
                try:
                    row = jobs.get_nowait()
                except queue.Empty:
                    return
                try:
                    self._evaluate(self.referees[i], row)
                    done[0] += 1
                except BaseException as e:  # a referee that cannot work at all stops the run
                    errors.append(e)
                    return

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(len(self.referees))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return done[0]

    def _evaluate(self, ref, row: dict) -> None:
        base = row["mutator"] == "base"
        code = None if base else row["code"]
        if self.precompiler is not None and not base:
            self.precompiler.wait(row["id"], timeout=120)
        if not self.timed:
            self._store(row, ref.evaluate(code, candidate_id=row["id"], timing="none"), "none")
            return
        if base:
            # The base against itself: baseline times, roofline and the A/A noise floor.
            self._store(row, ref.evaluate(None, candidate_id=row["id"], timing="full"), "full")
            return
        if not row.get("awaiting_full"):
            screen = ref.evaluate(code, candidate_id=row["id"], timing="screen")
            g = screen.geomean_speedup
            with self.lock:
                contender = screen.accepted and g is not None and g >= CONTENDER_MARGIN * self.best
            self._store(row, screen, "screen", awaiting_full=contender)
            if not contender:
                return
        self._store(row, ref.evaluate(code, candidate_id=row["id"], timing="full"), "full")

    def _store(self, row: dict, verdict, timing: str, awaiting_full: bool = False) -> None:
        data = verdict.to_json()
        with self.lock:
            self.archive.set_verdict(
                row["id"], data, verdict.feedback(), timing=timing, awaiting_full=awaiting_full
            )
            if data.get("device") and not self.device_info:
                self.device_info = data["device"]
            noisy = (data.get("timing") or {}).get("noisy")
            if timing == "full" and data.get("accepted") and not noisy and data.get("geomean_speedup"):
                self.best = max(self.best, data["geomean_speedup"])
        if self.on_verdict is not None and not awaiting_full:
            self.on_verdict(row, data, timing)

    def remeasure(self, row: dict, seed: int) -> dict:
        """A full measurement of `row` with new input seeds (the final check of the winner).

        It reuses the first GPU's referee (new seeds per call), so no second cold start is paid.
        """
        timing = "full" if self.timed else "none"
        verdict = self.referees[0].evaluate(row["code"], candidate_id=row["id"], timing=timing, seed=seed)
        return verdict.to_json()
