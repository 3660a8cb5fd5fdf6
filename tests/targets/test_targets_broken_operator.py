"""One operator the loader cannot take does not disable its target file (issue 41, item 4): the
other operators are served, the bad one is one clear error when named, and scan lists it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BAD = ("  - name: bad\n    file: miniserve/kernels/rms_norm.py\n    entry: rms_norm\n"
       "  - name: worse\n    file: miniserve/kernels/rms_norm.py\n    entry: rms_norm\n"
       "    harness: demo/rms_norm.py\n    launch: fast\n")


def _targets(tmp_path: Path) -> Path:
    folder = tmp_path / "targets"
    shutil.copytree(ROOT / "targets" / "demo", folder / "demo")
    yaml = (ROOT / "targets" / "demo.yaml").read_text()
    yaml = yaml.replace("clone_url: ../examples/miniserve", f"clone_url: {ROOT / 'examples' / 'miniserve'}")
    (folder / "demo.yaml").write_text(yaml.rstrip("\n") + "\n" + BAD)
    return folder


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "kernelsmith", "--targets", str(folder), *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_other_operators_are_served_and_the_bad_one_is_one_line_when_named(tmp_path):
    folder = _targets(tmp_path)
    ok = _cli(folder, "evaluate", "demo", "rms_norm", "--device", "interpret", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["accepted"] is True
    for op, field in (("bad", "operators[2].harness: missing required field"),
                      ("worse", "operators[3].launch: unknown field(s) launch")):
        out = _cli(folder, "evaluate", "demo", op, "--device", "interpret")
        lines = (out.stdout + out.stderr).strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in lines[0]
        assert lines[0] == f"kernelsmith: error: {folder / 'demo.yaml'}: {field}"


def test_scan_lists_the_bad_operators_as_problems(tmp_path):
    folder = _targets(tmp_path)
    out = _cli(folder, "scan", "demo", "--static", "--json")
    assert out.returncode == 2, out.stderr
    ops = {o["name"]: o for o in json.loads(out.stdout)["operators"]}
    assert set(ops) == {"rms_norm", "silu_and_mul", "bad", "worse"}
    assert ops["rms_norm"]["problems"] == [] and ops["silu_and_mul"]["problems"] == []
    assert ops["bad"]["problems"] == [f"{folder / 'demo.yaml'}: operators[2].harness: missing required field"]
    assert "unknown field(s) launch" in ops["worse"]["problems"][0]
    table = _cli(folder, "scan", "demo", "--static")
    assert table.returncode == 2 and "problem: bad:" in table.stdout and "Traceback" not in table.stderr
