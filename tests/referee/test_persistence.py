"""Damage that outlives a rejected candidate: Triton's on-disk kernel cache and device.json.

A candidate's write into either is a `file_access` rejection, but the file stays. The base and its
A/A copy compile only in a private Triton cache folder made per worker before any candidate runs
there (kernelsmith/referee/proc/compile_cache.py), and the device numbers behind the roofline and the
spin come from measurements taken before any candidate ran, never from device.json.
"""

import json
import math
import os
import shutil

import pytest
from referee_helpers import CORPUS, MINISERVE, ROOT

from kernelsmith.onboard.task import load_task
from kernelsmith.referee import Referee
from kernelsmith.referee.proc import compile_cache as cc

triton = pytest.importorskip("triton")


@pytest.fixture
def knobs_restored(monkeypatch, tmp_path):
    """A shared Triton cache folder for the test; Triton's knobs as they were afterwards."""
    shared = tmp_path / "shared"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    saved = dict(triton.knobs.cache.__dict__)
    yield shared
    triton.knobs.cache.__dict__.clear()
    triton.knobs.cache.__dict__.update(saved)


def test_base_compiles_switch_to_the_private_folder_and_back(knobs_restored, tmp_path, monkeypatch):
    from triton.runtime.cache import FileCacheManager, get_cache_manager

    caches = cc.CompileCaches(cc.make_private(tmp_path / "w"))
    assert caches.shared == str(knobs_restored) and cc.cache_dir() == str(knobs_restored)
    assert caches.private.parent == tmp_path / "w" and caches.private.is_dir()
    # What candidate code can do through the environment: a cache manager that ignores folders.
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "triton.runtime.cache:FileCacheManager")
    with caches.base():
        assert cc.cache_dir() == str(caches.private) == os.environ["TRITON_CACHE_DIR"]
        assert triton.knobs.cache.manager_class is None  # Triton's own file cache for the base
        assert get_cache_manager("ab" * 32).cache_dir.startswith(str(caches.private))
    assert cc.cache_dir() == str(knobs_restored) and triton.knobs.cache.manager_class is FileCacheManager
    assert get_cache_manager("ab" * 32).cache_dir.startswith(str(knobs_restored))
    other = cc.CompileCaches(cc.make_private(tmp_path / "w"))
    assert other.private != caches.private  # each worker its own folder


def test_private_folder_is_emptied_and_never_the_shared_one(knobs_restored, tmp_path):
    private = tmp_path / "p"
    (private / "key").mkdir(parents=True)
    (private / "key" / "__grp__k.json").write_text("{}")  # written before the worker started
    caches = cc.CompileCaches(private)
    assert list(caches.private.iterdir()) == []
    caches.remove()
    assert not private.exists()
    with pytest.raises(ValueError):
        cc.CompileCaches(knobs_restored)


def _recording_checkout(tmp_path):
    """The demo folder whose base rms_norm notes the Triton cache folder of each of its calls."""
    dest = tmp_path / "miniserve"
    shutil.copytree(MINISERVE, dest, ignore=shutil.ignore_patterns("__pycache__"))
    utils = dest / "miniserve" / "kernels" / "utils.py"
    utils.write_text(utils.read_text() + "\n\nCACHE_DIRS = []\n")
    kernel = dest / "miniserve" / "kernels" / "rms_norm.py"
    text = kernel.read_text()
    text = text.replace("from .utils import next_power_of_2\n",
                        "from . import utils\nfrom .utils import next_power_of_2\n")
    text = text.replace('    """RMSNorm over the last dimension of x."""\n',
                        '    """RMSNorm over the last dimension of x."""\n'
                        '    utils.CACHE_DIRS.append(triton.knobs.cache.dir)\n')
    kernel.write_text(text)
    probe = text.replace('    utils.CACHE_DIRS.append(triton.knobs.cache.dir)\n',
                         '    seen = {"base": sorted(set(utils.CACHE_DIRS)),\n'
                         '            "cand": triton.knobs.cache.dir}\n'
                         '    raise RuntimeError("DIRS " + json.dumps(seen))\n')
    return dest, "import json\n" + probe


def _dirs(verdict) -> dict:
    assert verdict.reason == "crash", verdict.feedback()
    return json.loads(verdict.error.split("RuntimeError: DIRS ")[1].splitlines()[0])


