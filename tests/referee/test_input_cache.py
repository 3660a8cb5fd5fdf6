"""The worker's cache of the listed shapes' inputs, reference and base outputs (input_cache.py):
LRU by bytes, tamper detection, hits across candidates, cheats still caught on cached inputs, new
inputs for the final re-measurement, and a per-candidate cost that does not grow with the harness's."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from referee_helpers import CORPUS, MINISERVE, ROOT, expected_outcome

from kernelsmith.onboard.task import load_task
from kernelsmith.referee.checks import correctness as C
from kernelsmith.referee.checks import input_cache as IC
from kernelsmith.search.seeds import FINAL_SEED_OFFSET

OP_FILE = MINISERVE / "miniserve" / "kernels" / "rms_norm.py"


# -- units ---------------------------------------------------------------------------------------
def _make(n: int, fill: float = 1.0):
    return lambda: {"x": torch.full((n,), fill), "k": [1, 2], "eps": 1e-6}


def test_lru_is_bounded_by_bytes_and_counts_hits_and_misses():
    cache = IC.InputCache(budget=3 * 400)  # three entries of 100 float32
    cache.begin()
    for s in range(3):
        cache.get({"n": 100}, s, _make(100))
    cache.get({"n": 100}, 0, _make(100))  # hit: 0 is now the most recent
    cache.get({"n": 100}, 3, _make(100))  # evicts 1, the least recent
    keys = [k[1] for k in cache.entries]
    assert keys == [2, 0, 3]
    assert cache.stats == {"hits": 1, "misses": 4, "evictions": 1, "make_inputs": 4,
                           "reference": 0, "base": 0}
    big = cache.get({"n": 1000}, 9, _make(1000))  # alone over budget: used once, not kept
    assert big.originals["x"].numel() == 1000 and all(k[1] != 9 for k in cache.entries)
    assert cache.bytes() <= cache.budget


def test_reference_and_base_are_computed_once_per_entry():
    cache = IC.InputCache(budget=1 << 20)
    cache.begin()
    calls = []
    e = cache.get({"n": 4}, 1, _make(4, 2.0))
    for _ in range(3):
        exp = cache.expected(e, lambda i: (calls.append("ref") or i["x"] * 2,))
        outs, err = cache.base(e, lambda i: (calls.append("base") or i["x"] * 2,),
                               lambda o: [C.Check(None, "", 0.5, 0.25)])
    assert calls == ["ref", "base"] and torch.equal(exp[0], outs[0]) and err == [0.25]
    assert [c.max_abs_err for c in e.base_checks] == [0.5]
    assert cache.stats["reference"] == 1 and cache.stats["base"] == 1


def test_fresh_copies_share_nothing_with_the_cached_originals():
    cache = IC.InputCache(budget=1 << 20)
    e = cache.get({"n": 8}, 1, _make(8))
    copy = IC.fresh_copy(e.originals)
    copy["x"].fill_(5.0)
    copy["k"].append(3)
    assert torch.equal(e.originals["x"], torch.ones(8)) and e.originals["k"] == [1, 2]
    assert copy["x"].data_ptr() != e.originals["x"].data_ptr()


def test_a_write_into_a_cached_tensor_is_found_and_the_entry_dropped():
    cache = IC.InputCache(budget=1 << 20)
    cache.begin()
    e = cache.get({"n": 300}, 1, _make(300))
    cache.expected(e, lambda i: (i["x"] + 1,))
    assert cache.verify() == []
    cache.begin()
    e = cache.get({"n": 300}, 1, _make(300))
    e.expected[0][123] = 7.0  # what an out-of-bounds store into the reference would do
    assert cache.verify() == [json.dumps({"n": 300})] and not cache.entries
    moved = IC.fingerprint(torch.tensor([1.0, 2.0] + [0.0] * 126))
    assert moved != IC.fingerprint(torch.tensor([2.0, 1.0] + [0.0] * 126))  # position-sensitive


def _old_checksum(t: torch.Tensor) -> tuple:
    """The fingerprint as first written (three passes): the two-pass one must give the same numbers."""
    raw = C._flat(t).view(torch.uint8)
    whole = raw.numel() // 4 * 4
    tail, ints = raw[whole:].to(torch.int64), raw[:whole].view(torch.int32)
    n = ints.numel() - ints.numel() % 64
    tag = torch.full((1,), 1 + (n > 0) + 2 * tail.numel(), dtype=torch.int64)
    if n == 0:
        return tuple(torch.cat([tag, ints.to(torch.int64), tail]).tolist())
    block = ints[:n].view(-1, 64)
    rows = block.sum(1, dtype=torch.int64)
    weights = torch.arange(rows.numel(), dtype=torch.int64) % 8191 + 1
    return tuple(torch.cat([tag, ints.sum(dtype=torch.int64).view(1), block.sum(0, dtype=torch.int64),
                            (rows * weights).sum().view(1), tail]).tolist())


def test_the_fingerprint_is_unchanged_by_taking_the_total_from_the_column_sums():
    g = torch.Generator().manual_seed(3)
    for nbytes in (7, 256, 259, 4 * 64 * 5 + 4 * 17 + 3, 4 * 64 * 300):
        t = torch.randint(0, 256, (nbytes,), generator=g, dtype=torch.uint8)
        assert IC.fingerprint(t) == _old_checksum(t), nbytes


class _Judge(IC.ListedInputs):
    """What ListedInputs needs of a Session: a harness, a reference and a base to call."""

    def __init__(self, base, library_base: bool = False):
        self.inputs, self.dev, self.base_fn = IC.InputCache(1 << 20), "cpu", base
        self.harness = type("H", (), {"library_base": library_base,
                                      "make_inputs": staticmethod(lambda shape, dev, seed: {
                                          "x": torch.linspace(-3, 3, 512) + seed % 7})})()

    def reference(self, x):
        return torch.sin(x)

    def call(self, fn, inputs, dirty, rec, sizes=()):
        return (fn(**inputs),)

    def _tol(self, t):
        return (1e-3, 1e-3)


def test_an_output_bit_for_bit_the_bases_gets_the_bases_check_and_nothing_else_does():
    judge = _Judge(lambda x: torch.sin(x))
    entry = judge.listed({"n": 512}, 5, 0)
    base_outs, _ = judge.listed_base(entry)
    expected = judge.listed_expected(entry)
    (chk, why), = judge.known_checks(entry, (base_outs[0].clone(),))
    fresh = C.compare(base_outs[0].clone(), expected[0], (1e-3, 1e-3), "out", like=base_outs[0])
    assert chk.problem is None and why is None
    assert (chk.max_abs_err, chk.mean_abs_err) == (fresh.max_abs_err, fresh.mean_abs_err)
    near = base_outs[0].clone()
    near[3] = torch.nextafter(near[3], torch.tensor(9.0))  # one ulp: correct, but not the same bits
    assert judge.known_checks(entry, (near,)) == [None]
    assert judge.known_checks(entry, (base_outs[0].double(),)) == [None]  # another dtype
    sub = torch.nn.Parameter(base_outs[0].clone(), requires_grad=False)  # a subclass is judged anew
    assert judge.known_checks(entry, (sub,)) == [None]
    assert judge.known_checks(entry, ()) is None  # not the base's arity: judged in full
    # No yardstick, or a base that fails its own check: every output judged in full.
    lib = _Judge(lambda x: torch.sin(x), library_base=True)
    assert lib.known_checks(lib.listed({"n": 512}, 5, 0), base_outs) is None
    wrong = _Judge(lambda x: torch.cos(x))
    e2 = wrong.listed({"n": 512}, 5, 0)
    outs, _ = wrong.listed_base(e2)
    assert wrong.known_checks(e2, outs) is None


def test_the_bases_precision_answer_is_reused_for_its_bits():
    """A base whose every output value fits in float16 (a reference that does not): an output with
    its bits gets the same precision_downgrade message as a freshly checked one."""
    judge = _Judge(lambda x: torch.sin(x).half().float())
    judge._tol = lambda t: (1e-2, 1e-2)
    entry = judge.listed({"n": 512}, 5, 0)
    base_outs, base_err = judge.listed_base(entry)
    (chk, why), = judge.known_checks(entry, (base_outs[0].clone(),))
    assert why and "float16" in why
    assert why == C.precision_downgrade(base_outs[0].clone(), judge.listed_expected(entry)[0],
                                        chk.mean_abs_err, base_err[0])


def test_listed_seeds_are_per_run_shape_and_trial():
    shape = {"tokens": 3}
    seeds = {IC.listed_seed(run, shape, t) for run in (0, FINAL_SEED_OFFSET) for t in range(3)}
    assert len(seeds) == 6
    assert IC.listed_seed(5, shape, 1) == IC.listed_seed(5, dict(shape), 1)
    assert IC.listed_seed(5, shape, 1) != IC.listed_seed(5, {"tokens": 4}, 1)


# -- in the worker (interpreter) -----------------------------------------------------------------
WRAPPER = '''
"""The demo rms_norm harness, with a `SLEEP`-second make_inputs and reference that log each call."""
import importlib.util
import json
import time
from pathlib import Path

_spec = importlib.util.spec_from_file_location("_ks_demo_rms_norm", {demo!r})
_h = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_h)
SHAPES, CPU_SHAPES, OUTPUTS, VARY = _h.SHAPES, _h.CPU_SHAPES, _h.OUTPUTS, _h.VARY
SLEEP = {sleep!r}
_LOG = Path({log!r})  # outside the harness folder: the referee pins that folder's files


def _note(what, shape, seed=None):
    kind = "listed" if shape in CPU_SHAPES else "fresh"
    with open(_LOG, "a") as f:
        f.write(json.dumps({{"call": what, "kind": kind, "seed": seed}}) + "\\n")


def make_inputs(shape, device, seed):
    _note("make_inputs", shape, seed)
    time.sleep(SLEEP)
    return _h.make_inputs(shape, device, seed)


def reference(x, weight, eps):
    shape = {{"tokens": x.shape[0], "hidden": x.shape[1], "dtype": str(x.dtype).replace("torch.", "")}}
    _note("reference", shape)
    time.sleep(SLEEP)
    return _h.reference(x, weight, eps)
'''


def _wrapped_task(folder: Path, sleep: float, log: Path):
    """The demo rms_norm operator judged by a logging harness whose calls take `sleep` seconds; the
    log lies in the referee's work folder, the one place the sandboxed worker may write."""
    folder.mkdir(parents=True)
    (folder / "slow_rms_norm.py").write_text(
        WRAPPER.format(demo=str(ROOT / "targets" / "demo" / "rms_norm.py"), sleep=sleep, log=str(log)))
    yaml = folder / "target.yaml"
    yaml.write_text(textwrap.dedent(f"""\
        repo: kernelsmith/demo
        clone_url: {MINISERVE}
        base: main
        operators:
          - name: rms_norm
            file: miniserve/kernels/rms_norm.py
            entry: rms_norm
            harness: slow_rms_norm.py
        """))
    return load_task(str(yaml), "rms_norm", checkout=str(MINISERVE)), log


