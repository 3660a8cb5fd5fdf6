"""The base's autotune choices are made once per run, in the oracle, and handed on as data: every
runner and later worker runs the base and its A/A copy with them; a candidate's own kernels are tuned
in its runner (kernelsmith/referee/proc/autotune_share.py)."""

import sys

import pytest
from tiny_project import TINY, tiny_task

from kernelsmith.loader import load_operator_module
from kernelsmith.referee.proc.autotune_share import Tuning, checked_report, checked_table, table_size

HARNESS = '''
import torch

SHAPES = [{"n": 4096}]
CPU_SHAPES = [{"n": 100}, {"n": 37}]
OUTPUTS = None
VARY = {"n": [5, 130, 300]}


def make_inputs(shape, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    return {"x": torch.randn(shape["n"], generator=g, device=device)}


def reference(x):
    return x * 2
'''
KERNEL = "tiny.kern._double_kernel"
CONFIGS = 'configs=[triton.Config({"MARK": 0}), triton.Config({"MARK": 1})]'
# A candidate with a config list of its own (each config right): its runner must tune it.
OWN_CONFIGS = 'configs=[triton.Config({"MARK": 0}, num_warps=2), triton.Config({"MARK": 0}, num_warps=8)]'


def _referee(tmp_path, monkeypatch):
    from kernelsmith.referee import Referee

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = tiny_task(tmp_path, "double", "double", HARNESS, kern="tuned_kern.py")
    return Referee(task, device="interpret", seed=3, timeout_s=120, prefork=False)


def test_the_base_runs_with_the_oracles_choices_in_every_runner_and_later_worker(tmp_path, monkeypatch):
    """The runner would choose config 1 (a wrong answer) if it tuned the base itself: the base is
    accepted only when it runs with the oracle's choice, on the listed shapes and the fresh ones.
    A replacement worker's oracle is given the choices too and tunes nothing."""
    code = (TINY / "tuned_kern.py").read_text()
    with _referee(tmp_path, monkeypatch) as ref:
        base = ref.evaluate(None)
        first = dict(ref.last_autotune)
        crash = ref.evaluate(code + "\nraise RuntimeError('replace the worker')\n", candidate_id=1)
        again = ref.evaluate(None, candidate_id=0)
        second = dict(ref.last_autotune)
    assert base.accepted, base.feedback()
    assert not crash.accepted and ref.workers_started >= 2
    assert again.accepted, again.feedback()
    for verdict in (base, again):
        chosen = verdict.details["autotune"][KERNEL]
        # Two listed shapes and the fresh ones: one key each (n and the two tensors' dtypes).
        assert len(chosen) == 2 + len(verdict.fresh_shapes) >= 3, chosen
        assert all(c["source"] == "shared" and c["config"].startswith("MARK: 0,") for c in chosen.values())
    assert first == {"kernels": 1, "given": 0, "tuned": 2, "compiled": 0}  # listed shapes; interpreted
    assert second["given"] >= 2 + len(base.fresh_shapes) and second["tuned"] == 0


def test_a_candidates_own_kernel_is_tuned_in_its_runner(tmp_path, monkeypatch):
    code = (TINY / "tuned_kern.py").read_text()
    assert code.count(CONFIGS) == 1
    with _referee(tmp_path, monkeypatch) as ref:
        verdict = ref.evaluate(code.replace(CONFIGS, OWN_CONFIGS), candidate_id=1, timing="none")
    assert verdict.accepted, verdict.feedback()
    own = verdict.details["autotune"][f"{KERNEL} (candidate)"]
    # The runner's benchmark prefers the second config: tuned there, not handed the base's.
    assert own and all(c["source"] == "tuned" and "num_warps: 8" in c["config"] for c in own.values())
    assert all(c["source"] == "shared" for c in verdict.details["autotune"][KERNEL].values())


@pytest.fixture
def modules(tmp_path):
    """The tuned kernel file loaded as the base, its A/A copy and a candidate, in this process."""
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "__init__.py").write_text("")
    (tmp_path / "tiny" / "kern.py").write_text((TINY / "tuned_kern.py").read_text())
    before = set(sys.modules)
    tuning = Tuning()
    code = (TINY / "tuned_kern.py").read_text()
    loaded = {tag: load_operator_module(tmp_path, "tiny/kern.py", tag=tag, code=code,
                                        source_path=tmp_path / f"{tag}.py") for tag in ("base", "aa", "c7")}
    yield tuning, {tag: mod._double_kernel for tag, mod in loaded.items()}
    for name in set(sys.modules) - before:
        sys.modules.pop(name, None)


