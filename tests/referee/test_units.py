"""Unit tests of the referee's pieces that need no worker process."""

import math

import pytest
import torch

from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks import static
from kernelsmith.referee.checks.integrity import Record, compute_ops, violations_vs_base
from kernelsmith.referee.timing.ab import bootstrap_ci, geomean, roofline_ms
from kernelsmith.referee.verdict import NO_TIMING_LINE, Verdict
from kernelsmith.sandbox import scrubbed_env

# -- verdict ------------------------------------------------------------------------------------


def test_verdict_roundtrip_and_reason_order():
    names = ["no_kernel_launch", "reference_call", "reference_call"]
    v = Verdict(accepted=True, correct=True, violations=names,
                shapes=[{"shape": {"n": 1}, "max_abs_err": float("nan")}], eval_s=1.5)
    v.finalize()
    assert not v.accepted and v.reason == "reference_call"  # the more specific name wins
    assert v.violations == ["no_kernel_launch", "reference_call"]
    data = v.to_json()
    assert data["shapes"][0]["max_abs_err"] is None  # JSON has no NaN
    # docs/design.md's per-shape keys are always there; unmeasured ones (no timing) are null.
    assert {"baseline_ms", "candidate_ms", "speedup", "ci95"} <= set(data["shapes"][0])
    assert data["shapes"][0]["speedup"] is None
    back = Verdict.from_json({**data, "something_new": 3})
    assert back.reason == "reference_call" and back.details["something_new"] == 3


def test_untimed_feedback_says_no_timing():
    v = Verdict(accepted=False, correct=True, timed=False, geomean_speedup=2.0).finalize()
    assert v.accepted and v.geomean_speedup is None
    assert NO_TIMING_LINE in v.feedback() and "no timing" in v.summary()


def test_timed_feedback_lists_shapes_and_noise():
    v = Verdict(accepted=True, correct=True, timed=True, geomean_speedup=1.2,
                timing={"metric": "device", "aa_ratio": 1.02, "noisy": True},
                shapes=[{"shape": {"n": 4}, "baseline_ms": 0.2, "candidate_ms": 0.1, "speedup": 2.0,
                         "pct_roofline": 50.0}]).finalize()
    text = v.feedback()
    assert "NOISY" in text and "speedup 2.000x" in text and "50% of roofline" in text


# -- correctness --------------------------------------------------------------------------------


def test_seeds_differ_across_candidates_trials_and_runs():
    seeds = {C.derive_seed(run, cid, 0, t) for run in (0, 1) for cid in (1, 2) for t in range(3)}
    assert len(seeds) == 12 and all(0 <= s < 2**31 for s in seeds)
    assert C.derive_seed(5, 3, 0, 1) == C.derive_seed(5, 3, 0, 1)


def test_fresh_shapes_redraw_vary_fields():
    shapes = [{"t": 3, "h": 256, "dtype": "float16"}]
    fresh = C.fresh_shapes(shapes, {"t": [1, 5, 37], "h": [64, 96]}, 0, 7, 3)
    assert len(fresh) == 3 and all(f not in shapes for f in fresh)
    assert all(f["dtype"] == "float16" and f["h"] in (64, 96) for f in fresh)
    assert C.fresh_shapes(shapes, {}, 0, 7, 3) == []


def test_poison_floats_ints_and_compare_finds_unwritten():
    f = torch.zeros(8)
    i = torch.zeros(4, dtype=torch.int32)
    C.poison(f)
    C.poison(i)
    assert torch.isnan(f).all() and (i == C.INT_SENTINEL).all()
    out = torch.ones(8)
    out[3] = float("nan")
    chk = C.compare(out, torch.ones(8), (1e-4, 1e-4), "y")
    assert chk.problem == "unwritten_output" and "1 of 8" in chk.message


