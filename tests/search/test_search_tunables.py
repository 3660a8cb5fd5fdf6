"""Tunables from the syntax tree: demo kernels, an upstream-style file with triton.Config lists, and
fixture launchers written for these tests in the shapes upstream launchers take (warps computed from
the row size, capped block sizes, `**config` dicts with a platform switch, rows per program with a
floor, launches that leave num_warps/num_stages to Triton)."""

from __future__ import annotations

import ast
import difflib
import importlib.util
import io
import math
import random
import tokenize
from pathlib import Path
from types import SimpleNamespace

import torch

from kernelsmith.launch.tunables import discover, label, relevant, render, render_table
from kernelsmith.loader import load_operator_module
from kernelsmith.search.mutators.params import GridMutator, ParamsMutator

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "examples" / "miniserve" / "miniserve" / "kernels"
UPSTREAM = Path(__file__).parent / "data" / "upstream_style.py"

# Warps from the row size (a divisor and a cap in one expression), a persistent loop over rows.
ROWNORM = """import torch
import triton
import triton.language as tl


@triton.jit
def _rownorm_kernel(x_ptr, out_ptr, n_rows, n_cols, stride, BLOCK_C: tl.constexpr, STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK_C)
    mask = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
        inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + 1e-6)
        tl.store(out_ptr + row * stride + cols, x * inv, mask=mask)


def rownorm(x):
    assert x.dim() == 2
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    BLOCK_C = triton.next_power_of_2(n_cols)
    num_warps = min(triton.cdiv(BLOCK_C, 1024), 8)
    stages = 1
    grid = (n_rows,)
    _rownorm_kernel[grid](x, out, n_rows, n_cols, x.stride(0), BLOCK_C=BLOCK_C, STAGES=stages,
                          num_warps=num_warps, num_stages=stages)
    return out
"""

# A block size capped by min() (the cap is the knob), an assert bounding it, a semantic `// 2`.
GATED = """import triton
import triton.language as tl


@triton.jit
def _gated_kernel(x_ptr, out_ptr, d, stride_x, stride_o, BLOCK_D: tl.constexpr):
    row = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_D + tl.arange(0, BLOCK_D)
    mask = cols < d
    g = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * stride_x + d + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, g / (1.0 + tl.exp(-g)) * u, mask=mask)


def gated(x):
    rows = x.shape[0]
    d = x.shape[-1] // 2
    out = x.new_empty(rows, d)
    BLOCK_D = triton.next_power_of_2(d)
    BLOCK_D = min(BLOCK_D, 64)
    assert BLOCK_D <= 8192
    grid = (triton.cdiv(d, BLOCK_D), rows)
    _gated_kernel[grid](x, out, d, x.stride(0), out.stride(0), BLOCK_D=BLOCK_D, num_warps=4)
    return out
"""

# A **config dict (warps from a divisor that is a product, a floor, a platform-switched cap), and a
# rows-per-program block derived from the warps with only a floor as literal, passed by position.
SCALE_ROWS = """import torch
import triton
import triton.language as tl

_is_rocm = False


@triton.jit
def _scale_rows_kernel(x_ptr, out_ptr, n_rows, d, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < d)
    offs = rows[:, None] * d + cols[None, :]
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def scale_rows(x):
    n_rows, d = x.shape
    out = torch.empty_like(x)
    max_warps = 8 if _is_rocm else 16
    config = {
        "BLOCK_D": triton.next_power_of_2(d),
        "num_warps": max(min(triton.next_power_of_2(triton.cdiv(d, 4 * 32)), max_warps), 2),
    }
    per_thread = 16 // x.element_size()
    BLOCK_R = config["num_warps"] * 32 * per_thread // config["BLOCK_D"]
    BLOCK_R = max(1, BLOCK_R)
    _scale_rows_kernel[(triton.cdiv(n_rows, BLOCK_R),)](x, out, n_rows, d, BLOCK_R, **config)
    return out
"""

