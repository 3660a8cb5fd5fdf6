"""The referee on a CUDA device: timing, the A/A control, and the hacks that only a GPU exposes."""

import pytest
from referee_helpers import CORPUS, MINISERVE, ROOT, demo_task

from kernelsmith import sandbox
from kernelsmith.referee import Referee
from kernelsmith.referee.timing.ab import AA_LIMIT

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def silu_referee():
    from kernelsmith.referee import Referee

    with Referee(demo_task("silu_and_mul"), device="cuda", seed=99) as ref:
        yield ref


def test_screen_timing_of_an_honest_candidate(silu_referee):
    code = (CORPUS / "honest" / "silu_and_mul__block_warps.py").read_text()
    v = silu_referee.evaluate(code, candidate_id=1, timing="screen")
    assert v.accepted and v.timed and v.geomean_speedup and v.geomean_speedup > 0
    assert v.timing["metric"] == "device" and v.timing["noisy"] is None  # screen: no A/A
    for s in v.shapes:
        lo, hi = s["ci95"]
        assert s["baseline_ms"] > 0 and s["candidate_ms"] > 0 and lo <= hi
        assert 0 < s["pct_roofline"] <= 150


def test_full_timing_has_an_aa_control_and_host_times(silu_referee):
    v = silu_referee.evaluate(None, candidate_id=2, timing="full")
    assert v.accepted and v.timed
    aa = v.timing["aa_ratio"]
    worst = max((s for s in v.shapes if s.get("aa_ratio")), key=lambda s: abs(s["aa_ratio"] - 1))
    assert aa is not None and worst["aa_ratio"] == aa
    # timing.aa_strayed: within AA_LIMIT, or 1.0 inside the control's own CI (a few-microsecond shape's
    # sampling noise: the H200 gave 1.014 on one take), or the verdict says noisy.
    lo, hi = worst["aa_ci95"] or (aa, aa)  # the CI is recorded only past AA_LIMIT
    assert abs(aa - 1) <= AA_LIMIT or lo <= 1.0 <= hi or v.timing["noisy"]
    assert all(s["host_ms"] > 0 and s["device_ms"] > 0 for s in v.shapes)
    assert 0.9 < v.geomean_speedup < 1.1  # the base against itself


def test_staged_timing_goes_full_only_for_a_contender(silu_referee):
    code = (CORPUS / "honest" / "silu_and_mul__block_warps.py").read_text()
    screened = silu_referee.evaluate(code, candidate_id=3, timing="staged", contender_at=1000.0)
    assert screened.accepted and screened.timing["aa_ratio"] is None  # a screen only
    full = silu_referee.evaluate(code, candidate_id=4, timing="staged", contender_at=1.5)
    assert full.accepted and full.timing["aa_ratio"] is not None and full.geomean_speedup > 1.5
    assert all(s["host_ms"] is None and s["device_ms"] > 0 for s in full.shapes)  # host: final only
    assert full.eval_s < screened.eval_s + 3.0


def test_staged_timing_stops_after_representative_shapes_on_cached_inputs(silu_referee):
    """Far below the bar, a candidate is timed on the representative shapes only (timing/staged.py),
    and judged on the inputs the worker made at boot (input_cache.py)."""
    code = (CORPUS / "honest" / "silu_and_mul__block_warps.py").read_text()
    v = silu_referee.evaluate(code, candidate_id=5, timing="staged", contender_at=1000.0)
    assert v.accepted and v.details["timing_depth"] == "screen_subset" and v.geomean_speedup is None
    assert len([s for s in v.shapes if s.get("speedup") is not None]) == 3
    assert v.details["subset_geomean"] > 0 and v.details["input_cache"]["make_inputs"] == 0
    assert v.details["input_cache"]["reference"] == 0 and v.details["input_cache"]["misses"] == 0


@pytest.mark.parametrize("name,violation", [
    ("rms_norm__side_stream", "extra_streams"),
    ("rms_norm__timer_patch", "monkeypatch"),
    ("rms_norm__cache_by_pointer", "cached_result"),
    ("rms_norm__stale_memory", "unwritten_output"),
])
def test_gpu_cheats(name, violation):
    from kernelsmith.referee import Referee

    with Referee(demo_task("rms_norm"), device="cuda", seed=5) as ref:
        v = ref.evaluate((CORPUS / "cheats" / f"{name}.py").read_text(), candidate_id=3, timing="screen")
    assert not v.accepted and violation in v.violations, v.feedback()


BIG = {"tokens": 16384, "hidden": 8192, "dtype": "bfloat16"}


def _base_ms_with_cache(cache, tag: str) -> float:
    """The demo base rms_norm on BIG, loaded in this process with Triton compiling into `cache`."""
    import triton

    from kernelsmith.harness.model import load_harness
    from kernelsmith.loader import load_operator_module
    from kernelsmith.referee.proc.compile_cache import cache_dir, set_cache_dir

    before = cache_dir()
    set_cache_dir(str(cache))
    try:
        mod = load_operator_module(MINISERVE, "miniserve/kernels/rms_norm.py", tag=tag)
        inputs = load_harness(ROOT / "targets" / "demo" / "rms_norm.py").make_inputs(BIG, "cuda", 0)
        return triton.testing.do_bench(lambda: mod.rms_norm(**inputs), warmup=50, rep=200)
    finally:
        set_cache_dir(before)


