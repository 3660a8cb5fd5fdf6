"""Re-time run winners against the base, independently of the referee and the search.

    python3 dev/gpu/retime.py TARGET OP --checkout DIR [--run NAME=RUN_DIR ...] [--candidate NAME=FILE ...]
                              [--seed N] [--seconds S] [--json OUT] [--device cuda|interpret]

Loads the operator's kernel file (the base) and each run's winner/<file> (or a candidate file) as
sibling modules of the checkout's package (kernelsmith's loader: no timing in it), makes inputs with
the harness's make_inputs on seeds no run used (`--seed`, default 777000001, plus the shape's
index), checks every kernel's output against the harness's reference (its tolerance; exact for
integers), then times them with plain torch.cuda events: per repetition, in a shuffled order, each
kernel on its own copy of the inputs after a 256 MiB write that evicts L2 and a ~100 us GPU spin
(so the launch is queued before the start event and host overhead is not timed). Repetitions run
until `--seconds` per shape (at least 50, at most 2000). Per shape: the median of each kernel's
times, and base median / kernel median; per kernel: the geomean of those over shapes.

Nothing here imports kernelsmith.referee's timing or kernelsmith.search. It runs the kernels in this
process, without the sandbox: it is for winners of runs made here with kernelsmith's own mutators.
`--device interpret` (CPU, Triton interpreter, CPU_SHAPES, perf_counter) only exercises the
script: interpreter times mean nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

FLUSH_BYTES = 256 << 20
SPIN_CYCLES = 200_000  # ~100 us at H100/H200 clocks
MIN_REPS, MAX_REPS = 50, 2000


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="target yaml path or name under targets/")
    p.add_argument("op", help="operator, OP@VARIANT for a harness variant")
    p.add_argument("--checkout", required=True)
    p.add_argument("--run", action="append", default=[], metavar="NAME=RUN_DIR",
                   help="time RUN_DIR's winner (skipped, saying so, when the run has none)")
    p.add_argument("--candidate", action="append", default=[], metavar="NAME=FILE",
                   help="time this file in place of the operator's file")
    p.add_argument("--seed", type=int, default=777000001)
    p.add_argument("--seconds", type=float, default=1.0, help="timing seconds per shape (all kernels)")
    p.add_argument("--json", type=Path, help="write the results here as well")
    p.add_argument("--device", choices=("cuda", "interpret"), default="cuda")
    return p.parse_args(argv)


def kernels(args, op, root, stubs) -> tuple[dict, dict]:
    """name -> entry function (the base first), and name -> why it is not timed."""
    from kernelsmith.loader import load_operator_module

    loaded = {"base": getattr(load_operator_module(root, op.file, tag="rt_base", stubs=stubs), op.entry)}
    skipped = {}
    sources = []
    for spec in args.run:
        name, _, run_dir = spec.partition("=")
        winner = Path(run_dir) / "winner" / Path(op.file).name
        if not winner.is_file():
            skipped[name] = f"no winner in {run_dir}"
            continue
        sources.append((name, winner))
    for spec in args.candidate:
        name, _, path = spec.partition("=")
        sources.append((name, Path(path)))
    scratch = Path(tempfile.mkdtemp(prefix="retime-"))
    for i, (name, path) in enumerate(sources):
        code = path.read_text()
        # Triton reads a kernel's source through inspect: each candidate gets a file of its own.
        module = load_operator_module(root, op.file, code=code, tag=f"rt{i}", stubs=stubs,
                                      source_path=scratch / str(i) / Path(op.file).name)
        loaded[name] = getattr(module, op.entry)
    return loaded, skipped


def results_of(harness, inputs, returned) -> tuple:
    """What the kernel produced: the OUTPUTS it wrote, else what it returned, as a tuple."""
    if harness.outputs:
        return tuple(inputs[n] for n in harness.outputs)
    return returned if isinstance(returned, tuple) else (returned,)


def mismatch(harness, got: tuple, want) -> str | None:
    """Why `got` is not the reference's answer (None: it is)."""
    import torch

    want = want if isinstance(want, tuple) else (want,)
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference has {len(want)}"
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.shape != w.shape:
            return f"output {i}: shape {tuple(g.shape)}, reference {tuple(w.shape)}"
        if g.dtype.is_floating_point:
            atol, rtol = harness.tolerance_for(str(g.dtype).replace("torch.", ""))
            gf, wf = g.double().cpu(), w.double().cpu()
            bad = ~((gf - wf).abs() <= atol + rtol * wf.abs()) & ~(gf.isnan() & wf.isnan())
            if bad.any():
                return f"output {i}: {int(bad.sum())} of {bad.numel()} off (atol {atol}, rtol {rtol})"
        elif not torch.equal(g.cpu(), w.cpu()):
            return f"output {i}: {int((g.cpu() != w.cpu()).sum())} elements differ"
    return None


