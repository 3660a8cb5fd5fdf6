"""Attack: a module planted in the folder a child Python starts in. `python -m pkg` puts that folder
first on sys.path, and the referee's work folder (where its workers, zygote and compile children
start) is writable by candidates, a checkout by the target's `setup`: a `torch.py` or a
`kernelsmith/` written there was imported by the next child instead of the real one.

Every trusted starter is tried with such a folder as its working folder: the referee (zygote and
plain worker), a compile child, the harness child and the LLM broker. None imports the plants."""

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MINISERVE = ROOT / "examples" / "miniserve"
PLANTED = ("torch", "numpy", "triton", "json", "kernelsmith")


def plant(folder: Path) -> Path:
    """Modules named like those children import, each leaving a mark in `folder` when imported."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in PLANTED:
        path = folder / name / "__init__.py" if name == "kernelsmith" else folder / f"{name}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text(f"open({str(folder / ('IMPORTED-' + name))!r}, 'w').write('planted')\n"
                        f"raise ImportError('the planted {name} was imported')\n")
    return folder


def imported(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("IMPORTED-*"))


def _task():
    from kernelsmith.onboard.task import load_task

    return load_task(str(ROOT / "targets" / "demo.yaml"), "rms_norm", checkout=str(MINISERVE))


@pytest.mark.parametrize("zygote", [True, False], ids=["forked", "spawned"])
def test_referee_workers_ignore_modules_planted_in_their_work_folder(tmp_path, zygote):
    from kernelsmith.referee import Referee

    work = plant(tmp_path / "work")
    code = (MINISERVE / "miniserve" / "kernels" / "rms_norm.py").read_text()
    with Referee(_task(), device="interpret", timeout_s=120, workdir=work, zygote=zygote) as ref:
        verdict = ref.evaluate(code, candidate_id=1, timing="none")
    assert imported(work) == []
    assert verdict.accepted, verdict.feedback()


def test_a_compile_child_ignores_modules_planted_in_its_folder(tmp_path):
    from kernelsmith.referee.proc.warm import worker_env
    from kernelsmith.sandbox.spawn import kill_group, start_candidate_python

    work = plant(tmp_path / "work")
    spec = {"target": ["cuda", 90, 32], "harness": str(ROOT / "targets" / "demo" / "rms_norm.py"),
            "device": None, "workdir": str(work)}  # as search/precompile.py starts it
    proc = start_candidate_python("kernelsmith.referee.proc.compile_child", [json.dumps(spec)],
                                  worker_env("interpret", None), work,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready = proc.stdout.readline()  # it answers once torch, Triton and the harness are loaded
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        kill_group(proc.pid)
        proc.stdout.close()
        proc.stderr.close()
    assert imported(work) == []
    assert json.loads(ready) == {"ready": True}


def test_the_harness_child_ignores_modules_planted_in_its_folder(tmp_path):
    from kernelsmith.harness.box import run_child

    checkout = tmp_path / "checkout"
    shutil.copytree(MINISERVE, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    plant(checkout)  # a target's setup can write its checkout, where the harness child starts
    harness = ROOT / "targets" / "demo" / "rms_norm.py"
    spec = {"root": str(checkout), "file": "miniserve/kernels/rms_norm.py", "entry": "rms_norm",
            "harness": str(harness), "stubs": {}, "device": "interpret"}
    answer = run_child(spec, harness=harness, cwd=checkout, device="interpret", timeout_s=120, what="probe")
    assert imported(checkout) == []
    assert isinstance(answer, dict)


def test_the_llm_broker_ignores_modules_planted_in_the_folder_it_starts_in(tmp_path, monkeypatch):
    from kernelsmith.search.mutators.broker import Broker

    folder = plant(tmp_path / "cwd")
    monkeypatch.chdir(folder)
    broker = Broker("http://127.0.0.1:9/v1", "sk-test0123456789abcdef")
    try:
        deadline = time.monotonic() + 5  # it imports its modules at once, then waits for requests
        while broker.proc.poll() is None and time.monotonic() < deadline and not imported(folder):
            time.sleep(0.2)
        assert broker.proc.poll() is None, "the broker died at start"
    finally:
        broker.close()
    assert imported(folder) == []
