"""kill -9 of a real `kernelsmith optimize` between every pair of writes of a generation (the
process kills itself at a write named by faultpoint.py), then `--resume`: the archive ends with
exactly the rows, in the same order, of an uninterrupted run with the same seed."""

from __future__ import annotations

import pytest
from faultkit import RUN, comparable, ks, rows

from kernelsmith.faultpoint import ENV

BUDGET = ["--budget", "6", "--seed", "0"]  # three generations of two rows


# A generation's writes are its rows (archive `add`) and then its `made` mark. add#1 is the base;
# add#2/#3 generation 1's rows, add#4/#5 generation 2's: a kill right after add#2 or add#4 falls
# between the generation's two rows, after add#3 or add#5 between its last row and its mark, after
# meta:made#1 between generation 1's mark and its commit.
KILL_POINTS = ["add#2", "add#3", "meta:made#1", "add#4", "add#5"]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_between_writes_of_a_generation_then_resume(tmp_path, uninterrupted, point):
    out = tmp_path / "run"
    killed = ks(*RUN, *BUDGET, "--out", str(out), env={ENV: point})
    assert killed.returncode == -9, (point, killed.returncode, killed.stderr[-2000:])
    resumed = ks(*RUN, *BUDGET, "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert comparable(rows(out / "archive.sqlite")) == comparable(uninterrupted)
