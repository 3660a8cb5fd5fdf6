"""`--resume` against its own run: conflicting arguments refused, referee folders of killed runs
removed, every invocation's statistics kept."""

from __future__ import annotations

import json
import shutil

import pytest
from faultkit import ROOT, RUN, ks, one_line_error


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


def test_referee_folders_left_by_a_killed_run_are_removed_by_the_next(killed_then_resumed):
    got = killed_then_resumed("add#4")  # conftest.py: killed, then resumed with the same TMPDIR
    assert got["killed_rc"] == -9, got["killed_stderr"]
    assert got["left"] and got["left_holds_files"]
    assert got["resumed_rc"] == 0, got["resumed_stderr"]
    assert got["left_after_resume"] == []
    assert got["alive_kept"]  # a live owner's (kernelsmith-referee-<pid of this session>-inuse)


def test_resume_keeps_every_invocations_evaluator_statistics(finished):
    first = json.loads((finished / "result.json").read_text())
    proc = ks(*RUN, "--out", str(finished), "--resume", "--budget", "4")
    assert proc.returncode == 0, proc.stderr
    second = json.loads((finished / "result.json").read_text())
    assert len(second["invocations"]) == 2
    assert second["invocations"][0]["evaluator"] == first["evaluator"]
    assert second["invocations"][1]["evaluator"] == second["evaluator"]
