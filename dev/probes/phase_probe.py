"""Where one referee worker's time goes per candidate: boot phases, then the base file evaluated as
candidates with staged timing (two far below the contender bar, two at the bar), printing each
verdict's eval_s, details.phase_s, timing depth and input-cache counters as JSON lines.

    python3 dev/probes/phase_probe.py TARGET OP [--checkout DIR] [--device cuda] [--candidates N]
    python3 dev/probes/phase_probe.py TARGET OP ... --profile [--warmup W] [--top K]

Uses only Referee/load_task calls that predate the input cache, so with PYTHONPATH pointing at an
older checkout it measures the "before" side of a comparison with the same command.

`--steps`: the judge in this process as with `--profile`, with device-synchronised timers around the
correctness steps (runner calls, comparisons, bit checks, copies, the cache's fingerprints): seconds
per evaluation by step, so time the device spends on the judge's own tensors lands where it is spent.

`--profile`: by function instead. The worker's judge runs in this process (its runner forked as in
a worker), the base is evaluated as candidates below the bar (screen only), and after `--warmup`
evaluations cProfile records the judge and, from its next candidate load on, the runner. Prints the
top functions of each by own and by cumulative time; the judge's wait for its runner shows up in the
channel's receive, and the runner's wait for the judge in its own. A diagnostic: the judge is not
isolated from this process.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee


def main(argv: list[str] | None = None) -> int:
    """Print one JSON line for the boot and one per evaluation."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("target")
    p.add_argument("op")
    p.add_argument("--checkout", default=None)
    p.add_argument("--targets", default="targets")
    p.add_argument("--device", default="cuda")
    p.add_argument("--candidates", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", action="store_true", help="profile the judge and its runner instead")
    p.add_argument("--steps", action="store_true", help="time the judge's correctness steps instead")
    p.add_argument("--warmup", type=int, default=2, help="--profile: evaluations before profiling")
    p.add_argument("--top", type=int, default=40, help="--profile: functions listed per table")
    args = p.parse_args(argv)
    if args.profile or args.steps:
        return profile(args)
    task = load_task(args.target, args.op, checkout=args.checkout, targets=args.targets)
    with Referee(task, device=args.device, seed=args.seed) as ref:
        t0 = time.monotonic()
        ref.start()
        print(json.dumps({"boot_s": round(time.monotonic() - t0, 3), "boot_phases": ref.boot_phases}))
        for i in range(args.candidates):
            bar = 1000.0 if i < args.candidates // 2 else 1.0  # unreachable, then reached by any
            v = ref.evaluate(task.base_code, candidate_id=i + 1, timing="staged", contender_at=bar)
            d = v.details or {}
            print(json.dumps({"candidate": i + 1, "contender_at": bar, "accepted": v.accepted,
                              "reason": v.reason, "eval_s": v.eval_s,
                              "timing_depth": d.get("timing_depth") or (v.timing or {}).get("mode"),
                              "geomean_speedup": v.geomean_speedup, "phase_s": d.get("phase_s"),
                              "input_cache": d.get("input_cache")}))
            sys.stdout.flush()
    return 0


def profile(args) -> int:
    """`--profile`: warm up, profile `--candidates` evaluations, print the tables."""
    from kernelsmith.referee.proc.judge import RunnerTemplate
    from kernelsmith.referee.proc.oracle_link import OracleLink
    from kernelsmith.referee.session import Session

    runner_stats = Path(tempfile.mkdtemp(prefix="ks-runner-prof-")) / "runner.prof"
    totals = _step_timers() if args.steps else None
    if not args.steps:
        _profile_runner(runner_stats, args.warmup)
    link = RunnerTemplate()  # forked before anything here touches CUDA, as in a worker
    oracle = OracleLink()  # the harness and the base run there, as in a worker
    task = load_task(args.target, args.op, checkout=args.checkout, targets=args.targets)
    with Referee(task, device=args.device) as ref:
        spec = ref._spec()  # what a worker's init request holds
        t0 = time.monotonic()
        session = Session(spec, link, oracle)
        print(json.dumps({"boot_s": round(time.monotonic() - t0, 3), "boot_phases": session.boot_phases}))
        prof = cProfile.Profile()
        try:
            for i in range(args.warmup + args.candidates):
                profiled = i >= args.warmup
                if profiled and totals is None:
                    prof.enable()
                if totals is not None:
                    totals.clear()
                t = time.monotonic()
                # The base's own code, as kernelsmith renders it: one runner serves every evaluation.
                v = session.evaluate(task.base_code, None, i + 2, "staged", args.seed, contender_at=1000.0,
                                     rendered=True)
                wall = time.monotonic() - t
                if profiled:
                    prof.disable()
                d = v.get("details") or {}
                print(json.dumps({"candidate": i + 2, "profiled": profiled, "wall_s": round(wall, 4),
                                  "accepted": v.get("accepted"), "reason": v.get("reason"),
                                  "phase_s": d.get("phase_s"), "channel": d.get("channel"),
                                  **({"steps_s": {k: round(v, 4) for k, v in totals.items()}}
                                     if totals is not None else {})}))
                sys.stdout.flush()
        finally:
            session.close_runners()
            session.caches.remove()
            link.close()
            oracle.close()
    if totals is not None:
        return 0
    for who, stats in (("judge", prof), ("runner", str(runner_stats))):
        if who == "runner" and not runner_stats.exists():
            print("## runner: no profile written")
            continue
        for key in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(stats, stream=out).sort_stats(key).print_stats(args.top)
            print(f"## {who}, by {key} ({args.candidates} evaluations)")
            print(out.getvalue())
    return 0


def _step_timers() -> dict[str, float]:
    """Wrap the judge's correctness steps with device-synchronised timers; returns the live totals
    (seconds by step, nested steps counted in each)."""
    import torch

    from kernelsmith.referee.checks import correctness, input_cache, shape_trials
    from kernelsmith.referee.proc import judge, oracle_link

    totals: dict[str, float] = {}

    def sync():  # asking for CUDA before the runner forks would break the runner
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()

    def timed(name, fn):
        def wrapper(*a, **kw):
            sync()
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                sync()
                totals[name] = totals.get(name, 0.0) + time.perf_counter() - t
        return wrapper

    for owner, name in ((correctness, "compare"), (correctness, "same_bits"),
                        (correctness, "precision_downgrade"), (shape_trials, "fresh_copy"),
                        (shape_trials, "into_arena"), (input_cache, "fingerprints")):
        setattr(owner, name, timed(name, getattr(owner, name)))
    for cls, name in ((judge.RunnerLink, "call"), (judge.RunnerLink, "request"),
                      (oracle_link.OracleLink, "request"),
                      (shape_trials.ShapeTrials, "check_shape"), (shape_trials.ShapeTrials, "check_fresh"),
                      (input_cache.InputCache, "verify")):
        setattr(cls, name, timed(f"{cls.__name__}.{name}", getattr(cls, name)))
    return totals


def _profile_runner(path: Path, warmup: int) -> None:
    """Patch the runner (before the fork, so the forked child has it) to profile itself from its
    `warmup`+1-th candidate load on, and write the stats to `path` when it is told to exit."""
    from kernelsmith.referee.proc import runner

    prof, loads = cProfile.Profile(), [0]
    load, serve = runner.RunnerSession.load, runner.serve

    def counted_load(self, msg):
        loads[0] += 1
        if loads[0] == warmup + 1:
            prof.enable()
        return load(self, msg)

    def profiled_serve(chan, own_userns=False):
        try:
            return serve(chan, own_userns)
        finally:
            prof.disable()
            prof.dump_stats(str(path))

    runner.RunnerSession.load, runner.serve = counted_load, profiled_serve


if __name__ == "__main__":
    sys.exit(main())
