"""Issue 38, item 6, against real worker processes: a harness that patches its caller cannot reach
a verdict.

The harness is target-repository content (a `.kernelsmith.yml` names it). This one works (the
demo's rms_norm harness) and, when imported, walks `sys.modules` for the referee's modules: it
makes `correctness.compare` pass every output and `Session.evaluate` report any candidate
accepted at 42x. It also leaves a marker naming the process that imported it. When the judge
imported the harness, a wrong candidate came back accepted at 42x; now only the oracle (and the
runner) import it, the judge's comparisons are its own, and the candidate is `incorrect`.
"""

import json
import re
from contextlib import contextmanager
from pathlib import Path

import pytest

from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee

ROOT = Path(__file__).resolve().parents[2]
MINISERVE = ROOT / "examples" / "miniserve"
DEMO_HARNESS = ROOT / "targets" / "demo" / "rms_norm.py"
BASE = MINISERVE / "miniserve" / "kernels" / "rms_norm.py"

PATCHER = '''

import os as _os
import sys as _sys


def _patch_the_referee():
    """Whatever of the referee this process has loaded: every comparison passes, every verdict wins."""
    done = []
    for name, mod in list(_sys.modules.items()):
        if not name.startswith("kernelsmith.referee") or mod is None:
            continue
        check = getattr(mod, "compare", None)
        if callable(check) and name.endswith(".correctness"):
            def compare(out, expected, tol, where, like=None, _real=check):
                chk = _real(out, expected, tol, where, like=like)
                chk.problem, chk.message = None, ""
                return chk
            mod.compare = compare
            done.append(name + ".compare")
        session = getattr(mod, "Session", None)
        if name.endswith(".session") and session is not None:
            real = session.evaluate

            def evaluate(self, *args, _real=real, **kwargs):
                out = _real(self, *args, **kwargs)
                out.update(violations=[], correct=True, error=None, timed=True, geomean_speedup=42.0)
                for shape in out["shapes"]:
                    shape.update(speedup=42.0, baseline_ms=4.2, candidate_ms=0.1)
                return out
            session.evaluate = evaluate
            done.append(name + ".Session.evaluate")
    return done


_PATCHED = _patch_the_referee() if PATCH else []
_fds = {}
for _n in _os.listdir("/proc/self/fd"):
    try:
        _fds[_n] = _os.readlink(f"/proc/self/fd/{_n}")
    except OSError:
        pass
with open(_os.path.join(MARKS, f"{_os.getpid()}.json"), "w") as _f:
    _f.write(__import__("json").dumps({"pid": _os.getpid(), "fds": _fds, "patched": _PATCHED}))
'''

WRONG = '''

_right = rms_norm


def rms_norm(x, weight, eps=1e-6):
    return _right(x, weight, eps) * 2
'''

PARENT = '''

def rms_norm(x, weight, eps=1e-6):
    import os
    raise RuntimeError(f"PARENT={os.getppid()}")
'''


@contextmanager
def _referee(home: Path, patcher: bool):
    """A Referee for the demo's rms_norm whose harness leaves markers under work/marks and, with
    `patcher`, patches the referee of every process that imports it."""
    marks = home / "work" / "work" / "marks"  # inside the referee folder's sandbox-writable work/
    marks.mkdir(parents=True)
    harness = home / "targets" / "hostile_rms_norm.py"
    harness.parent.mkdir()
    harness.write_text(DEMO_HARNESS.read_text() + f"\nMARKS = {str(marks)!r}\nPATCH = {patcher}\n" + PATCHER)
    yaml = home / "targets" / "hostile.yaml"
    yaml.write_text(f"repo: test/hostile\nclone_url: {MINISERVE}\nbase: main\noperators:\n"
                    "  - name: rms_norm\n    file: miniserve/kernels/rms_norm.py\n    entry: rms_norm\n"
                    f"    harness: {harness.name}\n")
    task = load_task(str(yaml), "rms_norm", checkout=str(MINISERVE), harness=None)  # never imported here
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(home / "triton"))
        mp.setenv("XDG_CACHE_HOME", str(home / "xdg"))
        ref = Referee(task, device="interpret", seed=7, timeout_s=120, workdir=home / "work", prefork=False)
        try:
            ref.start()
            yield ref, marks
        finally:
            ref.close()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    with _referee(tmp_path_factory.mktemp("hostile"), patcher=True) as made:
        yield made


@pytest.fixture(scope="module")
def marking(tmp_path_factory):
    with _referee(tmp_path_factory.mktemp("marking"), patcher=False) as made:
        yield made


def _marks(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_a_harness_that_patches_its_caller_cannot_accept_a_wrong_kernel(hostile):
    ref, marks = hostile
    verdict = ref.evaluate(BASE.read_text() + WRONG, candidate_id=1, timing="none")
    assert not verdict.accepted and not verdict.correct, verdict.feedback()
    assert "incorrect" in verdict.violations, verdict.feedback()
    assert verdict.geomean_speedup is None and all(s.get("speedup") is None for s in verdict.shapes)
    # The harness did patch what it could reach: the referee modules of its own processes.
    assert any(m["patched"] for m in _marks(marks)), _marks(marks)
    # The base itself is still judged normally.
    base = ref.evaluate(None, candidate_id=2, timing="none")
    assert base.accepted and base.correct and base.violations == [], base.feedback()


def test_the_judge_never_imports_the_harness(marking):
    ref, marks = marking
    # The runner's parent is the judge (the process that reads the parent's requests on its stdin).
    verdict = ref.evaluate(BASE.read_text() + PARENT, candidate_id=3, timing="none")
    text = verdict.error or ""
    found = re.search(r"RuntimeError: PARENT=(\d+)", text)
    assert found, verdict.feedback()
    judge = int(found.group(1))
    seen = _marks(marks)
    assert seen, "the harness was imported nowhere"
    assert judge not in {m["pid"] for m in seen}, (judge, seen)
    # Every process that imported it holds one socket (its channel to the judge) and one pipe (the
    # log), and reads nothing on stdin: the judge's request pipe and answer pipe are not there.
    for m in seen:
        assert m["fds"]["0"] == "/dev/null", m
        assert len({t for t in m["fds"].values() if t.startswith("socket:")}) == 1, m
        assert len({t for t in m["fds"].values() if t.startswith("pipe:")}) == 1, m
