"""Checkouts from a released package (kernelsmith/onboard/release.py, `kernelsmith checkout --from-package`).

Built from small wheels the tests write (fixed zip dates, so the wheel's bytes and the checkout's
commit id are the same everywhere); one test goes through pip with a local find-links folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from upstreamkit import write_wheel

from kernelsmith.cli import main
from kernelsmith.errors import ConfigError, KernelsmithError
from kernelsmith.loader import load_operator_module
from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.release import (
    MARKER,
    base_release,
    cached_checkout,
    download_wheel,
    release_checkout,
)
from kernelsmith.onboard.task import load_task

ROOT = Path(__file__).resolve().parents[2]
HEAVY = "raise RuntimeError('a package __init__ ran')\n"
ENG = {
    "eng/__init__.py": HEAVY,
    "eng/consts.py": "K = 5\n",
    "eng/big.py": HEAVY,  # only the real stubbed module imports it: never taken
    "eng/kern/__init__.py": "from .op import op\nfrom .unused import nothing\n",
    "eng/kern/op.py": ("from eng.consts import K\nfrom eng.rt.utils import is_hip\nfrom . import helper\n\n"
                       "def op(x):\n    from .lazy import ONE\n"
                       "    return x * K + helper.TWO + ONE + int(is_hip())\n"),
    "eng/kern/helper.py": "TWO = 2\n",
    "eng/kern/lazy.py": "ONE = 1\n",
    "eng/kern/unused.py": HEAVY,
    "eng/rt/__init__.py": HEAVY,
    "eng/rt/utils.py": "import eng.big\n\ndef is_hip():\n    return True\n",
    "eng-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: eng\nVersion: 1.0\n",
    "eng-1.0.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                "Tag: py3-none-any\n"),
    "eng-1.0.dist-info/RECORD": "",
}
TAKEN = ["eng/__init__.py", "eng/consts.py", "eng/kern/__init__.py", "eng/kern/helper.py", "eng/kern/lazy.py",
         "eng/kern/op.py", "eng/rt/__init__.py", "eng/rt/utils.py"]
# The commit of ENG's release checkout: fixed author, committer, date and message; the same on every
# machine and git version (a change here means every cached checkout's id changed).
ENG_SHA = "365bef6f2ad54143ec7b2b527c1d8f69ed68d5c6"


def write_target(folder: Path, package: str = "  spec: eng==1.0\n  prefix: python\n",
                 file: str = "python/eng/kern/op.py") -> Path:
    """A target yaml whose one operator is eng's op, with `package:` as given."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "h.py").write_text("SHAPES = [{'n': 4}]\nCPU_SHAPES = SHAPES\nOUTPUTS = None\n"
                                 "def make_inputs(shape, device, seed):\n    return {'x': shape['n']}\n"
                                 "def reference(x):\n    return x\n")
    (folder / "rt_stub.py").write_text("def is_hip():\n    return False\n")
    yaml = folder / "eng.yaml"
    yaml.write_text(f"repo: example/eng\nbase: main\npackage:\n{package}stubs:\n  eng.rt.utils: rt_stub.py\n"
                    f"operators:\n  - name: op\n    file: {file}\n    entry: op\n    harness: h.py\n")
    return yaml


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """A cache of each test's own: these tests assert whether a release checkout was `cached`, which
    in the test process's cache would depend on the tests that ran before."""
    monkeypatch.setenv("KERNELSMITH_CACHE", str(tmp_path / "ks-cache"))


@pytest.fixture
def eng(tmp_path):
    """(target, wheel) for the eng release."""
    wheel = write_wheel(tmp_path / "w" / "eng-1.0-py3-none-any.whl", ENG)
    return load_target(write_target(tmp_path / "t")), wheel


def test_the_checkout_holds_the_operator_what_it_imports_and_package_inits_at_a_fixed_commit(eng, tmp_path):
    target, wheel = eng
    co = release_checkout(target, wheel=wheel)
    assert co.files == TAKEN and co.package == "eng==1.0" and not co.cached
    assert co.path.parent.parent == Path(cached_checkout(target)).parent.parent  # in the cache
    got = sorted(str(p.relative_to(co.path)) for p in co.path.rglob("*")
                 if p.is_file() and ".git" not in p.parts)
    assert got == sorted([MARKER] + [f"python/{f}" for f in TAKEN])
    assert co.base_sha == ENG_SHA
    log = subprocess.run(["git", "log", "--format=%an <%ae> %ad|%cn %cd|%s", "--date=iso"], cwd=co.path,
                         capture_output=True, text=True, check=True).stdout.strip()
    assert log.startswith("kernelsmith <kernelsmith@users.noreply.github.com> 2000-01-01 00:00:00 +0000|")
    assert "a release, not an upstream commit" in log and len(log.splitlines()) == 1
    again = release_checkout(target, wheel=wheel)  # from the cache: nothing rebuilt
    assert again.cached and again.path == co.path and again.base_sha == ENG_SHA
    elsewhere = release_checkout(target, wheel=wheel, into=tmp_path / "into")
    assert elsewhere.base_sha == ENG_SHA and not elsewhere.cached
    assert base_release(elsewhere.path) == "eng==1.0" and base_release(tmp_path) is None


def test_the_loader_runs_the_operator_from_the_checkout_with_the_yaml_stub(eng):
    target, wheel = eng
    co = release_checkout(target, wheel=wheel)
    mod = load_operator_module(co.path, target.operators[0].file, tag="rel", stubs=target.stubs)
    assert mod.op(2) == 2 * 5 + 2 + 1  # the stub's is_hip (False), no package __init__ ran
    for name in [n for n in sys.modules if n.split(".")[0] == "eng"]:
        del sys.modules[name]
    task = load_task(str(target.path), "op", checkout=str(co.path))
    assert task.base_release == "eng==1.0" and task.base_sha == ENG_SHA


