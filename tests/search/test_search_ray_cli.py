"""`--ray` without the ray package, and its option checks (no cluster needed; runs where ray is absent)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kernelsmith.cli import main

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--targets", str(ROOT / "targets"), "optimize", "demo", "silu_and_mul", "--device", "interpret",
        "--mutator", "params", "--budget", "2", "--no-progress"]


def test_ray_missing_exits_2_with_the_install_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main([*ARGS, "--out", str(tmp_path / "run"), "--ray", "auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["kernelsmith: error: --ray: --ray needs the ray package: pip install 'kernelsmith[ray]'"]
    assert not (tmp_path / "run").exists()


def test_ray_option_checks(tmp_path, capsys):
    out = ["--out", str(tmp_path / "run")]
    assert main([*ARGS, *out, "--workers-per-node", "2"]) == 2
    assert "--workers-per-node: only applies with --ray" in capsys.readouterr().err
    assert main([*ARGS, *out, "--ray", "auto", "--workers-per-node", "0"]) == 2
    assert "must be at least 1" in capsys.readouterr().err
    assert main([*ARGS, *out, "--ray", "auto", "--gpus", "0"]) == 2
    assert "leave --gpus out" in capsys.readouterr().err


def test_search_and_referee_import_without_ray():
    code = ("import sys; sys.modules['ray'] = None\n"
            "import kernelsmith.referee, kernelsmith.search.loop, kernelsmith.search.evaluator\n"
            "import kernelsmith.search.ray_pool, kernelsmith.commands.optimize, kernelsmith.commands.sweep\n")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)})
