"""Target yaml and harness loading: every mistake is one clear error naming file and field."""

import json
import sys
import textwrap
from pathlib import Path

import pytest

from kernelsmith.errors import ConfigError
from kernelsmith.harness.model import load_harness
from kernelsmith.harness.static import check_harness_static
from kernelsmith.onboard.config import load_target, merge_repo_operators, resolve_target
from kernelsmith.onboard.task import load_task
from kernelsmith.referee.proc.pinned import task_files

ROOT = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, text: str, name: str = "t.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


GOOD = """
repo: owner/name
operators:
  - name: op
    file: pkg/op.py
    entry: op
    harness: h.py
"""


def test_demo_target_loads():
    t = load_target(ROOT / "targets" / "demo.yaml")
    assert t.repo == "kernelsmith/demo" and t.name == "demo"
    assert [o.name for o in t.operators] == ["rms_norm", "silu_and_mul"]
    assert t.operator("rms_norm").harness == (ROOT / "targets/demo/rms_norm.py").resolve()
    assert Path(t.resolved_clone_url()) == (ROOT / "examples/miniserve").resolve()


def test_defaults(tmp_path):
    t = load_target(_write(tmp_path, GOOD))
    assert t.base == "main" and t.max_open_prs == 5 and t.operators[0].min_speedup == 1.05


@pytest.mark.parametrize("text,field", [
    ("operators: []\n", "repo"),
    ("repo: noslash\n", "repo"),
    ("repo: a/b\nlabels: performance\n", "labels"),
    ("repo: a/b\nbogus: 1\n", "bogus"),
    ("repo: a/b\noperators: {x: 1}\n", "operators"),
])
def test_bad_yaml_names_field(tmp_path, text, field):
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_target(p)
    assert e.value.field == field
    assert str(p) in str(e.value)


# One operator the loader cannot take no longer takes the file down (issue 41, item 4): the file
# loads, and the operator's error, naming file and field, comes when it is named.
@pytest.mark.parametrize("items,field", [
    (["{name: x, file: f.py, entry: e}"], "operators[0].harness"),
    (["{name: x, entry: e, harness: h.py}"], "operators[0].file"),
    (["{name: x, file: f.py, entry: 'not ok', harness: h.py}"], "operators[0].entry"),
    (["{name: x, file: ../f.py, entry: e, harness: h.py}"], "operators[0].file"),
    (["{name: x, file: f.py, entry: e, harness: h.py, min_speedup: fast}"], "operators[0].min_speedup"),
    (["{name: x, file: f.py, entry: e, harness: h.py}", "{name: x, file: g.py, entry: e, harness: h.py}"],
     "operators[1].name"),
    (["{name: x, file: f.py, entry: e, harness: h.py, bogus: 1}"], "operators[0].bogus"),
])
def test_a_bad_operator_is_an_error_when_named_and_the_others_load(tmp_path, items, field):
    p = _write(tmp_path, "repo: a/b\noperators:\n" + "".join(f" - {i}\n" for i in items))
    t = load_target(p)
    assert t.operators == [] and set(t.broken) == {"x"}
    with pytest.raises(ConfigError) as e:
        t.operator("x")
    assert e.value.field == field and str(p) in str(e.value)
    # Beside a good operator (after it: the bad one's index moves by one), that one is served.
    good = " - {name: fine, file: ok.py, entry: ok, harness: h.py}\n"
    t = load_target(_write(tmp_path, "repo: a/b\noperators:\n" + good + "".join(f" - {i}\n" for i in items),
                           "mixed.yaml"))
    assert [o.name for o in t.operators] == ["fine"] and set(t.broken) == {"x"}
    assert t.operator("fine").entry == "ok"
    with pytest.raises(ConfigError, match="mixed.yaml"):
        t.operator("x")


def test_an_operator_without_a_usable_name_is_kept_by_position(tmp_path):
    t = load_target(_write(tmp_path, "repo: a/b\noperators:\n - 3\n - {name: 'no good', file: f.py}\n"
                                     " - {name: ok, file: f.py, entry: e, harness: h.py}\n"))
    assert [o.name for o in t.operators] == ["ok"] and set(t.broken) == {"operators[0]", "operators[1]"}
    assert t.broken["operators[1]"].field == "operators[1].name"


def test_broken_yaml_names_line(tmp_path):
    p = _write(tmp_path, "repo: a/b\noperators: [\n")
    with pytest.raises(ConfigError, match=r"invalid yaml \(line"):
        load_target(p)


def test_missing_file():
    with pytest.raises(ConfigError, match="not found"):
        load_target("/nonexistent/x.yaml")