@pytest.mark.parametrize("out,problem", [
    (torch.ones(4, dtype=torch.float64), "dtype_mismatch"),
    (torch.ones(5), "shape_mismatch"),
    (torch.ones(4) * 1.1, "incorrect"),
    ("not a tensor", "incorrect"),
    (torch.ones(4).as_subclass(type("Sub", (torch.Tensor,), {})), "tensor_subclass"),
    (torch.ones(4) + 1e-6, None),
])
def test_compare(out, problem):
    assert C.compare(out, torch.ones(4), (1e-4, 1e-4), "y").problem == problem


def test_integer_outputs_must_match_exactly():
    e = torch.arange(10)
    assert C.compare(e.clone(), e, (1.0, 1.0), "idx").problem is None
    bad = e.clone()
    bad[0] = 1
    assert C.compare(bad, e, (1.0, 1.0), "idx").problem == "incorrect"


def test_precision_downgrade_detection():
    torch.manual_seed(0)
    exp = torch.randn(1000)
    low = exp.to(torch.float16).to(torch.float32)
    assert "float16" in C.precision_downgrade(low, exp, 1e-4, None)
    assert C.precision_downgrade(exp + 1e-9, exp, 1e-9, 1e-9) is None
    # within tolerance, but far worse than the base and than fp32 rounding
    assert "base" in C.precision_downgrade(exp + 1e-3, exp, 1e-3, 1e-8)


def _representable_whole(t: torch.Tensor, lower: torch.dtype) -> bool:
    """The rule read off every element (what _representable_in answered before its first look)."""
    finite = torch.isfinite(t)
    kept = torch.where(finite, t, t.new_zeros(()))
    return int(finite.sum()) >= 16 and not bool((kept.to(lower).to(t.dtype) != kept).any())


def test_the_representability_test_answers_as_the_whole_tensor_would_after_a_first_look():
    lower = torch.float8_e4m3fn
    n = 4 * C._HEAD + 100  # long enough for the first look
    fits = torch.tensor([0.5, 1.0, -2.0, 448.0]).repeat(n // 4)  # every value in e4m3
    late = fits.clone()
    late[-3] = 0.1  # not in e4m3, past the first look
    early = fits.clone()
    early[7] = 0.1
    holes = fits.clone()
    holes[::5] = float("nan")  # non-finite values change nothing
    for t in (fits, late, early, holes, fits.half(), late.half(), torch.randn(n)):
        assert C._representable_in(t, lower) == _representable_whole(t, lower), t[:4]
    assert C._representable_in(fits, lower) and not C._representable_in(late, lower)


def test_same_bits_sees_nan_payloads_and_signed_zero():
    a = torch.tensor([0.0, float("nan")])
    assert C.same_bits(a, a.clone())
    assert not C.same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))


# -- integrity ----------------------------------------------------------------------------------


def test_violations_vs_base_are_relative_to_the_base():
    base = Record(launches=1, ops={"empty_like", "mul"}, files={"/data/table.bin"})
    cand = Record(launches=0, ops={"empty", "mul", "silu", "copy_"}, files={"/data/table.bin"},
                  network={"socket.connect"}, threads=2, streams={"0x1"}, reference_calls=1,
                  tamper={"Tensor.__eq__"}, writes={"/tmp/cache.pt"})
    names = [v for v, _ in violations_vs_base(cand, base)]
    assert names == ["reference_call", "monkeypatch", "network_access", "file_access", "extra_threads",
                     "extra_streams", "library_fallback", "no_kernel_launch"]
    assert compute_ops({"empty", "view", "copy_", "fill_", "silu"}) == {"silu"}
    # an evaluation cut short proves nothing about launches
    assert "no_kernel_launch" not in [v for v, _ in violations_vs_base(Record(), base, complete=False)]


BASE = "import torch\nimport triton\n\ndef op(x):\n    return x\n"