def test_pip_downloads_the_pinned_wheel(tmp_path, monkeypatch):
    links = tmp_path / "links"
    write_wheel(links / "eng-1.0-py3-none-any.whl", ENG)
    write_wheel(links / "eng-2.0-py3-none-any.whl", ENG)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    target = load_target(write_target(tmp_path / "t"))
    got = download_wheel(target.package, tmp_path / "dl")
    assert got.name == "eng-1.0-py3-none-any.whl"
    co = release_checkout(target)
    assert co.base_sha == ENG_SHA and co.wheel == got.name
    with pytest.raises(KernelsmithError, match="pip download eng==3.0 failed"):
        release_checkout(target, "eng==3.0")


@pytest.mark.parametrize("bad, why", [
    ({"links": {"eng/kern/helper.py": "/etc/passwd"}}, "a link or special file"),
    ({"dup": True}, "unsafe or duplicate name"),
])
def test_unsafe_wheel_entries_are_refused(tmp_path, bad, why):
    files = {k: v for k, v in ENG.items() if k not in bad.get("links", {})}
    wheel = write_wheel(tmp_path / "eng-1.0-py3-none-any.whl", files, bad.get("links"))
    if bad.get("dup"):
        with zipfile.ZipFile(wheel, "a") as z, pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr(zipfile.ZipInfo("eng/kern/op.py", date_time=(2020, 1, 1, 0, 0, 0)), "evil = 1\n")
    target = load_target(write_target(tmp_path / "t"))
    with pytest.raises(KernelsmithError, match=why):
        release_checkout(target, wheel=wheel, into=tmp_path / "co")
    assert not (tmp_path / "co").exists()  # nothing half-made is left


def test_an_absolute_entry_reached_through_a_stub_name_is_refused_before_anything_is_written(tmp_path):
    planted = {**ENG, f"{tmp_path}/planted/evil.py": "x = 1\n"}
    wheel = write_wheel(tmp_path / "eng-1.0-py3-none-any.whl", planted)
    yaml = write_target(tmp_path / "t")
    yaml.write_text(yaml.read_text().replace("stubs:\n", f"stubs:\n  {tmp_path}/planted/evil: rt_stub.py\n"))
    with pytest.raises(KernelsmithError, match="unsafe or duplicate name"):
        release_checkout(load_target(yaml), wheel=wheel, into=tmp_path / "co")
    assert not (tmp_path / "planted").exists() and not (tmp_path / "co").exists()


def test_an_operator_file_missing_from_the_wheel_names_the_yaml_field(tmp_path):
    target = load_target(write_target(tmp_path / "t", file="python/eng/kern/gone.py"))
    wheel = write_wheel(tmp_path / "eng-1.0-py3-none-any.whl", ENG)
    with pytest.raises(KernelsmithError, match=r"operators\[0\]\.file: eng/kern/gone.py is not in eng-1.0"):
        release_checkout(target, wheel=wheel, into=tmp_path / "co")
    outside = load_target(write_target(tmp_path / "u", file="eng/kern/op.py"))
    with pytest.raises(ConfigError, match=r"operators\[0\]\.file: eng/kern/op.py is not under the package"):
        release_checkout(outside, wheel=wheel, into=tmp_path / "co2")


@pytest.mark.parametrize("package, field", [
    ("  spec: eng\n", "package.spec"),
    ("  spec: eng>=1.0\n", "package.spec"),
    ("  spec: eng==1.0\n  prefix: ../up\n", "package.prefix"),
    ("  spec: eng==1.0\n  python: three\n", "package.python"),
    ("  spec: eng==1.0\n  files: [x]\n", "package.files"),
])
def test_bad_package_fields_are_one_config_error_line(tmp_path, capsys, package, field):
    yaml = write_target(tmp_path / "t", package=package)
    with pytest.raises(ConfigError, match=f"eng.yaml: {field}: "):
        load_target(yaml)
    assert main(["checkout", str(yaml), "--from-package"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"eng.yaml: {field}: " in err


def test_the_checkout_command_prints_the_release_and_its_commit(eng, capsys):
    target, wheel = eng
    assert main(["checkout", str(target.path), "--from-package", "--wheel", str(wheel), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["base_release"] == "eng==1.0" and out["base_sha"] == ENG_SHA and out["files"] == TAKEN
    assert main(["checkout", str(target.path), "--from-package"]) == 0  # cached: no download
    text = capsys.readouterr().out
    assert "the release eng==1.0 (cached)" in text and "a release, not an upstream commit" in text
    assert main(["checkout", str(target.path), "--from-package", "eng"]) == 2
    assert "--from-package: SPEC: 'eng' must pin one release" in capsys.readouterr().err
    no_package = target.path.with_name("plain.yaml")
    no_package.write_text(target.path.read_text().split("package:")[0] + "operators: []\n")
    assert main(["checkout", str(no_package), "--from-package"]) == 2
    assert "plain.yaml: package: missing" in capsys.readouterr().err


def test_the_report_of_a_run_on_a_commit_names_no_release(tmp_path):
    run = tmp_path / "example"
    shutil.copytree(ROOT / "tests" / "data" / "example_run", run)
    assert main(["report", str(run)]) == 0
    assert "The base is the release" not in (run / "report.md").read_text()
