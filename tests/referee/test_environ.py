"""A candidate cannot read the tokens its ancestors were started with (/proc/<pid>/environ)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelsmith.sandbox import probe

ROOT = Path(__file__).resolve().parents[2]
SECRET = "ghp_environLeakCanary0123456789abcdefXYZ"

# The demo's silu_and_mul, plus a hunt through every ancestor's initial environment.
HUNT = '''
import os as _os

_read = __import__("builtins").__dict__["op" + "en"]  # past the static check: this must run


def _hunt():
    pid = _os.getppid()
    while pid > 1:
        try:
            with _read(f"/proc/{pid}/environ", "rb") as f:
                if b"environLeakCanary" in f.read():
                    raise RuntimeError("leaked " + f.name)
        except OSError:
            pass
        try:
            with _read(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break

_hunt()
'''

DRIVER = '''
import json, sys
from pathlib import Path
from kernelsmith.referee import Referee
from kernelsmith.onboard.task import load_task

task = load_task(sys.argv[1], "silu_and_mul", checkout=sys.argv[2])
code = task.base_code + sys.argv[3]
with Referee(task, device="interpret") as ref:
    print(json.dumps(ref.evaluate(code, candidate_id=2, timing="none").to_json()))
'''


@pytest.mark.skipif(probe() is not None, reason="needs user namespaces (the sandbox)")
def test_candidate_finds_no_token_in_its_ancestors(tmp_path):
    env = {**os.environ, "GITHUB_TOKEN": SECRET, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(ROOT / "targets" / "demo.yaml"),
         str(ROOT / "examples" / "miniserve"), HUNT],
        env=env, capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    text = json.dumps(verdict)
    assert "leaked" not in text and SECRET not in text
    # It ran (a leak would have raised at import). Issue 13: the worker is pid 1 of a PID namespace
    # of its own, so it has no visible ancestor at all (before the sandbox, the monitor saw it read
    # other processes' files: file_access).
    assert verdict["violations"] in ([], ["file_access"]) and verdict["correct"], verdict


def test_hide_environ_makes_the_process_non_dumpable():
    code = ("import ctypes; from kernelsmith.sandbox import hide_environ;"
            "libc = ctypes.CDLL(None); before = libc.prctl(3, 0, 0, 0, 0);"
            "print(hide_environ(), before, libc.prctl(3, 0, 0, 0, 0))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True).stdout.split()
    if sys.platform.startswith("linux"):
        assert out == ["True", "1", "0"]  # PR_GET_DUMPABLE: 1 before, 0 after