def test_each_worker_compiles_the_base_in_its_own_folder(tmp_path, monkeypatch):
    """End to end under the interpreter: every base call (start-up profile, correctness, fresh
    shapes) runs with the worker's private folder; the candidate runs with the shared one; a
    replaced worker gets a new folder and the parent deletes the old one."""
    shared = tmp_path / "shared-triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    checkout, probe = _recording_checkout(tmp_path)
    task = load_task(str(ROOT / "targets" / "demo.yaml"), "rms_norm", checkout=str(checkout))
    with Referee(task, device="interpret", seed=3, timeout_s=60, workdir=tmp_path / "work") as ref:
        seen = []
        for cid in (1, 2):
            assert ref.evaluate(None, candidate_id=10 + cid).accepted  # base: listed and fresh shapes
            # The base runs in the judge (its folder: base_cache) and, for the integrity profile and
            # timing, beside the candidate in the runner (its own folder: runner_cache), which the
            # probe sees.
            private, beside = ref._worker.base_cache, ref._worker.runner_cache
            dirs = _dirs(ref.evaluate(probe, candidate_id=cid))
            assert dirs == {"base": [beside], "cand": str(shared)}
            assert os.path.dirname(private) == str(tmp_path / "work" / "work" / ".triton-base")
            assert os.path.dirname(beside) == str(tmp_path / "work" / "work" / ".triton-runner")
            # The rejected worker's folders are gone with it.
            assert not os.path.exists(private) and not os.path.exists(beside)
            seen.append(private)
        assert seen[0] != seen[1]


def test_triton_cache_cheat_is_rejected_and_the_next_base_is_clean(tmp_path, monkeypatch):
    """On CPU the plant is a record in the shared folder (nothing compiles); the rejection and the
    base's separate folder are what matter here. tests/referee/test_gpu.py times the damage."""
    shared = tmp_path / "shared-triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    from referee_helpers import demo_task

    cheat = (CORPUS / "cheats" / "rms_norm__triton_cache.py").read_text()
    with Referee(demo_task("rms_norm"), device="interpret", seed=4, timeout_s=60) as ref:
        v = ref.evaluate(cheat, candidate_id=1)
        assert v.reason == "file_access" and not v.accepted, v.feedback()
        assert (shared / "planted.json").exists()
        assert ref._worker is None
        base = ref.evaluate(None, candidate_id=2)
        assert base.accepted and not ref._worker.base_cache.startswith(str(shared))


@pytest.fixture
def without_sandbox():
    """What stands behind the sandbox, for `--no-sandbox` runs: the damage lands, and is undone."""
    from kernelsmith import sandbox

    sandbox.disable()
    yield
    sandbox.enable()


def test_device_json_cheat_cannot_write_inside_the_sandbox(tmp_path, monkeypatch):
    from referee_helpers import demo_task

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cheat = (CORPUS / "cheats" / "rms_norm__device_json.py").read_text()
    with Referee(demo_task("rms_norm"), device="interpret", seed=4, timeout_s=60) as ref:
        v = ref.evaluate(cheat, candidate_id=1)
    assert "file_access" in v.violations and not v.accepted, v.feedback()
    assert not (tmp_path / "xdg" / "kernelsmith" / "device.json").exists()


def test_device_json_cheat_is_rejected_and_never_read(tmp_path, monkeypatch, without_sandbox):
    from referee_helpers import demo_task

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cheat = (CORPUS / "cheats" / "rms_norm__device_json.py").read_text()
    with Referee(demo_task("rms_norm"), device="interpret", seed=4, timeout_s=60) as ref:
        v = ref.evaluate(cheat, candidate_id=1)
        assert v.reason == "file_access" and not v.accepted, v.feedback()
        written = json.loads((tmp_path / "xdg" / "kernelsmith" / "device.json").read_text())
        assert written["bandwidth_gbs"] == 1e9
        assert "cache_dir" not in ref._spec() and ref._spec()["calibration"] == ref.calibration


class _Measured:
    """Counts the CUDA backend's measurements instead of taking them (no GPU needed)."""

    def __init__(self, monkeypatch):
        from kernelsmith.referee.backend import cuda

        self.calls = []
        monkeypatch.setattr(cuda.CudaBackend, "_measure_spin", lambda s: self._note("spin", 1700.0))
        monkeypatch.setattr(cuda.CudaBackend, "_measure_bandwidth", lambda s: self._note("bw", 4100.0))
        monkeypatch.setattr(cuda.CudaBackend, "_measure_matmul", lambda s, d: self._note(d, 700.0))

    def _note(self, what, value):
        self.calls.append(what)
        return value