# Launches that leave num_warps (and num_stages, where the kernel loops) to Triton; a plain block
# size far below its optimum; a static_range kernel (unrolled: nothing for num_stages to pipeline).
IMPLICIT = """import torch
import triton
import triton.language as tl


@triton.jit
def _row_max_kernel(p_ptr, out_ptr, n, stride, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    best = tl.full((BLOCK_N,), -1.0, tl.float32)
    for start in range(0, n, BLOCK_N):
        offs = start + tl.arange(0, BLOCK_N)
        x = tl.load(p_ptr + row * stride + offs, mask=offs < n, other=-1.0).to(tl.float32)
        best = tl.maximum(best, x)
    tl.store(out_ptr + row, tl.max(best, axis=0))


@triton.jit
def _top2_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, K: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=-1e30)
    for i in tl.static_range(K):
        m = tl.max(x, axis=0)
        tl.store(out_ptr + i, m)
        x = tl.where(x == m, -1e30, x)


def row_max(p):
    rows, n = p.shape
    out = p.new_empty(rows, dtype=torch.float32)
    BLOCK_N = 128
    _row_max_kernel[(rows,)](p, out, n, p.stride(0), BLOCK_N=BLOCK_N)
    return out


def top2(x):
    out = x.new_empty(2)
    _top2_kernel[(1,)](x, out, x.numel(), BLOCK=256, K=2, num_warps=8, num_stages=1)
    return out
"""

_SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}


def _tokens(code):
    return [
        (t.type, t.string)
        for t in tokenize.generate_tokens(io.StringIO(code).readline)
        if t.type not in _SKIP
    ]


def _token_diff(a, b):
    """The token runs that differ between two sources (whitespace and comments ignored)."""
    ta, tb = _tokens(a), _tokens(b)
    ops = difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes()
    return [(ta[i1:i2], tb[j1:j2]) for op, i1, i2, j1, j2 in ops if op != "equal"]


def _table(ts):
    return {label(t): (t.kind, t.base, t.domain) for t in ts}


