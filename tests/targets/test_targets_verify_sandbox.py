"""verify's upstream commands run in the "tests" sandbox: they cannot write the run directory or
see a secret; without user namespaces verify refuses, and --no-sandbox is stated in its outputs."""

import json
import os

from targets_fixtures import OPS, make_run, make_target

from kernelsmith.cli import main
from kernelsmith.onboard.checkout import prepare_checkout
from kernelsmith.onboard.config import load_target

FASTER = OPS.replace("return [x * k for x in xs]", "return list(map(k.__mul__, xs))")
SECRETS = {"KERNELSMITH_LLM_API_KEY": "sk-verifyfake0123456789ab", "GITHUB_TOKEN": "ghs_" + "v" * 36}

# An upstream "test command" that attacks first, then runs the real tests.
ATTACK = '''
import os, sys
run_dir = sys.argv[1]
try:
    with open(os.path.join(run_dir, "result.json"), "w") as f:
        f.write('{"geomean_speedup": 42.0}')
    print("WRITE-SUCCEEDED")
except OSError as e:
    print("WRITE-REFUSED", e.errno)
found = []
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + [str(os.getppid())]:
    try:
        data = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        continue
    found += [s for s in sys.argv[2:] if s.encode() in data]
print("SECRET-FOUND" if found or any(s in os.environ.values() for s in sys.argv[2:]) else "NO-SECRET")
'''




def _run(tmp_path, fixture_repo, monkeypatch):
    attack = tmp_path / "attack.py"
    attack.write_text(ATTACK)
    run_dir = tmp_path / "run"
    values = " ".join(SECRETS.values())
    test = (f"python {attack} {run_dir} {values} && "
            "python -m pytest -q -p no:hypothesispytest tests/test_ops.py")
    yaml_path = make_target(tmp_path, fixture_repo, test=test)
    co = prepare_checkout(load_target(yaml_path))
    run = make_run(tmp_path, yaml_path, co.path, co.base_sha, FASTER)
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    return run


def test_tests_cannot_write_the_run_dir_or_see_secrets(tmp_path, fixture_repo, monkeypatch, sibling):
    run = _run(tmp_path, fixture_repo, monkeypatch)
    before = (run / "result.json").read_text()
    assert main(["verify", str(run)]) == 0
    doc = json.loads((run / "verify.json").read_text())
    assert doc["status"] == "pass" and doc["sandbox"]["enabled"] is True
    for side in ("base", "winner"):
        tail = doc[side]["output_tail"]
        assert "WRITE-REFUSED" in tail and "NO-SECRET" in tail and "SECRET-FOUND" not in tail, tail
    assert (run / "result.json").read_text() == before
    assert "Warning" not in (run / "report.md").read_text()


def test_verify_refuses_without_user_namespaces_unless_no_sandbox(tmp_path, fixture_repo, monkeypatch, capsys,
                                                                  sibling):
    run = _run(tmp_path, fixture_repo, monkeypatch)
    monkeypatch.setenv("KERNELSMITH_SANDBOX_SIMULATE_MISSING", "1")
    assert main(["verify", str(run)]) == 2
    err = capsys.readouterr().err
    assert "user.max_user_namespaces = 0" in err and "--no-sandbox" in err
    assert not (run / "verify.json").exists()
    assert main(["verify", str(run), "--no-sandbox"]) == 0
    assert "WARNING: --no-sandbox" in capsys.readouterr().err
    doc = json.loads((run / "verify.json").read_text())
    assert doc["sandbox"]["enabled"] is False and "WITHOUT the sandbox" in doc["sandbox"]["note"]
    assert "WITHOUT the sandbox" in (run / "report.md").read_text()
    # Without the sandbox the same attack goes through: what the sandbox is for.
    assert "WRITE-SUCCEEDED" in doc["base"]["output_tail"] and "SECRET-FOUND" in doc["base"]["output_tail"]


def test_setup_installs_into_the_checkouts_own_environment(tmp_path, fixture_repo):
    """Finding 6: `pip install -e .` in setup lands in the checkout's .kernelsmith-venv (which sees
    the runner's packages), never in the runner's Python, which is read-only inside the sandbox."""
    import sysconfig

    target = load_target(make_target(tmp_path, fixture_repo))
    runner_site = sysconfig.get_path("purelib")
    target.setup = ("python -c \"import sys, numpy; open('prefix.txt', 'w').write(sys.prefix)\" && "
                    f"(touch {runner_site}/planted.pth && echo PLANTED || echo REFUSED) > site.txt")
    co = prepare_checkout(target)
    assert (co.path / "prefix.txt").read_text() == str(co.path / ".kernelsmith-venv")
    assert (co.path / "site.txt").read_text().strip() == "REFUSED"
    assert not os.path.exists(f"{runner_site}/planted.pth")
