"""The params search against the sweep's random order on a simulated objective, on the CPU.

    python dev/probes/search_vs_random.py --target lmdeploy --op multinomial_sampling \
        --checkout ~/.cache/kernelsmith/releases/lmdeploy-... --landscape sampler --seeds 0-9 \
        [--shapes MIX.json] [--evaluations 80] [--at 15,30,60,120]

The real loop (Search, its pipeline, the evaluator, staged timing, the params mutator or the sweep's
grid) runs against a referee that computes each launch config's per-shape speedup from a simulated
objective instead of timing it (tests/search/model_referee.py's staging over those numbers), and
charges each evaluation the seconds a GPU would take (SCREEN_S, FULL_S). Two objectives:

- `sampler`: a cost model of LMDeploy's multinomial_sampling (BLOCK_N, num_warps, num_stages; per
  shape its batch, vocabulary and score distribution): rows walk the sorted vocabulary in BLOCK_N
  steps until the draw lands (half of it for a flat distribution, the first block for a peaked
  one), latency-bound at small batches, bandwidth-bound at large ones; big blocks on few warps
  spill, a block whose pipeline stages outgrow shared memory fails to compile.
- `smooth:N`: a random smooth landscape over any space, seeded by N: per shape, a log speedup
  quadratic in each knob's log2 value around a per-shape optimum, plus seeded bumps. Different N
  give different optima, so constants are not fitted to one landscape.

Every timing draws each shape's speedup log-normally (SCREEN_SIGMA for a screen, FULL_SIGMA for a
full measurement), seeded by run seed, candidate and depth. `--shapes FILE` (a JSON list) replaces
the harness's GPU shapes (another shape mix of the same kernel). For each seed it runs `optimize
--mutator params` and `sweep`, both over `--evaluations` proposals, and prints, at each of `--at`
simulated GPU-seconds, the best measured win each had reached (search.compare's win curve: full,
not noisy, geomean CI above 1.0, no shape lost) and the medians over seeds; `wins` counts the seeds
where the search was ahead, `ties` where equal.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "search")]

import model_referee  # noqa: E402 (tests/search: the referee stand-in whose staging this reuses)

from kernelsmith.launch.tunables import discover  # noqa: E402
from kernelsmith.referee.verdict import Verdict  # noqa: E402
from kernelsmith.search.archive import Archive  # noqa: E402
from kernelsmith.search.compare import win_curve  # noqa: E402
from kernelsmith.search.efficiency import candidate_rows  # noqa: E402
from kernelsmith.search.loop import optimize  # noqa: E402
from kernelsmith.search.mutators.space import ConfigSpace, Record  # noqa: E402
from kernelsmith.search.run_config import SearchConfig  # noqa: E402

SCREEN_S = 0.8  # simulated GPU-seconds of a screen (load, correctness, screen timing)
FULL_S = 1.6  # what the full measurement adds
SCREEN_SIGMA = 0.03  # log-normal spread of one shape's screened speedup
FULL_SIGMA = 0.005


def _kind(key: str) -> str:
    """A knob's role from its key (BLOCK_N, num_warps, num_stages of the sampler's launcher)."""
    name = key.split(":")[-1].split(".")[-1]
    return "warps" if "warps" in name else "stages" if "stages" in name else "block"


def sampler_ms(shape: dict, block: int, warps: int, stages: int) -> float | None:
    """Microseconds of one call of the sampler's kernel in the cost model; None: fails to compile."""
    batch, vocab, dist = shape["batch"], shape["vocab"], shape.get("dist", "flat")
    size = 2 if shape.get("dtype") in ("float16", "bfloat16") else 4
    if stages * block * size > 228 * 1024:
        return None  # the pipelined loads outgrow shared memory
    walked = {"flat": 0.5 * vocab, "peaked": block, "mixed": 0.25 * vocab + block / 2}[dist]
    iters = math.ceil(vocab / block)
    active = min(iters, max(1, math.ceil(walked / block)))
    per_thread = block / (32 * warps)
    scan = 0.004 * per_thread * math.log2(block) + 0.05 * math.log2(32 * warps)
    if per_thread > 128:
        scan *= (per_thread / 128) ** 0.7  # registers spill
    latency = 0.8 * {1: 1.0, 2: 0.75}.get(stages, 0.65)
    program = active * (latency + scan) + (iters - active) * 0.01
    per_sm = min(32, 64 // warps)
    waves = math.ceil(batch / (132 * per_sm))
    bound = batch * active * block * (size + 8) / 3.0e6  # scores and indices read, microseconds
    return 3.0 + max(waves * program, 1.1 * bound)


def sampler_point(shapes: list[dict], values: dict, base: dict) -> dict:
    """Per-shape speedups of a config of the sampler's space over the base's (or its rejection)."""
    def knobs(v):
        got = {_kind(k): x for k, x in v.items()}
        return got.get("block", 128), got.get("warps", 1), got.get("stages", 3)

    speeds = []
    for s in shapes:
        cand, ref = sampler_ms(s, *knobs(values)), sampler_ms(s, *knobs(base))
        if cand is None:
            return {"reason": "compile_error"}
        speeds.append(ref / cand)
    return {"speeds": speeds}


def smooth_point(shapes: list[dict], values: dict, base: dict, seed: int) -> dict:
    """Per-shape speedups of a random smooth landscape (seeded): a hill in the knobs' log2 values,
    up to about 8x at a per-shape optimum (shapes apart move it), with seeded ripples; the base is 1.0."""
    def log_speed(v: dict, i: int) -> float:
        rng = random.Random(f"smooth/{seed}")
        spread, ripple = 0.0, 0.0
        shift = i / max(1, len(shapes) - 1) - 0.5  # where the shape lies in the mix
        for k in sorted(v):
            x = math.log2(max(1, v[k]))
            center = rng.uniform(0, 12) + rng.gauss(0, 3.0) * shift
            spread += ((x - center) / rng.uniform(1.5, 4.0)) ** 2
            ripple += 0.08 * math.sin(x * rng.uniform(1.0, 3.0) + rng.uniform(0, 6.3))
        return 2.1 * math.exp(-spread / 2) + ripple

    return {"speeds": [math.exp(log_speed(values, i) - log_speed(base, i)) for i in range(len(shapes))]}


class SimulatedReferee(model_referee.ModelReferee):
    """The model referee's staging over a simulated objective (see module docstring)."""

    FULL_S = FULL_S
    LANDSCAPE = "sampler"
    NOISE = "0"
    ARCHIVE: Path | None = None  # the run's: a table's rows are read from its params
    space: ConfigSpace | None = None

    def sizes(self) -> list[int]:
        return list(range(1, len(self.shapes) + 1))

    def evaluate(self, code, *, timing="full", **kw):
        cid = kw.get("candidate_id", 0)
        if timing == "staged":
            return self._staged(code, cid, kw.get("seed"), False, kw.get("contender_at"),
                                kw.get("contender_shapes"), promote_at=kw.get("promote_at"))
        code = code if code is not None else self.task.base_code
        point = self.point_of(code, cid)
        if "reason" in point:
            v = Verdict.rejected(point["reason"], "from the simulated objective")
            v.eval_s = SCREEN_S
            return v.finalize()
        sigma = FULL_SIGMA if timing == "full" else SCREEN_SIGMA
        rng = random.Random(f"{self.NOISE}/{cid}/{timing}/{kw.get('seed')}")
        speeds = [sp * math.exp(rng.gauss(0.0, sigma)) for sp in point["speeds"]]
        if code == self.task.base_code:
            speeds = [1.0] * len(speeds)
        shapes = [{"shape": s, "max_abs_err": 0.0, "baseline_ms": 1.0, "candidate_ms": 1.0 / sp,
                   "speedup": sp, "ci95": [sp * math.exp(-1.96 * sigma), sp * math.exp(1.96 * sigma)],
                   "aa_ratio": 1.001 if timing == "full" else None, "device_ms": 1.0 / sp, "host_ms": None,
                   "bitwise_identical": True, "pct_roofline": None,
                   "samples_ms": {"base": [1.0 * math.exp(sigma * d) for d in (-1, 0, 1)],
                                  "candidate": [math.exp(sigma * d) / sp for d in (-1, 0, 1)]}}
                  for s, sp in zip(self.shapes, speeds, strict=True)]
        timed = timing != "none"
        v = Verdict(accepted=True, correct=True, device={"name": "simulated", "driver": "0", "torch": "x",
                                                         "triton": "y"},
                    shapes=shapes, geomean_speedup=statistics.geometric_mean(speeds) if timed else None,
                    timed=timed, timing={"metric": "device", "aa_ratio": 1.001 if timing == "full" else None,
                                         "noisy": False if timing == "full" else None})
        v.eval_s = {"screen": SCREEN_S, "rescreen": SCREEN_S / 2}.get(timing, 0.0)
        return v.finalize()

    def point_of(self, code: str, cid: int) -> dict:
        """The objective's point for a candidate; a per-shape table's, its rows' points shape by shape."""
        if self.space is None:
            self.space = ConfigSpace(self.task, device="cuda")
        if "_KS_CONFIGS" not in code:
            return self.point([{t.key: t.base for t in discover(code)}] * len(self.shapes))
        params = Archive(self.ARCHIVE).get(cid).params
        return self.point(self.space.shape_configs(Record(cid, params, params["values"], "running")))

    def point(self, configs: list[dict]) -> dict:
        """Per shape, the speedup of the config serving it (a rejection if any is rejected)."""
        speeds = []
        for i, values in enumerate(configs):
            p = _point(self.LANDSCAPE, json.dumps(self.shapes, sort_keys=True),
                       json.dumps(values, sort_keys=True), json.dumps(self.space.base_values, sort_keys=True))
            if "reason" in p:
                return p
            speeds.append(p["speeds"][i])
        return {"speeds": speeds}


@functools.lru_cache(maxsize=100_000)
def _point(landscape: str, shapes: str, values: str, base: str) -> dict:
    shapes_, values_, base_ = json.loads(shapes), json.loads(values), json.loads(base)
    if landscape == "sampler":
        return sampler_point(shapes_, values_, base_)
    return smooth_point(shapes_, values_, base_, int(landscape.split(":")[1]))


def shape_mix(args, shapes: list[dict], workdir: Path) -> Path:
    """A copy of the targets folder whose harness for `args.op` lists `shapes` as its GPU shapes."""
    import ast
    import shutil

    import yaml

    src = Path(args.targets or ROOT / "targets")
    dst = workdir / "targets"
    shutil.copytree(src, dst)
    entry = next(o for o in yaml.safe_load((dst / f"{args.target}.yaml").read_text())["operators"]
                 if o["name"] == args.op)
    harness = dst / entry["harness"]
    text = harness.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", None) == "SHAPES")
    lines = text.splitlines(keepends=True)
    lines[node.lineno - 1:node.end_lineno] = [f"SHAPES = {shapes!r}\n"]
    harness.write_text("".join(lines))
    return dst


def run(args, seed: int, sweep: bool, workdir: Path) -> list[tuple[float, float]]:
    """One run's win curve [(simulated GPU-s, best measured win)]."""
    name = f"{'sweep' if sweep else 'search'}{seed}"
    cfg = SearchConfig(target=args.target, op=args.op, checkout=args.checkout, targets=args.targets,
                       out=str(workdir / name), budget=args.evaluations,
                       mutator="grid" if sweep else "params",
                       device="cuda", gpus=[0], progress=False, precompile=False, seed=seed,
                       stagnation=10**6 if not sweep else None, referee_factory=SimulatedReferee,
                       argv=["kernelsmith", "sweep" if sweep else "optimize"],
                       command="sweep" if sweep else "optimize")
    SimulatedReferee.ARCHIVE = workdir / name / "archive.sqlite"
    SimulatedReferee.NOISE = str(seed)
    optimize(cfg)
    return win_curve(candidate_rows(workdir / name), seed)


def best_at(points: list[tuple[float, float]], t: float) -> float:
    return max([b for s, b in points if s <= t] + [1.0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--op", required=True)
    ap.add_argument("--checkout", default=None)
    ap.add_argument("--targets", default=None)
    ap.add_argument("--landscape", default="sampler", help="sampler | smooth:N")
    ap.add_argument("--shapes", default=None, help="a JSON file: the GPU shapes to simulate instead")
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--evaluations", type=int, default=80)
    ap.add_argument("--at", default="15,30,45,60,90")
    ap.add_argument("--promote-margin", type=float, default=None,
                    help="search/rules.py PROMOTE_MARGIN for this probe (inf: no promotion)")
    args = ap.parse_args()
    if args.promote_margin is not None:
        import kernelsmith.search.evaluator as evaluator

        evaluator.PROMOTE_MARGIN = args.promote_margin
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    at = [float(x) for x in args.at.split(",")]

    import torch

    import kernelsmith.referee.backend as backend

    backend.cuda_available = lambda: True  # the referee is the simulation: nothing runs on a GPU
    torch.cuda.device_count = lambda: 1
    SimulatedReferee.LANDSCAPE = args.landscape
    table = {t: ([], []) for t in at}
    with tempfile.TemporaryDirectory() as tmp:
        if args.shapes:
            args.targets = str(shape_mix(args, json.loads(Path(args.shapes).read_text()), Path(tmp)))
        for seed in seeds:
            search, sweep = run(args, seed, False, Path(tmp)), run(args, seed, True, Path(tmp))
            row = []
            for t in at:
                a, b = best_at(search, t), best_at(sweep, t)
                table[t][0].append(a)
                table[t][1].append(b)
                row.append(f"{t:g}s {a:.3f}/{b:.3f}")
            print(f"seed {seed} (search/sweep): " + ", ".join(row), flush=True)
    print(f"landscape {args.landscape}, {args.op}: best measured win at simulated GPU-seconds, "
          f"medians over {len(seeds)} seeds (search / sweep's random order)")
    for t, (a, b) in table.items():
        wins = sum(x > y for x, y in zip(a, b, strict=True))
        ties = sum(x == y for x, y in zip(a, b, strict=True))
        print(f"  {t:>5g} s: {statistics.median(a):.3f} / {statistics.median(b):.3f}  "
              f"(search ahead at {wins}, even at {ties} of {len(a)} seeds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
