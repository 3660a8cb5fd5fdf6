"""Shared fixtures for the referee tests."""

import pytest
from referee_helpers import demo_task


@pytest.fixture(scope="module")
def referees(tmp_path_factory):
    """One interpreter Referee per demo operator, shared by a test module.

    Its workers get a private Triton cache folder and XDG cache home: cheats in the corpus write
    into both (tests/referee/cheats/rms_norm__triton_cache.py, rms_norm__device_json.py), and they
    must never reach the user's own ~/.triton or ~/.cache.
    """
    from kernelsmith.referee import Referee

    made = {}
    home = tmp_path_factory.mktemp("referee-env")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(home / "triton"))
        mp.setenv("XDG_CACHE_HOME", str(home / "xdg"))

        def get(op: str):
            if op not in made:
                made[op] = Referee(demo_task(op), device="interpret", seed=1234, timeout_s=45)
            return made[op]

        yield get
        for ref in made.values():
            ref.close()
