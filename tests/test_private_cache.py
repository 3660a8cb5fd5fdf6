"""Each test's kernelsmith state file is its own and the cache the test process's (tests/conftest.py):
what one test records is never what the next one in the same process sees, whichever tests
pytest-xdist puts together, and fixtures made before any test runs write no user cache either."""

import os

import pytest

from kernelsmith.onboard.state import entry, load_state, record_run, save_state, state_path
from kernelsmith.paths import cache_dir

KEEP_CACHE = os.environ.get("KERNELSMITH_KEEP_CACHE") == "1"


@pytest.fixture(scope="module")
def module_fixture_places():
    """Where a module fixture, made before its first test's own cache is set, keeps state and cache."""
    return state_path(), cache_dir()


def test_a_test_records_a_run():
    state = load_state()
    record_run(state, "fix", "scale", source_hash="0" * 64)
    save_state(state)
    assert entry(load_state(), "fix", "scale")["source_hash"] == "0" * 64


def test_the_next_test_in_the_process_does_not_see_it():
    assert load_state()["operators"] == {}


def test_the_cache_is_the_test_processs(tmp_path_factory):
    if not KEEP_CACHE:  # KERNELSMITH_KEEP_CACHE=1 asks for the user's cache on purpose
        assert cache_dir() == tmp_path_factory.getbasetemp() / "ks-cache"


def test_module_fixtures_write_the_test_processs_cache(module_fixture_places, tmp_path_factory):
    state, cache = module_fixture_places
    base = tmp_path_factory.getbasetemp()
    assert state.is_relative_to(base) and state != state_path()
    if not KEEP_CACHE:
        assert cache == base / "ks-cache"
