"""A stand-in for the referee in loop tests on machines without a GPU.

It times nothing: `evaluate` reads the launch configuration of a silu_and_mul candidate (BLOCK and
num_warps, or the per-size table) and returns a Verdict whose per-shape milliseconds come from a
fixed cost model with shape-dependent optima far from the base (BLOCK 64, num_warps 1), the way
real configs behave. BLOCK above 8192 "fails to compile". Every call is logged for assertions.
"""

from __future__ import annotations

import ast
import functools
import math

import torch

from kernelsmith.harness.facts import shape_key
from kernelsmith.launch.tunables import discover
from kernelsmith.pysource import parse
from kernelsmith.referee.timing.ab import conclude
from kernelsmith.referee.timing.staged import run_staged
from kernelsmith.referee.verdict import Verdict

CALLS: list[dict] = []
SMS = 132


@functools.lru_cache(maxsize=512)
def _parsed(code: str) -> ast.Module:
    # Evaluator threads parse candidates while the search loop parses proposals: kernelsmith's
    # parse takes the process-wide lock that CPython 3.11 needs (pysource.py).
    return parse(code)


@functools.lru_cache(maxsize=512)
def config_of(code: str) -> list[tuple[int | None | tuple, dict]]:
    """[(limit, {"BLOCK", "num_warps"})]: one row for a plain config, several for a table (a
    two-level table's limit is a pair: first-level and second-level size limits)."""
    tree = _parsed(code)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_KS_CONFIGS":
            return [
                (limit, {"BLOCK": cfg["BLOCK"], "num_warps": cfg["num_warps"]})
                for limit, cfg in ast.literal_eval(node.value)
            ]
    found = discover(code)
    vals = {t.key.split(":")[-1].split(".")[-1]: t.base for t in found}
    return [(None, {"BLOCK": vals.get("BLOCK", 64), "num_warps": vals.get("num_warps", 1)})]


