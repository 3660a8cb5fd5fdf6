"""The bad-input bar for harness files (issue 41): a harness that is missing, does not parse or
lacks a required name is found from its syntax tree before any child starts, and every command
that loads a task says so in one line naming the file, exit 2, no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelsmith.errors import ConfigError
from kernelsmith.harness.static import check_harness_static, module_names
from kernelsmith.pysource import parse

ROOT = Path(__file__).resolve().parents[2]
GOOD = (ROOT / "targets" / "demo" / "rms_norm.py").read_text()
CASES = {
    "missing": (None, "harness file not found (operators.rms_norm.harness in"),
    "syntax": ("SHAPES = [\ndef make_inputs(:\n", "syntax error at line 2"),
    "no_make_inputs": (GOOD.replace("def make_inputs(", "def make_inputs_later("),
                       "make_inputs: missing (read from the file's syntax tree"),
    "no_reference": (GOOD.replace("def reference(", "def _reference("),
                     "reference: missing (read from the file's syntax tree"),
}


def _targets(tmp_path: Path, case: str) -> tuple[Path, Path]:
    folder = tmp_path / "targets"
    shutil.copytree(ROOT / "targets" / "demo", folder / "demo")
    text, _ = CASES[case]
    harness = folder / "demo" / "broken.py"
    if text is not None:
        harness.write_text(text)
    yaml = (ROOT / "targets" / "demo.yaml").read_text()
    yaml = yaml.replace("clone_url: ../examples/miniserve", f"clone_url: {ROOT / 'examples' / 'miniserve'}")
    (folder / "demo.yaml").write_text(yaml.replace("harness: demo/rms_norm.py", "harness: demo/broken.py"))
    return folder, harness


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kernelsmith", "--targets", str(folder), *args],
                          capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", [["evaluate", "demo", "rms_norm", "--device", "interpret"],
                                     ["harness", "check", "demo", "rms_norm", "--device", "interpret"]])
def test_a_broken_harness_is_one_line_exit_2(tmp_path, case, command):
    folder, harness = _targets(tmp_path, case)
    out = _cli(folder, *command)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2, out.stdout + out.stderr
    assert len(lines) == 1 and "Traceback" not in lines[0]
    assert lines[0].startswith(f"kernelsmith: error: {harness}: ") and CASES[case][1] in lines[0]
    assert "the operator's `file`" not in lines[0]


@pytest.mark.parametrize("command", [
    ["optimize", "demo", "rms_norm", "--device", "interpret", "--budget", "1"],
    ["sweep", "demo", "rms_norm", "--device", "interpret"]])
def test_search_commands_refuse_a_broken_harness_before_any_run(tmp_path, command):
    folder, harness = _targets(tmp_path, "no_make_inputs")
    out = _cli(folder, *command, "--out", str(tmp_path / "run"))
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in lines[0], out.stdout + out.stderr
    assert lines[0].startswith(f"kernelsmith: error: {harness}: make_inputs: missing")
    assert not (tmp_path / "run").exists()


def _names(code: str) -> set[str]:
    names, star = module_names(parse(code))
    assert not star
    return names


def test_names_bound_at_module_level_in_any_of_the_usual_ways_count():
    code = (
        "import torch\nfrom .common import make_inputs as make_inputs\nimport a.b\n"
        "try:\n    from fast import reference\nexcept ImportError:\n    def reference(x):\n        return x\n"
        "if True:\n    SHAPES = []\nelse:\n    SHAPES: list = []\n"
        "with open('x') as (f, g):\n    pass\n"
        "class K:\n    inner = 1\n"
        "def f():\n    hidden = 1\n"
    )
    got = _names(code)
    assert {"torch", "make_inputs", "a", "reference", "SHAPES", "f", "g", "K"} <= got
    assert "inner" not in got and "hidden" not in got
    assert module_names(parse("from common import *\n"))[1] is True


def test_files_that_are_not_harness_text_are_named(tmp_path):
    (tmp_path / "d.py").mkdir()
    with pytest.raises(ConfigError, match="not a regular file"):
        check_harness_static(tmp_path / "d.py")
    (tmp_path / "b.py").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        check_harness_static(tmp_path / "b.py")
    (tmp_path / "star.py").write_text("from common import *\n")
    check_harness_static(tmp_path / "star.py")   # the sandboxed import decides
