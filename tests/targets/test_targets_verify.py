"""verify: upstream tests + benchmark on base and winner, in a clean worktree; exits 0 / 1 / 2."""

import json
import shutil

import pytest
from targets_fixtures import OPS, git, make_run, make_target, write

from kernelsmith.cli import main
from kernelsmith.onboard.checkout import prepare_checkout, tree_hash
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.state import entry, load_state
from kernelsmith.verify import parse_pytest_counts, render_section, replace_section, why_not_runnable

FASTER = OPS.replace("return [x * k for x in xs]", "return list(map(k.__mul__, xs))")
BROKEN = OPS.replace("return [x * k for x in xs]", "return [abs(x) * k for x in xs]")  # wrong sign


def _setup(tmp_path, fixture_repo, winner, **op_fields):
    yaml_path = make_target(tmp_path, fixture_repo, **op_fields)
    co = prepare_checkout(load_target(yaml_path))
    return make_run(tmp_path, yaml_path, co.path, co.base_sha, winner), co


def _verify(run):
    code = main(["verify", str(run)])
    return code, json.loads((run / "verify.json").read_text())


def test_winner_that_keeps_tests_passing_passes(tmp_path, fixture_repo, monkeypatch):
    monkeypatch.setenv("KERNELSMITH_TOKEN", "secret-token-value")
    run, co = _setup(tmp_path, fixture_repo, FASTER, benchmark="python bench/bench_ops.py")
    (co.path / "eng" / "ops.py").write_text("def scale(xs, k):\n    raise SystemExit\n")  # dirty checkout
    code, doc = _verify(run)
    assert code == 0 and doc["status"] == "pass" and doc["regression"] is False
    assert doc["base"]["passed"] == 3 and doc["winner"]["passed"] == 3 and doc["winner"]["failed"] == 0
    bench = doc["base"]["benchmark"]
    assert bench["exit_code"] == 0 and "ms per call" in bench["output_tail"]
    assert doc["device"] in ("cuda", "interpret")
    report = (run / "report.md").read_text()
    assert report.count("## Upstream tests") == 1 and "keep me" in report and "**pass**" in report
    assert entry(load_state(), "fix", "scale")["verify_status"] == "pass"
    # The checkout the run used is left as it was (verify worked in its own worktree).
    assert "raise SystemExit" in (co.path / "eng" / "ops.py").read_text()


def test_winner_breaking_an_upstream_test_is_a_regression(tmp_path, fixture_repo):
    run, _ = _setup(tmp_path, fixture_repo, BROKEN)
    code, doc = _verify(run)
    assert code == 1 and doc["status"] == "regression" and doc["regression"] is True
    assert doc["newly_failing"] == ["tests.test_ops::test_scale_negative"] or \
        doc["newly_failing"] == ["test_ops::test_scale_negative"]
    assert doc["winner"]["failed"] == 1 and doc["winner"]["passed"] == 2
    code, doc = _verify(run)  # verifying again replaces the report section, never duplicates it
    assert (run / "report.md").read_text().count("## Upstream tests") == 1
    assert "test_scale_negative" in (run / "report.md").read_text()


def test_benchmark_failing_with_the_winner_is_a_regression(tmp_path, fixture_repo):
    winner = OPS + "\nimport sys\nif 'bench_ops' in sys.argv[0]:\n    raise SystemExit(3)\n"
    run, _ = _setup(tmp_path, fixture_repo, winner, benchmark="python bench/bench_ops.py")
    code, doc = _verify(run)
    assert code == 1 and any("benchmark" in x for x in doc["newly_failing"])


@pytest.mark.parametrize("test_cmd, why", [
    ("python -m pytest -q -p no:hypothesispytest tests/test_needs_dep.py",
     "missing dependency: definitely_not_installed_mod"),
    ("python -m pytest -q -p no:hypothesispytest tests/test_all_skip.py", "every test was skipped"),
    ("no-such-tool --run", "bad command"),
    ("python -m pytest -q -p no:hypothesispytest tests/does_not_exist.py", "bad command"),
])
def test_commands_that_cannot_run_are_reported_never_passed(tmp_path, fixture_repo, test_cmd, why):
    write(fixture_repo, "tests/test_needs_dep.py",
          "import definitely_not_installed_mod\n\ndef test_x():\n    pass\n")
    write(fixture_repo, "tests/test_all_skip.py",
          "import pytest\n\n@pytest.mark.skip(reason='needs CUDA')\ndef test_x():\n    pass\n")
    git(fixture_repo, "add", "-A")
    git(fixture_repo, "commit", "-q", "-m", "more tests")
    run, _ = _setup(tmp_path, fixture_repo, FASTER, test=test_cmd)
    code, doc = _verify(run)
    assert code == 2 and doc["status"] == "could-not-run" and doc["regression"] is False
    assert why in doc["reason"]
    assert doc["winner"]["output_tail"].startswith("not run")
    assert "could not run" in (run / "report.md").read_text()


def test_no_test_command_or_no_winner_cannot_run(tmp_path, fixture_repo):
    run, _ = _setup(tmp_path, fixture_repo, None)
    code, doc = _verify(run)
    assert code == 2 and "no winner" in doc["reason"]
    shutil.rmtree(run)
    run, _ = _setup(tmp_path, fixture_repo, FASTER, test=None)
    code, doc = _verify(run)
    assert code == 2 and "no upstream test command" in doc["reason"]


def test_plain_folder_checkout_without_git(tmp_path, fixture_repo):
    folder = tmp_path / "plain"
    shutil.copytree(fixture_repo, folder, ignore=shutil.ignore_patterns(".git"))
    yaml_path = make_target(tmp_path, fixture_repo)
    run = make_run(tmp_path, yaml_path, folder, tree_hash(folder), BROKEN)
    code, doc = _verify(run)
    assert code == 1 and doc["status"] == "regression"
    (folder / "eng" / "ops.py").write_text(FASTER)  # the folder no longer matches the run's base
    code, doc = _verify(run)
    assert code == 2 and "changed since the run" in doc["reason"]


def test_pytest_counts_and_diagnosis():
    assert parse_pytest_counts("...\n3 passed, 1 failed, 2 skipped, 1 error in 0.12s\n") == {
        "passed": 3, "failed": 1, "errors": 1, "skipped": 2, "xfailed": 0, "xpassed": 0}
    assert parse_pytest_counts("==== 5 passed, 2 warnings in 1.00s ====")["passed"] == 5
    assert parse_pytest_counts("no tests ran in 0.01s")["passed"] == 0
    assert parse_pytest_counts("Traceback ...") is None
    from kernelsmith.verify import CommandResult
    out = "E   RuntimeError: Found no NVIDIA driver on your system\n1 error in 0.2s"
    res = CommandResult("c", 2, 1.0, out, counts=parse_pytest_counts(out), output=out)
    assert why_not_runnable(res, has_cuda=False).startswith("no GPU")
    assert why_not_runnable(res, has_cuda=True).startswith("no test passes on the base")


def test_report_section_replaced_in_place():
    doc = {"status": "pass", "reason": "ok", "base_sha": "a" * 40, "device": "cuda", "created_at": "t",
           "newly_failing": [], "base": None, "winner": None}
    text = "# title\n\n## Upstream tests\n\nold\n\n## Chart\n\nimg\n"
    new = replace_section(text, render_section(doc))
    assert new.count("## Upstream tests") == 1 and "old" not in new and "## Chart\n\nimg" in new
    assert replace_section(new, render_section(doc)) == new
