"""Tasks resolve operators from the target yaml and from the target repo's `.kernelsmith.yml`."""

import shutil
import textwrap
from pathlib import Path

import pytest

from kernelsmith.errors import ConfigError
from kernelsmith.onboard.task import load_task

ROOT = Path(__file__).resolve().parents[2]


def _target(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "examples" / "miniserve", src)
    shutil.copytree(ROOT / "targets" / "demo", src / "harnesses")
    (src / ".kernelsmith.yml").write_text(textwrap.dedent("""
        operators:
          - name: silu_mine
            file: miniserve/kernels/silu_and_mul.py
            entry: silu_and_mul
            harness: harnesses/silu_and_mul.py
    """))
    y = tmp_path / "t.yaml"
    y.write_text(textwrap.dedent(f"""
        repo: owner/engine
        clone_url: {src}
        operators:
          - name: rms_norm
            file: miniserve/kernels/rms_norm.py
            entry: rms_norm
            harness: {ROOT}/targets/demo/rms_norm.py
    """))
    return y


def test_yaml_operator(tmp_path):
    task = load_task(str(_target(tmp_path)), "rms_norm", checkout=str(tmp_path / "src"))
    assert task.file_path.name == "rms_norm.py" and task.harness.outputs is None
    assert "def rms_norm" in task.base_code


def test_repo_operator_from_kernelsmith_yml(tmp_path):
    task = load_task(str(_target(tmp_path)), "silu_mine", checkout=str(tmp_path / "src"))
    assert task.operator.source == ".kernelsmith.yml"
    assert task.harness.outputs == ["out"]


def test_unknown_operator_names_both_sources(tmp_path):
    with pytest.raises(ConfigError, match="unknown operator 'nope'.*rms_norm, silu_mine"):
        load_task(str(_target(tmp_path)), "nope", checkout=str(tmp_path / "src"))
