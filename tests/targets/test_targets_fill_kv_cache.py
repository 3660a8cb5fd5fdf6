"""LMDeploy's fill_kv_cache harness: a paged cache whose block count follows the seed, written at
some slots only (issue 14's motivating case).

The harness tests need no upstream sources; the referee tests run the real kernel file from the
LMDeploy sources (tests/upstreamkit.py) under the interpreter.
"""

from pathlib import Path

import pytest
import torch
import upstreamkit

from kernelsmith.harness.model import load_harness
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee

TARGETS = Path(__file__).resolve().parents[2] / "targets"
YAML = TARGETS / "lmdeploy.yaml"
HARNESS = load_harness(load_target(YAML).operator("fill_kv_cache").harness)


def _slot_by_slot(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """The caches after the fill, one token at a time in Python (as upstream's test builds its `gt`)."""
    k_out, v_out = inputs["k_caches"].clone(), inputs["v_caches"].clone()
    bs = k_out.size(1)
    table = inputs["block_offsets"].tolist()
    starts, q_lens = inputs["q_start_loc"].tolist(), inputs["q_seq_length"].tolist()
    for b, kv_len in enumerate(inputs["kv_seq_length"].tolist()):
        for j in range(q_lens[b]):
            pos = kv_len - q_lens[b] + j
            block, row = table[b][pos // bs], pos % bs
            k_out[block, row] = inputs["k_states"][starts[b] + j]
            v_out[block, row] = inputs["v_states"][starts[b] + j]
    return k_out, v_out


@pytest.mark.parametrize("shape", HARNESS.cpu_shapes + [
    {"batch": 5, "q_per_seq": 9, "max_history": 40, "block_size": 8, "heads": 3, "q_heads": 6,
     "head_dim": 24, "dtype": "float16"}])
@pytest.mark.parametrize("seed", [0, 3])
def test_reference_writes_exactly_the_new_tokens_slots(shape, seed):
    inputs = HARNESS.make_inputs(shape, "cpu", seed)
    k_ref, v_ref = HARNESS.reference(**inputs)
    k_loop, v_loop = _slot_by_slot(inputs)
    assert torch.equal(k_ref, k_loop) and torch.equal(v_ref, v_loop)
    tokens = shape["batch"] * shape["q_per_seq"]
    changed = (k_ref != inputs["k_caches"]).any(-1).any(-1).sum()  # (block, row) slots rewritten
    assert int(changed) == tokens  # random old contents: every written slot changes, no other does


def test_sizes_follow_the_seed_and_the_token_count_the_shape():
    for shape in HARNESS.shapes + HARNESS.cpu_shapes:
        small = dict(shape, batch=min(shape["batch"], 8), q_per_seq=min(shape["q_per_seq"], 4),
                     heads=1, q_heads=1, head_dim=4)  # the lengths and table, at a small size
        drawn = [HARNESS.make_inputs(small, "cpu", seed) for seed in range(4)]
        for inputs in drawn:
            assert inputs["k_states"].size(0) == small["batch"] * small["q_per_seq"]  # bytes_moved is exact
            assert inputs["max_q_seq_length"] == int(inputs["q_seq_length"].max())
            assert bool((inputs["q_seq_length"] >= 1).all())
            assert inputs["q_start_loc"].dtype == torch.int64 and inputs["block_offsets"].dtype == torch.int32
        if shape["max_history"] > 8 * shape["block_size"]:
            assert len({d["k_caches"].size(0) for d in drawn}) > 1, shape  # the block count follows the seed
    decode = [s for s in HARNESS.shapes if s["q_per_seq"] == 1]
    assert decode and all(HARNESS.make_inputs(dict(s, heads=1, q_heads=1, head_dim=4), "cpu", 1)
                          ["max_q_seq_length"] == 1 for s in decode)


def _checkout() -> Path:
    return upstreamkit.require("lmdeploy")


@pytest.fixture
def referee(tmp_path, monkeypatch):
    """A referee (interpreter) for fill_kv_cache on the checkout, with the yaml's harness or another."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    root, made = _checkout(), []

    def make(harness_text: str | None = None):
        yaml = YAML
        if harness_text is not None:
            (tmp_path / "h.py").write_text(harness_text)
            yaml = tmp_path / "lmdeploy.yaml"
            yaml.write_text(YAML.read_text().replace("harness: lmdeploy/fill_kv_cache.py",
                                                     f"harness: {tmp_path / 'h.py'}")
                            .replace("lmdeploy.messages: lmdeploy/stubs/",
                                     f"lmdeploy.messages: {TARGETS / 'lmdeploy' / 'stubs'}/"))
        task = load_task(str(yaml), "fill_kv_cache", checkout=str(root))
        made.append(Referee(task, device="interpret", seed=7, timeout_s=300, prefork=False))
        return made[-1]

    yield make
    for r in made:
        r.close()


def test_a_candidate_that_writes_whole_blocks_is_rejected(referee):
    ref = referee()
    store = "tl.store(kc_ptrs, k, mask=mask_kc)"
    assert store in ref.task.base_code
    # "Drop the row mask": rows of the block before the history's end, or past the sequence's end,
    # get whatever the masked load left there; the old slots must keep their values.
    code = ref.task.base_code.replace(store, "tl.store(kc_ptrs, k, mask=d_off[None, :] < head_dim)", 1)
    verdict = ref.evaluate(code, candidate_id=3, timing="none")
    assert not verdict.accepted and verdict.reason == "incorrect", verdict.feedback()
    assert "k_caches" in " ".join(verdict.details["messages"])


def test_without_inplace_the_base_leaves_poison_and_the_message_says_inplace(referee):
    text = HARNESS.path.read_text()
    assert 'INPLACE = ["k_caches", "v_caches"]' in text
    ref = referee(text.replace('INPLACE = ["k_caches", "v_caches"]', "INPLACE = []"))
    verdict = ref.evaluate(None, timing="none")
    assert not verdict.accepted and verdict.reason == "unwritten_output", verdict.feedback()
    assert "INPLACE" in " ".join(verdict.details["messages"])


def test_params_knobs_are_launch_options_not_the_grids_block_count():
    from kernelsmith.launch.tunables import discover, label, relevant

    op = load_target(YAML).operator("fill_kv_cache")
    code = (_checkout() / op.file).read_text()
    labels = {label(t) for t in relevant(discover(code), code, op.entry)}
    assert "num_warps" in labels
    # `max_num_blocks = 1` (decode) else `cdiv(max_q_seq_length, block_size) + 1`: the grid's count of
    # cache blocks per sequence, derived from the inputs; every value above 1 only launches more
    # programs (and turns the decode path off), so it is no launch choice.
    assert "max_num_blocks" not in labels


# A kernel that returns early when the first slot it would write already holds its key. Every
# correctness trial starts from random old cache contents (and the determinism rerun restores them),
# so it always does the work there; timing restores the INPLACE outputs before every timed call
# (referee/timing.py), so it must do the work there too (before that fix it skipped the copy).
_SKIP_IF_FILLED = """
    first = tl.min(tl.where(kv_mask, page_offs, 1 << 30), 0)
    q_first = tl.min(tl.where(kv_mask, q_offs, 1 << 30), 0)
    k_new = tl.load(ks_ptr + q_first * stride_kss + d_off * stride_ksd)
    k_old = tl.load(kc_ptr + first * stride_kcb + d_off * stride_kcd)
    if tl.sum((k_new != k_old).to(tl.int32), 0) == 0:
        return
"""


def _skip_if_filled(base_code: str) -> str:
    anchor = "    k = tl.load(ks_ptrs, mask=mask_ks)\n"  # first in _fill_kv_cache_kernel (quant_policy NONE)
    assert base_code.index(anchor) < base_code.index("def _fill_kv_cache_fp8_scalar_kernel(")
    return base_code.replace(anchor, _SKIP_IF_FILLED.lstrip("\n") + anchor, 1)


def test_a_kernel_that_skips_already_filled_slots_passes_every_correctness_trial(referee):
    # The premise of the GPU test below: nothing before timing tells this kernel from the base.
    ref = referee()
    verdict = ref.evaluate(_skip_if_filled(ref.task.base_code), candidate_id=4, timing="none")
    assert verdict.accepted, verdict.feedback()


@pytest.mark.gpu
def test_a_kernel_that_skips_already_filled_slots_gains_nothing_in_timing(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    task = load_task(str(YAML), "fill_kv_cache", checkout=str(_checkout()))
    with Referee(task, device="cuda", seed=7) as ref:
        verdict = ref.evaluate(_skip_if_filled(task.base_code), candidate_id=4).to_json()
    assert verdict["accepted"], verdict  # the premise: correct on every trial
    shapes = [(s["shape"], s.get("speedup")) for s in verdict["shapes"]]
    assert (verdict.get("geomean_speedup") or 0) < 1.05, shapes