def test_unknown_operator(tmp_path):
    t = load_target(_write(tmp_path, GOOD))
    with pytest.raises(ConfigError, match=r"unknown operator 'nope' \(known: op\)"):
        t.operator("nope")


def test_resolve_by_name(tmp_path, monkeypatch):
    _write(tmp_path, GOOD, "mine.yaml")
    assert resolve_target("mine", str(tmp_path)) == (tmp_path / "mine.yaml").resolve()
    monkeypatch.setenv("KERNELSMITH_TARGETS", str(tmp_path))
    assert resolve_target("mine") == (tmp_path / "mine.yaml").resolve()
    with pytest.raises(ConfigError, match="no target named 'other'"):
        resolve_target("other", str(tmp_path))


def test_repo_operators_clash(tmp_path):
    t = load_target(_write(tmp_path, GOOD))
    repo_yml = _write(tmp_path, "operators: [{name: op, file: a.py, entry: a, harness: h.py}]\n",
                      ".kernelsmith.yml")
    with pytest.raises(ConfigError, match="also defined"):
        merge_repo_operators(t, repo_yml)
    ok = _write(tmp_path, "operators: [{name: op2, file: a.py, entry: a, harness: h/x.py}]\n",
                ".kernelsmith.yml")
    merge_repo_operators(t, ok)
    assert t.operator("op2").source == ".kernelsmith.yml"
    assert t.operator("op2").harness == (tmp_path / "h/x.py").resolve()


def test_demo_harness_loads():
    h = load_harness(ROOT / "targets/demo/silu_and_mul.py")
    assert h.outputs == ["out"] and h.shapes_for("cuda")[0]["dtype"] == "bfloat16"
    assert h.shapes_for("interpret")[0]["dtype"] == "float16"
    assert h.tolerance_for("float32") == (1e-4, 1e-4)


@pytest.mark.parametrize("body,field", [
    ("def make_inputs(shape, device, seed): return {}\ndef reference(**k): pass\n", "SHAPES"),
    ("SHAPES=[{}]\ndef reference(**k): pass\n", "make_inputs"),
    ("SHAPES=[{}]\ndef make_inputs(shape, device, seed): return {}\n", "reference"),
    ("SHAPES=[1]\ndef make_inputs(s, d, e): return {}\ndef reference(**k): pass\n", "SHAPES[0]"),
    ("SHAPES=[{}]\nTOLERANCE={'float16': 1}\ndef make_inputs(s, d, e): return {}\n"
     "def reference(**k): pass\n", "TOLERANCE.float16"),
])
def test_bad_harness_names_field(tmp_path, body, field):
    p = tmp_path / "h.py"
    p.write_text(body)
    with pytest.raises(ConfigError) as e:
        load_harness(p)
    assert e.value.field == field and str(p) in str(e.value)


def test_a_harness_imports_what_it_shares_from_beside_it(tmp_path):
    """Relative imports resolve in a private package over the harness's folder: nothing takes a real
    module's name, and the referee pins the shared module with the harness."""
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "_shared.py").write_text(
        "SHAPES = [{'tokens': 3, 'hidden': 48, 'dtype': 'float32'}]\n"
        "def make_inputs(shape, device, seed): return {'n': shape['tokens']}\n")
    harness = tmp_path / "h" / "json.py"  # named like a real module: it must not shadow it
    harness.write_text("from ._shared import SHAPES, make_inputs\ndef reference(**k): pass\n")
    check_harness_static(harness)
    h = load_harness(harness)
    assert h.shapes == [{"tokens": 3, "hidden": 48, "dtype": "float32"}]
    assert h.make_inputs(h.shapes[0], "cpu", 0) == {"n": 3}
    assert json.dumps({}) == "{}" and "_shared" not in sys.modules and "json" not in h.module.__name__
    (tmp_path / "t.yaml").write_text("repo: a/b\noperators:\n  - {name: rms_norm, file: miniserve/kernels/"
                                     "rms_norm.py, entry: rms_norm, harness: h/json.py}\n")
    task = load_task(str(tmp_path / "t.yaml"), "rms_norm", checkout=str(ROOT / "examples" / "miniserve"))
    assert {harness, tmp_path / "h" / "_shared.py"} <= set(task_files(task).files)


def test_harness_syntax_error(tmp_path):
    p = tmp_path / "lmdeploy.py"  # a harness named like a real package must not shadow it
    p.write_text("SHAPES = [\n")
    with pytest.raises(ConfigError, match="syntax error at line"):
        load_harness(p)


HARNESS = "SHAPES = [{'n': 8}]\ndef make_inputs(shape, device, seed): return {}\ndef reference(**k): pass\n"


