"""Harness variants (issue 42): the heavy operators keep other shape mixes in their harness's
VARIANTS, run as `OP@VARIANT` with that entry's shapes; dev/variants.py is the one place naming which
variant tunes the search's rules, which reports, and which is held out."""

import importlib.util
import inspect
from pathlib import Path

import pytest

from kernelsmith.harness.gather import gather
from kernelsmith.harness.model import load_harness
from kernelsmith.harness.static import harness_variants
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee
from kernelsmith.referee.proc.pinned import task_files

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ROOT / "targets"
MINISERVE = ROOT / "examples" / "miniserve"
_spec = importlib.util.spec_from_file_location("dev_variants", ROOT / "dev" / "variants.py")
variants = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(variants)
# What the variant shares with its operator's harness: everything but the shapes.
SHARED = ("outputs", "inplace", "tolerance", "vary", "nondeterministic")
SHARED_FUNCTIONS = ("make_inputs", "reference", "bytes_moved", "flops")


def _harnesses(pair: str) -> dict[str, object]:
    """Role -> loaded harness of one `target:op` of dev/variants.py."""
    target_name, op = pair.split(":")
    target = load_target(TARGETS / f"{target_name}.yaml")
    ops = [(role, target.operator(variants.operator_name(op, name)))
           for role, name in variants.OPERATORS[pair].items()]
    return {role: load_harness(o.harness, o.variant) for role, o in ops}


def test_the_four_heavy_operators_have_three_roles_each():
    assert set(variants.OPERATORS) == {"lmdeploy:multinomial_sampling", "lmdeploy:fill_kv_cache",
                                       "sglang:merge_state", "sglang:act_quant"}
    for pair, roles in variants.OPERATORS.items():
        assert set(roles) == set(variants.ROLES), pair
        assert len(set(roles.values())) == 3, pair  # three different harnesses
        target_name, op = pair.split(":")
        declared = harness_variants(load_target(TARGETS / f"{target_name}.yaml").operator(op).harness)
        # Every variant the harness declares has a role here, and every named one exists.
        assert set(declared) == {v for v in roles.values() if v}, pair


@pytest.mark.parametrize("pair", sorted(variants.OPERATORS))
def test_variants_differ_in_shape_mix(pair):
    hs = _harnesses(pair)
    roles = list(hs)
    for i, a in enumerate(roles):
        for b in roles[i + 1:]:
            for device in ("cuda", "interpret"):
                sa = [tuple(sorted(s.items())) for s in hs[a].shapes_for(device)]
                sb = [tuple(sorted(s.items())) for s in hs[b].shapes_for(device)]
                assert not set(sa) & set(sb), (pair, a, b, device)  # no shape in common
            # Not the same shapes reordered: at least two fields take other values across the mix.
            fields = set().union(*hs[a].shapes) & set().union(*hs[b].shapes)
            differ = [f for f in fields
                      if {repr(s.get(f)) for s in hs[a].shapes} != {repr(s.get(f)) for s in hs[b].shapes}]
            assert len(differ) >= 2, (pair, a, b, differ)


@pytest.mark.parametrize("pair", sorted(variants.OPERATORS))
def test_a_variant_shares_everything_but_shapes_with_its_operator(pair):
    hs = _harnesses(pair)
    own = hs["tune"]
    for role, h in hs.items():
        for name in SHARED:
            assert getattr(h, name) == getattr(own, name), (pair, role, name)
        for name in SHARED_FUNCTIONS:
            fa, fb = getattr(h, name), getattr(own, name)
            assert (fa is None) == (fb is None), (pair, role, name)
            if fa is not None:
                assert inspect.getsourcefile(fa) == inspect.getsourcefile(fb) == str(own.path), (pair, role)
        for shape in h.cpu_shapes + h.shapes:
            assert set(shape) >= set(h.vary), (pair, role, shape)  # VARY redraws fields every shape has


def test_held_out_variants_are_named_in_one_place():
    """Only dev/variants.py says which variants are held out: no script, test or product file names
    one (nothing is tuned on them); the pages that report their runs (docs/, dev/notes/) may."""
    held = [variants.operator_name(pair.split(":")[1], roles["held_out"])
            for pair, roles in variants.OPERATORS.items()]
    assert variants.pairs("held-out") == [f"{p.split(':')[0]}:{h}"
                                          for p, h in zip(variants.OPERATORS, held, strict=True)]
    assert not set(variants.pairs("measured")) & set(variants.pairs("held-out"))
    reports = (ROOT / "docs", ROOT / "dev" / "notes")
    files = [p for folder in ("dev", "docs", "scripts", "tests", "kernelsmith", "bot")
             for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".sh", ".md")
             and not (p.suffix == ".md" and p.parent in reports)]
    assert ROOT / "dev" / "variants.py" in files
    for path in files:
        if path == ROOT / "dev" / "variants.py":
            continue
        text = path.read_text(errors="replace")
        assert not [h for h in held if h in text], path


def test_a_variant_runs_through_the_referee_with_its_shapes(tmp_path):
    """`rms_norm@tiny`: the worker rebuilds the task from its name and judges the shapes of the
    harness's VARIANTS entry, which the search's facts read too."""
    (tmp_path / "h").mkdir()
    text = (TARGETS / "demo" / "rms_norm.py").read_text()
    (tmp_path / "h" / "rms_norm.py").write_text(
        text + "VARIANTS = {'tiny': {'shapes': [{'tokens': 7, 'hidden': 4096, 'dtype': 'bfloat16'}],\n"
        "                        'cpu_shapes': [{'tokens': 5, 'hidden': 48, 'dtype': 'float32'}]}}\n")
    (tmp_path / "t.yaml").write_text(
        "repo: kernelsmith/demo\noperators:\n  - name: rms_norm\n    file: miniserve/kernels/rms_norm.py\n"
        "    entry: rms_norm\n    harness: h/rms_norm.py\n")
    task = load_task(str(tmp_path / "t.yaml"), "rms_norm@tiny", checkout=str(MINISERVE))
    assert (task.operator.harness, task.operator.variant) == (tmp_path / "h" / "rms_norm.py", "tiny")
    assert task.harness.shapes == [{"tokens": 7, "hidden": 4096, "dtype": "bfloat16"}]
    facts = gather(task.operator.harness, MINISERVE, variant="tiny")  # what the search reads, sandboxed
    assert (facts.shapes, facts.cpu_shapes) == (task.harness.shapes, task.harness.cpu_shapes)
    assert task.to_json()["op"] == "rms_norm@tiny"
    assert tmp_path / "h" / "rms_norm.py" in task_files(task).files
    with Referee(task, device="interpret", seed=3, timeout_s=120) as ref:
        v = ref.evaluate(None, candidate_id=0)
    assert v.accepted, v.feedback()
    assert [s["shape"] for s in v.shapes] == [{"tokens": 5, "hidden": 48, "dtype": "float32"}]
