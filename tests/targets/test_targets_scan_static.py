"""`scan --static` runs no target code: harnesses are read from their syntax tree, setup is skipped."""

import json
import shutil
import textwrap
from pathlib import Path

from kernelsmith.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _target(tmp_path: Path, harness_body: str, setup: str | None = None) -> Path:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "examples" / "miniserve", src)
    (tmp_path / "h.py").write_text(textwrap.dedent(harness_body))
    y = tmp_path / "t.yaml"
    y.write_text(textwrap.dedent(f"""
        repo: owner/engine
        clone_url: {src}
        setup: {json.dumps(setup)}
        operators:
          - name: rms_norm
            file: miniserve/kernels/rms_norm.py
            entry: rms_norm
            harness: h.py
    """))
    return y


HOSTILE = """
    import pathlib
    pathlib.Path(__file__).with_name("ran.txt").write_text("harness code ran")
    SHAPES = [{"n": 1}]
    def make_inputs(shape, device, seed):
        return {}
    def reference(**inputs):
        return None
"""


def test_static_scan_imports_no_harness_and_runs_no_setup(tmp_path, capsys):
    y = _target(tmp_path, HOSTILE, setup="touch setup-ran.txt")
    assert main(["scan", str(y), "--static", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["operators"][0]["harness_ok"] is True
    assert not (tmp_path / "ran.txt").exists()
    assert not list(Path(data["checkout"]).glob("setup-ran.txt"))
    # Without --static the harness is imported (its code runs: the check is real), but in the
    # sandbox (issue 13): its write outside its scratch fails, and that is the harness's problem.
    assert main(["scan", str(y), "--json"]) == 2
    problems = json.loads(capsys.readouterr().out)["operators"][0]["problems"]
    assert any(f"{tmp_path / 'h.py'}: import failed" in p and "Read-only file system" in p for p in problems)
    assert not (tmp_path / "ran.txt").exists()
    assert list(Path(data["checkout"]).glob("setup-ran.txt"))


def test_static_scan_reports_a_missing_harness_name(tmp_path, capsys):
    y = _target(tmp_path, "SHAPES = [{'n': 1}]\ndef reference(**k):\n    return None\n")
    assert main(["scan", str(y), "--static", "--json"]) == 2
    problems = json.loads(capsys.readouterr().out)["operators"][0]["problems"]
    assert any("make_inputs: missing (read from the file's syntax tree, not imported)" in p for p in problems)
