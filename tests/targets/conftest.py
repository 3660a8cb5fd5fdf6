"""Fixtures of the target tests; the helpers live in targets_fixtures.py (a unique module name)."""

from targets_fixtures import fixture_repo  # noqa: F401 - the fixture, registered here
