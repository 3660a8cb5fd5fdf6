"""Evaluation across GPUs: one Referee (one isolated worker process) per device, one thread each.

The threads live for the whole run and take candidates from one shared queue (the oldest whose
kernels the compile processes have built, so a slow build holds back nothing behind it), so every
GPU stays busy while the loop proposes the next generation (no barrier between generations), and each
referee's cold start (worker, CUDA context, base compilation, calibration) happens at once, in
parallel, when the evaluator starts.

Every candidate gets the referee's full correctness and integrity checks; only the timing depth
is staged (kernelsmith/referee/timing/staged.py): a quick "screen" on a few representative shapes for
all, on every shape for those near the best so far, then, in the same referee call, the full
interleaved measurement with its A/A control for contenders (at least as fast as the best so far;
within 1% of it while the best loses a shape by its point estimate: FRAGILE_BAR), and for a screen
far ahead of the best full measurement (rules.PROMOTE_MARGIN) even where its screen loses a shape.
A candidate stopped after the representative shapes has a null geomean (archive timing "screen",
verdict `details.timing_depth` "screen_subset") and counts as not faster (selection.fitness). Each
verdict is written to the archive as soon as it exists, so a kill loses at most the evaluations in
flight.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable

from kernelsmith.harness.facts import shape_key
from kernelsmith.referee.verdict import Verdict, contender_bar
from kernelsmith.search import gpu_time
from kernelsmith.search.archive import Archive
from kernelsmith.search.candidate import Candidate
from kernelsmith.search.evidence import SIMPLER_WITHIN, fragile
from kernelsmith.search.precompile import compile_timeout_verdict
from kernelsmith.search.rules import PROMOTE_MARGIN

POLL_S = 0.2
# A build this old that still holds the GPUs idle is stuck, not slow (the H200's builds take 2-7 s;
# the ones that held the sampler's window ran into the 20 s compile limit). Once builds have
# finished, STUCK_OVER_TYPICAL times their median, not less than STUCK_MIN_S: the sampler's builds
# took 1.7 s (median) and its 15 stuck ones idled the GPU until they were 8 s old (2026-12-02).
STUCK_BUILD_S = 8.0
STUCK_MIN_S = 3.0
STUCK_OVER_TYPICAL = 3.0
# While the best measured win is fragile (evidence.fragile: a shape below the winner rule's floor by
# its point estimate), candidates screened within the finals' SIMPLER_WITHIN of it are contenders
# too: the finals may fail the best, and a near-tie measured in full is then the winner.
FRAGILE_BAR = 1.0 - SIMPLER_WITHIN
TAKE_POLL_S = 0.02  # how often an idle worker looks again for a candidate whose compile finished


class WorkerLost(Exception):
    """A remote referee's worker (search/ray_pool.py) died with its node before answering: its
    candidate goes back to the queue for another worker, and this worker's thread ends."""