def table_size(code: str, tokens: int, d: int) -> tuple[int, ...]:
    """The sizes a rendered table looks up for silu_and_mul(out, x) at one shape: its key expressions
    (`x.shape[-1]`, then `x.numel() // x.shape[-1]`) evaluated on meta tensors, or the largest
    tensor's element count."""
    x = torch.empty(tokens, 2 * d, device="meta")
    out = torch.empty(tokens, d, device="meta")
    for node in ast.walk(_parsed(code)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "_ks_config" and node.args:
            if not any(isinstance(a, ast.Name) for a in node.args):
                exprs = [compile(ast.Expression(a), "<key>", "eval") for a in node.args]
                return tuple(int(eval(e, {}, {"x": x, "out": out})) for e in exprs)
    return (x.numel(),)


def serves(limit, sizes: tuple[int, ...]) -> bool:
    """Whether a table row's limit (one or a pair; None: any size) admits the sizes."""
    limits = limit if isinstance(limit, tuple) else (limit,)
    return all(lim is None or s <= lim for lim, s in zip(limits, sizes, strict=False))


def model_ms(tokens: int, d: int, block: int, warps: int) -> float:
    """Milliseconds of one call in the cost model."""
    programs = tokens * math.ceil(d / block)
    threads = 32 * warps
    per_thread = block / threads
    waste = 1 / per_thread if per_thread < 1 else 1.0  # idle threads
    pressure = (per_thread / 16) ** 0.5 if per_thread > 16 else 1.0  # registers spill
    util = min(1.0, programs * warps / (SMS * 24))  # enough warps in flight to hide latency
    mem_ms = 6 * tokens * d / 4.0e9 / max(util, 0.02) * waste * pressure
    tail = math.ceil(programs / (SMS * 8)) * (block / 1024) * 0.0004
    return 0.003 + programs * 2.0e-6 + mem_ms + tail


class ModelReferee:
    """Referee-shaped (context manager, evaluate, close, gpu, seed) with modelled timings."""

    FULL_S = 2.0  # modelled referee seconds a full measurement adds to a screen

    def __init__(self, task, *, device="cuda", gpu=None, seed=0, **kw):
        self.task, self.device, self.gpu, self.seed = task, device, gpu, seed
        self.shapes = task.harness.shapes_for(device)

    def evaluate(self, code, *, candidate_id=0, timing="full", seed=None, fresh_compile=False,
                 contender_at=None, contender_shapes=None, promote_at=None, rendered=False):
        if timing == "staged":  # the worker's stages, over the model's timings
            return self._staged(code, candidate_id, seed, fresh_compile, contender_at, contender_shapes,
                                rendered, promote_at)
        seed = self.seed if seed is None else seed
        CALLS.append({"cid": candidate_id, "timing": timing, "seed": seed, "gpu": self.gpu,
                      "fresh_compile": fresh_compile, "rendered": rendered})
        code = code if code is not None else self.task.base_code
        rows = config_of(code)
        if any(cfg["BLOCK"] > 8192 for _, cfg in rows):
            return Verdict.rejected("compile_error", "out of resources: shared memory").finalize()
        shapes, speedups = [], []
        for s in self.shapes:
            sizes = table_size(code, s["tokens"], s["d"]) if len(rows) > 1 else (0,)
            cfg = next(c for limit, c in rows if serves(limit, sizes))
            base = model_ms(s["tokens"], s["d"], 64, 1)
            cand = model_ms(s["tokens"], s["d"], cfg["BLOCK"], cfg["num_warps"])
            sp = base / cand
            speedups.append(sp)
            shapes.append(
                {
                    "shape": s,
                    "max_abs_err": 0.0,
                    "baseline_ms": base,
                    "candidate_ms": cand,
                    "speedup": sp,
                    "ci95": [sp * 0.99, sp * 1.01],
                    "aa_ratio": 1.001 if timing == "full" else None,
                    "device_ms": cand,
                    "host_ms": None,
                    "bitwise_identical": True,
                    "pct_roofline": 100 * (6 * s["tokens"] * s["d"] / 4.0e9) / cand,
                    "samples_ms": {
                        "base": [base * f for f in (0.99, 1.0, 1.01)],
                        "candidate": [cand * f for f in (0.99, 1.0, 1.02)],
                    },
                }
            )
        timed = timing != "none"
        g = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
        v = Verdict(
            accepted=True,
            correct=True,
            device={"name": "model GPU", "driver": "0", "torch": "x", "triton": "y"},
            shapes=shapes if timed else [{"shape": s["shape"], "max_abs_err": 0.0} for s in shapes],
            geomean_speedup=g if timed else None,
            timed=timed,
            timing={
                "metric": "device",
                "aa_ratio": 1.001 if timing == "full" else None,
                "noisy": False if timing == "full" else None,
            },
        )
        # Modelled referee seconds: a load and correctness pass, then the timing (a second screen adds
        # its timing alone).
        v.eval_s = 0.3 if timing == "rescreen" else 0.5 + {"full": 2.0, "screen": 0.3}.get(timing, 0.0)
        return v.finalize()

    def _staged(self, code, cid, seed, fresh_compile, contender_at, contender_shapes, rendered=False,
                promote_at=None):
        """The worker's staged timing (referee/staging.run_staged, the same function) fed by the
        model: representative shapes, the rest, then the full measurement for a contender."""
        kw = dict(candidate_id=cid, seed=seed, fresh_compile=fresh_compile, rendered=rendered)
        screen = self.evaluate(code, timing="screen", **kw)
        if not screen.accepted:
            return screen
        out = screen.to_json()
        out.update(shapes=[{"shape": s["shape"], "max_abs_err": 0.0} for s in screen.shapes],
                   details={"messages": []}, geomean_speedup=None)
        taken = {"screen": screen}

        def timer(mode, indices, host):
            if mode not in taken:
                taken[mode] = self.evaluate(code, timing=mode, **kw)
            for i in range(len(out["shapes"])) if indices is None else indices:
                entry = dict(taken[mode].shapes[i])
                out["shapes"][i] = pooled(out["shapes"][i], entry) if mode == "rescreen" else entry
            conclude(out, "screen" if mode == "rescreen" else mode)
            return True

        sizes = self.sizes()
        best = [(contender_shapes or {}).get(shape_key(s)) for s in self.shapes]
        run_staged(timer, out, sizes, contender_at, best_shapes=best, promote_at=promote_at)
        v = Verdict.from_json(out)
        # One load and correctness pass; a second screen costs what the evaluate call said.
        again = taken["rescreen"].eval_s if "rescreen" in taken else 0.0
        v.eval_s = screen.eval_s + (self.FULL_S if "full" in taken else 0.0) + again
        return v.finalize()

    def sizes(self) -> list[int]:
        """Each listed shape's size, the staged screen's representative-shape pick."""
        return [s["tokens"] * s["d"] for s in self.shapes]

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SlowBuildPrecompiler:
    """Precompiler-shaped stand-in for a Ray actor's compile processes (ray_pool.CompileGate): a
    candidate whose BLOCK reaches SLOW_BUILD_BLOCK "compiles" for 1.5 s past any limit; the rest are
    quick. Jobs are logged (cid, "calibrate"/"submit"/"wait", limit) for assertions."""

    SLOW_BUILD_BLOCK = 1024

    def __init__(self, task, *, workers, seed=None, n_gpus=1):
        self.workers, self.jobs, self.codes, self.closed = workers, [], {}, False

    def calibrate(self, base_code):
        self.jobs.append((0, "calibrate", None))

    def submit(self, cid, code):
        self.codes[cid] = code
        self.jobs.append((cid, "submit", None))

    def wait(self, cid, timeout, limit=None, queued=False):
        assert queued  # submitted just before: a job still queued must be waited for, not dropped
        self.jobs.append((cid, "wait", limit))
        slow = any(cfg["BLOCK"] >= self.SLOW_BUILD_BLOCK for _, cfg in config_of(self.codes.pop(cid)))
        return limit + 1.5 if slow and limit else None

    def close(self):
        self.closed = True


def pooled(first: dict, again: dict) -> dict:
    """A shape's entry after a second screen pooled with the first (referee/timing.pooled): the
    model's stand-in, the two speedups' geometric mean with a CI narrower by sqrt(2)."""
    a, b = first.get("speedup"), again.get("speedup")
    if not a or not b:
        return again
    sp = math.sqrt(a * b)
    ci = again.get("ci95")
    half = math.log(ci[1] / ci[0]) / 2 / math.sqrt(2) if ci and ci[0] and ci[0] > 0 else 0.0
    return {**again, "speedup": sp, "ci95": [sp * math.exp(-half), sp * math.exp(half)]}