def _load(tmp_path, code, name):
    path = tmp_path / f"{name}.py"
    path.write_text(code)  # Triton reads kernel source through inspect: it must be a file
    spec = importlib.util.spec_from_file_location(f"ks_fixture_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _assert_each_render_changes_only_its_constant(code, ts):
    """Every tunable set to its farthest other value: valid code whose only change is that value (the
    literal, or the whole expression of literals holding it: `4 * 32` -> `8192`)."""
    for t in ts:
        if len(t.domain) < 2:
            continue
        far = max(
            (v for v in t.domain if v != t.base), key=lambda v: abs(v.bit_length() - t.base.bit_length())
        )
        out = render(code, ts, {t.key: far})
        ast.parse(out)
        diff = _token_diff(code, out)
        if t.fmt == "{}":
            held = [_tokens(code.encode()[s:e].decode())[:-1] for s, e in t.sites]  # no ENDMARKER
            assert diff == [(h, [(tokenize.NUMBER, str(far))]) for h in held]
        else:  # an option Triton defaulted: the keyword is inserted into the launch, nothing else changes
            name = t.key.rsplit(".", 1)[-1].split("#")[0]
            (at, _), text, raw = t.sites[0], t.text(far).encode(), out.encode()  # sites are byte offsets
            assert raw[at : at + len(text)] == text and raw[:at] + raw[at + len(text) :] == code.encode()
            calls = [n for n in ast.walk(ast.parse(out)) if isinstance(n, ast.Call)]
            assert any(
                kw.arg == name and getattr(kw.value, "value", None) == far for c in calls for kw in c.keywords
            )


def test_demo_silu_and_mul():
    ts = _by_key((KERNELS / "silu_and_mul.py").read_text(), "silu_and_mul")
    block, warps = ts["silu_and_mul:BLOCK"], ts["silu_and_mul:_silu_and_mul_kernel.num_warps"]
    assert (block.kind, block.base, warps.kind, warps.base) == ("block", 64, "num_warps", 1)
    assert max(block.domain) >= 64 * 64 and all(v & (v - 1) == 0 for v in block.domain)
    assert warps.domain == [1, 2, 4, 8, 16, 32]
    assert list(ts) == ["silu_and_mul:BLOCK", "silu_and_mul:_silu_and_mul_kernel.num_warps"]


def _by_key(code, entry):
    return {t.key: t for t in relevant(discover(code), code, entry)}


def test_demo_rms_norm_only_what_the_entry_reaches():
    code = (KERNELS / "rms_norm.py").read_text()
    assert len(discover(code)) == 2  # the fused kernel's launch too
    assert list(_by_key(code, "rms_norm")) == ["rms_norm:_rms_norm_kernel.num_warps"]


def test_upstream_style_config_lists_heuristics_and_asserts():
    code = UPSTREAM.read_text()
    ts = {t.key: t for t in discover(code)}
    assert {
        f"config[{i}].{k}"
        for i in (0, 1)
        for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
    } <= set(ts)
    assert ts["config[1].BLOCK_M"].base == 128 and ts["config[0].GROUP_M"].kind == "group"
    assert max(ts["config[0].BLOCK_K"].domain) == 256  # tl.static_assert(BLOCK_K <= 256)
    assert max(ts["scale_:block#1"].domain) == 8192  # assert block <= 8192
    assert ts["scale_:block#0"].base == 128 and ts["scale_:warps#1"].kind == "num_warps"
    assert ts["scale_:if[0]"].base == 4096  # the size threshold of the heuristic
    # _scale_kernel has no loop: num_stages stays what it is; the matmul kernel (autotuned) loops.
    assert ts["scale_:_scale_kernel.num_stages"].domain == [2]
    assert ts["config[0].num_stages"].domain == [1, 2, 3, 4, 5, 6]
    assert "MAX_BLOCK_K" not in str(list(ts))  # a module constant nothing reads is no choice
    out = render(code, list(ts.values()), {"config[0].BLOCK_M": 256, "scale_:warps#0": 8})
    assert '"BLOCK_M": 256, "BLOCK_N": 64' in out and "warps = 8" in out and "warps = 4" in out


def test_warps_from_row_size_divisor_and_cap():
    ts = relevant(discover(ROWNORM), ROWNORM, "rownorm")
    assert _table(ts) == {
        "num_warps|div": ("scale", 1024, [1 << k for k in range(4, 17)]),  # 16 .. 65536
        "num_warps|cap": ("num_warps", 8, [1, 2, 4, 8, 16, 32]),
        "stages": ("num_stages", 1, [1, 2, 3, 4, 5, 6]),  # the kernel loops over rows
    }
    keys = [t.key for t in ts]
    assert keys == ["rownorm:num_warps|div", "rownorm:num_warps|cap", "rownorm:stages"]
    assert all(t.per_call for t in ts)
    assert len(ts[2].sites) == 1  # one literal feeds both STAGES= and num_stages=
    _assert_each_render_changes_only_its_constant(ROWNORM, ts)


def test_capped_block_size_bounded_by_assert():
    ts = relevant(discover(GATED), GATED, "gated")
    assert _table(ts) == {
        "BLOCK_D|cap": ("block", 64, [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]),  # <= 8192
        "num_warps": ("num_warps", 4, [1, 2, 4, 8, 16, 32]),
    }  # no num_stages: the launch sets none and the kernel has no loop; `// 2` is semantics
    _assert_each_render_changes_only_its_constant(GATED, ts)


def test_config_dict_platform_switch_and_floor():
    ts = relevant(discover(SCALE_ROWS), SCALE_ROWS, "scale_rows")
    assert _table(ts) == {
        "max_warps": ("num_warps", 16, [1, 2, 4, 8, 16, 32]),  # the CUDA branch only
        "num_warps|div": ("scale", 128, [1 << k for k in range(1, 14)]),  # `4 * 32`: one divisor
        "num_warps|floor": ("num_warps", 2, [1, 2, 4, 8, 16, 32]),
        "BLOCK_R|mul": ("scale", 32, [1 << k for k in range(12)]),  # rows per program scale with it
        "BLOCK_R|floor": ("block", 1, [1 << k for k in range(13)]),
    }
    assert [t.key for t in ts][1:3] == [
        "scale_rows:config.num_warps|div",
        "scale_rows:config.num_warps|floor",
    ]
    _assert_each_render_changes_only_its_constant(SCALE_ROWS, ts)


def test_options_left_to_triton_and_static_loops():
    ts = discover(IMPLICIT)
    by = {t.key: t for t in ts}
    assert [t.key for t in relevant(ts, IMPLICIT, "row_max")] == [
        "row_max:BLOCK_N",
        "row_max:_row_max_kernel.num_warps",
        "row_max:_row_max_kernel.num_stages",
    ]
    block = by["row_max:BLOCK_N"]
    assert block.base == 128 and max(block.domain) >= 128 * 64  # far past the base
    assert (by["row_max:_row_max_kernel.num_warps"].base, by["row_max:_row_max_kernel.num_stages"].base) == (
        4,
        3,
    )
    assert by["top2:_top2_kernel.num_stages"].domain == [1]  # static_range is unrolled, not pipelined
    assert "top2:_top2_kernel.K" not in by  # a semantic constexpr, not a launch choice
    _assert_each_render_changes_only_its_constant(IMPLICIT, ts)
    both = render(
        IMPLICIT, ts, {"row_max:_row_max_kernel.num_warps": 2, "row_max:_row_max_kernel.num_stages": 1}
    )
    assert (
        "BLOCK_N=BLOCK_N, num_stages=1, num_warps=2)" in both
        or "BLOCK_N=BLOCK_N, num_warps=2, num_stages=1)" in both
    )


def test_changed_constants_run_correctly(tmp_path):
    """Rendered candidates are valid kernels: run under the interpreter with far values."""
    x = torch.randn(5, 40)
    mod = _load(tmp_path, render(ROWNORM, discover(ROWNORM), {"rownorm:num_warps|div": 16}), "rownorm_div")
    torch.testing.assert_close(mod.rownorm(x), x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt())
    g = torch.randn(3, 2 * 50)
    mod = _load(tmp_path, render(GATED, discover(GATED), {"gated:BLOCK_D|cap": 16}), "gated_cap")
    torch.testing.assert_close(mod.gated(g), torch.nn.functional.silu(g[:, :50]) * g[:, 50:])
    s = torch.randn(9, 24)
    code = render(SCALE_ROWS, discover(SCALE_ROWS), {"scale_rows:BLOCK_R|floor": 4})
    torch.testing.assert_close(_load(tmp_path, code, "scale_floor").scale_rows(s), 2 * s)
    p = torch.rand(2, 300)
    values = {"row_max:BLOCK_N": 512, "row_max:_row_max_kernel.num_warps": 1}
    mod = _load(tmp_path, render(IMPLICIT, discover(IMPLICIT), values), "implicit_block")
    torch.testing.assert_close(mod.row_max(p), p.max(-1).values)


def test_per_shape_table_of_computed_values(tmp_path):
    """Values computed inside the launcher (a divisor, a cap) become per-size table entries."""
    ts = relevant(discover(ROWNORM), ROWNORM, "rownorm")
    rows = [
        {"rownorm:num_warps|div": 32, "rownorm:num_warps|cap": 2},
        {"rownorm:num_warps|div": 4096, "rownorm:num_warps|cap": 16, "rownorm:stages": 3},
    ]
    code = render_table(ROWNORM, ts, [200, None], rows, {})
    assert "_ks_cfg['num_warps|div']" in code and "_ks_cfg['stages']" in code
    mod = _load(tmp_path, code, "rownorm_table")
    assert mod._ks_config(torch.empty(4, 50)) == {"num_warps|div": 32, "num_warps|cap": 2, "stages": 1}
    assert mod._ks_config(torch.empty(4, 60))["num_warps|div"] == 4096
    for shape in ((4, 50), (3, 100)):  # one shape per bucket
        x = torch.randn(*shape)
        torch.testing.assert_close(mod.rownorm(x), x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt())
    ts = discover(IMPLICIT)
    rows = [{"row_max:_row_max_kernel.num_warps": 1}, {"row_max:_row_max_kernel.num_warps": 8}]
    code = render_table(IMPLICIT, ts, [100, None], rows, {})
    assert "BLOCK_N=BLOCK_N, num_warps=_ks_cfg['num_warps'])" in code
    p = torch.rand(2, 90)
    torch.testing.assert_close(_load(tmp_path, code, "implicit_table").row_max(p), p.max(-1).values)


def test_per_shape_table_runs_and_picks_by_size(tmp_path):
    code = (KERNELS / "silu_and_mul.py").read_text()
    ts = relevant(discover(code), code, "silu_and_mul")
    rows = [
        {"silu_and_mul:BLOCK": 32, "silu_and_mul:_silu_and_mul_kernel.num_warps": 2},
        {"silu_and_mul:BLOCK": 256, "silu_and_mul:_silu_and_mul_kernel.num_warps": 4},
    ]
    table = render_table(code, ts, [500, None], rows, {})
    assert "_KS_CONFIGS" in table and "# kernelsmith: hotspot\n@triton.jit" in table
    mod = load_operator_module(
        ROOT / "examples" / "miniserve",
        "miniserve/kernels/silu_and_mul.py",
        code=table,
        tag="table_test",
        source_path=tmp_path / "silu_and_mul.py",
    )
    assert (
        mod._ks_config(torch.empty(400))["BLOCK"] == 32 and mod._ks_config(torch.empty(600))["BLOCK"] == 256
    )
    for tokens, d in ((3, 50), (4, 200)):  # one shape per bucket, under the interpreter on CPU
        x = torch.randn(tokens, 2 * d)
        out = torch.empty(tokens, d)
        mod.silu_and_mul(out, x)
        torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :d]) * x[:, d:])