def test_cuda_calibration_is_measured_or_handed_over_never_read_from_a_file(monkeypatch, tmp_path):
    from kernelsmith.paths import cache_dir
    from kernelsmith.referee.backend.cuda import CudaBackend

    (cache_dir() / "device.json").write_text(json.dumps({"bandwidth_gbs": 1e9, "sleep_cycles_per_us": 1e-3}))
    m = _Measured(monkeypatch)
    b = CudaBackend()
    cal = b.calibrate(["float16"])
    assert m.calls == ["spin", "bw", "float16"]
    assert b.peak("float16") == {"bandwidth_gbs": 4100.0, "tflops": 700.0} and b.cycles_per_us() == 1700.0
    assert b.peak("float32")["tflops"] is None  # not calibrated at start: no number from later
    # A later worker: the parent's numbers are used as they are; only what is missing or unusable is measured.
    m.calls.clear()
    given = {**cal, "bandwidth_gbs": float("nan"), "tflops": {"float16": 650.0}}
    b2 = CudaBackend()
    b2.calibrate(["float16", "bfloat16"], given)
    assert m.calls == ["bw", "bfloat16"]
    assert b2.peak("float16")["tflops"] == 650.0 and b2.cycles_per_us() == 1700.0
    assert math.isclose(b2.peak()["bandwidth_gbs"], 4100.0)


TINY_HARNESS = '''
import torch
SHAPES = [{"tokens": 2, "hidden": 256, "dtype": "float16"}]
def make_inputs(shape, device, seed):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["tokens"], shape["hidden"], generator=g, device=device).to(torch.float16)
    return {"x": x, "weight": torch.ones(shape["hidden"], dtype=torch.float16, device=device), "eps": 1e-6}
def reference(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
'''

# Compile-only for an sm_90 target (the precompiler's stand-in driver): which binary does a base
# kernel get, compiled inside CompileCaches.base() and, as the control, from the shared folder?
WHICH_BINARY = '''
import json, sys
from pathlib import Path
import torch
from kernelsmith.loader import load_operator_module
from kernelsmith.referee.proc.compile_cache import CompileCaches, make_private
from kernelsmith.referee.proc.compile_child import install_fake_driver

install_fake_driver(["cuda", 90, 32])
caches = CompileCaches(make_private(Path(sys.argv[2])))
x, w = torch.randn(2, 256).to(torch.float16), torch.ones(256, dtype=torch.float16)

def kernel_name(tag):
    mod = load_operator_module(Path(sys.argv[1]), "miniserve/kernels/rms_norm.py", tag=tag)
    k = mod._rms_norm_kernel[(2,)](x, w, torch.empty_like(x), 256, 256, 256, 1e-6, BLOCK_N=256, num_warps=1)
    return k.name

with caches.base():
    private = kernel_name("base")
print(json.dumps({"private": private, "shared": kernel_name("control")}))
'''


def _plant_from_a_precompile_child(tmp_path, monkeypatch, shared) -> None:
    """Run the cache-planting cheat in a CPU precompile child (sm_90 target), with `shared` as
    Triton's cache: the slow kernel's binary lands under the base kernel's key there."""
    from kernelsmith.onboard.config import load_target
    from kernelsmith.onboard.task import make_task
    from kernelsmith.search.precompile import Precompiler

    monkeypatch.setenv("TRITON_CACHE_DIR", str(shared))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    (tmp_path / "h.py").write_text(TINY_HARNESS)
    (tmp_path / "t.yaml").write_text("repo: a/b\noperators:\n  - name: rms_norm\n"
                                     "    file: miniserve/kernels/rms_norm.py\n    entry: rms_norm\n"
                                     "    harness: h.py\n")
    task = make_task(load_target(tmp_path / "t.yaml"), "rms_norm", MINISERVE, "0" * 40)
    pc = Precompiler(task, ("cuda", 90, 32), 1, tmp_path / "pc")
    try:
        pc.submit(1, (CORPUS / "cheats" / "rms_norm__triton_cache.py").read_text())
        assert pc.futures[1].result(timeout=120)["ok"]
    finally:
        pc.close()
    assert json.loads((shared / "planted.json").read_text())


def test_binary_planted_by_a_precompiled_cheat_never_reaches_the_base(tmp_path, monkeypatch):
    """The precompiler runs candidate code without integrity checks, so the cheat's plant lands in
    the shared cache. A base compiled the referee's way still gets its own binary; compiled from the
    shared folder (the control) it would get the slow one. Real compiles for sm_90, no GPU needed."""
    import subprocess
    import sys

    shared = tmp_path / "shared-triton"
    _plant_from_a_precompile_child(tmp_path, monkeypatch, shared)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", WHICH_BINARY, str(MINISERVE), str(tmp_path / "w")],
                         capture_output=True, text=True, env=env, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    names = json.loads(out.stdout.strip().splitlines()[-1])
    assert names == {"private": "_rms_norm_kernel", "shared": "_slow_rms_norm_kernel"}


