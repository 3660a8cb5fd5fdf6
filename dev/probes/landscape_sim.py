"""Replay a measured sweep as a landscape and run the search against it on the CPU, many seeds.

    python dev/probes/landscape_sim.py --target lmdeploy --op fused_single_group_router \
        --archive RUN/archive.sqlite [--archive ...] --seeds 0-19 --budget 40 [--mutator params|grid] \
        [--noise] [--no-rescreen]

Every launch config a sweep (or any run) judged on the H200 is a point of the landscape: its
verdict (a rejection, or per-shape speedups, untimed shapes filled with the config's geomean) and
its referee seconds. The real search loop (Search, its pipeline, staging and mutators) then runs
with a referee that looks configs up instead of timing them, so a change to how the params mutator
proposes can be compared over twenty seeds in minutes, without the device. It prints, per seed,
the evaluations and the landscape's referee seconds until the first candidate measured in full (as
search.compare counts) whose geomean holds 95% of the landscape's best gain, and their medians. A
config takes the point of one the landscape holds that launches the same on every listed shape (a
sweep judges one config per launch set); a per-shape table, its rows' points shape by shape. One
the landscape lacks counts as rejected and is reported: measure a complete sweep. `--pipeline`
defaults to what a new run would choose (resolve.py). With `--noise` every timing (a screen, a full
measurement) draws each shape's speedup log-normally around its point, as wide as the 95% CI the run
recorded there, seeded by the run's seed and the candidate: on a gain of a few percent the GPU's
screens decide by noise.
A screen draws at least as widely as the landscape's screen-only points (a config measured in full
recorded its full measurement's narrower CI); a second screen (referee/staging.near_miss) costs
the point's recorded screen seconds, and `--no-rescreen` replays without second screens.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
from pathlib import Path
from statistics import geometric_mean

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "search")]

import model_referee  # noqa: E402 (tests/search: the referee stand-in whose staging this reuses)

from kernelsmith.launch.tunables import discover  # noqa: E402
from kernelsmith.referee.timing import staged as staging  # noqa: E402
from kernelsmith.referee.verdict import Verdict  # noqa: E402
from kernelsmith.search.archive import Archive  # noqa: E402
from kernelsmith.search.compare import sweep_reference  # noqa: E402
from kernelsmith.search.efficiency import SWEEP_SHARE, gain_target  # noqa: E402
from kernelsmith.search.loop import optimize  # noqa: E402
from kernelsmith.search.mutators.space import ConfigSpace, Record  # noqa: E402
from kernelsmith.search.run_config import SearchConfig, SearchHooks  # noqa: E402


def load_landscape(archives: list[str]) -> dict[str, dict]:
    """{config json: {"reason" | "speeds", "eval_s"}} from the single-config rows of run archives."""
    land: dict[str, dict] = {}
    for path in archives:
        with Archive(path) as archive:
            rows = archive.all()
        for c in rows:
            values = (c.params or {}).get("values")
            if c.verdict is None or not values or c.params.get("table"):
                continue
            v = c.verdict
            point = {"eval_s": float(v.eval_s or 0.0)}
            if not v.accepted:
                point["reason"] = v.reason or "rejected"
            else:
                speeds = [s.get("speedup") for s in v.shapes or []]
                known = [s for s in speeds if s]
                if not known:
                    continue
                g = geometric_mean(known)
                point["speeds"] = [s or g for s in speeds]
                point["geomean"] = c.speedup or g
                point["sigma"] = [_sigma(s.get("ci95")) for s in v.shapes or []]
                point["depth"] = c.depth
                phases = (v.details or {}).get("phase_s") or {}
                point["screen_s"] = sum(phases.get(k) or 0.0 for k in ("screen_subset_timing",
                                                                        "screen_timing"))
            key = json.dumps(values, sort_keys=True)
            if key not in land or "geomean" in point and c.speedup:
                land[key] = point  # a full measurement outranks a screen of the same config
    return land


def sweep_reference_of(archives: list[str]) -> float | None:
    """search.compare's reference for each sweep run among the archives' (its result.json: the
    sweep's measured per-shape table or best single config), the highest; None for other runs."""
    found = []
    for path in archives:
        run = Path(path).parent
        try:
            sweep = json.loads((run / "result.json").read_text()).get("sweep")
        except (OSError, ValueError):
            continue
        if sweep:
            found.append(sweep_reference(run, sweep)[0])
    return max((r for r in found if r), default=None)


def screen_sigma(land: dict[str, dict]) -> list[float]:
    """Per shape, the median sigma of the landscape's screen-only points: a config measured in full
    recorded its full measurement's CI, far narrower than what one of its screens would draw."""
    sig = [p["sigma"] for p in land.values() if p.get("depth") == "screen" and p.get("sigma")]
    if not sig:
        return []
    return [statistics.median(s[i] for s in sig if len(s) > i) for i in range(max(map(len, sig)))]


def _sigma(ci) -> float:
    """The standard deviation of a log speedup whose 95% CI is `ci` (0.0 without one)."""
    if not ci or len(ci) < 2 or not ci[0] or not ci[1] or ci[0] <= 0:
        return 0.0
    return max(0.0, math.log(ci[1] / ci[0]) / (2 * 1.96))


class LandscapeReferee(model_referee.ModelReferee):
    """The model referee's staging over a measured landscape instead of a cost model."""

    FULL_S = 0.0  # a point's seconds are what the run that judged it spent, full measurement or not
    LAND: dict[str, dict] = {}
    MISSES: list[str] = []
    SCREEN_SIGMA: list[float] = []  # per shape (screen_sigma)
    NOISE: str | None = None  # with --noise: the run's seed, so that each timing draws anew
    ARCHIVE: Path | None = None  # the run's: a table's rows are read from its params
    space: ConfigSpace | None = None
    _base_key: str | None = None
    _twins: dict | None = None

    def sizes(self) -> list[int]:
        """Shapes ordered as listed (the harness's order is by size for the targets measured)."""
        return list(range(1, len(self.shapes) + 1))

    def evaluate(self, code, *, timing="full", **kw):
        if timing == "staged":
            return self._staged(code, kw.get("candidate_id", 0), kw.get("seed"), False,
                                kw.get("contender_at"), kw.get("contender_shapes"),
                                promote_at=kw.get("promote_at"))
        code = code if code is not None else self.task.base_code
        point = self.point_of(code, kw.get("candidate_id", 0))
        if point is None:
            return Verdict.rejected("compile_error", "not in the landscape").finalize()
        if "reason" in point:
            v = Verdict.rejected(point["reason"], "from the landscape")
            v.eval_s = point["eval_s"]
            return v.finalize()
        speeds = point["speeds"]
        sig = point.get("sigma") or [0.0] * len(speeds)
        if timing != "full":  # a screen draws as widely as the landscape's screens
            sig = [max(x, y) for x, y in itertools.zip_longest(sig, self.SCREEN_SIGMA, fillvalue=0.0)]
        if self.NOISE is not None and timing != "none":  # each timing its own draw, as on the GPU
            rng = random.Random(f"{self.NOISE}/{kw.get('candidate_id', 0)}/{timing}")
            speeds = [sp * math.exp(rng.gauss(0.0, sd)) for sp, sd in zip(speeds, sig, strict=False)]
        shapes = []
        for s, sp, sd in zip(self.shapes, speeds, sig, strict=False):
            shapes.append({"shape": s, "max_abs_err": 0.0, "baseline_ms": 1.0, "candidate_ms": 1.0 / sp,
                           "speedup": sp, "ci95": [sp * math.exp(-1.96 * sd), sp * math.exp(1.96 * sd)],
                           "aa_ratio": 1.001 if timing == "full" else None, "device_ms": 1.0 / sp,
                           "host_ms": None, "bitwise_identical": True, "pct_roofline": None,
                           "samples_ms": {"base": [0.99, 1.0, 1.01], "candidate": [1 / sp] * 3}})
        timed = timing != "none"
        g = geometric_mean(speeds)
        v = Verdict(accepted=True, correct=True,
                    device={"name": "landscape", "driver": "0", "torch": "x", "triton": "y"},
                    shapes=shapes, geomean_speedup=g if timed else None, timed=timed,
                    timing={"metric": "device", "aa_ratio": 1.001 if timing == "full" else None,
                            "noisy": False if timing == "full" else None})
        # A point's seconds are its whole evaluation; a second screen costs that point's screen timing.
        v.eval_s = {"screen": point["eval_s"], "rescreen": point.get("screen_s", 0.0)}.get(timing, 0.0)
        return v.finalize()

    def point_of(self, code: str, cid: int) -> dict | None:
        """The landscape's point for a candidate: a per-shape table's from its rows' points, shape by
        shape (the table's params read from the run's archive); None (noted) where one is missing."""
        if "_KS_CONFIGS" not in code:
            return self.point(json.dumps({t.key: t.base for t in discover(code)}, sort_keys=True))
        if self.space is None:
            self.space = ConfigSpace(self.task, device="cuda")
        params = Archive(self.ARCHIVE).get(cid).params
        configs = self.space.shape_configs(Record(cid, params, params["values"], "running"))
        points = [self.point(json.dumps(c, sort_keys=True)) for c in configs]
        if any(p is None for p in points):
            return None
        failed = next((p for p in points if "reason" in p), None)
        if failed is not None:
            return failed
        return {"speeds": [p["speeds"][i] for i, p in enumerate(points)],
                "sigma": [(p.get("sigma") or [0.0] * len(points))[i] for i, p in enumerate(points)],
                "eval_s": statistics.fmean(p["eval_s"] for p in points)}

    def point(self, key: str) -> dict | None:
        """One config's point (the base's: 1.0x on every shape), or that of a config the landscape
        holds that launches the same on every listed shape (twins.py: a sweep judged one config per
        launch set, in its own order); None, noted, when it has neither."""
        sig = None if key == self.base_key() else self._signature(key)
        if key == self.base_key() or sig is not None and sig == self._signature(self.base_key()):
            return {"speeds": [1.0] * len(self.shapes), "eval_s": 2.0}  # the base, or a twin of it
        twin = key if key in self.LAND else self.twin_keys().get(sig)
        if twin is None:
            self.MISSES.append(key)
        return self.LAND.get(twin)

    def _signature(self, key: str):
        if self.space is None:
            self.space = ConfigSpace(self.task, device="cuda")
        return self.space.twins.signature({"values": json.loads(key)})

    def twin_keys(self) -> dict:
        """{launch signature: landscape key} (built once per run)."""
        if self._twins is None:
            self._twins = {}
            for key in self.LAND:
                sig = self._signature(key)
                if sig is not None:
                    self._twins.setdefault(sig, key)
        return self._twins

    def base_key(self) -> str:
        """The base's config as the landscape keys it (found once)."""
        if self._base_key is None:
            values = {t.key: t.base for t in discover(self.task.base_code)}
            self._base_key = json.dumps(values, sort_keys=True)
        return self._base_key


def run_seed(args, seed: int, target_speedup: float, workdir: Path) -> tuple[int | None, float | None, int]:
    """(evaluations to the target or None, landscape referee seconds to it, evaluations in all)."""
    cfg = SearchConfig(target=args.target, op=args.op, checkout=args.checkout, out=str(workdir / f"s{seed}"),
                       budget=args.budget, mutator=args.mutator, device="cuda", gpus=[0], progress=False,
                       seed=seed, pipeline=args.pipeline, stagnation=10**6,
                       command="sweep" if args.mutator == "grid" else "optimize")
    hooks = SearchHooks(referee_factory=LandscapeReferee, precompile=False, argv=["kernelsmith", "optimize"])
    LandscapeReferee.ARCHIVE = workdir / f"s{seed}" / "archive.sqlite"
    LandscapeReferee.NOISE = str(seed) if args.noise else None
    result = optimize(cfg, hooks)
    rows = [c for c in Archive(Path(result.run_dir) / "archive.sqlite").all() if c.mutator != "base"]
    spent = 0.0
    for n, c in enumerate((c for c in rows if c.verdict is not None), start=1):
        spent += c.verdict.eval_s  # the landscape's seconds for that config
        if c.accepted and c.depth == "full" and (c.speedup or 0.0) >= target_speedup:
            return n, spent, len(rows)
    return None, None, len(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True)
    ap.add_argument("--op", required=True)
    ap.add_argument("--checkout", default=None)
    ap.add_argument("--archive", action="append", required=True)
    ap.add_argument("--seeds", default="0-9")
    ap.add_argument("--budget", type=int, default=40)
    ap.add_argument("--pipeline", type=int, default=None, help="generations in flight (default: a run's own)")
    ap.add_argument("--mutator", default="params")
    ap.add_argument("--no-rescreen", action="store_true", help="no second screen of a near miss")
    ap.add_argument("--noise", action="store_true",
                    help="each timing draws every shape's speedup from its recorded 95%% CI (log-normal)")
    args = ap.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)

    import kernelsmith.referee.backend as backend

    backend.cuda_available = lambda: True  # the referee is the landscape: nothing runs on a GPU
    torch.cuda.device_count = lambda: 1
    staging.RESCREEN = not args.no_rescreen
    LandscapeReferee.LAND = load_landscape(args.archive)
    LandscapeReferee.SCREEN_SIGMA = screen_sigma(LandscapeReferee.LAND)
    best = max(p.get("geomean", 0.0) for p in LandscapeReferee.LAND.values())
    reference = sweep_reference_of(args.archive)
    if reference is not None and reference > best:  # as search.compare: e.g. the sweep's measured table
        print(f"reference: search.compare's for the sweep, {reference:.3f}x (best single {best:.3f}x)")
        best = reference
    target = gain_target(best, SWEEP_SHARE)
    total_s = sum(p["eval_s"] for p in LandscapeReferee.LAND.values())
    print(f"landscape: {len(LandscapeReferee.LAND)} configs, best {best:.3f}x, target {target:.3f}x, "
          f"{total_s:.1f} referee-s for all of them")
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            n, spent, judged = run_seed(args, seed, target, Path(tmp))
            found.append((n, spent))
            said = f"{n} evaluations, {spent:.1f} referee-s" if n else f"never in {judged}"
            print(f"seed {seed}: {said}", flush=True)
    hits = [f for f in found if f[0] is not None]
    never = len(found) - len(hits)
    big = 10**9  # a miss ranks after every hit in the medians
    med_n = statistics.median([f[0] or big for f in found])
    med_s = statistics.median([f[1] if f[1] is not None else big for f in found])
    print(f"median to target: {med_n if med_n < big else 'never'} evaluations, "
          f"{f'{med_s:.1f}' if med_s < big else 'never'} referee-s; missed at {never} of {len(found)} seeds")
    if LandscapeReferee.MISSES:
        print(f"{len(LandscapeReferee.MISSES)} proposals outside the landscape (judged rejected), e.g. "
              f"{LandscapeReferee.MISSES[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
