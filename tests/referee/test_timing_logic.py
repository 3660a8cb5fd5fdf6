"""The timing pipeline (interleaving, A/A re-takes, cached-result check, roofline floor) driven by a
synthetic backend, so its logic is tested without a GPU. Real numbers come from the H200 step."""

import random
from contextlib import contextmanager

import pytest
import torch
from referee_helpers import ROOT

from kernelsmith.harness.model import load_harness
from kernelsmith.referee.backend.base import Backend
from kernelsmith.referee.checks.input_cache import InputCache, ListedInputs
from kernelsmith.referee.timing import ab as timing


class FakeBackend(Backend):
    """Calls every function for real (so outputs exist) but reports scripted device times."""

    timed = True

    def __init__(self, ms: list[float], bandwidth_gbs: float = 1e9, aa_drift: list[float] = (),
                 jitter: float = 0.001):
        self.ms, self.bw, self.drift, self.calls = ms, bandwidth_gbs, list(aa_drift), 0
        self.jitter = jitter  # per-call noise: uniform in [0, jitter) of the time

    def time_calls(self, fns, reps, order_seed):
        rng = random.Random(order_seed)
        drift = self.drift.pop(0) if self.drift and len(fns) == 3 else 1.0
        out = [[] for _ in fns]
        for r in range(reps):
            for i, f in enumerate(fns):
                if getattr(f, "prepare", None):  # the CUDA backend's contract: untimed, before the call
                    f.prepare(r)
                f(r)
                self.calls += 1
                scale = drift if i == 2 else 1.0
                out[i].append(self.ms[i] * scale * (1 + self.jitter * rng.random()))
        return out

    def host_time(self, fn, calls):
        for i in range(calls):
            fn(i)
        return 0.05

    def peak(self, dtype_name=None):
        return {"bandwidth_gbs": self.bw, "tflops": None}


