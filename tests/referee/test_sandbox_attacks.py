"""Issue 13, findings 2 and 4, against real worker processes: a candidate cannot write outside its
work folder, finds no secret in any process it can see, and what it starts dies with its worker."""

import json
import os
import shutil
import subprocess
import sys
import time

from referee_helpers import CORPUS, DEMO_YAML, MINISERVE, ROOT

from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee


def _copy_checkout(tmp_path):
    dest = tmp_path / "checkout-cache" / "miniserve"
    shutil.copytree(MINISERVE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_writes_outside_the_work_folder_fail_and_are_recorded(tmp_path, monkeypatch):
    checkout = _copy_checkout(tmp_path)
    run_dir = tmp_path / "runs" / "demo-rms_norm-1"
    run_dir.mkdir(parents=True)
    result = run_dir / "result.json"
    result.write_text('{"geomean_speedup": 1.01}')
    home = tmp_path / "home"
    (home / ".triton").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))  # the user's files: a file in the home folder
    planted = checkout / "miniserve" / "kernels" / "planted.py"
    targets = [result, home / ".bashrc", planted, checkout / "miniserve" / "kernels" / "utils.py"]
    before = {p: p.read_bytes() if p.exists() else None for p in targets}
    monkeypatch.setenv("KS_ATTACK_PATHS", os.pathsep.join(map(str, targets)))
    task = load_task(str(DEMO_YAML), "rms_norm", checkout=str(checkout))
    with Referee(task, device="interpret", timeout_s=60, workdir=tmp_path / "work") as ref:
        verdict = ref.evaluate((CORPUS / "cheats" / "rms_norm__write_outside.py").read_text(), candidate_id=7)
    assert not verdict.accepted and "file_access" in verdict.violations, verdict.feedback()
    assert verdict.correct  # every write failed quietly inside; the outputs were right
    for path, data in before.items():
        assert (path.read_bytes() if path.exists() else None) == data, path


HUNTER = '''
import json, os, subprocess, sys
from kernelsmith.referee import Referee
from kernelsmith.onboard.task import load_task

# A sibling holding the secrets and dumpable (like a CI step's shell): outside a PID namespace a
# process of the same user could read its /proc/<pid>/environ.
sibling = subprocess.Popen(["sleep", "120"])
task = load_task(sys.argv[1], "rms_norm", checkout=sys.argv[2])
try:
    with Referee(task, device="interpret", timeout_s=60, zygote=sys.argv[4] == "forked") as ref:
        verdict = ref.evaluate(open(sys.argv[3]).read(), candidate_id=3, timing="none")
finally:
    sibling.kill()
print(json.dumps(verdict.to_json()))
'''


def _hunt(tmp_path, how):
    secrets = {"KERNELSMITH_LLM_API_KEY": "sk-fakekey0123456789abcdef", "GITHUB_TOKEN": "ghs_" + "z" * 36,
               "OPENAI_API_KEY": "sk-otherfake0123456789abc"}
    env = {**os.environ, **secrets, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", HUNTER, str(DEMO_YAML), str(MINISERVE),
                           str(CORPUS / "cheats" / "rms_norm__environ_hunt.py"), how],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    text = json.dumps(verdict)
    assert "leaked" not in text and not any(v in text for v in secrets.values()), text[:2000]
    # It ran to the end (a find raises) and was seen reading other processes' files.
    assert verdict["correct"] and verdict["violations"] == ["file_access"], verdict


def test_no_process_a_candidate_can_see_holds_a_secret_forked(tmp_path):
    _hunt(tmp_path, "forked")


def test_no_process_a_candidate_can_see_holds_a_secret_spawned(tmp_path):
    _hunt(tmp_path, "spawned")


def test_a_double_forked_child_dies_with_its_worker(tmp_path):
    work = tmp_path / "work"
    with Referee(load_task(str(DEMO_YAML), "rms_norm", checkout=str(MINISERVE)), device="interpret",
                 timeout_s=60, workdir=work) as ref:
        verdict = ref.evaluate((CORPUS / "cheats" / "rms_norm__double_fork.py").read_text(), candidate_id=9)
        assert "extra_threads" in verdict.violations and ref._worker is None  # recycled
        started = ref.workdir / "tmp" / "forked-started"  # the sandbox's writable work folder
        assert started.exists()  # the detached grandchild ran and could write there
        time.sleep(4.5)  # past its 3 s sleep, with the Referee (and its zygote) still alive
        assert not (ref.workdir / "tmp" / "forked-late").exists()