class Evaluator:
    """Runs archive rows through the referees: `submit` rows, `wait` for them; `run` does both."""

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
        compile_limit: float | None = None,
        on_verdict: Callable[[Candidate], None] | None = None,
        promote: bool = True,
    ):
        """`promote`: screens PROMOTE_MARGIN ahead of the best full measurement are measured in full
        even where they lose a shape (a search; a sweep, the baseline, measures its grid as it did)."""
        from kernelsmith.referee import Referee

        factory = referee_factory or Referee
        self.task = task
        self.archive = archive
        self.device = device
        self.timed = device == "cuda"
        self.seed = int(seed)  # the run seed: every search evaluation's inputs derive from it
        self.referees = [factory(task, device=device, gpu=g, seed=seed) for g in gpus]
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.precompiler = precompiler
        self.compile_limit = compile_limit  # seconds a candidate's CPU compile may take (None: no limit)
        self.on_verdict = on_verdict
        # Best full-measured geomean so far that is a measured win (evidence.py: the winner rule; the
        # base is 1.0). A faster candidate that loses a shape can never win, so it sets no bar.
        self.best = 1.0
        # That win's speedup per listed shape (its verdict's shapes, keyed by sorted shape JSON): the
        # referee scales the bar to the representative shapes it screens first (timing/staged.py).
        self.best_shapes: dict[str, float] | None = None
        # Best full measurement of any accepted candidate, not noisy (a measured win or not; the base
        # is 1.0): a screen PROMOTE_MARGIN ahead of it is measured in full at once (rules.py).
        self.best_full = 1.0
        self.promote = promote
        self.deadline: float | None = None
        self.device_info: dict | None = None
        # Submitted candidates not yet taken by a worker, oldest first (guarded by self.lock).
        self._jobs: collections.deque[Candidate] = collections.deque()
        self._outstanding: set[int] = set()  # submitted, not yet evaluated
        self._submitted: dict[int, float] = {}  # id -> when it was submitted (its build began)
        self._busy = 0  # threads evaluating right now
        self._errors: list[BaseException] = []
        self._threads: list[threading.Thread] = []
        self._halted = False
        self._closing = False  # close() killed the workers: verdicts still arriving are not real
        self._booting = 0  # threads starting their referee's worker
        self.evaluated = 0
        self._created = time.monotonic()
        self.stats = gpu_time.new_stats(gpus)  # where each GPU's time went (gpu_time.py)

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Start one thread per referee; each first boots its worker (all GPUs cold-start together)."""
        if self._threads:
            return
        for i in range(len(self.referees)):
            t = threading.Thread(target=self._serve, args=(i,), name=f"referee-{i}", daemon=True)
            self._threads.append(t)
            t.start()

    def halt(self) -> None:
        """Take no more jobs and wait for the ones in flight (the referees are then free to use)."""
        with self.changed:
            self._halted = True
            self.changed.notify_all()
            while self._busy:
                self.changed.wait(POLL_S)
        for t in self._threads:
            t.join()  # a thread still booting its worker finishes that first (bounded by its timeout)
        self._threads = []

    def close(self) -> None:
        """Stop every worker now (an evaluation in flight is dropped, not recorded: its row stays
        pending and a resume evaluates it) and let the threads end."""
        with self.changed:
            self._closing = self._halted = True
            self.changed.notify_all()
            while self._booting:  # a worker booting now would outlive close() (bounded by its timeout)
                self.changed.wait(POLL_S)
        for ref in self.referees:
            ref.close()
        if self.precompiler is not None:
            self.precompiler.close()

    def note_best(self, rows: list[Candidate]) -> None:
        """Seed the contender and promotion thresholds from candidates already in the archive (on resume)."""
        self.best_full = max([1.0] + [c.trusted_speedup for c in rows if c.trusted_speedup and not c.is_base])
        for c in sorted(rows, key=lambda c: -(c.speedup or 0.0)):  # the fastest measured win
            if (c.trusted_speedup or 0.0) > self.best and c.verdict and measured_win(c.verdict_json, c.id):
                self.best, self.best_shapes = c.speedup, shape_speedups(c.verdict_json)
                break

    # -- jobs -----------------------------------------------------------------------------------
    def stop_at(self, when: float | None) -> None:
        """Stop evaluating at wall-clock time `when` (None: no time budget): a search's minutes."""
        self.deadline = when

    def past_deadline(self) -> bool:
        """Whether the time budget given to stop_at is spent."""
        return self.deadline is not None and time.time() >= self.deadline

    def submit(self, rows: Iterable[Candidate]) -> list[int]:
        """Queue candidates for evaluation (their compilation starts on CPU cores now); returns their ids."""
        self.start()
        ids = []
        for c in rows:
            if c.id in self._outstanding:
                continue
            if self.precompiler is not None and c.code and not c.is_base:
                self.precompiler.submit(c.id, c.code)
            with self.changed:
                self._submitted[c.id] = time.monotonic()
                self._outstanding.add(c.id)
                self._jobs.append(c)
                self.changed.notify_all()
            ids.append(c.id)
        return ids

    def _stopped(self) -> bool:
        return self._halted or (self.deadline is not None and time.time() > self.deadline)

    def wait(self, ids: Iterable[int] | None = None, stall_s: float | None = None) -> list[int]:
        """Block until `ids` (default: everything submitted) are evaluated, or the time budget is
        spent and no evaluation is in flight; re-raises a referee that could not work at all.

        With `stall_s`: return early once every GPU has idled `stall_s` seconds with only builds
        queued (each of `ids` left among them, building for STUCK_BUILD_S or more), answering the
        ids still to judge; else []."""
        want = None if ids is None else set(ids)
        idle_since = None
        with self.changed:
            while True:
                if self._errors:
                    raise self._errors[0]
                left = self._outstanding if want is None else (want & self._outstanding)
                if not left or (self._stopped() and not self._busy):
                    return []
                if stall_s is not None and self._only_builds(left):
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since >= stall_s:
                        return sorted(left)
                else:
                    idle_since = None
                self.changed.wait(POLL_S)

    def _only_builds(self, left: set[int]) -> bool:
        """No GPU busy or booting, and every queued candidate (each of `left` among them) is still
        compiling: the GPUs wait on CPU builds alone. Called under the lock."""
        if self.precompiler is None or self._busy or self._booting or not self._jobs:
            return False
        queued = {r.id for r in self._jobs}
        now, stuck_s = time.monotonic(), self._stuck_build_s()
        if not left <= queued or any(now - self._submitted.get(c, now) < stuck_s for c in left):
            return False
        return not any(self._built(r) for r in self._jobs)

    def _stuck_build_s(self) -> float:
        """How old a build holding the GPUs idle must be to count as stuck (see STUCK_BUILD_S)."""
        typical = getattr(self.precompiler, "typical_s", lambda: None)()
        if typical is None:
            return STUCK_BUILD_S
        return min(STUCK_BUILD_S, max(STUCK_MIN_S, STUCK_OVER_TYPICAL * typical))

    def run(self, rows: list[Candidate]) -> int:
        """Evaluate `rows` (pending, or awaiting their full measurement) and wait; returns how many ran."""
        before = self.evaluated
        self.wait(self.submit(rows))
        return self.evaluated - before

    def _serve(self, i: int) -> None:
        ref = self.referees[i]
        try:
            starter = getattr(ref, "start", None)
            if starter is not None:
                t0 = time.monotonic()
                with self.changed:
                    if self._closing:
                        return
                    self._booting += 1
                lost_at_boot = None
                try:
                    starter()  # the cold start, overlapped with the other GPUs' and with proposing
                except WorkerLost as e:  # its Ray node died while it booted: nothing to retry there
                    lost_at_boot = e
                except Exception:  # noqa: BLE001 - the first evaluation retries and turns it into a verdict
                    pass
                finally:
                    with self.changed:
                        self._booting -= 1
                        self.changed.notify_all()
                self.stats[i]["boot_s"] = round(time.monotonic() - t0, 3)
                if lost_at_boot is not None:
                    self._retire(i, lost_at_boot)
                    return
            while True:
                with self.changed:
                    if self._stopped():  # what is left stays pending in the archive: a resume runs it
                        return
                    row = self._take()
                    if row is None:
                        t_idle, queued = time.monotonic(), bool(self._jobs)
                        self.changed.wait(TAKE_POLL_S)
                        if self.stats[i]["first"] is not None:  # between jobs, not before the first
                            key = "idle_builds_only_s" if queued else "idle_nothing_queued_s"
                            self.stats[i][key] += time.monotonic() - t_idle
                        continue
                    self._busy += 1
                st = self.stats[i]
                t0 = time.monotonic()
                st["first"] = st["first"] or t0
                done, lost = False, None
                try:
                    done = self._evaluate(ref, row, st)
                    if done and not row.is_base and st["first_candidate_s"] is None:
                        st["first_candidate_s"] = round(time.monotonic() - self._created, 2)
                except WorkerLost as e:
                    lost = e
                finally:
                    st["last"] = time.monotonic()
                    st["job_s"] += st["last"] - t0
                    st["jobs"] += int(done)
                    with self.changed:
                        self._busy -= 1
                        if lost is not None:  # nothing was stored: another worker evaluates it, first
                            self._jobs.appendleft(row)
                        else:
                            self._outstanding.discard(row.id)
                            self._submitted.pop(row.id, None)
                        self.evaluated += int(done)
                        self.changed.notify_all()
                if lost is not None:
                    self._retire(i, lost)
                    return
        except BaseException as e:  # a referee that cannot work at all stops the run
            with self.changed:
                self._errors.append(e)
                self.changed.notify_all()

    def _take(self) -> Candidate | None:
        """The oldest queued candidate whose kernels are compiled (or need no compile), removed from
        the queue; None when every queued one is still compiling. Called under the lock.

        Taking them in submission order made a GPU wait out a slow build (up to the compile limit,
        20 s: the sampler's first minute on the H200) while compiled candidates queued behind it."""
        for row in self._jobs:
            if self._built(row):
                self._jobs.remove(row)
                return row
        return None

    def _built(self, row: Candidate) -> bool:
        """Whether a queued candidate's kernels are compiled (or it needs no compile)."""
        return self.precompiler is None or row.is_base or not row.code or \
            self.precompiler.ready(row.id, self.compile_limit)

    def _retire(self, i: int, why: WorkerLost) -> None:
        """Worker `i` is lost for good (`why`); the run stops only when every worker is."""
        from kernelsmith.errors import KernelsmithError

        with self.changed:
            self.stats[i]["lost"] = True
            self.stats[i]["lost_why"] = str(why)
            if all(st.get("lost") for st in self.stats):
                self._errors.append(KernelsmithError(
                    "every evaluation worker was lost (their Ray nodes died); the candidates in flight "
                    f"stay pending: resume the run with --resume (last: {self.stats[i].get('lost_why')})"))
            self.changed.notify_all()

    def _evaluate(self, ref, row: Candidate, st: dict | None = None) -> bool:
        """Evaluate one candidate and store its verdict; False when the time budget ran out first
        (while its kernels compiled) and the row stays pending for a resume."""
        if self.precompiler is not None and not row.is_base:
            t0 = time.monotonic()
            # A slow compile (a huge block on one warp: a minute on the H200 host) must not keep
            # the run past its time budget.
            wait_s = 120.0 if self.deadline is None else max(0.0, min(120.0, self.deadline - time.time()))
            over = self.precompiler.wait(row.id, timeout=wait_s, limit=self.compile_limit)
            if st is not None:
                st["compile_wait_s"] += time.monotonic() - t0
            if over is not None:
                self._store(row, compile_timeout_verdict(over, self.compile_limit), "none")
                return True
            if self._stopped():
                return False
        self._judge(ref, row)
        return True

    def _judge(self, ref, row: Candidate) -> None:
        """Judge one candidate whose kernels are built (or that the referee builds) and store the verdict."""
        base, code = row.is_base, (None if row.is_base else row.code)
        if not self.timed:
            verdict = ref.evaluate(code, candidate_id=row.id, timing="none", rendered=row.rendered)
            self._store(row, verdict, "none")
            return
        if base:
            # The base against itself: baseline times, roofline and the A/A noise floor.
            self._store(row, ref.evaluate(None, candidate_id=row.id, timing="full"), "full")
            return
        if row.get("awaiting_full"):
            # Archives written before the staged referee call (the screen, then a second call for
            # the full measurement) can hold a screened contender killed before its full one: a
            # resume still owes it that measurement. Nothing sets the column today.
            self._store(row, ref.evaluate(code, candidate_id=row.id, timing="full"), "full")
            return
        # One call: the screen, and for a contender the full measurement on the candidate already
        # loaded and checked (no second load, no second correctness pass).
        with self.lock:
            bar, shapes = contender_bar(self.best), self.best_shapes
            promote = PROMOTE_MARGIN * self.best_full if self.promote else None
        if shapes and fragile(shapes.values()):
            bar *= FRAGILE_BAR
        verdict = ref.evaluate(code, candidate_id=row.id, timing="staged", contender_at=bar,
                               contender_shapes=shapes, promote_at=promote, rendered=row.rendered)
        self._store(row, verdict, "full" if verdict.fully_measured else "screen")

    def judge_late(self, row: Candidate) -> None:
        """Judge one candidate after the time budget as the search judges its own (a sweep's closing
        table): the pool takes no more jobs and the first alive referee judges it, on the search's inputs."""
        self.halt()
        self._on_first_alive(lambda ref: self._judge(ref, row), f"candidate #{row.id} stays pending")

    def _on_first_alive(self, call, what: str):
        """`call(referee)` on the first referee alive, after the pool halted; a worker lost meanwhile
        (its Ray node died: nothing was measured) is retired and the next one is called. `what`: the
        consequence said when every worker is lost."""
        from kernelsmith.errors import KernelsmithError

        for i, (ref, st) in enumerate(zip(self.referees, self.stats, strict=True)):
            if st.get("lost"):
                continue
            try:
                return call(ref)
            except WorkerLost as e:
                self._retire(i, e)
        raise KernelsmithError(f"every evaluation worker was lost (their Ray nodes died): {what}; "
                               "resume the run with --resume")

    def _store(self, row: Candidate, verdict: Verdict, timing: str) -> None:
        data = verdict.to_json()
        trusted = verdict.trusted_speedup(timing)
        # The bootstrap outside the lock (a fraction of a second): only for what could raise the bar.
        win = (trusted or 0.0) > self.best and measured_win(data, row.id)
        with self.lock:
            if self._closing:
                return
            self.archive.set_verdict(row.id, data, verdict.feedback(), timing=timing)
            if data.get("device") and not self.device_info:
                self.device_info = data["device"]
            if win and trusted > self.best:
                self.best, self.best_shapes = trusted, shape_speedups(data)
            if trusted is not None and not row.is_base:
                self.best_full = max(self.best_full, trusted)
        if self.on_verdict is not None:
            self.on_verdict(self.archive.get(row.id))

    def summary(self) -> list[dict]:
        """Per GPU: where its time went (gpu_time.py)."""
        return gpu_time.summary(self.stats, self.referees)

    def remeasure(self, row: Candidate | dict, seed: int) -> dict:
        """A full measurement of `row` with new input seeds (the final check of the winner).

        It reuses the first GPU's referee (the first alive on a Ray cluster; new seeds per call), so
        no second cold start is paid; a Ray worker lost meanwhile is retired and the next alive one
        measures it. The candidate is compiled afresh from its source in an empty Triton cache, so
        no binary planted in the shared cache (by a precompile child, say) can stand in for it.
        """
        # The referee derives the listed shapes' inputs from (run seed, shape, trial) and caches them
        # per worker for the whole search (referee/checks/input_cache.py): a final check on the search's
        # own seed would judge the winner on the very inputs it was selected on.
        if int(seed) == self.seed:
            raise ValueError("the final re-measurement needs a seed other than the search's "
                             f"({seed}): new inputs, not the ones the winner was selected on")
        row = Candidate.of(row)  # an archive row, or one built by hand (a code and an id)
        self.halt()
        timing = "full" if self.timed else "none"
        return self._on_first_alive(
            lambda ref: ref.evaluate(row.code, candidate_id=row.id, timing=timing, seed=seed,
                                     fresh_compile=True).to_json(),
            f"no final re-measurement of #{row.id}")


def shape_speedups(verdict: dict) -> dict[str, float] | None:
    """A verdict's speedup per listed shape, keyed by the shape's sorted JSON; None if any is missing."""
    out = {}
    for s in verdict.get("shapes") or []:
        if not isinstance(s, dict) or not s.get("speedup") or not isinstance(s.get("shape"), dict):
            return None
        out[shape_key(s["shape"])] = float(s["speedup"])
    return out or None


def measured_win(verdict: dict, cid: int) -> bool:
    """True when a full verdict passes the winner rule (accepted, not noisy, CI above 1.0, no shape lost)."""
    from kernelsmith.search.evidence import judge

    return judge(verdict, seed=cid)["win"]