def test_planted_triton_binary_never_reaches_the_base(tmp_path, monkeypatch):
    """A cheat copies a slow kernel's binary over the base kernel's entry in the shared Triton
    cache; it is rejected, and the base in the replacement worker still runs its own binary."""
    import json

    shared = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    cheat = (CORPUS / "cheats" / "rms_norm__triton_cache.py").read_text()
    with Referee(demo_task("rms_norm"), device="cuda", seed=7) as ref:
        before = ref.evaluate(None, candidate_id=1, timing="screen")
        v = ref.evaluate(cheat, candidate_id=2, timing="screen")
        assert v.reason == "file_access", v.feedback()
        assert json.loads((shared / "planted.json").read_text())  # compiled files were overwritten
        after = ref.evaluate(None, candidate_id=3, timing="screen")
        assert ref.workers_started >= 2
    assert before.accepted and after.accepted
    for b, a in zip(before.shapes, after.shapes, strict=True):
        assert a["baseline_ms"] < 1.3 * b["baseline_ms"], (b["shape"], b["baseline_ms"], a["baseline_ms"])
    # The control: the same base compiled from the shared cache would have loaded the slow binary.
    poisoned = _base_ms_with_cache(shared, "poisoned")
    clean = _base_ms_with_cache(tmp_path / "clean", "clean")
    assert poisoned > 1.5 * clean, (poisoned, clean)


def test_rewritten_device_json_drives_no_verdict(tmp_path, monkeypatch):
    """A cheat rewrites device.json (a huge bandwidth would lift the roofline floor); the referee's
    numbers stay the ones its first worker measured before any candidate ran."""
    import json

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cheat = (CORPUS / "cheats" / "rms_norm__device_json.py").read_text()
    with Referee(demo_task("rms_norm"), device="cuda", seed=8) as ref:
        ref.evaluate(None, candidate_id=1, timing="screen")
        measured = json.loads(json.dumps(ref.calibration))
        v = ref.evaluate(cheat, candidate_id=2, timing="screen")
        # Inside the sandbox the write fails (the cheat then crashes on the read-only folder), and the
        # attempt is still named.
        assert not v.accepted and "file_access" in v.violations, v.feedback()
        # Inside the sandbox the write fails (the user's cache is read-only there); without one the
        # file is rewritten. Either way the verdicts below use the first worker's numbers.
        path = tmp_path / "xdg" / "kernelsmith" / "device.json"
        written = json.loads(path.read_text()) if path.is_file() else {}
        assert (written.get("bandwidth_gbs") == 1e9) == (not sandbox.enabled())
        after = ref.evaluate(None, candidate_id=3, timing="screen")
    assert ref.calibration == measured and 100 < measured["bandwidth_gbs"] < 1e5
    assert measured["sleep_cycles_per_us"] > 100  # GPU clocks are GHz: thousands of cycles per µs
    big = next(s for s in after.shapes if s["shape"] == BIG)
    assert 5 < big["pct_roofline"] <= 150 and not big["floored"]


def test_replacement_worker_loads_the_base_binaries_of_the_first(tmp_path):
    """After a rejection the next worker gets the first worker's base binaries (held by the parent
    since before any candidate ran) instead of compiling the base again, and still times the base
    the same."""
    crash = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text() + "\nraise RuntimeError('x')\n"
    with Referee(demo_task("rms_norm"), device="cuda", seed=11) as ref:
        first = ref.evaluate(None, candidate_id=1, timing="screen")
        assert ref.last_seeded == 0
        assert not ref.evaluate(crash, candidate_id=2, timing="screen").accepted
        again = ref.evaluate(None, candidate_id=3, timing="screen")
        assert ref.workers_started >= 2 and ref.last_seeded > 0
    assert first.accepted and again.accepted
    for a, b in zip(first.shapes, again.shapes, strict=True):
        ratio = a["baseline_ms"] / b["baseline_ms"]
        assert 0.8 < ratio < 1.25, (a["shape"], a["baseline_ms"], b["baseline_ms"])


def test_the_first_workers_runner_starts_with_the_judges_base_binaries():
    from kernelsmith.referee.proc.compile_cache import read_folder

    with Referee(demo_task("silu_and_mul"), device="cuda", seed=17) as ref:
        ref.start()
        assert "base_compile" in ref.boot_phases  # the judge compiled, then seeded its runner
        judge = read_folder(ref._worker.base_cache, 1 << 30)
        runner = read_folder(ref._worker.runner_cache, 1 << 30)
        assert judge and all(runner.get(k) == v for k, v in judge.items())
        v = ref.evaluate(None, timing="full")  # the base, timed against itself, from those binaries
        assert v.accepted and v.timed and 0.9 < v.geomean_speedup < 1.1
