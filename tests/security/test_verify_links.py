"""Attack: a hostile `conftest.py` in the target's tests, while the base's tests run, replaces the
operator's file by a symlink to a file outside; verify then placed the winner through that link
(the winner's content landed outside) and still reported `pass`. Now base and winner each run in a
worktree made fresh from the store, and the winner is written with safefs before any test ran there."""

import json

from hostile_demo import OP_FILE, ROOT, demo_target, make_run, needs_sandbox, python_first_on_path

from kernelsmith import safefs
from kernelsmith.cli import main
from kernelsmith.onboard.checkout import prepare_checkout
from kernelsmith.onboard.config import load_target

WINNER_MARK = "# kernelsmith-winner-under-test"


def _hostile_conftest(victim) -> str:
    base = (ROOT / "examples" / "miniserve" / "tests" / "conftest.py").read_text()
    return base + f"""
_OP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), {OP_FILE!r})
_SEEN = []


def pytest_sessionstart(session):
    with open(_OP) as f:
        _SEEN.append("yes" if {WINNER_MARK!r} in f.read() else "no")


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line("WINNER-IN-TREE: " + _SEEN[0])


def pytest_sessionfinish(session, exitstatus):
    # After the tests passed: the operator's file becomes a link to a file outside the tree.
    os.unlink(_OP)
    os.symlink({str(victim)!r}, _OP)
"""


def _prepared(tmp_path, victim):
    yaml_path = demo_target(tmp_path, files={"tests/conftest.py": _hostile_conftest(victim)})
    co = prepare_checkout(load_target(yaml_path))
    winner = (co.path / OP_FILE).read_text() + f"\n{WINNER_MARK}\n"
    return make_run(tmp_path, yaml_path, co.path, co.base_sha, winner)


@needs_sandbox
def test_a_link_planted_by_the_base_tests_is_not_written_through(tmp_path, monkeypatch):
    python_first_on_path(monkeypatch)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = _prepared(tmp_path, victim)
    code = main(["verify", str(run)])
    doc = json.loads((run / "verify.json").read_text())
    assert victim.read_text() == "precious\n"  # the winner was never written through the link
    # Honest: the base ran the base, the winner's tests ran the winner (not what a link pointed at).
    assert code == 0 and doc["status"] == "pass", doc["reason"]
    assert doc["base"]["passed"] > 0 and doc["winner"]["passed"] == doc["base"]["passed"]
    assert "WINNER-IN-TREE: no" in doc["base"]["output_tail"]
    assert "WINNER-IN-TREE: yes" in doc["winner"]["output_tail"]


@needs_sandbox
def test_a_winner_that_cannot_be_placed_is_never_a_pass(tmp_path, monkeypatch):
    python_first_on_path(monkeypatch)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    run = _prepared(tmp_path, victim)

    def refuse(dir_fd, name, data, **kw):
        raise safefs.UnsafePath(f"{name}: a symlink; refused")

    monkeypatch.setattr(safefs, "write_at", refuse)
    code = main(["verify", str(run)])
    doc = json.loads((run / "verify.json").read_text())
    assert code == 2 and doc["status"] == "could-not-run" and doc["regression"] is False
    assert doc["reason"].startswith(f"cannot place the winner at {OP_FILE}")
    assert doc["winner"]["passed"] is None and victim.read_text() == "precious\n"
