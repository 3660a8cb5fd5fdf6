"""Launch settings followed to where they are computed, on a small checkout written for these tests in
the shapes Triton kernel libraries take (tests/launch/data/helper_repo): tile and warps returned by a
helper imported from a utils module and unpacked, a warp ladder in a helper of the same file behind a
platform switch, a tile cap set per platform at module level, launchers called from a thin wrapper
or an autograd Function, parameters passed by callers, and values that cannot be followed."""

from __future__ import annotations

import ast
import difflib
import io
import json
import random
import shutil
import tokenize
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernelsmith.launch.evaluate import LaunchEvaluator
from kernelsmith.launch.follow import Sources
from kernelsmith.launch.syntax import AS_COMPUTED, _cuda_branch
from kernelsmith.launch.tunables import entry_knobs, render, render_table
from kernelsmith.loader import load_operator_module
from kernelsmith.search.mutator_set import build_mutators
from kernelsmith.search.mutators.params import GridMutator

REPO = Path(__file__).parent / "data" / "helper_repo"
NORM = "src/kitpkg/ops/norm.py"
DIVERGENCE = "src/kitpkg/ops/divergence.py"
SCALE = "src/kitpkg/ops/scale.py"
_SKIP = {tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}


def _knobs(rel: str, entry: str):
    code = (REPO / rel).read_text()
    tunables, notes = entry_knobs(code, entry, Sources(REPO, rel))
    return code, {t.key: t for t in tunables}, notes


def _token_diff(a: str, b: str) -> list:
    """The token runs that differ between two sources (whitespace and comments ignored)."""
    ta, tb = ([(t.type, t.string) for t in tokenize.generate_tokens(io.StringIO(c).readline)
               if t.type not in _SKIP] for c in (a, b))
    ops = difflib.SequenceMatcher(None, ta, tb, autojunk=False).get_opcodes()
    return [([s for _, s in ta[i1:i2]], [s for _, s in tb[j1:j2]])
            for op, i1, i2, j1, j2 in ops if op != "equal"]


def _load(code: str, rel: str, tag: str, tmp_path):
    return load_operator_module(REPO, rel, code=code, tag=tag, source_path=tmp_path / Path(rel).name)


@pytest.mark.parametrize("test, cuda", [
    ('infer_device() == "xpu"', "orelse"),
    ('x.device.type != "cuda"', "orelse"),
    ('DEVICE in ("npu", "xpu")', "orelse"),
    ('"cuda" == current_device()', "body"),
    ('not torch.version.hip', "body"),
    ('mode == "fast"', None),  # not a device name: no platform switch
    ('n_cols == 4096', None),
])
def test_platform_switches_by_device_name(test, cuda):
    assert _cuda_branch(ast.parse(test, mode="eval").body) == cuda


def test_warps_returned_by_a_helper_of_another_file_are_overridden_at_the_launch(tmp_path):
    """`BLOCK_SIZE, num_warps = row_settings(n_cols)` imported from ops/utils.py: its warp ladder is
    a choice this file cannot change, so the launch's num_warps becomes a knob whose base keeps it
    as computed; the tile (the row rounded up, no literal) is no knob at all."""
    code, knobs, notes = _knobs(NORM, "norm_forward")
    assert list(knobs) == ["norm_forward:_norm_kernel.num_warps"] and notes == []
    warps = knobs["norm_forward:_norm_kernel.num_warps"]
    assert (warps.base, warps.computed, warps.per_call) == (AS_COMPUTED, "num_warps", True)
    assert warps.domain == [AS_COMPUTED, 1, 2, 4, 8, 16, 32]
    assert render(code, list(knobs.values()), {warps.key: AS_COMPUTED}) == code
    out = render(code, list(knobs.values()), {warps.key: 8})
    assert _token_diff(code, out) == [(["num_warps"], ["8"])]  # `num_warps=num_warps` -> `num_warps=8`
    x, w = torch.randn(3, 40), torch.randn(40)
    want = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w
    torch.testing.assert_close(_load(out, NORM, "warps8", tmp_path).norm_forward(x, w)[0], want)


def test_a_table_keeps_the_computed_value_where_a_row_does(tmp_path):
    code, knobs, _ = _knobs(NORM, "norm_forward")
    key = "norm_forward:_norm_kernel.num_warps"
    out = render_table(code, list(knobs.values()), [64, None], [{key: AS_COMPUTED}, {key: 2}], {})
    assert "num_warps=_ks_cfg.get('num_warps', num_warps)" in out
    assert "    (64, {}),\n    (None, {'num_warps': 2}),\n" in out  # no made-up 0 in the table
    mod = _load(out, NORM, "warps_table", tmp_path)
    for n_cols in (40, 100):  # one shape per row
        x, w = torch.randn(2, n_cols), torch.randn(n_cols)
        want = x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w
        torch.testing.assert_close(mod.norm_forward(x, w)[0], want)