def _rms(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


class FakeSession(ListedInputs):
    """The Session's cache of inputs and reference outputs (ListedInputs), with the demo rms_norm."""

    def __init__(self, backend):
        self.harness = load_harness(ROOT / "targets" / "demo" / "rms_norm.py")
        self.backend, self.dev, self.device = backend, "cpu", "interpret"
        self.base_fn = _rms
        self._aa = lambda **kw: _rms(**kw)
        self.in_base_cache = False  # what Session.base_compiles() switches (compile_cache.py)
        self.inputs = InputCache(1 << 20)

    def reference(self, **inputs):
        return self.harness.reference(**inputs)

    def aa_fn(self):
        return self._aa

    def trusted(self, fn):
        return fn is self.base_fn or fn is self._aa

    @contextmanager
    def base_compiles(self):
        self.in_base_cache = True
        try:
            yield
        finally:
            self.in_base_cache = False

    def expected(self, inputs):
        return (self.harness.reference(**inputs),)

    def _tol(self, t):
        return self.harness.tolerance_for(str(t.dtype).replace("torch.", ""))


def _verdict_dict(session):
    shapes = [{"shape": s} for s in session.harness.shapes_for("interpret")]
    return {"shapes": shapes, "violations": [], "details": {"messages": []}}


@pytest.fixture(autouse=True)
def _few_reps(monkeypatch):
    monkeypatch.setitem(timing.FULL, "min_reps", 12)
    monkeypatch.setitem(timing.FULL, "max_reps", 12)
    monkeypatch.setitem(timing.FULL, "host_calls", 3)


def test_full_timing_fills_every_shape_field():
    s = FakeSession(FakeBackend([0.2, 0.1, 0.2]))
    out = _verdict_dict(s)
    timing.time_candidate(s, _rms, cid=1, seed=0, mode="full", out=out)
    assert out["timed"] and out["violations"] == []
    assert out["timing"]["metric"] == "device" and out["timing"]["noisy"] is False
    assert abs(out["timing"]["aa_ratio"] - 1) < 0.01 and 1.9 < out["geomean_speedup"] < 2.1
    for sh in out["shapes"]:
        lo, hi = sh["ci95"]
        assert lo <= sh["speedup"] <= hi * 1.001 and sh["host_ms"] == 0.05 and sh["reps"] == 12
        assert sh["device_ms"] == sh["candidate_ms"] and sh["floored"] is False


def test_aa_drift_is_retaken_then_reported_noisy():
    retaken = FakeBackend([0.2, 0.1, 0.2], aa_drift=[1.05, 1.0] * 2)  # first take of each shape drifts
    s = FakeSession(retaken)
    out = _verdict_dict(s)
    timing.time_candidate(s, _rms, cid=1, seed=0, mode="full", out=out)
    assert out["timing"]["noisy"] is False and all(sh["attempts"] == 2 for sh in out["shapes"])
    noisy = FakeSession(FakeBackend([0.2, 0.1, 0.2], aa_drift=[1.05] * 10))
    out = _verdict_dict(noisy)
    timing.time_candidate(noisy, _rms, cid=1, seed=0, mode="full", out=out)
    assert out["timing"]["noisy"] is True and out["shapes"][0]["attempts"] == timing.RETAKES + 1


def test_aa_strayed_needs_the_deviation_and_a_ci_that_excludes_one():
    assert not timing.aa_strayed(None, None) and not timing.aa_strayed(1.009, [1.005, 1.013])
    assert timing.aa_strayed(1.0128, [1.006, 1.02])  # past 1%, and 1.0 is outside its CI
    assert not timing.aa_strayed(1.0128, [1.0, 1.0325])  # fused_rmsnorm at 1 token: sampling noise
    assert timing.aa_strayed(0.97, None)  # no CI recorded: the plain ±1% rule


def test_a_jittery_tiny_kernels_aa_within_its_sampling_noise_is_not_noisy():
    # Kernels of a few microseconds jitter ~10% per call: a 1.2% A/A offset is inside the A/A
    # ratio's own CI, and re-taking it would not change that. No jitter: the same offset strays.
    jittery = FakeSession(FakeBackend([0.005, 0.005, 0.005], aa_drift=[1.012] * 10, jitter=0.3))
    out = _verdict_dict(jittery)
    timing.time_candidate(jittery, _rms, cid=1, seed=0, mode="full", out=out)
    past = [sh for sh in out["shapes"] if abs(sh["aa_ratio"] - 1) > timing.AA_LIMIT]
    assert past and all(sh["aa_ci95"][0] <= 1.0 <= sh["aa_ci95"][1] for sh in past)
    assert all(sh["aa_ci95"] is None for sh in out["shapes"] if sh not in past)  # no bootstrap needed
    assert out["timing"]["noisy"] is False and all(sh["attempts"] == 1 for sh in out["shapes"])
    steady = FakeSession(FakeBackend([0.005, 0.005, 0.005], aa_drift=[1.012] * 10))
    out = _verdict_dict(steady)
    timing.time_candidate(steady, _rms, cid=1, seed=0, mode="full", out=out)
    assert out["timing"]["noisy"] is True and out["shapes"][0]["attempts"] == timing.RETAKES + 1
    far = FakeSession(FakeBackend([0.005, 0.005, 0.005], aa_drift=[1.3] * 10, jitter=0.3))
    out = _verdict_dict(far)
    timing.time_candidate(far, _rms, cid=1, seed=0, mode="full", out=out)
    assert out["timing"]["noisy"] is True  # a drift beyond the noise is still caught


def test_screen_mode_has_no_aa_control():
    s = FakeSession(FakeBackend([0.2, 0.1]))
    out = _verdict_dict(s)
    timing.time_candidate(s, _rms, cid=1, seed=0, mode="screen", out=out)
    assert out["timed"] and out["timing"]["aa_ratio"] is None and out["timing"]["noisy"] is None


def test_impossible_time_is_floored_at_the_roofline():
    # A bandwidth of 1 kB/s makes the roofline far slower than the reported 0.1 ms.
    s = FakeSession(FakeBackend([0.2, 0.1, 0.2], bandwidth_gbs=1e-6))
    out = _verdict_dict(s)
    timing.time_candidate(s, _rms, cid=1, seed=0, mode="full", out=out)
    # Neither time counts below the roofline: the impossible candidate ties the base, never wins.
    assert all(sh["floored"] and sh["speedup"] == 1.0 and sh["ci95"] == [1.0, 1.0] for sh in out["shapes"])


@pytest.mark.parametrize(("ms", "roof", "want"), [
    ([0.2, 0.2, 0.2], 0.21, 1.0),   # base past its roofline estimate, candidate equal: a tie, not 0.95x
    ([0.2, 0.1, 0.2], 0.15, 0.2 / 0.15),  # a candidate past the roofline is credited only down to it
    ([0.2, 0.25, 0.2], 0.1, 0.2 / 0.25),  # above the roofline, the plain ratio of medians
])
def test_base_and_candidate_are_floored_at_the_roofline_alike(monkeypatch, ms, roof, want):
    # A memory-bound base measured at 101-103% of the copy-bandwidth roofline (Unsloth's geglu on an
    # H100) made every equal candidate 0.97-0.99x there when only the candidate was floored.
    monkeypatch.setattr(timing, "roofline_ms", lambda h, shape, peak: roof)
    s = FakeSession(FakeBackend(ms, jitter=0.0))
    out = _verdict_dict(s)
    timing.time_candidate(s, _rms, cid=1, seed=0, mode="full", out=out)
    for sh in out["shapes"]:
        assert sh["speedup"] == pytest.approx(want, rel=1e-6)
        assert sh["ci95"][0] <= sh["speedup"] <= sh["ci95"][1] * (1 + 1e-9)


def test_result_cached_across_timed_calls_is_caught():
    first = {}

    def cached(x, weight, eps):
        return first.setdefault("y", _rms(x, weight, eps))

    s = FakeSession(FakeBackend([0.2, 0.01, 0.2]))
    out = _verdict_dict(s)
    timing.time_candidate(s, cached, cid=1, seed=0, mode="full", out=out)
    assert out["violations"] == ["cached_result"] and not out.get("timed")


def _phase_recording(phase: list) -> type:
    """A FakeBackend class that sets phase[0] to "timed" while its device or host timing runs."""

    class Recording(FakeBackend):
        def time_calls(self, fns, reps, order_seed):
            phase[0] = "timed"
            try:
                return super().time_calls(fns, reps, order_seed)
            finally:
                phase[0] = "warm-up"

        def host_time(self, fn, calls):
            phase[0] = "timed"
            try:
                return super().host_time(fn, calls)
            finally:
                phase[0] = "warm-up"

    return Recording


def test_base_and_aa_warm_up_in_the_private_cache_and_nothing_switches_while_timed():
    """Base/A-A calls that can compile run inside base_compiles(); the candidate's never do, and
    no switch happens inside the timed calls (it would add host work to the measurement)."""
    seen, phase = [], ["warm-up"]
    s = FakeSession(_phase_recording(phase)([0.2, 0.1, 0.2]))
    base, aa = s.base_fn, s.aa_fn()

    def spy(name, fn):
        def call(**kw):
            seen.append((name, phase[0], s.in_base_cache))
            return fn(**kw)
        return call

    s.base_fn, s._aa = spy("base", base), spy("aa", aa)
    timing.time_candidate(s, spy("cand", _rms), cid=1, seed=0, mode="full", out=_verdict_dict(s))
    warm = [(n, inside) for n, ph, inside in seen if ph == "warm-up"]
    timed = [(n, inside) for n, ph, inside in seen if ph == "timed"]
    assert {n for n, _ in warm} == {"base", "aa", "cand"} and {n for n, _ in timed} == {"base", "aa", "cand"}
    assert all(inside == (n != "cand") for n, inside in warm)
    assert not any(inside for _, inside in timed)


def test_a_functions_first_call_on_a_shape_is_never_timed():
    """A first call with new sizes is where an autotuned kernel benchmarks its configs (a
    candidate's own kernels tune in the runner, autotune_share.py): base, candidate and A/A copy
    each make theirs in the untimed warm-up, the probe and the timed repetitions come after."""
    firsts, phase = {}, ["warm-up"]
    s = FakeSession(_phase_recording(phase)([0.2, 0.1, 0.2]))

    def first_seen(name, fn):
        def call(**kw):
            firsts.setdefault((name, kw["x"].shape), phase[0])
            return fn(**kw)
        return call

    s.base_fn, s._aa = first_seen("base", s.base_fn), first_seen("aa", s.aa_fn())
    timing.time_candidate(s, first_seen("cand", _rms), cid=1, seed=0, mode="full", out=_verdict_dict(s))
    shapes = s.harness.shapes_for("interpret")
    assert len(firsts) == 3 * len(shapes) and set(firsts.values()) == {"warm-up"}


def test_timing_some_shapes_then_the_rest_reuses_the_cached_inputs():
    """time_candidate(indices=...) (the staged screen's subset): the geomean covers the shapes
    timed so far; the inputs and reference outputs come from the session's cache, made once."""
    s = FakeSession(FakeBackend([0.2, 0.1]))
    out = _verdict_dict(s)
    assert timing.time_candidate(s, _rms, cid=1, seed=0, mode="screen", out=out, indices=[1])
    assert out["shapes"][0].get("speedup") is None and out["shapes"][1]["speedup"] > 1.9
    assert out["details"]["timing_depth"] == "screen" and 1.9 < out["geomean_speedup"] < 2.1
    made = s.inputs.stats["make_inputs"]
    timing.time_candidate(s, _rms, cid=2, seed=0, mode="screen", out=out, indices=[0])
    timing.time_candidate(s, _rms, cid=3, seed=0, mode="screen", out=out, indices=[0, 1])
    assert all(sh["speedup"] > 1.9 for sh in out["shapes"])
    assert s.inputs.stats["make_inputs"] == made + timing.INPUT_SETS  # shape 0's, once
    assert s.inputs.stats["reference"] == 2 * timing.INPUT_SETS


FILL_HARNESS = """
import torch

SHAPES = CPU_SHAPES = [{"n": 64}]
OUTPUTS = ["cache"]
INPLACE = ["cache"]


def make_inputs(shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return {"cache": torch.rand(shape["n"], generator=g), "src": torch.rand(shape["n"], generator=g)}


def reference(cache, src):
    return src.clone()
"""


def test_in_place_buffers_are_restored_before_every_timed_call(tmp_path):
    """A kernel that skips its work when the cache already holds the values (LMDeploy fill_kv_cache
    style) must do the work in every timed call, and its last timed output is still checked."""
    (tmp_path / "fill.py").write_text(FILL_HARNESS)
    s = FakeSession(FakeBackend([0.2, 0.1]))
    s.harness = load_harness(tmp_path / "fill.py")
    work = {"copies": 0, "calls": 0}

    def honest(cache, src):
        cache.copy_(src)

    def skipping(cache, src):
        work["calls"] += 1
        if torch.equal(cache, src):
            return  # already filled: nothing to do
        work["copies"] += 1
        cache.copy_(src)

    s.base_fn = honest
    out = {"shapes": [{"shape": {"n": 64}}], "violations": [], "details": {"messages": []}}
    timing.time_candidate(s, skipping, cid=1, seed=0, mode="screen", out=out)
    assert out["timed"] and out["violations"] == []
    warm_up = timing.INPUT_SETS  # the untimed first calls, one per input set, start from fresh copies
    assert work["copies"] == work["calls"] and work["calls"] > warm_up

    def wrong(cache, src):
        cache.copy_(src * 2)

    out = {"shapes": [{"shape": {"n": 64}}], "violations": [], "details": {"messages": []}}
    timing.time_candidate(s, wrong, cid=2, seed=0, mode="screen", out=out)
    assert "cached_result" in out["violations"]  # the in-place output of a timed call is checked now


def test_time_shape_returns_a_shape_timing_serialised_in_the_verdicts_key_order():
    """time_shape's ShapeTiming becomes the verdict's per-shape fields and timing block with the keys
    (and their order: archive rows and result.json are compared byte for byte) of referee/verdict.py."""
    s = FakeSession(FakeBackend([0.2, 0.1, 0.2]))
    shape = s.harness.shapes_for("interpret")[0]
    r = timing.time_shape(s, _rms, shape, 0, cid=1, seed=0, mode="full")
    assert isinstance(r, timing.ShapeTiming) and r.reps == 12 and r.attempts == 1 and not r.noisy
    assert len(r.base) == len(r.cand) == 12 and r.timed_output_ok is True and r.host_cand == 0.05
    screen = timing.time_shape(s, _rms, shape, 0, cid=1, seed=0, mode="screen")
    assert screen.aa_ratio is None and screen.host_base is None and not screen.noisy
    out = _verdict_dict(s)
    timing.time_candidate(s, _rms, cid=1, seed=0, mode="full", out=out)
    assert list(out["shapes"][0]) == [
        "shape", "baseline_ms", "candidate_ms", "speedup", "ci95", "device_ms", "base_device_ms", "host_ms",
        "base_host_ms", "pct_roofline", "floored", "aa_ratio", "aa_ci95", "reps", "attempts", "aa_bias",
        "judge_base_ms", "late_reps", "samples_ms"]
    assert list(out["timing"]) == ["metric", "aa_ratio", "noisy", "mode", "method"]


def test_a_rescreen_pools_its_samples_with_the_screen_before_it():
    s = FakeSession(FakeBackend([0.2, 0.1], jitter=0.01))
    out = _verdict_dict(s)
    timing.time_candidate(s, _rms, cid=1, seed=0, mode="screen", out=out)
    first = [dict(sh) for sh in out["shapes"]]
    s.backend.ms = [0.2, 0.2]  # the second screen sees the candidate as fast as the base
    timing.time_candidate(s, _rms, cid=1, seed=0, mode="rescreen", out=out)
    assert out["timing"]["mode"] == "screen" and out["details"]["timing_depth"] == "screen"
    for before, sh in zip(first, out["shapes"], strict=True):
        n = before["reps"]
        assert sh["reps"] == 2 * n and len(sh["samples_ms"]["candidate"]) == 2 * n
        assert sh["samples_ms"]["base"][:n] == before["samples_ms"]["base"]  # the first screen's, kept
        # Half the pooled candidate times are 0.1 ms and half 0.2: the median lies between.
        assert 1.0 <= sh["speedup"] <= 2.0 and sh["ci95"][0] <= sh["speedup"] <= sh["ci95"][1] * 1.001
        assert before["speedup"] > 1.9


def test_a_strayed_aa_that_the_shapes_effect_dwarfs_widens_its_ci_instead_of_voiding_it():
    # LMDeploy's sampler on the H200: the A/A copy 1.4% slower than the base on every take, at 15x.
    big = FakeSession(FakeBackend([0.3, 0.02, 0.3], aa_drift=[1.014] * 30))
    out = _verdict_dict(big)
    timing.time_candidate(big, _rms, cid=1, seed=0, mode="full", out=out)
    assert out["timing"]["noisy"] is False and out["geomean_speedup"] > 14
    for sh in out["shapes"]:
        assert sh["attempts"] == timing.RETAKES + 1  # it strayed on every take
        assert sh["aa_bias"] == pytest.approx(1 / sh["aa_ratio"], rel=1e-9)
        lo, hi = sh["ci95"]
        assert lo < sh["speedup"] / 1.013 and hi > sh["speedup"] * 1.013  # the bias is inside the CI
    # The same stray on a 1.1x shape is no smaller than a tenth of its effect: noisy, as before.
    small = FakeSession(FakeBackend([0.3, 0.27, 0.3], aa_drift=[1.014] * 30))
    out = _verdict_dict(small)
    timing.time_candidate(small, _rms, cid=1, seed=0, mode="full", out=out)
    assert out["timing"]["noisy"] is True and all(sh["aa_bias"] is None for sh in out["shapes"])


def test_aa_bias_needs_a_stray_and_an_effect_twenty_times_its_size():
    assert timing.aa_bias(1.005, None, 15.0) is None  # within AA_LIMIT: nothing strayed
    assert timing.aa_bias(0.986, [0.984, 0.988], 15.0) == pytest.approx(1 / 0.986)
    assert timing.aa_bias(0.986, [0.984, 0.988], 1.3) is None  # log 1.3 < 20 x 0.0141
    assert timing.aa_bias(0.986, [0.97, 1.01], 15.0) is None  # 1.0 inside its CI: sampling noise
    assert timing.aa_bias(1.05, None, 0.5) is None  # a slowdown's effect counts as its size too
    assert timing.aa_bias(1.05, None, 0.02) is not None


class PlacementBackend(FakeBackend):
    """Times a call 2% slower when it read the buffers the base was first given (a slow placement:
    on the H200 an identical call on another copy of the same inputs differed by up to ~1.1%)."""

    def __init__(self, ms):
        super().__init__(ms)
        self.first_seen, self.slow, self.read = [], set(), {}

    def reads(self, x):
        """Called by every timed function with its input: where the call's data sits."""
        self.read["ptr"] = x.data_ptr()
        if len(self.first_seen) < timing.INPUT_SETS:  # the base's warm-up calls, one per input set
            self.first_seen.append(x.data_ptr())
            self.slow.add(x.data_ptr())

    def time_calls(self, fns, reps, order_seed):
        rng = random.Random(order_seed)
        out = [[] for _ in fns]
        for _ in range(reps):
            for i, f in enumerate(fns):
                f(len(out[i]))
                slow = 1.02 if self.read["ptr"] in self.slow else 1.0
                out[i].append(self.ms[i] * slow * (1 + self.jitter * rng.random()))
        return out


def test_every_function_reads_every_copy_of_the_inputs_so_placement_cancels_out_of_the_ratio(monkeypatch):
    """Base, candidate and A/A copy each read every copy of every read-only input set in turn: buffers
    that sit where calls run slower slow all three alike, so neither the A/A control nor the speedup
    carries it (with a private copy each, the base read its slow buffers on every call: A/A 1.02)."""
    monkeypatch.setitem(timing.FULL, "min_reps", 18)  # 2 x 9: each (set, copy) pair twice
    monkeypatch.setitem(timing.FULL, "max_reps", 18)
    backend = PlacementBackend([0.2, 0.1, 0.2])
    s = FakeSession(backend)

    def reading(fn):
        def call(x, weight, eps):
            backend.reads(x)
            return fn(x, weight, eps)
        return call

    s.base_fn, s._aa = reading(_rms), reading(_rms)
    out = _verdict_dict(s)
    timing.time_candidate(s, reading(_rms), cid=1, seed=0, mode="full", out=out, indices=[0])
    sh = out["shapes"][0]
    assert sh["attempts"] == 1 and abs(sh["aa_ratio"] - 1) < 0.002 and not out["timing"]["noisy"]
    assert sh["speedup"] == pytest.approx(2.0, rel=0.002)
    assert len(backend.slow) == timing.INPUT_SETS and backend.first_seen


def test_written_buffers_rotate_too_and_the_candidates_own_last_output_is_checked(tmp_path):
    """In-place buffers rotate like the inputs (restored before every call); within a repetition no
    two functions share one, and a candidate writing wrong values is caught although the base writes
    the right ones into the same buffers on other repetitions."""
    (tmp_path / "fill.py").write_text(FILL_HARNESS)
    s = FakeSession(FakeBackend([0.2, 0.1, 0.2]))
    s.harness = load_harness(tmp_path / "fill.py")
    seen = {}

    def recording(name, factor=1.0):
        def fill(cache, src):
            seen.setdefault(name, []).append((cache.data_ptr(), src.data_ptr()))
            cache.copy_(src * factor)
        return fill

    s.base_fn, s._aa = recording("base"), recording("aa")
    out = {"shapes": [{"shape": {"n": 64}}], "violations": [], "details": {"messages": []}}
    timing.time_candidate(s, recording("cand"), cid=1, seed=0, mode="full", out=out)
    assert out["timed"] and out["violations"] == []
    caches = [{c for c, _ in seen[n]} for n in ("base", "cand", "aa")]
    assert caches[0] == caches[1] == caches[2] and len(caches[0]) == 3 * timing.INPUT_SETS
    # FakeBackend calls base, candidate and A/A in turn each repetition: the timed calls are the
    # last 12 of the A/A's (warm-up and host timing aside), aligned with the candidate's probe.
    n = 12
    cand_timed = seen["cand"][2 * timing.INPUT_SETS:2 * timing.INPUT_SETS + n]
    aa_timed = seen["aa"][timing.INPUT_SETS:timing.INPUT_SETS + n]
    assert all(a[0] != b[0] for a, b in zip(cand_timed, aa_timed, strict=True))

    seen.clear()
    out = {"shapes": [{"shape": {"n": 64}}], "violations": [], "details": {"messages": []}}
    timing.time_candidate(s, recording("cand", 2.0), cid=2, seed=0, mode="full", out=out)
    assert "cached_result" in out["violations"]


def test_a_candidate_writing_a_shared_input_while_timed_is_an_input_mutation():
    """Its own output stays right, but the base's later calls on that copy read the changed input:
    the loop checks every copy after timing (rotation.Rotation.changed)."""
    calls = {"n": 0}

    def writes_once(x, weight, eps):
        y = _rms(x, weight, eps)
        calls["n"] += 1
        if calls["n"] == 2 * timing.INPUT_SETS + 1:  # after its warm-up and the probe
            weight.mul_(2.0)
        return y

    s = FakeSession(FakeBackend([0.2, 0.1, 0.2]))
    out = _verdict_dict(s)
    assert not timing.time_candidate(s, writes_once, cid=1, seed=0, mode="full", out=out, indices=[0])
    assert out["violations"] == ["input_mutation"] and "'weight'" in out["details"]["messages"][0]
    out = _verdict_dict(s)
    assert timing.time_candidate(s, _rms, cid=2, seed=0, mode="full", out=out, indices=[0])