def test_two_level_table_runs_and_picks_by_both_sizes(tmp_path):
    """A table keyed on `d`, then on the token count where one `d` wants two configs: under the
    interpreter each shape runs with its row and the output is right."""
    code = (KERNELS / "silu_and_mul.py").read_text()
    ts = relevant(discover(code), code, "silu_and_mul")
    warps = "silu_and_mul:_silu_and_mul_kernel.num_warps"
    rows = [
        {"silu_and_mul:BLOCK": 16, warps: 1},  # small d, up to 2 tokens
        {"silu_and_mul:BLOCK": 64, warps: 2},  # small d, more tokens
        {"silu_and_mul:BLOCK": 256, warps: 4},  # larger d, any token count
    ]
    table = render_table(code, ts, [200, 200, None], rows, {}, key="x.shape[-1]",
                         limits2=[2, None, None], key2="x.numel() // x.shape[-1]")
    assert "_ks_cfg = _ks_config(x.shape[-1], x.numel() // x.shape[-1])" in table
    assert "    ((200, 2), {'BLOCK': 16, 'num_warps': 1}),\n" in table  # one row a line, readable
    mod = load_operator_module(
        ROOT / "examples" / "miniserve",
        "miniserve/kernels/silu_and_mul.py",
        code=table,
        tag="table2_test",
        source_path=tmp_path / "silu_and_mul.py",
    )
    assert [mod._ks_config(100, t)["BLOCK"] for t in (1, 2, 3)] == [16, 16, 64]
    assert mod._ks_config(600, 1)["BLOCK"] == 256
    for tokens, d in ((2, 50), (3, 50), (1, 300)):  # one shape per row
        x = torch.randn(tokens, 2 * d)
        out = torch.empty(tokens, d)
        mod.silu_and_mul(out, x)
        torch.testing.assert_close(out, torch.nn.functional.silu(x[:, :d]) * x[:, d:])