def _calls(log: Path) -> list[dict]:
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def _count(calls, call, kind):
    return sum(1 for c in calls if c["call"] == call and c["kind"] == kind)


@pytest.fixture(scope="module")
def wrapped(tmp_path_factory):
    """Two referees on the same operator: a fast harness and one whose calls take 0.3 s each."""
    from kernelsmith.referee import Referee

    made = {}
    home = tmp_path_factory.mktemp("cache-env")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(home / "triton"))
        mp.setenv("XDG_CACHE_HOME", str(home / "xdg"))
        for name, sleep in (("fast", 0.0), ("slow", 0.3)):
            work = home / f"{name}-work"
            (work / "work").mkdir(parents=True)  # the referee's folder: the sandbox writes work/
            task, log = _wrapped_task(home / name, sleep, work / "work" / "calls.log")
            made[name] = (Referee(task, device="interpret", seed=77, timeout_s=120, prefork=False,
                                  workdir=work), log)
        yield made
        for ref, _ in made.values():
            ref.close()


def test_candidates_reuse_the_inputs_and_a_slow_harness_costs_them_nothing(wrapped):
    code = OP_FILE.read_text()
    n_listed = 2  # the demo harness's CPU_SHAPES
    phases = {}
    for name, (ref, log) in wrapped.items():
        ref.start()
        _calls(log)  # the boot's (base profile)
        first = ref.evaluate(code, candidate_id=1, timing="none")
        second = ref.evaluate(code, candidate_id=2, timing="none")
        assert first.accepted and second.accepted, (first.violations, second.violations)
        calls = _calls(log)
        # Candidate 2 is judged on candidate 1's inputs: no make_inputs, reference or base call
        # for a listed shape; its fresh (VARY) shapes are made anew for it.
        stats = second.details["input_cache"]
        assert stats["hits"] == 3 * n_listed and stats["misses"] == 0
        assert stats["make_inputs"] == stats["reference"] == stats["base"] == 0
        made = first.details["input_cache"]
        assert made["misses"] + made["hits"] == 3 * n_listed
        listed = _count(calls, "make_inputs", "listed") + _count(calls, "reference", "listed")
        assert listed == made["make_inputs"] + made["reference"]
        assert _count(calls, "make_inputs", "fresh") == len(first.fresh_shapes) + len(second.fresh_shapes) > 0
        third = ref.evaluate(code, candidate_id=3, timing="none")
        assert third.details["input_cache"]["make_inputs"] == 0
        # The least of two candidates' phases: one slow moment of a loaded machine is not the harness.
        phases[name] = min(v.details["phase_s"]["correctness"] for v in (second, third))
    # Uncached, the slow harness would add 2 shapes x 3 trials x (0.3 s + 0.3 s) = 3.6 s here.
    assert phases["slow"] < phases["fast"] + 1.0, phases