@pytest.mark.parametrize("snippet,violation", [
    ("import threading\n", "extra_threads"),
    ("s = torch.cuda.Stream()\n", "extra_streams"),
    ("import time\ntime.perf_counter = lambda: 0\n", "monkeypatch"),
    ("setattr(torch, 'matmul', None)\n", "monkeypatch"),
    ("import sys\nf = sys._getframe(1).f_back\n", "reference_call"),
    ("import gc\n", "reference_call"),
    ("from kernelsmith.harness.model import load_harness\n", "reference_call"),
    ("g = torch.compile(lambda x: x)\n", "library_fallback"),
    ("y = torch.ops.aten.mul\n", "library_fallback"),
    ("try:\n    pass\nexcept Exception:\n    y = torch.nn.functional.silu(x)\n", "library_fallback"),
    ("class T(torch.Tensor):\n    pass\n", "tensor_subclass"),
    ("import socket\n", "network_access"),
    ("torch.save(1, 'x.pt')\n", "file_access"),
    ("torch.backends.cuda.matmul.allow_tf32 = True\n", "precision_downgrade"),
])
def test_static_flags_constructs_the_base_does_not_use(snippet, violation):
    found = [v for v, _ in static.static_violations(BASE + snippet, BASE)]
    assert violation in found
    assert static.static_violations(BASE + snippet, BASE + snippet) == []  # the base uses it too


def test_static_leaves_honest_code_alone():
    honest = BASE + ("import functools\n\n@functools.lru_cache(maxsize=None)\ndef cfg(n):\n    return n\n"
                     "try:\n    import numpy as np\nexcept ImportError:\n    np = None\n")
    assert static.static_violations(honest, BASE) == []
    assert static.defines(BASE, "op") and not static.defines(BASE, "other")
    assert static.same_program(BASE + "# comment\n", BASE)


# -- isolation environment ----------------------------------------------------------------------


def test_scrubbed_env_drops_secrets_and_keeps_the_rest():
    env = scrubbed_env({
        "PATH": "/usr/bin", "HOME": "/root", "PYTHONPATH": "/x", "GITHUB_TOKEN": "t",
        "GITHUB_REPOSITORY": "a/b", "KERNELSMITH_LLM_API_KEY": "k", "KERNELSMITH_CACHE": "/c",
        "OPENAI_API_KEY": "sk", "HF_TOKEN": "h", "MY_SECRET": "s", "DB_PASSWORD": "p",
        "ACTIONS_ID_TOKEN_REQUEST_URL": "u", "INNOCENT": "ghp_" + "a" * 36,
        "OTHER": "sk-" + "b" * 40, "CUDA_HOME": "/usr/local/cuda",
    })
    assert set(env) == {"PATH", "HOME", "PYTHONPATH", "CUDA_HOME"}


# -- timing statistics --------------------------------------------------------------------------


def test_bootstrap_ci_brackets_the_ratio():
    g = torch.Generator().manual_seed(0)
    base = (1.0 + 0.01 * torch.randn(200, generator=g)).tolist()
    cand = (0.5 + 0.005 * torch.randn(200, generator=g)).tolist()
    lo, hi = bootstrap_ci(base, cand, seed=1)
    assert lo < 2.0 < hi and hi - lo < 0.05


def test_geomean_and_roofline():
    assert math.isclose(geomean([2.0, 0.5, 1.0]), 1.0)
    assert geomean([]) is None

    class H:
        bytes_moved = staticmethod(lambda s: 4_000_000_000)
        flops = staticmethod(lambda s: 10**12)

    ms = roofline_ms(H, {}, {"bandwidth_gbs": 4000.0, "tflops": 500.0})
    assert math.isclose(ms, 2.0)  # flops-bound: 1e12 / 500e12 s = 2 ms > 1 ms of bytes


