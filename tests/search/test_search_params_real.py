"""The tunables found in real upstream launchers (LMDeploy, SGLang), read from their sources
(tests/upstreamkit.py: the release checkouts scripts/test.sh makes, or LMDEPLOY_CHECKOUT /
SGLANG_CHECKOUT); skipped without them (the fixture tests in test_search_tunables.py cover the same
patterns)."""

from __future__ import annotations

import ast
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import upstreamkit
from test_search_tunables import _assert_each_render_changes_only_its_constant

from kernelsmith.harness.model import load_harness
from kernelsmith.launch.sizekeys import size_key
from kernelsmith.launch.tunables import discover, label, relevant, render_table
from kernelsmith.search.mutators.space import ConfigSpace

ROOT = Path(__file__).resolve().parents[2]
LMDEPLOY = "lmdeploy/lmdeploy/pytorch/kernels/cuda"
SGLANG = "sglang/python/sglang/kernels/ops"
STAGES = [1, 2, 3, 4, 5, 6]
WARPS = [1, 2, 4, 8, 16, 32]

# file, entry, {label: (kind, base)}, {label: domain checks}
CASES = [
    (
        f"{LMDEPLOY}/rms_norm.py",
        "rms_norm",
        {
            "num_warps|div": ("scale", 2048),
            "num_warps|cap": ("num_warps", 4),
            "num_stages": ("num_stages", 1),
        },
        {"num_warps|div": lambda d: d[0] <= 64 and d[-1] >= 65536, "num_stages": lambda d: d == STAGES},
    ),
    (
        f"{LMDEPLOY}/activation.py",
        "silu_and_mul",
        {"BLOCK_SIZE_N|cap": ("block", 512), "num_warps": ("num_warps", 4), "num_stages": ("num_stages", 1)},
        {"BLOCK_SIZE_N|cap": lambda d: d[-1] >= 512 * 64, "num_stages": lambda d: d == STAGES},
    ),
    (
        f"{LMDEPLOY}/apply_rotary_pos_emb.py",
        "apply_rotary_pos_emb",
        {"num_warps": ("num_warps", 2), "num_stages": ("num_stages", 1), "BLOCK|floor": ("block", 1)},
        {"num_stages": lambda d: d == [1], "BLOCK|floor": lambda d: d[-1] >= 1024},
    ),
    (
        f"{LMDEPLOY}/multinomial_sampling.py",
        "multinomial_sampling",
        {"BLOCK_N": ("block", 128), "num_warps": ("num_warps", 1), "num_stages": ("num_stages", 3)},
        {"BLOCK_N": lambda d: d[-1] >= 8192, "num_warps": lambda d: d == WARPS},
    ),
    (
        f"{LMDEPLOY}/fused_single_group_router.py",
        "fused_single_group_topk_router",
        {"BLOCK_SIZE": ("block", 256), "num_warps": ("num_warps", 8), "num_stages": ("num_stages", 1)},
        {"num_stages": lambda d: d == [1]},  # its only loop is a static_range
    ),
    (
        f"{SGLANG}/layernorm/fused_rmsnorm.py",
        "fused_rmsnorm",
        {
            "max_warps": ("num_warps", 32),
            "num_warps|div": ("scale", 256),
            "num_warps|floor": ("num_warps", 4),
        },
        {"num_warps|div": lambda d: d[0] <= 8 and d[-1] >= 8192},
    ),
    (
        f"{SGLANG}/activation/gelu_and_mul_triton.py",
        "gelu_and_mul_triton",
        # `cdiv(hidden_dim, 8 * 32)`: the divisor is the product, one knob around 256
        {"max_warps": ("num_warps", 32), "num_warps|div": ("scale", 256),
         "num_warps|floor": ("num_warps", 4)},
        {"num_warps|div": lambda d: d[0] == 4 and d[-1] >= 8192},
    ),
    (
        f"{SGLANG}/attention/merge_state.py",
        "merge_state_triton",
        {"num_warps": ("num_warps", 4)},  # left to Triton's default; a change inserts the keyword
        {"num_warps": lambda d: d == WARPS},
    ),
]


@pytest.mark.parametrize("rel, entry, found, domains", CASES, ids=[Path(c[0]).stem for c in CASES])
def test_real_launchers(rel, entry, found, domains):
    path = upstreamkit.require_file(rel)
    code = path.read_text()
    ts = relevant(discover(code), code, entry)
    assert {label(t): (t.kind, t.base) for t in ts} == found
    for t in ts:
        assert domains.get(label(t), lambda d: True)(t.domain), (label(t), t.domain)
    _assert_each_render_changes_only_its_constant(code, ts)
    per_call = [t for t in ts if t.per_call and len(t.domain) > 1]
    rows = [{t.key: t.domain[0] for t in per_call}, {t.key: t.domain[-1] for t in per_call}]
    ast.parse(render_table(code, ts, [4096, None], rows, {}))  # a per-size table of them is valid code