def test_base_file_cannot_be_rewritten_inside_the_sandbox(tmp_path):
    checkout = tmp_path / "miniserve"
    shutil.copytree(MINISERVE, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    task = load_task(str(ROOT / "targets" / "demo.yaml"), "rms_norm", checkout=str(checkout))
    base_file = checkout / "miniserve" / "kernels" / "rms_norm.py"
    original = base_file.read_bytes()
    mtime = base_file.stat().st_mtime_ns
    with Referee(task, device="interpret", seed=5, timeout_s=60) as ref:
        v = ref.evaluate((CORPUS / "cheats" / "rms_norm__rewrite_base.py").read_text(), candidate_id=1)
        assert "file_access" in v.violations and not v.accepted, v.feedback()
        assert base_file.read_bytes() == original and base_file.stat().st_mtime_ns == mtime
        assert ref.pinned.restore() == []  # nothing to put back


def test_rewritten_base_file_is_put_back_before_the_next_worker(tmp_path, without_sandbox):
    """The base file (like its siblings, the harness and stubs) is pinned to its content at the
    Referee's start: a candidate's rewrite is rejected and never reaches a later worker."""
    checkout = tmp_path / "miniserve"
    shutil.copytree(MINISERVE, checkout, ignore=shutil.ignore_patterns("__pycache__"))
    task = load_task(str(ROOT / "targets" / "demo.yaml"), "rms_norm", checkout=str(checkout))
    base_file = checkout / "miniserve" / "kernels" / "rms_norm.py"
    original = base_file.read_text()
    cheat = (CORPUS / "cheats" / "rms_norm__rewrite_base.py").read_text()
    with Referee(task, device="interpret", seed=5, timeout_s=60) as ref:
        v = ref.evaluate(cheat, candidate_id=1)
        assert v.reason == "file_access" and not v.accepted, v.feedback()
        assert base_file.read_text() != original  # the damage is on disk until a worker starts
        # What a candidate could plant to shadow a sibling module: a package of the same name, a .pyc.
        kernels = base_file.parent
        (kernels / "utils").mkdir()
        (kernels / "utils" / "__init__.py").write_text("raise ImportError('planted')\n")
        (kernels / "__pycache__").mkdir(exist_ok=True)
        (kernels / "__pycache__" / "utils.cpython-311.pyc").write_bytes(b"planted")
        assert ref.evaluate(None, candidate_id=2).accepted
        assert base_file.read_text() == original
        assert sorted(ref.pinned.restored) == sorted([str(base_file), str(kernels / "utils")])
        assert not (kernels / "utils").exists() and not (kernels / "__pycache__").exists()


# Seeding a replacement worker's private folder, and the winner's fresh compile: compile-only for
# sm_90 as above. Prints which kernel each load got and what the compiles wrote.
SEED_AND_FRESH = '''
import json, os, sys
from pathlib import Path
import torch
from kernelsmith.loader import load_operator_module
from kernelsmith.referee.proc.compile_cache import CompileCaches, make_private, read_folder
from kernelsmith.referee.proc.compile_child import install_fake_driver

install_fake_driver(["cuda", 90, 32])
work = Path(sys.argv[2])
x, w = torch.randn(2, 256).to(torch.float16), torch.ones(256, dtype=torch.float16)

def kernel_name(tag):
    mod = load_operator_module(Path(sys.argv[1]), "miniserve/kernels/rms_norm.py", tag=tag)
    k = mod._rms_norm_kernel[(2,)](x, w, torch.empty_like(x), 256, 256, 256, 1e-6, BLOCK_N=256, num_warps=1)
    return k.name

first = CompileCaches(make_private(work))
with first.base():
    kernel_name("base1")
seed = read_folder(first.private, 64 << 20)
second = CompileCaches(make_private(work))
n = second.seed({**seed, "../escape.bin": b"x"})
before = {p: os.stat(second.private / p).st_mtime_ns for p in seed}
with second.base():
    kernel_name("base2")
after = sorted(str(p.relative_to(second.private)) for p in second.private.rglob("*") if p.is_file())
unchanged = all(os.stat(second.private / p).st_mtime_ns == t for p, t in before.items())
with second.fresh() as fresh_dir:
    fresh = kernel_name("fresh")
    inside = str(second.current) == str(fresh_dir)
    with second.base():
        pass
    back_to_fresh = str(second.current) == str(fresh_dir)
print(json.dumps({"seeded": n, "files": len(seed), "same_files": after == sorted(seed),
                  "unchanged": unchanged, "escaped": (work.parent / "escape.bin").exists(),
                  "fresh": fresh, "shared": kernel_name("control"), "inside": inside,
                  "back_to_fresh": back_to_fresh, "fresh_removed": not fresh_dir.exists()}))
'''


def test_seeded_worker_loads_the_base_and_the_winner_compiles_afresh(tmp_path, monkeypatch):
    """A replacement worker's private folder, seeded with the first worker's base binaries, loads
    them (nothing is compiled or rewritten); a path outside the folder is never written. Under
    `fresh()` a candidate compiles from its source even where the shared folder holds a planted
    binary under its key (the plant a precompile child could make). Real sm_90 compiles."""
    import subprocess
    import sys

    shared = tmp_path / "shared-triton"
    env = {**os.environ, "TRITON_CACHE_DIR": str(shared),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_INTERPRET", None)
    _plant_from_a_precompile_child(tmp_path, monkeypatch, shared)
    out = subprocess.run([sys.executable, "-c", SEED_AND_FRESH, str(MINISERVE), str(tmp_path / "w")],
                         capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["files"] > 0 and got["seeded"] == got["files"]
    assert got["same_files"] and got["unchanged"] and not got["escaped"]
    assert got["fresh"] == "_rms_norm_kernel" and got["shared"] == "_slow_rms_norm_kernel"
    assert got["inside"] and got["back_to_fresh"] and got["fresh_removed"]


def test_a_work_folder_a_dying_worker_still_writes_into_is_removed_on_a_second_try(tmp_path, monkeypatch):
    """close() removes the referee's work folder even when a killed worker's process adds a file
    while the first removal runs ("Directory not empty"); it never fails the run for it."""
    import shutil
    from pathlib import Path

    from kernelsmith.scratch import ScratchDir

    tmp = ScratchDir("ks-", dir=tmp_path)
    (Path(tmp.name) / "runner").mkdir()
    real, calls = shutil.rmtree, []

    def late_writer(path, ignore_errors=False, **kw):
        calls.append(ignore_errors)
        if len(calls) == 1:  # the first removal races a file written after the listing
            raise OSError(39, "Directory not empty", path)
        return real(path, ignore_errors=ignore_errors, **kw)

    monkeypatch.setattr(shutil, "rmtree", late_writer)
    tmp.remove()
    assert calls == [False, False] and not Path(tmp.name).exists()

    stuck, calls[:] = ScratchDir("ks-", dir=tmp_path), []
    monkeypatch.setattr(shutil, "rmtree", lambda path, ignore_errors=False, **kw: (
        calls.append(ignore_errors), real(path, ignore_errors=True) if ignore_errors
        else (_ for _ in ()).throw(OSError(39, "Directory not empty"))))
    stuck.remove(tries=2)  # gives up quietly, removing what it can
    assert calls == [False, False, True] and not Path(stuck.name).exists()


def test_removing_a_work_folder_never_chmods_through_a_link_left_in_it(tmp_path, monkeypatch):
    """A candidate can leave a link to a file outside in its work folder and make its removal fail
    with a permission error: TemporaryDirectory.cleanup then chmods the failing path, following the
    link (CPython before 3.11.8 / 3.12.2), so the outside file became mode 0o700. A ScratchDir
    (the referee's work folder) retries without ever following it. (Tests run as root, where no
    directory denies an unlink: the permission error is raised by hand.)"""
    import os
    import stat
    from pathlib import Path

    from kernelsmith.scratch import ScratchDir

    secret = tmp_path / "secret"
    secret.write_text("x")
    secret.chmod(0o600)
    tmp = ScratchDir("ks-", dir=tmp_path)
    locked = Path(tmp.name) / "locked"
    locked.mkdir()
    (locked / "link").symlink_to(secret)
    locked.chmod(0o500)
    real, denied = os.unlink, []

    def unlink(path, *a, **kw):
        if os.fspath(path).endswith("link") and not denied:
            denied.append(path)
            raise PermissionError(13, "Permission denied", path)
        return real(path, *a, **kw)

    monkeypatch.setattr(os, "unlink", unlink)
    tmp.remove()
    assert denied and not Path(tmp.name).exists()
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and secret.read_text() == "x"
