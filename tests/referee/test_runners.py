"""A new runner's warm-up (referee/runners.py): its failures are the referee's, never the next
candidate's. Running out of device memory there is made room for (tests/referee/test_memory.py,
through a Referee); anything else is an infrastructure failure, judged again on a new worker."""

import pytest

from kernelsmith.referee.link.errors import CandidateError, RunnerFailed
from kernelsmith.referee.runners import RunnerSwaps


def test_a_warm_up_failing_other_than_for_memory_is_the_referees_failure():
    error = CandidateError("crash", "Traceback (most recent call last):\nRuntimeError: the base broke")
    with pytest.raises(RunnerFailed) as e:
        RunnerSwaps()._warm_again(None, error)  # nothing of the session is touched on this path
    assert e.value.reason == "infrastructure"
    assert "warm-up call of the base failed" in e.value.message and "the base broke" in e.value.message
