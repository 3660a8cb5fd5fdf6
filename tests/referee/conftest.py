"""Shared fixtures for the referee tests."""

import pytest
from referee_helpers import demo_task


@pytest.fixture(scope="module")
def referees():
    """One interpreter Referee per demo operator, shared by a test module."""
    from kernelsmith.referee import Referee

    made = {}

    def get(op: str):
        if op not in made:
            made[op] = Referee(demo_task(op), device="interpret", seed=1234, timeout_s=45)
        return made[op]

    yield get
    for ref in made.values():
        ref.close()
