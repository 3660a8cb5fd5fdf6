"""A harness's facts are kept between commands (kernelsmith/harness/factstore.py) while every file
its code read, and every folder it listed, is unchanged; without the sandbox, or from an entry that
was tampered with, they are gathered anew."""

import os
import shutil
import time

import pytest

from kernelsmith import sandbox
from kernelsmith.harness import factstore
from kernelsmith.harness import gather as harnessfacts
from kernelsmith.harness.gather import gather

needs_sandbox = pytest.mark.skipif(sandbox.probe() is not None, reason=f"no sandbox here: {sandbox.probe()}")

# Its shapes come from a module beside it (a relative import) and a data file it opens.
HARNESS = '''from pathlib import Path

from ._sizes import WIDTH

ROWS = int(Path(__file__).with_name("rows.txt").read_text())
SHAPES = [{"rows": ROWS, "width": WIDTH}]


def make_inputs(shape, device, seed):
    return {"n": shape["rows"] * shape["width"]}


def reference(n):
    return n
'''


FILES = {"harness.py": HARNESS, "_sizes.py": "WIDTH = 8\n", "rows.txt": "4\n"}
SHAPES = [{"rows": 4, "width": 8}]


def _as_written(folder):
    """The harness folder as FILES make it (a test before may have changed it)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name, text in FILES.items():
        (folder / name).write_text(text)


@pytest.fixture(scope="module")
def gathered_once(tmp_path_factory):
    """(the harness folder, a cache keeping its facts): one facts child for the module's tests (each
    child costs 4-5 s), which start from a copy of that cache."""
    base = tmp_path_factory.mktemp("factstore")
    _as_written(base / "h")
    calls = []
    real = harnessfacts._gather
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELSMITH_CACHE", str(base / "kept"))
        mp.setattr(harnessfacts, "_GATHERED", {})
        mp.setattr(harnessfacts, "_gather", lambda *a: calls.append(a) or real(*a))
        assert gather(base / "h" / "harness.py", base).shapes == SHAPES and len(calls) == 1  # a fresh cache
    assert len(list((base / "kept" / "harness-facts").glob("*.json"))) == 1
    return base / "h", base / "kept"


@pytest.fixture
def children(gathered_once, tmp_path, monkeypatch):
    """The harness folder as written, with a copy of the module's cache (behind a link, as the user
    may put it); the facts children each `command()` starts."""
    folder, kept = gathered_once
    _as_written(folder)
    shutil.copytree(kept, tmp_path / "cache-disk")
    (tmp_path / "cache").symlink_to(tmp_path / "cache-disk")
    monkeypatch.setenv("KERNELSMITH_CACHE", str(tmp_path / "cache"))
    calls = []
    real = harnessfacts._gather
    monkeypatch.setattr(harnessfacts, "_gather", lambda *a: calls.append(a) or real(*a))

    def command():
        """The facts as a new command gets them (nothing gathered in this process yet)."""
        monkeypatch.setattr(harnessfacts, "_GATHERED", {})
        before = len(calls)
        facts = gather(folder / "harness.py", folder.parent)
        return facts.shapes, len(calls) - before
    return folder, command


@needs_sandbox
def test_facts_are_kept_while_what_the_harness_read_is_unchanged(children):
    folder, command = children
    assert command() == (SHAPES, 0)  # kept by the module's command: no child
    (folder / "__pycache__").mkdir()  # what importing it here leaves changes nothing it reads
    assert command() == ([{"rows": 4, "width": 8}], 0)
    (folder / "rows.txt").write_text("5\n")  # a file it opened
    assert command() == ([{"rows": 5, "width": 8}], 1)
    assert command() == ([{"rows": 5, "width": 8}], 0)
    (folder / "_sizes").mkdir()  # a package beside it now wins the relative import: its folder's listing
    (folder / "_sizes" / "__init__.py").write_text("WIDTH = 16\n")
    assert command() == ([{"rows": 5, "width": 16}], 1)


@needs_sandbox
def test_kept_facts_are_not_used_when_tampered_with_or_without_the_sandbox(children, tmp_path, monkeypatch):
    _, command = children
    [entry] = (tmp_path / "cache" / "harness-facts").glob("*.json")
    assert command()[1] == 0  # the entry is good as kept
    good = entry.read_bytes()
    entry.write_text('{"reads": [], "digests": [], "facts": {"shapes": "all of them"}}')
    assert command() == ([{"rows": 4, "width": 8}], 1)  # gathered anew, and kept again
    assert entry.read_bytes() == good and command()[1] == 0
    (tmp_path / "elsewhere.json").write_bytes(good)
    entry.unlink()
    entry.symlink_to(tmp_path / "elsewhere.json")  # never read through a link
    assert command()[1] == 1 and not entry.is_symlink()
    monkeypatch.setattr(sandbox, "enabled", lambda: False)
    assert command() == ([{"rows": 4, "width": 8}], 1)  # without the sandbox nothing kept is read
    assert entry.read_bytes() == good


def test_paths_a_child_names_are_read_as_plain_files_only_never_through_links_or_pipes(tmp_path, monkeypatch):
    """The child's list of what it read is hostile input: a link, a pipe (whose read would block) or
    a device named there keeps nothing, at once."""
    monkeypatch.setenv("KERNELSMITH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "real.txt").write_text("4\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "real.txt")
    os.mkfifo(tmp_path / "pipe")
    start = time.monotonic()
    for path in (tmp_path / "link.txt", tmp_path / "pipe", "/dev/zero", tmp_path / "absent"):
        factstore.save("entry.json", None, [["file", str(path)]], time.time_ns())
        assert not (tmp_path / "cache" / "harness-facts" / "entry.json").exists(), path
    assert factstore._digests([("file", str(tmp_path / "real.txt"))]) is not None
    assert time.monotonic() - start < 5