def test_a_literal_zero_is_a_value_never_the_computed_one():
    """The override's base is a marker, not a number: a value 0 is written, shown and tabled as 0."""
    code, knobs, _ = _knobs(NORM, "norm_forward")
    key = "norm_forward:_norm_kernel.num_warps"
    warps = knobs[key]
    assert AS_COMPUTED != 0 and 0 not in warps.domain and repr(AS_COMPUTED) == "AS_COMPUTED"
    assert (warps.show(0), warps.text(0)) == ("0", "0")
    assert (warps.show(AS_COMPUTED), warps.text(AS_COMPUTED)) == ("computed", "num_warps")
    assert _token_diff(code, render(code, list(knobs.values()), {key: 0})) == [(["num_warps"], ["0"])]
    out = render_table(code, list(knobs.values()), [64, None], [{key: 0}, {key: AS_COMPUTED}], {})
    assert "    (64, {'num_warps': 0}),\n    (None, {}),\n" in out


def test_the_computed_value_reads_computed_in_json_and_back():
    """Proposals, the archive's json and the sweep's knobs say "computed", which reads back as the base."""
    key = "norm_forward:_norm_kernel.num_warps"
    grid = GridMutator(_task(NORM, "norm_forward"), device="cuda")
    knobs = json.dumps({t.key: t.domain for t in grid.tunables})  # result.json's sweep block
    assert knobs == f'{{"{key}": ["computed", 1, 2, 4, 8, 16, 32]}}'
    p = grid.propose({}, [], random.Random(0))  # the grid's first point after the base
    assert p.params["changed"] == {key: [AS_COMPUTED, 1]} and p.prompt.endswith("computed -> 1")
    stored = json.loads(json.dumps(p.params))  # as the archive holds it
    assert stored["changed"][key] == ["computed", 1]
    base = {"values": {key: stored["changed"][key][0]}}
    assert grid.render(base) == grid.base_code and grid.valid(base)
    assert grid.proposal(base, set()) is None  # the base config: tried already


@pytest.mark.parametrize("entry", ["norm", "NormFunction.apply", "NormFunction.forward"])
def test_a_thin_wrapper_entry_exposes_the_launchers_launches(entry):
    """A module function calling the autograd Function, or the Function itself, reaches the launch."""
    assert list(_knobs(NORM, entry)[1]) == ["norm_forward:_norm_kernel.num_warps"]


def test_a_dead_platform_branch_is_never_a_knob(tmp_path):
    """`num_warps = 32 if device_name() == "xpu" else warps_for(BLOCK_SIZE)`: the 32 never runs on
    CUDA and is no knob; the ladder of warps_for (this file) is, rendered inside warps_for; of the
    module-level per-platform cap only the CUDA branch's constants are knobs."""
    code, knobs, notes = _knobs(DIVERGENCE, "row_sum")
    lines = code.splitlines()
    sited = {lines[code.encode()[:s].decode().count("\n")].strip()
             for t in knobs.values() for s, e in t.sites if s < e}
    assert sited == {
        "warps = 4", "if tile >= 32768:", "warps = 32 if not on_rocm() else 16", "elif tile >= 8192:",
        "warps = 16", "elif tile >= 2048:", "warps = 8", "MAX_FUSED_SIZE = 65536 // 4"}
    helper = {k: t for k, t in knobs.items() if k.startswith("warps_for:")}
    assert [(t.key.split(":")[1], t.base) for t in helper.values()] == [
        ("warps#0", 4), ("if[0]", 32768), ("warps#1", 32), ("if[1]", 8192), ("warps#2", 16),
        ("if[2]", 2048), ("warps#3", 8)]
    assert all(t.helper and not t.per_call for t in helper.values())  # shared: never tabled per call
    # `65536 // 4` is one value (16384), one knob of the cap's own kind: never a multiplier and a
    # divisor whose products launch the same.
    assert {k for k in knobs if k.startswith("None:MAX_FUSED_SIZE")} == {"None:MAX_FUSED_SIZE"}
    cap = knobs["None:MAX_FUSED_SIZE"]
    assert (cap.kind, cap.base, notes) == ("block", 16384, [])
    assert _token_diff(code, render(code, list(knobs.values()), {cap.key: 64})) == [
        (["65536", "//", "4"], ["64"])]
    out = render(code, list(knobs.values()), {"warps_for:warps#2": 4})
    assert _token_diff(code, out) == [(["16"], ["4"])]
    before, after = code.splitlines(), out.splitlines()
    changed = next(i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b)
    assert after[changed].strip() == "warps = 4"  # in warps_for, where the warps are computed
    assert [line for line in after[:changed] if line.startswith("def ")] == ["def warps_for(tile):"]
    x = torch.randn(3, 50)
    torch.testing.assert_close(_load(out, DIVERGENCE, "ladder", tmp_path).row_sum(x), x.sum(-1))


