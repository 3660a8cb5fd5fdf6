"""`kernelsmith harness check` and `harness new` (issue 14, items 6 and 7)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "referee"))
from tiny_project import FP32_REFERENCE, tiny_task  # noqa: E402

from kernelsmith.cli import main  # noqa: E402
from kernelsmith.harness.new import entry_arguments, skeleton  # noqa: E402
from kernelsmith.onboard.harness_check import run_probe  # noqa: E402

LOOSE_FIXED_SEED = FP32_REFERENCE.replace('VARY = {"n": [5, 64, 130]}', "").replace(
    "manual_seed(seed)", "manual_seed(0)").replace("return 4 * shape[\"n\"]", "return 0") + (
    '\nTOLERANCE = {"float16": {"atol": 1.0, "rtol": 1.0}}\n')

MUTATING_BAD_OUTPUTS = FP32_REFERENCE.replace("OUTPUTS = None", 'OUTPUTS = ["y"]').replace(
    "    return x.float() * 1.5 + 0.25", "    y = x.float() * 1.5 + 0.25\n    x.zero_()\n    return y")


@pytest.fixture(autouse=True)
def _triton_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))


def _checks(report):
    return {check for check, _, _ in report.problems}


def test_sound_harness_passes_check(tmp_path, capsys):
    task = tiny_task(tmp_path, "scale", "scale", FP32_REFERENCE)
    code = main(["harness", "check", str(task.target.path), "scale", "--checkout", str(task.root),
                 "--device", "interpret"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "sound" in out and "problem" not in out


def test_loose_unseeded_harness_without_vary_is_flagged(tmp_path):
    report = run_probe(tiny_task(tmp_path, "scale", "scale", LOOSE_FIXED_SEED), "interpret")
    assert {"VARY", "seed sensitivity", "bytes_moved", "negative control", "tolerance"} <= _checks(report)
    controls = " ".join(m for c, m, _ in report.problems if c == "negative control")
    assert "a 1% perturbation" in controls and "a dropped term" in controls
    assert "zeros" in controls and "unwritten" not in controls  # NaN still fails
    assert any("x the base's error" in m for c, m, _ in report.problems if c == "tolerance")
    assert "seeded determinism" not in _checks(report)


def test_mutating_reference_and_outputs_that_are_not_inputs_are_flagged(tmp_path):
    report = run_probe(tiny_task(tmp_path, "scale", "scale", MUTATING_BAD_OUTPUTS), "interpret")
    assert {"reference leaves its inputs alone", "OUTPUTS"} <= _checks(report)
    assert all(fix for _, _, fix in report.problems)  # every problem names a fix


def test_check_exits_1_with_one_line_per_problem(tmp_path, capsys):
    task = tiny_task(tmp_path, "scale", "scale", LOOSE_FIXED_SEED)
    code = main(["harness", "check", str(task.target.path), "scale", "--checkout", str(task.root),
                 "--device", "interpret"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 1
    problems = [ln for ln in lines if ln.startswith("problem [")]
    assert len(problems) >= 5 and all("-> fix: " in ln for ln in problems)


def test_check_config_errors_exit_2(tmp_path):
    task = tiny_task(tmp_path, "scale", "scale", FP32_REFERENCE)
    assert main(["harness", "check", str(task.target.path), "nope", "--checkout", str(task.root)]) == 2


def test_entry_arguments_and_skeleton_text():
    src = ("import torch\n\n"
           "def op(x: torch.Tensor, weight, eps: float = 1e-6, *, out=None, n: int = 4):\n    pass\n")
    args = entry_arguments(src, "op", "f.py")
    assert args == [("x", "torch.Tensor", None), ("weight", None, None), ("eps", "float", "1e-06"),
                    ("out", None, "None"), ("n", "int", "4")]
    text = skeleton("o/r", "f.py", "op", args)
    assert '"x_rows"' in text and '"weight_cols"' in text and "manual_seed(seed)" in text
    assert 'raise NotImplementedError("TODO: write the reference")' in text
    compile(text, "skeleton.py", "exec")


def test_harness_new_then_check_reports_the_todo(tmp_path, capsys):
    task = tiny_task(tmp_path, "scale", "scale", FP32_REFERENCE)
    harness = Path(task.operator.harness)
    harness.unlink()
    yaml = str(task.target.path)
    assert main(["harness", "new", yaml, "scale", "--checkout", str(task.root)]) == 0
    assert harness.is_file() and "harness check" in capsys.readouterr().out
    assert main(["harness", "new", yaml, "scale", "--checkout", str(task.root)]) == 2  # never overwrites
    argv = ["harness", "check", yaml, "scale", "--checkout", str(task.root), "--device", "interpret"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "problem [reference] reference not written" in out


def test_readme_flow_on_the_demo_mark_without_a_harness(tmp_path, capsys):
    """README's "Adding a target": the demo's marked fused_add_rms_norm, harness new then check."""
    root = Path(__file__).resolve().parents[2]
    targets = tmp_path / "targets"
    targets.mkdir()
    yaml = (root / "targets" / "demo.yaml").read_text().replace(
        "clone_url: ../examples/miniserve", f"clone_url: {root / 'examples' / 'miniserve'}")
    entry = ("  - name: fused_add_rms_norm\n    file: miniserve/kernels/rms_norm.py\n"
             "    entry: fused_add_rms_norm\n    harness: demo/fused_add_rms_norm.py\n")
    (targets / "demo.yaml").write_text(yaml + entry)
    base = ["--targets", str(targets), "harness"]
    checkout = ["--checkout", str(root / "examples" / "miniserve")]
    assert main([*base, "new", "demo", "fused_add_rms_norm", *checkout]) == 0
    text = (targets / "demo" / "fused_add_rms_norm.py").read_text()
    # `n_rows, n_cols = x.shape` names x's fields; residual is only handed to the kernel.
    assert 'x = torch.randn((shape["n_rows"], shape["n_cols"])' in text and '"residual_rows"' in text
    assert "def reference(x, residual, weight, eps):" in text
    capsys.readouterr()
    assert main([*base, "check", "demo", "fused_add_rms_norm", *checkout, "--device", "interpret"]) == 1
    assert "reference not written" in capsys.readouterr().out
