"""The search loop behind `kernelsmith optimize`: generations of proposals, evaluation on every
GPU, resume from the archive, the final re-measurement, winner/ and result.json (the caller
renders the reports from them: commands/run.py).

Generations are pipelined: generation g is proposed (and its kernels start compiling on CPU
cores) while generation g-1 is still being evaluated, so the GPUs never wait for the loop.
Proposals of generation g therefore see the verdicts of generations < g-1 only, and each proposal
draws from its own generator, seeded by run seed, generation and slot: a fixed `--seed` reproduces
the proposal sequence given the same verdicts, however many GPUs evaluate and however fast (and the
same moves: a candidate whose build holds the window's front while every GPU idles moves to the
newest generation in flight, recorded in the archive, so a resume sees what the proposals saw).
"""

from __future__ import annotations

import time

from kernelsmith.errors import KernelsmithError
from kernelsmith.search.archive import Archive, NewRow, code_hash
from kernelsmith.search.candidate import Candidate
from kernelsmith.search.mutator_set import build_mutators
from kernelsmith.search.mutators import Proposal
from kernelsmith.search.progress import Progress
from kernelsmith.search.resolve import DEFAULT_BUDGET, resolve_run
from kernelsmith.search.result import SearchResult
from kernelsmith.search.rules import IMPROVEMENT, could_change_best, default_stagnation
from kernelsmith.search.run_config import PIPELINE, SearchConfig, SearchHooks
from kernelsmith.search.seeds import slot_rng
from kernelsmith.search.selection import Population, SelectionConfig

# Seconds every GPU may idle on CPU builds alone before the builds at the window's front move on
# (on the H200 a sampler config at the 20 s compile limit stalled every GPU for 9-13 s). Short: the
# builds are old by then (evaluator.py's stuck age) and nothing else can reach the GPUs; at 1 s the
# sampler's 23 moves (8 of them a second move of the same build) cost at least 23 s of idle GPU.
STALL_S = 0.25