def test_choices_are_taken_for_the_base_and_its_copy_only_where_the_kernel_has_that_config(modules):
    tuning, kernels = modules
    key = (100, "torch.float32", "torch.float32")
    kernels["base"].cache[key] = kernels["base"].configs[1]
    table = tuning.table()  # a trusted process's: the candidate's kernel is never in it
    assert table == {KERNEL: {"configs": 2, "chosen": [[list(key), 1, str(kernels["base"].configs[1])]]}}
    assert table_size(table) == 1 and checked_table(table) == table
    other = [37, "torch.float16", "torch.float16"]
    given = {KERNEL: {"configs": 2, "chosen": [
        [other, 0, str(kernels["base"].configs[0])],
        [[5, "torch.float16", "torch.float16"], 0, "MARK: 7, num_warps: 4"],  # not the config at index 0
        [list(key), 0, str(kernels["base"].configs[0])],  # the base chose for this key itself: kept
    ]}}
    assert tuning.seed(given) == 3  # `other` for the base, `other` and `key` for the A/A copy
    assert kernels["aa"].cache == {tuple(other): kernels["aa"].configs[0], key: kernels["aa"].configs[0]}
    base = kernels["base"]
    assert base.cache == {key: base.configs[1], tuple(other): base.configs[0]}
    assert kernels["c7"].cache == {}  # a candidate's own kernel tunes itself
    assert tuning.seed({KERNEL: {"configs": 3, "chosen": [[[1], 0, str(kernels["base"].configs[0])]]}}) == 0
    assert tuning.counts() == {"kernels": 3, "given": 3, "tuned": 1}
    kernels["c7"].cache[key] = kernels["c7"].configs[1]
    report = checked_report(tuning.report())
    assert report[KERNEL]['[37, "torch.float16", "torch.float16"]']["source"] == "shared"
    assert report[KERNEL]['[100, "torch.float32", "torch.float32"]']["source"] == "tuned"
    assert report[f"{KERNEL} (candidate)"]['[100, "torch.float32", "torch.float32"]'] == {
        "config": str(kernels["c7"].configs[1]), "source": "tuned"}


@pytest.mark.parametrize("table", [
    [], {"k": {"configs": 2}}, {"k": {"configs": 1, "chosen": []}},
    {"k": {"configs": 2, "chosen": [[[1], 2, "x"]]}},  # index past the list
    {"k": {"configs": 2, "chosen": [[[[1]], 0, "x"]]}},  # a key that is no list of plain values
    {"k": {"configs": 2, "chosen": [[[1], 0, 5]]}},
])
def test_a_malformed_table_is_refused(table):
    with pytest.raises(ValueError):
        checked_table(table)


# The later config is faster in every process, and the output does not show which one ran.
LATER_IS_FASTER = '''
import torch
import triton
import triton.language as tl

BENCHED = []


def _bench(kernel_call, quantiles=None, **_):
    kernel_call()
    BENCHED.append(len(BENCHED) % 2)
    return [2.0 - BENCHED[-1]] * 3


@triton.autotune(configs=[triton.Config({"MARK": 0}), triton.Config({"MARK": 1})], key=["n"], do_bench=_bench)
@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, MARK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2 + MARK * 0, mask=mask)


def double(x):
    out = torch.empty_like(x)
    _double_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out
'''


def test_a_fresh_shapes_key_is_not_benchmarked_in_the_oracle(tmp_path, monkeypatch):
    """Listed shapes are timed: their keys are benchmarked (the faster config 1 wins). A fresh shape
    is only checked for correctness: its key takes the first config that runs (0), and the runner is
    handed that choice like any other."""
    from kernelsmith.onboard.task import load_task
    from kernelsmith.referee import Referee

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    tiny_task(tmp_path, "double", "double", HARNESS)
    (tmp_path / "proj" / "tiny" / "kern.py").write_text(LATER_IS_FASTER)
    task = load_task(str(tmp_path / "targets" / "tiny.yaml"), "double", checkout=str(tmp_path / "proj"))
    with Referee(task, device="interpret", seed=3, timeout_s=120, prefork=False) as ref:
        verdict = ref.evaluate(None)
    assert verdict.accepted, verdict.feedback()
    chosen = verdict.details["autotune"][KERNEL]
    listed = {f'[{n}, "torch.float32", "torch.float32"]' for n in (100, 37)}
    fresh = {f'[{s["n"]}, "torch.float32", "torch.float32"]' for s in verdict.fresh_shapes} - listed
    assert fresh and set(chosen) == listed | fresh, chosen
    assert all(chosen[k]["config"].startswith("MARK: 1,") for k in listed), chosen
    assert all(chosen[k]["config"].startswith("MARK: 0,") for k in fresh), chosen
    assert all(c["source"] == "shared" for c in chosen.values())