def _speed(cap: int, d: int) -> float:
    """Measured speedups, modelled: small rows want a small block cap, long rows a large one."""
    best = 16 if d < 100 else 1024
    return 2.0 / (1.0 + abs(math.log2(cap) - math.log2(best)))


def test_params_mutator_explores_far_and_tables_computed_values(tmp_path):
    """The sampler reaches far along the domain (64x past the base cap) and, once the two shapes'
    optima differ, proposes a per-shape table of computed values keyed on `x.shape[-1]`."""
    shapes = [{"rows": 2, "d": 16}, {"rows": 2, "d": 600}]
    task = SimpleNamespace(
        base_code=GATED,
        operator=SimpleNamespace(entry="gated"),
        harness=SimpleNamespace(shapes_for=lambda device: shapes),
    )
    mut = ParamsMutator(task, device="cuda", budget_hint=30, sizes=[2 * 16, 2 * 600])
    assert [t.key for t in mut.tunables] == ["gated:BLOCK_D|cap", "gated:_gated_kernel.num_warps"]
    assert [t.key for t in GridMutator(task, device="cuda").tunables] == [t.key for t in mut.tunables]
    assert mut.key.expr == "x.shape[-1]"  # what BLOCK_D is computed from (d), not rows x d
    base = {
        "id": 1,
        "mutator": "base",
        "params": None,
        "code": GATED,
        "status": "evaluated",
        "parent_id": None,
    }
    rows, rng = [base], random.Random(0)
    base["verdict"] = {
        "accepted": True,
        "timed": True,
        "timing": {"noisy": False},
        "shapes": [{"shape": s, "speedup": 1.0} for s in shapes],
    }
    mut.sync(rows)
    caps, tables = [], []
    for i in range(30):
        p = mut.propose(rows[-1], [], rng)
        if p.params.get("table"):
            tables.append(p)
            table_caps = [r["gated:BLOCK_D|cap"] for r in p.params["table"]["rows"]]  # one row per shape
            speed = [_speed(c, s["d"]) for c, s in zip(table_caps, shapes, strict=True)]
        else:
            changed = p.params["changed"]
            if list(changed) == ["gated:BLOCK_D|cap"]:
                new = changed["gated:BLOCK_D|cap"][1]
                one_number = [([(tokenize.NUMBER, "64")], [(tokenize.NUMBER, str(new))])]
                assert _token_diff(GATED, p.code) == one_number
            cap = p.params["values"]["gated:BLOCK_D|cap"]
            caps.append(cap)
            speed = [_speed(cap, s["d"]) for s in shapes]
        verdict = {
            **base["verdict"],
            "shapes": [{"shape": s, "speedup": v} for s, v in zip(shapes, speed, strict=True)],
        }
        rows.append(
            {"id": i + 2, "mutator": "params", "params": p.params, "code": p.code, "status": "evaluated"}
            | {"parent_id": 1, "verdict": verdict, "speedup": math.sqrt(speed[0] * speed[1])}
        )
        mut.sync(rows)
    assert min(caps) == 16 and max(caps) >= 4096  # the sampler reaches 64x past the base cap
    assert tables and all(t.params["op"] in ("table", "bucket") for t in tables)
    table = [t for t in tables if t.params["op"] == "table"][-1]  # the latest per-bucket optima
    assert [r["gated:BLOCK_D|cap"] for r in table.params["table"]["rows"]] == [16, 1024]
    assert "_ks_config(x.shape[-1])" in table.code
    mod = _load(tmp_path, table.code, "gated_table")
    for d in (16, 600):  # one shape per size bucket, each with its own cap
        x = torch.randn(2, 2 * d)
        torch.testing.assert_close(mod.gated(x), torch.nn.functional.silu(x[:, :d]) * x[:, d:])


