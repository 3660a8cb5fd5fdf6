"""A harness's facts are kept between commands (kernelsmith/harness/factstore.py) while every file
its code read, and every folder it listed, is unchanged; without the sandbox, or from an entry that
was tampered with, they are gathered anew."""

import pytest

from kernelsmith import sandbox
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


@pytest.fixture
def children(tmp_path, monkeypatch):
    """The harness folder, with a fresh cache (behind a link, as the user may put it); the facts
    children each `command()` starts."""
    (tmp_path / "cache-disk").mkdir()
    (tmp_path / "cache").symlink_to(tmp_path / "cache-disk")
    monkeypatch.setenv("KERNELSMITH_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "h"
    folder.mkdir()
    (folder / "harness.py").write_text(HARNESS)
    (folder / "_sizes.py").write_text("WIDTH = 8\n")
    (folder / "rows.txt").write_text("4\n")
    calls = []
    real = harnessfacts._gather
    monkeypatch.setattr(harnessfacts, "_gather", lambda *a: calls.append(a) or real(*a))

    def command():
        """The facts as a new command gets them (nothing gathered in this process yet)."""
        monkeypatch.setattr(harnessfacts, "_GATHERED", {})
        before = len(calls)
        facts = gather(folder / "harness.py", tmp_path)
        return facts.shapes, len(calls) - before
    return folder, command


@needs_sandbox
def test_facts_are_kept_while_what_the_harness_read_is_unchanged(children):
    folder, command = children
    assert command() == ([{"rows": 4, "width": 8}], 1)
    assert command() == ([{"rows": 4, "width": 8}], 0)  # kept: no child
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
    assert command()[1] == 1
    [entry] = (tmp_path / "cache" / "harness-facts").glob("*.json")
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
    import os
    import time

    from kernelsmith.harness import factstore

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