def time_shape(fns: dict, inputs: dict, seconds: float, cuda: bool, rng: random.Random) -> dict[str, list]:
    """Milliseconds per call of each kernel, repetitions interleaved in a shuffled order."""
    import torch

    names = list(fns)
    times = {n: [] for n in names}
    if not cuda:
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(times[names[0]]) < 3:
            rng.shuffle(names)
            for n in names:
                t0 = time.perf_counter()
                fns[n](**inputs[n])
                times[n].append((time.perf_counter() - t0) * 1e3)
        return times
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    events = []
    t0, reps = time.perf_counter(), 0
    while reps < MIN_REPS or (reps < MAX_REPS and time.perf_counter() - t0 < seconds):
        rng.shuffle(names)
        for n in names:
            flush.zero_()
            torch.cuda._sleep(SPIN_CYCLES)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[n](**inputs[n])
            end.record()
            events.append((n, start, end))
        reps += 1
        if reps % 25 == 0:  # bounded queue: the wall clock above means something
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    for n, start, end in events:
        times[n].append(start.elapsed_time(end))
    return times


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.device == "interpret":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from kernelsmith.harness.model import load_harness
    from kernelsmith.onboard.config import load_target, resolve_target

    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("retime: no CUDA device", file=sys.stderr)
        return 2
    if not cuda:
        from kernelsmith.referee.backend.interpret import InterpretBackend

        InterpretBackend().init_context()  # list grids, fp8 casts: what the kernels need on CPU
    target = load_target(resolve_target(args.target))
    op = target.operator(args.op)
    harness = load_harness(op.harness, op.variant)
    fns, skipped = kernels(args, op, Path(args.checkout).resolve(), target.stubs)
    device = "cuda" if cuda else "cpu"
    shapes = harness.shapes_for("cuda" if cuda else "interpret")
    rng = random.Random(args.seed)
    out = {"op": args.op, "device": torch.cuda.get_device_name() if cuda else "cpu (Triton interpreter)",
           "seed": args.seed, "skipped": skipped, "shapes": [], "geomean": {}, "wrong": {}}
    for i, shape in enumerate(shapes):
        seed = args.seed + i
        inputs = {n: harness.make_inputs(shape, device, seed) for n in fns}  # the same inputs, a copy each
        want = harness.reference(**harness.make_inputs(shape, device, seed))
        for n, fn in list(fns.items()):
            try:
                problem = mismatch(harness, results_of(harness, inputs[n], fn(**inputs[n])), want)
            except Exception as e:  # a kernel that fails is reported and timed no more
                problem = f"raised {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                if n == "base":
                    raise
                del fns[n]
            if problem:
                out["wrong"].setdefault(n, []).append({"shape": shape, "problem": problem})
        del want
        times = time_shape(fns, inputs, args.seconds, cuda, rng)
        del inputs
        med = {n: statistics.median(t) for n, t in times.items()}
        row = {"shape": shape, "reps": len(times["base"]), "median_ms": med,
               "speedup": {n: med["base"] / med[n] for n in fns if n != "base"}}
        out["shapes"].append(row)
        print(f"  {shape}: base {med['base']:.4f} ms, " + ", ".join(
            f"{n} {row['speedup'][n]:.3f}x" for n in row["speedup"]) + f" ({row['reps']} reps)", flush=True)
        if cuda:
            torch.cuda.empty_cache()
    for n in fns:
        if n != "base":
            out["geomean"][n] = math.exp(statistics.fmean(math.log(r["speedup"][n]) for r in out["shapes"]))
    for n in out["wrong"]:
        out["geomean"].setdefault(n, None)
    print(f"retime {args.op} on {out['device']}: " + ", ".join(
        (f"{n} {g:.3f}x" if g is not None else f"{n} failed")
        + (" (WRONG on some shape)" if n in out["wrong"] else "") for n, g in out["geomean"].items())
        + "".join(f"; {n}: {why}" for n, why in skipped.items()))
    for n, problems in out["wrong"].items():
        for p in problems:
            print(f"  WRONG {n} on {p['shape']}: {p['problem']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))
    return 1 if out["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main())