def test_same_bits_of_a_one_element_slice_with_a_long_stride():
    """A one-element column of a wide tensor keeps its row stride through clone(); comparing its
    bits must still work (LMDeploy's sampler returns such a tensor for batch 1)."""
    import torch

    from kernelsmith.referee.checks.correctness import same_bits

    col = torch.arange(151936).reshape(1, 151936)[:, 0].clone()
    assert col.stride() == (151936,)
    assert same_bits(col, col.clone()) and not same_bits(col, col + 1)


def test_the_trusted_speedup_noisy_and_contender_rules():
    from kernelsmith.referee.verdict import (
        contender_bar,
        fully_measured,
        is_contender,
        is_noisy,
        row_trusted_speedup,
        trusted_speedup,
    )

    full = {"accepted": True, "timed": True, "geomean_speedup": 1.4,
            "timing": {"metric": "device", "aa_ratio": 1.002, "noisy": False}}
    assert fully_measured(full) and not is_noisy(full) and trusted_speedup(full, "full") == 1.4
    noisy = {**full, "timing": {**full["timing"], "noisy": True}}
    assert is_noisy(noisy) and trusted_speedup(noisy, "full") is None
    assert trusted_speedup(full, "screen") is None  # a screen number is never a decision's ground
    assert trusted_speedup({**full, "accepted": False}, "full") is None
    assert not is_noisy(None) and not fully_measured({"timing": {"aa_ratio": None}})
    assert fully_measured(Verdict(accepted=True, correct=True, timing={"aa_ratio": 1.0}))
    row = {"accepted": 1, "timing": "full", "speedup": 1.4, "verdict": full}
    assert row_trusted_speedup(row) == 1.4
    assert row_trusted_speedup({**row, "verdict": noisy}) is None
    assert row_trusted_speedup({**row, "timing": "screen"}) is None
    assert row_trusted_speedup({**row, "accepted": 0}) is None
    bar = contender_bar(1.3)
    assert is_contender(1.3, bar) and not is_contender(1.29, bar)
    assert not is_contender(None, bar) and not is_contender(2.0, None)


def test_the_verdict_schema_and_its_rules_live_on_the_verdict():
    from kernelsmith.referee.verdict import in_progress, timing_block, untimed_block

    blank = in_progress()
    assert blank["timing"] == untimed_block() == Verdict(accepted=False, correct=False).timing
    assert blank is not in_progress() and blank["details"] is not in_progress()["details"]  # fresh each time
    v = Verdict.from_json({**blank, "correct": True, "timed": True, "geomean_speedup": 1.3,
                           "timing": timing_block(1.002, False, "full")}).finalize()
    assert v.accepted and v.fully_measured and v.depth == "full" and not v.noisy
    assert v.trusted_speedup() == 1.3 and v.trusted_speedup("screen") is None and v.shape_timings_usable
    assert timing_block(1.05, True, "screen")["noisy"] is None  # a screen has no A/A control
    noisy = Verdict.from_json({**v.to_json(), "timing": timing_block(1.05, True, "full")})
    assert noisy.noisy and noisy.trusted_speedup() is None and not noisy.shape_timings_usable
    assert "NOISY" in noisy.feedback() and "(noisy)" in noisy.summary()


def test_the_default_fp8_tolerance_takes_one_step_of_the_format_and_not_two():
    from kernelsmith.harness.model import DEFAULT_TOLERANCE

    for name, codes in (("float8_e4m3fn", range(1, 0x7E)), ("float8_e5m2", range(1, 0x7B))):
        dtype = getattr(torch, name)
        tol = (DEFAULT_TOLERANCE[name]["atol"], DEFAULT_TOLERANCE[name]["rtol"])
        exact = torch.tensor(list(codes), dtype=torch.uint8).view(dtype)
        for step, ok in ((1, True), (-1, True), (2, False)):
            moved = (exact.view(torch.uint8).int() + step).clamp(1, max(codes)).to(torch.uint8).view(dtype)
            check = C.compare(moved, exact, tol, "y")
            assert (check.problem is None) == ok, (name, step, check.message)
