"""Harnesses are target code: `scan` and `harness check` import them only in a sandboxed child
(issue 13). A hostile harness cannot write outside its scratch, see a secret or reach the network;
one that crashes or hangs is one error naming its file, and scan still checks the other operators."""

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from spykit import spy_harness

from kernelsmith import sandbox
from kernelsmith.cli import main
from kernelsmith.harness import box as harnessbox
from kernelsmith.onboard import harness_check as harnesscheck

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {"KERNELSMITH_LLM_API_KEY": "sk-harnessfake0123456789ab", "GITHUB_TOKEN": "ghs_" + "h" * 36}
pytestmark = pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")

# Attacks at import, then reports what it saw in its import error (the one text that comes back).
SPY_ENDING = 'raise RuntimeError("\\x1b[31m " + " ".join(seen))\n'
CRASH = "import ctypes\nctypes.string_at(0)  # a segfault at import\n"
HANG = "import time\ntime.sleep(3600)\n"
# The names every harness defines, so the syntax-tree check before any child starts lets these
# through: what they do at import is for the sandbox to contain.
NAMES = ("SHAPES = []\n\n\ndef make_inputs(shape, device, seed):\n    return {}\n\n\n"
         "def reference(**k):\n    return None\n\n\n")






def _target(tmp_path: Path, port: int, monkeypatch,
            names=("good", "spy", "crash", "hang")) -> tuple[Path, Path]:
    """A target over a copy of miniserve with a sound harness and spy, crash and hang harnesses."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "examples" / "miniserve", src)
    outside = [str(tmp_path / "pwned.txt"), str(src / "pwned.txt")]
    spy = spy_harness(outside, list(SECRETS.values()), port, SPY_ENDING)
    harnesses = {"good": (ROOT / "targets" / "demo" / "rms_norm.py").read_text(), "spy": NAMES + spy,
                 "crash": NAMES + CRASH, "hang": NAMES + HANG}
    ops = ""
    for name in names:
        text = harnesses[name]
        (tmp_path / f"{name}.py").write_text(text)
        ops += (f"  - name: {name}\n    file: miniserve/kernels/rms_norm.py\n    entry: rms_norm\n"
                f"    harness: {name}.py\n")
    yaml = tmp_path / "t.yaml"
    yaml.write_text(f"repo: owner/engine\nclone_url: {src}\noperators:\n{ops}")
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    return yaml, src


def _nothing_written(tmp_path: Path, src: Path, checkout: Path | None = None) -> None:
    assert not (tmp_path / "pwned.txt").exists() and not (src / "pwned.txt").exists()
    assert checkout is None or not (checkout / "pwned.txt").exists()


def _spy_saw_nothing(text: str) -> None:
    assert "WRITE-REFUSED WRITE-REFUSED NO-SECRET NET-REFUSED" in text, text
    assert "SUCCEEDED" not in text and "SECRET-FOUND" not in text and "NET-CONNECTED" not in text
    assert "\x1b" not in text and "\\x1b[31m" in text  # its terminal escape is shown, not obeyed


def test_scan_imports_each_harness_in_the_sandbox(tmp_path, listener, sibling, monkeypatch, capsys):
    yaml, src = _target(tmp_path, listener, monkeypatch)
    monkeypatch.setattr(harnessbox, "LOAD_TIMEOUT_S", 15.0)
    assert main(["scan", str(yaml), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    ops = {op["name"]: op for op in doc["operators"]}
    assert ops["good"]["harness_ok"] and not ops["good"]["problems"]  # still scanned, and sound
    for name in ("spy", "crash", "hang"):
        (problem,) = ops[name]["problems"]
        assert not ops[name]["harness_ok"] and problem.startswith(f"harness: {tmp_path / name}.py: "), problem
    _spy_saw_nothing(ops["spy"]["problems"][0])
    assert "import failed: RuntimeError" in ops["spy"]["problems"][0]
    assert "killed by SIGSEGV" in ops["crash"]["problems"][0]
    assert "did not finish in 15 s" in ops["hang"]["problems"][0]
    assert doc["sandbox"]["enabled"] is True
    _nothing_written(tmp_path, src, Path(doc["checkout"]))


def _check(yaml: Path, op: str, *extra: str) -> list[str]:
    return ["harness", "check", str(yaml), op, "--device", "interpret", *extra]


def test_harness_check_runs_the_harness_in_the_sandbox(tmp_path, listener, sibling, monkeypatch, capsys):
    yaml, src = _target(tmp_path, listener, monkeypatch)
    assert main(_check(yaml, "spy")) == 2  # a harness that does not import: a config error, as before
    err = capsys.readouterr().err
    assert f"{tmp_path / 'spy.py'}: import failed: RuntimeError" in err
    _spy_saw_nothing(err)
    assert main(_check(yaml, "crash")) == 1
    out = capsys.readouterr().out
    crash = tmp_path / "crash.py"
    assert f"problem [harness] {crash}: the harness checks process was killed by SIGSEGV" in out
    monkeypatch.setattr(harnesscheck, "PROBE_TIMEOUT_S", 6)  # the hang's alone: it sleeps through any
    assert main(_check(yaml, "hang")) == 1
    out = capsys.readouterr().out
    assert f"problem [harness] {tmp_path / 'hang.py'}: the harness checks did not finish in 6 s" in out
    _nothing_written(tmp_path, src)


def test_without_user_namespaces_both_refuse_unless_no_sandbox_and_say_so(tmp_path, listener, sibling,
                                                                          monkeypatch, capsys):
    yaml, src = _target(tmp_path, listener, monkeypatch, names=("good", "spy"))
    monkeypatch.setenv("KERNELSMITH_SANDBOX_SIMULATE_MISSING", "1")
    assert main(_check(yaml, "good")) == 2
    assert "user.max_user_namespaces = 0" in capsys.readouterr().err
    assert main(["scan", str(yaml), "--json"]) == 2
    assert "user.max_user_namespaces = 0" in capsys.readouterr().err
    # --no-sandbox: the harness runs outside, and the outputs say so.
    code = main(_check(yaml, "good", "--no-sandbox"))
    out = capsys.readouterr().out
    assert code == 0 and "warning: --no-sandbox" in out and "WITHOUT the sandbox" in out, out
    code = main(["scan", str(yaml), "--json", "--no-sandbox"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and doc["sandbox"]["enabled"] is False
    assert "WITHOUT the sandbox" in doc["sandbox"]["note"]
    # Without the sandbox the same attack writes its files: what the sandbox is for.
    spy = {op["name"]: op for op in doc["operators"]}["spy"]["problems"][0]
    assert "WRITE-SUCCEEDED" in spy and "SECRET-FOUND" in spy and "NET-CONNECTED" in spy
    assert (tmp_path / "pwned.txt").exists()


def test_malformed_answers_are_refused():
    with pytest.raises(harnessbox.HarnessChildError, match="h.py: the harness check process answered"):
        harnessbox.checked_probe({"problems": [["a", "b"]], "passed": 1}, "h.py")
    with pytest.raises(harnessbox.HarnessChildError):
        harnessbox.checked_probe({"problems": [], "passed": True}, "h.py")
    problems, passed = harnessbox.checked_probe({"problems": [["c", "x\x1b]0;t\x07" + "y" * 5000, "f"]],
                                                 "passed": 3}, "h.py")
    assert passed == 3 and "\x1b" not in problems[0][1] and len(problems[0][1]) < 1100
    err = harnessbox.config_error({"config_error": {"message": "bad\nline", "field": "x; rm -rf"}}, "h.py")
    assert str(err) == f"{Path('h.py').resolve()}: bad\\nline"  # a field that is no name is dropped
    assert harnessbox.shown("a\u202eb") == "a\\u202eb"  # no bidi override


def test_a_process_left_behind_does_not_hold_the_answer_back():
    """--no-sandbox: a daemon keeping the pipes open costs EXIT_GRACE_S, not the timeout."""
    proc = subprocess.Popen(["sh", "-c", "sleep 60 & echo '{\"loaded\": true}'"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    start = time.monotonic()
    out, _, timed_out = harnessbox._collect(proc, 60)
    assert json.loads(out) == {"loaded": True} and not timed_out
    assert time.monotonic() - start < 10