def test_parameters_are_followed_to_the_calls_that_pass_them():
    """`_launch(x, factor, BLOCK=1024)` and `_launch(x, factor)`: the tile passed at the call and
    the default the other call keeps are knobs where they are written; so is the default warps."""
    code, knobs, notes = _knobs(SCALE, "scale")
    assert {k: t.base for k, t in knobs.items()} == {
        "_launch:BLOCK": 256, "_launch:num_warps": 4, "scale:_launch.BLOCK": 1024}
    out = render(code, list(knobs.values()), {"scale:_launch.BLOCK": 2048, "_launch:BLOCK": 128})
    assert "_launch(x, factor, BLOCK=2048)" in out
    assert "def _launch(x, factor, BLOCK=128, num_warps=4):" in out
    assert notes == []


def test_what_cannot_be_followed_is_said_with_its_launch_and_argument():
    _, knobs, notes = _knobs(SCALE, "scale_as_told")
    assert knobs == {}
    assert notes == [
        "_scale_kernel launched in scale_as_told, BLOCK: BLOCK is a parameter of scale_as_told, which "
        "no function of this file calls: its caller chooses it",
        "_scale_kernel launched in scale_as_told, num_warps: warps_for_rows() cannot be followed: "
        "kitpkg.ops.settings_gone: not a module of the repository",
    ]
    _, knobs, notes = _knobs(SCALE, "scale_capped")
    assert list(knobs) == ["scale_capped:_scale_kernel.num_warps"]  # left to Triton: inserted
    assert notes == [
        "_scale_kernel launched in scale_capped, BLOCK: chosen in kitpkg.ops.utils.capped_tile (another "
        "file, which a candidate of this file cannot change); a tile size is not overridden at the launch"]


def test_without_a_checkout_only_the_files_own_helpers_are_followed():
    """A candidate judged alone (no checkout): the import is said, nothing is made up."""
    code = (REPO / NORM).read_text()
    tunables, notes = entry_knobs(code, "norm_forward")
    assert tunables == []
    assert notes == [f"_norm_kernel launched in norm_forward, {arg}: row_settings() cannot be followed: "
                     "kitpkg.ops.utils: no checkout to read it from" for arg in ("BLOCK_SIZE", "num_warps")]


def _task(rel: str, entry: str) -> SimpleNamespace:
    return SimpleNamespace(root=REPO, operator=SimpleNamespace(file=rel, entry=entry),
                           base_code=(REPO / rel).read_text(), harness=None)


@pytest.mark.parametrize("entry", ["norm_forward", "NormFunction.apply"])
def test_launches_through_a_helper_of_another_file(entry):
    """The evaluator runs row_settings from ops/utils.py on the shape's sizes: the base launches with
    the warps it computes (no knob in them), an override with its own."""
    code, knobs, _ = _knobs(NORM, entry)
    key = "norm_forward:_norm_kernel.num_warps"
    ev = LaunchEvaluator(code, list(knobs.values()), entry, sources=Sources(REPO, NORM))
    x = {"x": torch.empty(3, 50, device="meta"), "w": torch.empty(50, device="meta")}
    launches = [[item for item in path if item[0] == "_norm_kernel"] for path in ev.signature({}, x)]
    assert launches == [[("_norm_kernel", (), ())]]
    (path,) = ev.signature({key: 8}, x)
    assert ("_norm_kernel", (("num_warps", 8),), ()) in path
    assert ev.signature({key: 2}, x) != ev.signature({key: 8}, x)


def test_optimize_and_sweep_say_what_could_not_be_followed():
    lines = []
    build_mutators("params", _task(SCALE, "scale_as_told"), "cuda", 10, lines.append)
    assert lines == [
        "params: no knobs; not followed: _scale_kernel launched in scale_as_told, BLOCK: BLOCK is a "
        "parameter of scale_as_told, which no function of this file calls: its caller chooses it; not "
        "followed: _scale_kernel launched in scale_as_told, num_warps: warps_for_rows() cannot be followed: "
        "kitpkg.ops.settings_gone: not a module of the repository"]
    lines.clear()
    build_mutators("grid", _task(NORM, "norm_forward"), "cuda", 10, lines.append, sweep_seed=0)
    assert lines[0].startswith("sweep: grid of 7 configurations: num_warps (7)")
    lines.clear()
    build_mutators("params", _task(NORM, "norm_forward"), "cuda", 10, lines.append)
    assert lines == ["params: 1 knob (num_warps)"]


def test_a_module_reached_through_a_link_is_not_read(tmp_path):
    """The checkout is target code: a helper module that is a symlink is refused, and said, never read."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo)
    utils = repo / "src" / "kitpkg" / "ops" / "utils.py"
    outside = tmp_path / "elsewhere.py"
    outside.write_text(utils.read_text())
    utils.unlink()
    utils.symlink_to(outside)
    code = (repo / NORM).read_text()
    tunables, notes = entry_knobs(code, "norm_forward", Sources(repo, NORM))
    assert tunables == []
    assert len(notes) == 2 and all("kitpkg.ops.utils: not read (" in n and "symlink" in n for n in notes)
