"""`--resume` against its own run: conflicting arguments refused, referee folders of killed runs
removed, every invocation's statistics kept."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from faultkit import ROOT, RUN, ks, one_line_error

from kernelsmith.faultpoint import ENV


@pytest.mark.parametrize("change,field", [
    ({"target": "OTHER"}, "target"), ({"op": "silu_and_mul"}, "op"),
    ({"--mutator": "params"}, "mutator"), ({"--seed": "1"}, "seed")])
def test_resume_refuses_a_conflicting_argument(finished, tmp_path, change, field):
    other = tmp_path / "other.yaml"
    shutil.copy(ROOT / "targets" / "demo.yaml", other)
    args = list(RUN)
    if "target" in change:
        args[1] = str(other)
    if "op" in change:
        args[2] = change["op"]
    if "--mutator" in change:
        args[args.index("--mutator") + 1] = change["--mutator"]
    if "--seed" in change:
        args += ["--seed", change["--seed"]]
    proc = ks(*args, "--out", str(finished), "--resume")
    assert proc.returncode == 2
    assert f"run.json: {field}:" in one_line_error(proc)


def test_referee_folders_left_by_a_killed_run_are_removed_by_the_next(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = tmp_path / "run"
    env = {"TMPDIR": str(tmp)}
    assert ks(*RUN, "--budget", "6", "--out", str(out), env={**env, ENV: "add#4"}).returncode == -9
    left = [p for p in tmp.iterdir() if p.name.startswith("kernelsmith-referee-")]
    assert left and any((p / name).exists() for p in left for name in os.listdir(p))
    alive = tmp / f"kernelsmith-referee-{os.getpid()}-inuse"  # a live owner's: kept
    alive.mkdir()
    proc = ks(*RUN, "--budget", "6", "--out", str(out), "--resume", env=env)
    assert proc.returncode == 0, proc.stderr
    assert all(not p.exists() for p in left)
    assert alive.is_dir()


def test_resume_keeps_every_invocations_evaluator_statistics(finished):
    first = json.loads((finished / "result.json").read_text())
    proc = ks(*RUN, "--out", str(finished), "--resume", "--budget", "4")
    assert proc.returncode == 0, proc.stderr
    second = json.loads((finished / "result.json").read_text())
    assert len(second["invocations"]) == 2
    assert second["invocations"][0]["evaluator"] == first["evaluator"]
    assert second["invocations"][1]["evaluator"] == second["evaluator"]