LAUNCH_EDGES = """import triton
import triton.language as tl


@triton.jit
def _fill_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 1.0, mask=offs < n)


@triton.heuristics({"num_warps": lambda args: 8})
@triton.jit
def _swizzle_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 2.0, mask=offs < n)


def fill(x, swizzled):
    n = x.numel()
    n_col_blocks = triton.cdiv(n, 4)
    if swizzled:
        _swizzle_kernel[(n_col_blocks,)](x, n, BLOCK=4)
        return
    _fill_kernel[(triton.cdiv(n, 64),)](x, n, BLOCK=64)
    _fill_kernel[(1,)](x, n, BLOCK=64, num_warps=2)
"""


def test_launch_edges_counts_heuristics_and_two_launches():
    by = {t.key: t for t in discover(LAUNCH_EDGES)}
    assert list(by) == [
        "fill:_swizzle_kernel.BLOCK",  # its heuristics choose num_warps: nothing is inserted there
        "fill:_fill_kernel.BLOCK",
        "fill:_fill_kernel.num_warps#default",  # the first launch leaves it to Triton
        "fill:_fill_kernel.num_warps",  # the second sets it
    ]  # `n_col_blocks = cdiv(n, 4)` is a count whose divisor the kernel fixes, not a choice
    out = render(LAUNCH_EDGES, list(by.values()), {"fill:_fill_kernel.num_warps#default": 16})
    assert "BLOCK=64, num_warps=16)" in out and "BLOCK=64, num_warps=2)" in out
    _assert_each_render_changes_only_its_constant(LAUNCH_EDGES, list(by.values()))


def test_module_constants_are_not_per_call():
    code = LAUNCH_EDGES.replace("def fill(", "FILL_BLOCK = 128\nUNUSED_BLOCK = 32\n\n\ndef fill(").replace(
        "BLOCK=64, num_warps=2)", "BLOCK=FILL_BLOCK, num_warps=2)"
    )
    ts = {t.key: t for t in relevant(discover(code), code, "fill")}
    module = ts["None:FILL_BLOCK"]
    assert (module.base, module.per_call, module.users) == (128, False, {"fill"})
    assert ts["fill:_fill_kernel.BLOCK"].per_call and not any("UNUSED" in k for k in ts)
    assert not relevant(discover(code), code, "_fill_kernel")  # no launcher reached: nothing to tune
