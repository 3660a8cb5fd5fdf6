"""CI runs every CPU test it can: the optional dependencies a GPU box may lack are required there
(.ci/run sets KERNELSMITH_REQUIRE_BOT=1), so losing one from the dependency list fails CI instead of
skipping a whole folder of tests (the bot's were skipped for a day when GitPython was dropped)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# botkit.py as a bot test module imports it, with PyJWT hidden.
PROBE = ("import sys; sys.modules['jwt'] = None; sys.path[:0] = ['tests/bot', 'tests']\n"
         "try:\n    import botkit\nexcept BaseException as e:\n    print(type(e).__name__, e)\n")


def _probe(**env) -> str:
    """What importing botkit raised, as `<exception name> <message>`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout


def test_a_missing_bot_dependency_is_an_error_where_ci_requires_the_bot_tests():
    assert _probe(KERNELSMITH_REQUIRE_BOT="1").startswith("ImportError the bot tests need jwt")


def test_elsewhere_a_missing_bot_dependency_skips_the_bot_tests():
    out = _probe(KERNELSMITH_REQUIRE_BOT="0")
    assert out.startswith("Skipped") and "the bot tests need jwt" in out


def test_ci_requires_the_bot_tests():
    assert "export KERNELSMITH_REQUIRE_BOT=1" in (ROOT / ".ci" / "run").read_text()