def test_the_final_remeasurement_draws_new_inputs(wrapped):
    ref, log = wrapped["fast"]
    code = OP_FILE.read_text()
    run_seeds = {IC.listed_seed(77, s, t) for s in ref.task.harness.shapes_for("interpret") for t in range(3)}

    def listed_seeds():
        return {c["seed"] for c in _calls(log) if c["call"] == "make_inputs" and c["kind"] == "listed"}

    ref.start()
    for cid in (5, 6):  # search evaluations (and the boot, if it happens here): the run's seeds only
        assert ref.evaluate(code, candidate_id=cid, timing="none").accepted
        assert listed_seeds() <= run_seeds
    # As Evaluator.remeasure does it: the run seed + FINAL_SEED_OFFSET, compiled afresh.
    final = ref.evaluate(code, candidate_id=5, timing="none", seed=77 + FINAL_SEED_OFFSET, fresh_compile=True)
    made = listed_seeds()
    assert final.accepted and final.details["input_cache"]["misses"] == 6 and len(made) == 6
    assert not made & run_seeds


@pytest.mark.parametrize("cheat", ["rms_norm__input_mutation.py", "rms_norm__cache_by_pointer.py"])
def test_cheats_are_caught_on_cached_inputs(referees, cheat):
    ref = referees("rms_norm")
    assert ref.evaluate(OP_FILE.read_text(), candidate_id=10, timing="none").accepted  # fills the cache
    path = CORPUS / "cheats" / cheat
    v = ref.evaluate(path.read_text(), candidate_id=11, timing="none")
    assert expected_outcome(path) in v.violations, (v.violations, v.details.get("messages"))
    stats = v.details["input_cache"]
    assert stats["hits"] > 0 and stats["make_inputs"] == 0