class Search:
    """One run of the loop (see module docstring)."""

    def __init__(self, config: SearchConfig, hooks: SearchHooks = SearchHooks()):
        self.config, self.hooks = config, hooks
        resolved = resolve_run(config, hooks)
        self.task, self.path, self.run, self.lock = resolved.task, resolved.path, resolved.run, resolved.lock
        self.device, self.gpus = self.run.device, self.run.gpus
        try:
            self._setup(config)
        except BaseException:
            self.lock.release()
            raise

    def _setup(self, config: SearchConfig) -> None:
        """The archive, population, mutators and stop rule of the resolved run."""
        self.seed = self.run.seed
        self.budget = self.run.budget
        self.minutes = self.run.minutes
        self.archive = Archive(self.path / "archive.sqlite")
        self.timed = self.device == "cuda"
        self.population = Population(
            SelectionConfig(islands=self.run.islands, exploit=float(self.run.exploit)),
            self.task.base_code,
        )
        # Proposals per generation, and generations in flight (run.json's: see resolve.py).
        self.batch = self.hooks.batch or self.run.batch or max(2, len(self.gpus))
        self.pipeline = self.run.pipeline or PIPELINE
        self.progress = Progress(self.budget, live=config.progress, timed=self.timed)
        hint = self.budget or DEFAULT_BUDGET
        self.command = self.run.command
        sweep = self.command == "sweep"
        self.mutators = build_mutators(
            self.run.mutator, self.task, self.device, hint, self.progress.note, self.run.replay,
            sweep_seed=self.seed if sweep else None,
        )
        # Generation 1 is proposed while the base is judged (Search.search), blind to its verdict;
        # not where a model writes proposals, whose prompt shows the parent's feedback.
        self.base_overlap = self.pipeline > 1 and not any(m.name == "llm" for m in self.mutators)
        # The space's distinct launches (twins.py; None: no countable space), which scale the
        # stagnation count (rules.py). A sweep visits the whole grid: no stagnation stop.
        self.space = next((m for m in self.mutators if hasattr(m, "coverage")), None)
        self.launches = self.space.launch_count() if self.space is not None else None
        if sweep:
            self.stagnation = float("inf")
        else:
            self.stagnation = self.run.stagnation or default_stagnation(self.launches, hint,
                                                                        minutes=self.minutes)
        self._wins: dict[int, bool] = {}  # candidate id -> measured win (a bootstrap each: memoised)
        self.stop_reason = None
        self.propose_s = 0.0  # this invocation's time in _propose (result.json "loop")
        self.timeline: dict[str, float] = {}  # this invocation's setup_s and search_s (result.json)
        self.prior_wall = float(self.archive.get_meta("wall_s", 0.0))  # earlier invocations (resume)

    # -- archive rows ---------------------------------------------------------------------------
    def record(self, p: Proposal, island: int, generation: int) -> int:
        """Store a proposal in the archive: pending, or rejected at once (no code, a duplicate); its id."""
        from kernelsmith.referee.verdict import Verdict
        from kernelsmith.search.edits import unified_diff

        parent = self.archive.get(p.parent_id) if p.parent_id is not None else None
        parent_code = (parent.code if parent is not None else None) or self.task.base_code
        common = dict(
            mutator=p.mutator,
            parent_id=p.parent_id,
            island=island,
            generation=generation,
            inspiration_ids=p.inspiration_ids,
            prompt=p.prompt,
            response=p.response,
            params=p.params,
        )
        if p.code is None:
            v = Verdict.rejected("malformed_proposal", p.error or "the answer held no usable code")
            return self.archive.add(
                NewRow(None, status="evaluated", verdict=v.to_json(), feedback=v.feedback(), **common)
            )
        diff = unified_diff(parent_code, p.code, self.task.operator.file)
        same = self.archive.find_code(p.code)
        if same is not None:
            v = Verdict.rejected("duplicate", f"identical to candidate #{same.id}")
            return self.archive.add(NewRow(
                p.code,
                diff=diff,
                status="duplicate",
                verdict=v.to_json(),
                feedback=v.feedback(),
                duplicate_of=same.id,
                **common,
            ))
        return self.archive.add(NewRow(p.code, diff=diff, **common))

    def settled(self, c: Candidate) -> None:
        """Report a candidate's verdict as it lands (the evaluator's on_verdict)."""
        from kernelsmith.search.prompt import status_line

        summary = status_line(c) + (f" [{c.depth}]" if self.timed else "")
        if c.is_base:
            self.progress.note(f"base: {summary}")
            return
        self.progress.event(
            c.id,
            c.mutator,
            summary + (" (noisy)" if c.noisy else ""),
            evaluated=True,
            accepted=c.accepted,
            best=c.trusted_speedup,
            generation=c.generation,
        )

    # -- the loop -------------------------------------------------------------------------------
    def _visible(self, rows: list[Candidate], generation: int) -> list[Candidate]:
        """Candidates as generation `generation` may see them: verdicts of the generations still in
        flight when it is proposed are hidden (whether or not they happen to be in yet). The base is
        generation 0, and (`base_overlap`) generation 1 is proposed while it is judged, so generation 1
        never sees its verdict (a pending base is still every island's parent: selection.py)."""
        out = []
        for c in rows:
            if c.is_base:
                fresh = generation <= 1 and self.base_overlap
            else:
                fresh = c.generation > generation - self.pipeline
            if fresh and c.evaluated and not c.malformed:
                c = c.with_columns(status="pending", verdict=None, feedback=None, speedup=None,
                                   accepted=0, timing=None, reason=None, awaiting_full=0)
            out.append(c)
        return out

    def _seen_by(self, generation: int) -> list[Candidate]:
        """The rows generation `generation` sees (earlier generations only), the islands rebuilt from them."""
        rows = self._visible([c for c in self.archive.all() if c.generation < generation], generation)
        self.population.rebuild(rows, self.archive.migrations())
        return rows

    def _island(self, generation: int, slot: int) -> int:
        """The island a slot works for: every island gets turns, however small the batch."""
        return (generation * self.batch + slot) % self.population.n_islands

    def _propose(self, generation: int, remaining: int) -> int:
        """Make one generation of proposals and record them in slot order (model calls run in parallel)."""
        from concurrent.futures import ThreadPoolExecutor

        rows = self._seen_by(generation)
        for m in self.mutators:
            m.sync(rows)
        known = self.archive.known_hashes()
        n_slots = min(self.batch, remaining)
        spare = remaining - n_slots
        results: list[list[Proposal]] = [[] for _ in range(n_slots)]
        llm_jobs = []
        # Sequential part, in slot order: sampling and the params mutator (whose state is shared).
        for slot in range(n_slots):
            rng = slot_rng(self.seed, generation, slot)
            island = self._island(generation, slot)
            parent, inspirations = self.population.sample(island, rng)
            order = list(self.mutators)
            rng.shuffle(order)
            for m in order:
                if m.name == "llm":
                    if getattr(m, "dead", False):
                        continue
                    extra = min(m.settings.fix_attempts, spare)
                    spare -= extra
                    llm_jobs.append((slot, m, parent, inspirations, rng, 1 + extra))
                    break
                p = m.propose(self.archive.base() if m.name == "grid" else parent, inspirations, rng, known)
                if p is not None:
                    results[slot] = [p]
                    known.add(code_hash(p.code))
                    break
            results[slot] = [(island, p) for p in results[slot]]
        if llm_jobs:
            # One thread per proposal: the broker sends them to the endpoint at once (broker.py).
            with ThreadPoolExecutor(max_workers=len(llm_jobs)) as pool:
                futures = [
                    (slot, pool.submit(m.propose, parent, insp, rng, known, quota))
                    for slot, m, parent, insp, rng, quota in llm_jobs
                ]
                for slot, fut in futures:
                    results[slot] = [(self._island(generation, slot), p) for p in fut.result()]
        made, settled = 0, []
        # The generation's rows and its `made` mark commit together: a kill between two of them
        # leaves none, and a resume proposes the whole generation again, as this run would have.
        with self.archive.transaction():
            for slot_results in results:
                for island, p in slot_results:
                    cid = self.record(p, island, generation)
                    row = self.archive.get(cid)
                    made += 1
                    if row.status != "pending":
                        settled.append((cid, p, row.verdict.reason))
            if made:  # until it is tallied: a resume takes the generation back into its window
                self._set_made({**self._made(), generation: made})
        for cid, p, reason in settled:
            self.progress.event(
                cid,
                p.mutator,
                f"{reason}: {p.error}" if p.error else reason,
                evaluated=False,
                accepted=False,
                best=None,
            )
        return made

    def check_base(self) -> None:
        """Stop the run, saying why, when the referee did not accept the base (it must pass its own
        harness before any candidate can be compared with it)."""
        base = self.archive.base()
        if base.evaluated and base.accepted:
            return
        from kernelsmith.referee.checks.diagnose import base_failure

        raise KernelsmithError(base_failure(base.verdict_json or {"error": base.get("feedback")}))

    def _best(self, upto: int | None = None) -> float | None:
        """The best measured win (evidence.py: the rule a winner passes) of the accepted candidates
        (untimed: distinct accepted codes), of generations up to `upto` only when given. A faster
        candidate that loses a shape can never be the winner: it is no progress."""
        from kernelsmith.search.evaluator import measured_win

        clause, args = "accepted=1 AND mutator!='base'", ()
        if upto is not None:
            clause, args = clause + " AND generation<=?", (upto,)
        rows = self.archive.where(clause, args)
        if not self.timed:
            return float(len({c["code_hash"] for c in rows}))  # progress = new distinct accepted code
        for c in sorted((c for c in rows if c.trusted_speedup), key=lambda c: (-c.trusted_speedup, c.id)):
            if c.id not in self._wins:
                self._wins[c.id] = measured_win(c.verdict_json, c.id)
            if self._wins[c.id]:
                return c.trusted_speedup
        return None

    def _counted(self, generation: int, made: int) -> int:
        """What generation `generation` adds to the stagnation count: its measurements that could
        have changed the best (rules.could_change_best); untimed, its `made` proposals."""
        if not self.timed:
            return made
        rows = self.archive.where("generation=? AND mutator!='base'", (generation,))
        return sum(1 for c in rows if could_change_best(c))

    def _tally(self, done_gen: int, made: int, best: float | None, since: int) -> tuple[float | None, int]:
        """The best so far and the stagnation count (measurements that could have changed it since it
        last improved: rules.py) once generation `done_gen` (`made` proposals) is judged. Only
        generations up to done_gen count: a later one's verdicts already in (the pipeline judges
        them at once) would credit its improvement to done_gen or not by timing, and the count,
        kept for a resume, would differ."""
        new_best = self._best(upto=done_gen)
        step = IMPROVEMENT if self.timed else 1
        improved = new_best is not None and (best is None or new_best > best * step)
        return (new_best, 0) if improved else (best, since + self._counted(done_gen, made))

    def _save_tally(self, generation: int, best: float | None, since: int) -> None:
        """Keep the tally after `generation` in the archive: a resume goes on from exactly there."""
        made = self._made()
        made.pop(generation, None)
        self._set_made(made)
        self.archive.set_meta("since_best", since)
        self.archive.set_meta("tally_best", best)

    def _tallied_best(self) -> float | None:
        """The running best of the last tally (it moves by 0.2% steps only), not the best of every
        verdict in: a killed run's window holds verdicts its tally had not reached. An archive
        without the meta: the latter."""
        best = self.archive.get_meta("tally_best", "")
        return best if best is None or isinstance(best, (int, float)) else self._best()

    def _made(self) -> dict[int, int]:
        """Proposals per generation not yet tallied (archive meta `made`; malformed entries ignored)."""
        made = self.archive.get_meta("made", {})
        if not isinstance(made, dict):
            return {}
        return {int(g): n for g, n in made.items() if str(g).isdigit() and isinstance(n, int) and n > 0}

    def _set_made(self, made: dict[int, int]) -> None:
        self.archive.set_meta("made", {str(g): n for g, n in sorted(made.items())})

    def untallied(self) -> list[Candidate]:
        """The rows of generations proposed but not tallied (a killed run's window), judged or not."""
        gens = self._made()
        return [c for c in self.archive.all() if c.generation in gens and not c.is_base]

    def _should_stop(self, evaluator, since: int) -> str | None:
        """Why no further generation is proposed, or None."""
        proposals = self.archive.proposals()
        if self.budget is not None and proposals >= self.budget:
            return f"budget of {self.budget} proposals spent"
        if evaluator.past_deadline():
            return f"time budget of {self.minutes} minutes spent"
        if since >= self.stagnation:
            counted = "measurements that could have changed it" if self.timed else "proposals"
            return f"stagnation: no better candidate in {since} {counted}"
        return None

    def _dry_reason(self) -> str:
        """Why the run ends when no mutator has anything new: its space covered (every distinct
        launch measured), or exhausted (no proposal could be made; how much was measured, where known),
        and the launch values the params search could not follow (why its space may be small)."""
        notes = [n for m in self.mutators for n in getattr(m, "unfollowed", [])]
        unfollowed = "".join(f"; not followed: {n}" for n in notes)
        coverage = self.space.coverage() if self.space is not None else None
        if coverage is None:
            return "search space exhausted: no new proposal could be made" + unfollowed
        measured, total = coverage
        if measured >= total:
            return f"search space covered: all {total} distinct launches measured" + unfollowed
        return (f"search space exhausted: {measured} of {total} distinct launches measured (the others "
                "lie beyond the learned edges or Triton's limits)" + unfollowed)

    def space_summary(self) -> dict | None:
        """result.json's `space`: the distinct launches, how many were judged, whether all were."""
        if self.space is None:
            return None
        self.space.sync(self.archive.all())  # every verdict in (the last generations' too)
        coverage = self.space.coverage()
        if coverage is None:
            return None
        return {"launches": coverage[1], "measured": coverage[0], "covered": coverage[0] >= coverage[1]}

    def search(self, evaluator, started: float, in_flight_at_start: list[Candidate] | None = None) -> None:
        """Propose and evaluate generation after generation until a budget or stagnation stops it;
        up to `pipeline` generations are in flight at once. `in_flight_at_start`: the rows submitted
        at the start while the base was not judged yet (the base, and on a resume the pending rows
        of the generations after it): the base is generation 0, in flight with generation 1 only,
        and is checked before generation 2 is proposed (a base the referee rejects stops the run)."""
        def arm_deadline() -> None:
            if self.minutes is not None:
                evaluator.stop_at(started + self.minutes * 60 - self.prior_wall)
                for m in self.mutators:  # a model's requests end with the run too (llm.py)
                    if hasattr(m, "stop_at"):
                        m.stop_at(started + self.minutes * 60 - self.prior_wall)

        best = self._tallied_best()
        since = int(self.archive.get_meta("since_best", 0))
        made_of = self._made()
        generation = self.archive.max_generation()
        # (generation, candidate ids, proposals made)
        by_generation: dict[int, list[int]] = {}
        for c in in_flight_at_start or []:
            by_generation.setdefault(c.generation, []).append(c.id)
        in_flight: list[tuple[int, list[int], int]] = [
            (g, ids, made_of.get(g, len(ids) if g else 0))
            for g, ids in sorted(by_generation.items())]
        if in_flight and in_flight[0][0] > 0:
            # A killed run's window: its first tally may migrate island elites before anything is
            # proposed here, from the islands as the newest generation's proposals saw them.
            self._seen_by(generation)
        # The base is judged whatever the budget (everything is compared with it, as when it was
        # judged before the search began): the deadline applies once its verdict is in.
        if not (in_flight and in_flight[0][0] == 0):
            arm_deadline()
        dry = False  # the last generation proposed nothing: the next must see the verdicts now in
        while True:
            if in_flight and in_flight[0][0] == 0:  # the base is judged: generation 1 only, see above
                room = generation == 0
            else:
                room = len(in_flight) < self.pipeline
            if self.stop_reason is None and room:
                self.stop_reason = self._should_stop(evaluator, since)
                if self.stop_reason is None:
                    generation += 1
                    proposals = self.archive.proposals()
                    self.progress.set_generation(generation, proposals)
                    remaining = (self.budget - proposals) if self.budget is not None else self.batch
                    t_propose = time.monotonic()
                    made = self._propose(generation, remaining)
                    self.propose_s += time.monotonic() - t_propose
                    self.progress.set_generation(generation, self.archive.proposals())
                    if made:
                        rows = self.archive.where("status='pending' AND generation=?", (generation,))
                        in_flight.append((generation, evaluator.submit(rows), made))
                        continue
                    # Nothing new from what this generation may see. With verdicts still in flight
                    # the next generation (which sees them) may find more, a per-shape table say.
                    if not in_flight:
                        # A model asks nothing in the last second of the time budget (llm.py): the
                        # budget stopped the run, not the search space.
                        late = evaluator.past_deadline() or any(
                            getattr(m, "out_of_time", lambda: False)() for m in self.mutators)
                        self.stop_reason = (f"time budget of {self.minutes} minutes spent" if late
                                            else self._dry_reason())
                    dry = True
            if not in_flight:
                break
            done_gen, ids, made = in_flight.pop(0)
            if dry:
                # Generation numbers decide what a proposal sees (`_visible`): the next one is
                # numbered to see done_gen's verdicts, or with a window not full, the last try before
                # "exhausted" would not see the last verdicts (a per-shape table they make pay, say).
                generation, dry = max(generation, done_gen + self.pipeline - 1), False
            # A build stuck at the window's front (a huge block on few warps, up to the compile
            # limit) would hold every later generation back while the GPUs idle: it moves to the
            # newest generation in flight, so the next one is proposed without its verdict (the
            # archive keeps the move, so a resume sees what this run's proposals saw).
            movable = done_gen > 0 and in_flight and self.stop_reason is None
            stuck = evaluator.wait(ids, stall_s=STALL_S if movable else None)
            if stuck:
                newest = in_flight[-1]
                self.archive.move_generation(stuck, newest[0])
                newest[1].extend(stuck)
                self.progress.note(f"candidate(s) {', '.join(f'#{c}' for c in stuck)} still compiling "
                                   f"with the GPUs idle: moved from generation {done_gen} to {newest[0]}")
            if done_gen == 0:
                self.check_base()
                arm_deadline()
                continue
            # The tally's writes commit together: a kill between them would resume with the
            # generation out of the window but the stagnation count from before it.
            with self.archive.transaction():
                for cid, to in self.population.migrate(done_gen):
                    self.archive.add_migration(done_gen, cid, to)
                best, since = self._tally(done_gen, made, best, since)
                self._save_tally(done_gen, best, since)
                self.archive.set_meta("wall_s", self.prior_wall + time.time() - started)