def test_a_variant_is_the_operator_with_its_harness_shapes(tmp_path):
    (tmp_path / "h.py").write_text(HARNESS + "VARIANTS = {\n"
                                   "    'wide': {'shapes': [{'n': 4096}], 'cpu_shapes': [{'n': 5}]},\n"
                                   "    'skewed': {'shapes': [{'n': 8, 'skew': True}]}}\n")
    t = load_target(_write(tmp_path, GOOD))
    assert [o.name for o in t.operators] == ["op"]  # variants are no operators of their own
    op, wide = t.operator("op"), t.operator("op@wide")
    assert (wide.name, wide.variant, wide.harness) == ("op@wide", "wide", (tmp_path / "h.py").resolve())
    assert (wide.file, wide.entry, wide.min_speedup) == (op.file, op.entry, op.min_speedup)
    assert op.variant is None and op.harness == (tmp_path / "h.py").resolve()
    assert load_harness(op.harness).shapes == [{"n": 8}]
    h = load_harness(wide.harness, wide.variant)
    assert (h.shapes, h.cpu_shapes, h.variant) == ([{"n": 4096}], [{"n": 5}], "wide")
    assert load_harness(op.harness, "skewed").shapes_for("interpret") == [{"n": 8, "skew": True}]
    assert t.has_operator("op@wide") and t.has_operator("op@nope") and not t.has_operator("other@wide")
    with pytest.raises(ConfigError) as e:
        t.operator("op@nope")
    harness = (tmp_path / "h.py").resolve()
    assert str(e.value) == f"{harness}: VARIANTS: no variant 'nope' (known: skewed, wide)"
    with pytest.raises(ConfigError, match=r"unknown operator 'other'"):
        t.operator("other@wide")


def test_a_yaml_variants_field_is_unknown(tmp_path):
    """Variants are data in the harness; the yaml field that named harness files is gone."""
    t = load_target(_write(tmp_path, GOOD + "    variants: {wide: v/wide.py}\n"))
    with pytest.raises(ConfigError) as e:
        t.operator("op")
    assert e.value.field == "operators[0].variants" and "unknown field" in str(e.value)


BAD_VARIANTS = [
    ("[1]", "VARIANTS", "must map a variant name to {shapes, cpu_shapes}"),
    ("{'bad@name': {'shapes': [{}]}}", "VARIANTS", "'bad@name' is not a valid variant name"),
    ("{'w': [1]}", "VARIANTS.w", "must be a mapping {shapes, cpu_shapes}"),
    ("{'w': {'cpu_shapes': [{}]}}", "VARIANTS.w.shapes", "missing (a list of shape dicts)"),
    ("{'w': {'shapes': []}}", "VARIANTS.w.shapes", "must be a non-empty list of shape dicts"),
    ("{'w': {'shapes': [{}, 3]}}", "VARIANTS.w.shapes[1]", "must be a dict, got int"),
    ("{'w': {'shapes': [{}], 'cpu_shapes': 'x'}}", "VARIANTS.w.cpu_shapes", "must be a non-empty list"),
    ("{'w': {'shapes': [{}], 'gpu': []}}", "VARIANTS.w.gpu", "unknown field(s) gpu (known: shapes, "),
]


@pytest.mark.parametrize("value,field,problem", BAD_VARIANTS)
def test_bad_variants_are_one_line_naming_the_harness_and_field(tmp_path, value, field, problem):
    """The parent's read of the syntax tree and the sandboxed child's import say the same line."""
    p = tmp_path / "h.py"
    p.write_text(HARNESS + f"VARIANTS = {value}\n")
    for load in (check_harness_static, load_harness):
        with pytest.raises(ConfigError) as e:
            load(p)
        assert (e.value.file, e.value.field) == (str(p), field), load
        assert problem in e.value.message and "\n" not in str(e.value), load
    t = load_target(_write(tmp_path, GOOD))
    with pytest.raises(ConfigError) as e:
        t.operator("op@w")  # the variant's name is resolved against the same declaration
    assert (e.value.file, e.value.field) == (str(p), field)


@pytest.mark.parametrize("text,problem", [
    ("VARIANTS = dict(w={'shapes': [{}]})\n", "line 4: must be a literal"),
    ("VARIANTS = {}\nVARIANTS = {'w': {'shapes': [{}]}}\n", "assigned 2 times (lines 4, 5)"),
    ("if True:\n    VARIANTS = {}\n", "must be assigned a literal at the module's top level"),
])
def test_variants_are_data_read_without_running_the_harness(tmp_path, text, problem):
    p = tmp_path / "h.py"
    p.write_text(HARNESS + text)
    with pytest.raises(ConfigError) as e:
        check_harness_static(p, variant="w")
    assert (e.value.file, e.value.field) == (str(p), "VARIANTS") and problem in e.value.message