# What each launcher's per-call knobs are computed from or tile (sizekeys.py): a table keys on it.
KEYS = {
    "multinomial_sampling": "scores.shape[1]",  # BLOCK_N walks the vocabulary, not batch x vocab
    "rms_norm": "weight.shape[0]",
    "activation": "gate_up.shape[-1]",
    "fused_rmsnorm": "x.shape[1]",
    "gelu_and_mul_triton": "hidden_states.shape[1]",
}


@pytest.mark.parametrize("rel, entry", [(c[0], c[1]) for c in CASES if Path(c[0]).stem in KEYS],
                         ids=[Path(c[0]).stem for c in CASES if Path(c[0]).stem in KEYS])
def test_table_keys_of_real_launchers(rel, entry):
    path = upstreamkit.require_file(rel)
    code = path.read_text()
    assert size_key(code, relevant(discover(code), code, entry), entry).expr == KEYS[Path(rel).stem]


def test_the_samplers_table_buckets_by_vocabulary():
    """LMDeploy's sampler over its harness's GPU shapes: three buckets by vocabulary length, each
    holding every batch size of that vocabulary, split at geometric midpoints."""
    path = upstreamkit.require_file(f"{LMDEPLOY}/multinomial_sampling.py")
    harness = load_harness(ROOT / "targets" / "lmdeploy" / "multinomial_sampling.py")
    task = SimpleNamespace(base_code=path.read_text(), harness=harness,
                           operator=SimpleNamespace(entry="multinomial_sampling"))
    space = ConfigSpace(task, device="cuda")
    vocab = [s["vocab"] for s in harness.shapes_for("cuda")]
    assert space.key.expr == "scores.shape[1]" and space.sizes == vocab
    assert space.limits == [int(math.sqrt(32000 * 128256)), int(math.sqrt(128256 * 151936)), None]
    assert [t.key.rsplit(".", 1)[-1] for t in space.tabled] == ["multinomial_sampling:BLOCK_N", "num_warps",
                                                                 "num_stages"]
    # The batch is the second level, used only where the measurements say it matters.
    batches = [s["batch"] for s in harness.shapes_for("cuda")]
    assert space.key2.expr == "scores.shape[0]" and space.sizes2 == batches
    block, warps = space.tabled[0].key, space.tabled[1].key

    def speed(shape, n, w, small_batch_gain):
        """Long rows want BLOCK_N 4096, 32k rows 1024 with 4 warps; with 4096, 4 warps instead of 8
        gain `small_batch_gain` below batch 50 and lose 5% above."""
        if shape["vocab"] < 64000:
            return 3.0 if (n, w) == (1024, 4) else 1.5
        if (n, w) == (4096, 4):
            return 3.0 * (small_batch_gain if shape["batch"] < 50 else 0.95)
        return 3.0 if (n, w) == (4096, 8) else 1.5

    def measured(cid, n, w, gain, ci):
        sp = [speed(s, n, w, gain) for s in space.shapes]
        shapes = [{"shape": s, "speedup": v, "ci95": [v * (1 - ci), v * (1 + ci)]}
                  for s, v in zip(space.shapes, sp, strict=True)]
        verdict = {"accepted": True, "timed": True, "timing": {"noisy": False}, "shapes": shapes,
                   "geomean_speedup": math.prod(sp) ** (1 / len(sp))}
        return {"id": cid, "mutator": "base" if cid == 1 else "params", "status": "evaluated",
                "params": None if cid == 1 else {"values": {**space.base_values, block: n, warps: w}},
                "verdict": verdict, "speedup": verdict["geomean_speedup"]}

    configs = [(128, 1), (1024, 4), (4096, 8), (4096, 4)]
    for gain, ci in ((1.0, 0.01), (1.03, 0.03)):  # batch does not matter; a 3% edge within ±3% CIs
        space.sync([measured(i + 1, n, w, gain, ci) for i, (n, w) in enumerate(configs)])
        table = space.table_proposal()
        assert table is not None and "limits2" not in table["table"]  # keyed on the vocabulary only
        assert "_ks_cfg = _ks_config(scores.shape[1])" in space.render(table)
    space.sync([measured(i + 1, n, w, 1.10, 0.01) for i, (n, w) in enumerate(configs)])
    table = space.table_proposal()  # 10% beyond ±1% CIs: the measurements say the batch matters
    assert table is not None and "limits2" in table["table"]
    assert "_ks_cfg = _ks_config(scores.shape[1], scores.shape[0])" in space.render(table)