def test_a_cache_too_small_for_anything_still_judges_on_the_run_inputs(tmp_path):
    """Every entry evicted at once: the inputs are made again each time, on the same seeds, and the
    verdicts are the same (a cheat is still caught)."""
    from kernelsmith.referee import Referee

    work = tmp_path / "work"
    (work / "work").mkdir(parents=True)  # the referee's folder: the sandbox writes work/
    task, log = _wrapped_task(tmp_path / "tiny", 0.0, work / "work" / "calls.log")
    with Referee(task, device="interpret", seed=77, timeout_s=120, prefork=False, input_cache_bytes=0,
                 workdir=work) as ref:
        ref.start()
        _calls(log)
        v = ref.evaluate(OP_FILE.read_text(), candidate_id=1, timing="none")
        stats = v.details["input_cache"]
        assert v.accepted and stats["hits"] == 0 and stats["misses"] == 6 and stats["entries"] == 0
        seeds = {c["seed"] for c in _calls(log) if c["call"] == "make_inputs" and c["kind"] == "listed"}
        shapes = task.harness.shapes_for("interpret")
        assert seeds == {IC.listed_seed(77, s, t) for s in shapes for t in range(3)}
        cheat = CORPUS / "cheats" / "rms_norm__input_mutation.py"
        assert "input_mutation" in ref.evaluate(cheat.read_text(), candidate_id=2, timing="none").violations
