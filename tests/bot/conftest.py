"""The bot tests' fixture, from botkit.py (helpers are imported from botkit by name, never from
conftest: a run over several test folders has several conftests). Without the bot's optional
dependencies botkit skips itself: every test module importing it is reported skipped."""

import pytest

try:
    from botkit import gh  # noqa: F401 - registers the fixture
except pytest.skip.Exception:
    pass
