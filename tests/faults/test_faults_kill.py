"""kill -9 of a real `kernelsmith optimize` between every pair of writes of a generation (the
process kills itself at a write named by faultpoint.py), then `--resume`: the archive ends with
exactly the rows, in the same order, of an uninterrupted run with the same seed."""

from __future__ import annotations

import pytest
from faultkit import KILL_POINTS, comparable


@pytest.mark.parametrize("point", KILL_POINTS)
def test_kill_between_writes_of_a_generation_then_resume(killed_then_resumed, uninterrupted, point):
    got = killed_then_resumed(point)  # conftest.py: killed, `report` on it, resumed
    assert got["killed_rc"] == -9, (point, got["killed_rc"], got["killed_stderr"])
    assert got["resumed_rc"] == 0, got["resumed_stderr"]
    assert comparable(got["rows"]) == comparable(uninterrupted)