def optimize(config: SearchConfig, hooks: SearchHooks = SearchHooks()) -> SearchResult:
    """Run or resume a search; returns its run directory and result.json's content (winner null
    when none). The reports are the caller's: report.py's write_reports (commands/run.py does both)."""
    from kernelsmith.referee.proc import warm
    from kernelsmith.search.evaluator import Evaluator
    from kernelsmith.search.finish import finish, record_state

    setup_start = time.time()
    try:
        search = Search(config, hooks)
    except BaseException:
        warm.discard()  # fork servers started for referees this run will never make
        raise
    progress = search.progress
    progress.note(f"run directory: {search.path}")
    from kernelsmith.scratch import remove_orphans

    orphans = remove_orphans("kernelsmith-referee-")  # left by a killed run: candidate sources
    if orphans:
        progress.note(f"removed {len(orphans)} referee folder(s) left by processes that are gone")
    if not search.timed:
        progress.note(
            "no CUDA device: the Triton interpreter checks correctness and integrity only; no timing is done"
        )
    precompiler = None
    workers, factory = search.gpus, hooks.referee_factory
    if config.ray:  # one actor per worker; kernels compile on each actor's node (ray_pool.py)
        from kernelsmith.search.ray_pool import RayPool

        pool = RayPool(config.ray, search.task, search.device, search.seed, config.workers_per_node, factory,
                       compile_limit=config.compile_limit or None, precompile=hooks.precompile,
                       precompiler_factory=hooks.precompiler_factory)
        workers, factory = list(range(len(pool.actors))), pool.factory
        progress.note(f"Ray: {len(workers)} evaluation worker(s) on the cluster at {config.ray}")
    elif search.timed and hooks.precompile:
        from kernelsmith.search.precompile import Precompiler

        # One compile process per candidate that can be in flight (`pipeline` generations of a
        # batch), and one for the base's calibration job at start.
        precompiler = Precompiler.maybe(search.task, workers=search.pipeline * search.batch + 1,
                                        seed=search.seed, n_gpus=len(search.gpus))
        if precompiler is not None:
            precompiler.calibrate(search.task.base_code)
    evaluator = Evaluator(
        search.task,
        search.archive,
        device=search.device,
        gpus=workers,
        seed=search.seed,
        referee_factory=factory,
        precompiler=precompiler,
        compile_limit=config.compile_limit or None,
        on_verdict=search.settled,
        promote=search.command != "sweep",  # the sweep is the baseline: its grid measured as it was
    )
    started = time.time()
    # Where this invocation's time went outside wall_s's window and inside it (result.json "timeline").
    search.timeline["setup_s"] = round(started - setup_start, 2)
    try:
        if search.archive.base() is None:
            search.archive.add(NewRow(search.task.base_code, mutator="base"))
        evaluator.note_best(search.archive.all())
        pending = search.archive.pending()
        in_flight_at_start = None
        if not search.archive.base().evaluated and search.base_overlap:
            # A new run (or one killed before the base's verdict): the first generations are
            # proposed and compiled while the workers boot and judge the base, which the search
            # checks before it proposes more (Search.search).
            evaluator.submit(pending)
            in_flight_at_start = pending
        else:
            # A killed run's window goes back in flight (the loop tallies it in order); anything
            # else pending (an archive older than the tally) is judged first.
            window = search.untallied()
            ids = {c.id for c in window}
            rest = [c for c in pending if c.id not in ids]
            if rest:
                progress.note(f"evaluating {len(rest)} pending candidate(s) first")
                evaluator.run(rest)
            search.check_base()
            if window:
                gens = sorted({c.generation for c in window})
                progress.note(f"generation(s) {', '.join(map(str, gens))} were in flight: back in the window")
                evaluator.submit([c for c in pending if c.id in ids])
                in_flight_at_start = window
        rows = search.archive.all()
        progress.set_counts(
            search.archive.proposals(),
            search.archive.evaluations(),
            sum(1 for c in rows if c.accepted and not c.is_base),
            search._best() if search.timed else None,
        )
        search.search(evaluator, started, in_flight_at_start)
        progress.note(f"search stopped: {search.stop_reason}")
        if search.run.command == "sweep":
            from kernelsmith.search.sweep import measure_table

            measure_table(search, evaluator)
        search.timeline["search_s"] = round(time.time() - started, 2)
        result = finish(search, evaluator, started)
        record_state(search.path, progress)
        return result
    finally:
        progress.close()
        evaluator.close()
        warm.discard()  # those no referee took (stand-in referees, a worker count that changed)
        search.archive.close()
        search.lock.release()
