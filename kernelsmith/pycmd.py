"""How trusted code starts a child Python: never with a folder untrusted code can write on sys.path.

`python -m pkg` puts its working folder first on sys.path, so a `torch.py` or a `kernelsmith/`
that a candidate or a target's `setup` wrote there (a referee's work folder, a checkout) would be
imported in its place. `-P` (Python 3.11+) leaves the folder off; on 3.10 a `-c` bootstrap drops
it before importing anything that is not built in, then runs the module as `-m` would. PYTHONPATH
keeps only absolute entries: "" or "." would name that same folder again.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# The folder holding this kernelsmith package: children import it, never an installed copy.
PACKAGE_PARENT = str(Path(__file__).resolve().parents[1])

_BOOTSTRAP = ("import sys; del sys.path[0]; import runpy; "
              "runpy.run_module({module!r}, run_name='__main__', alter_sys=True)")


def module_argv(module: str, *args: str, python: str | None = None) -> list[str]:
    """argv for `python -m module args...` without the working folder on sys.path."""
    python = python or sys.executable
    if sys.version_info >= (3, 11):
        return [python, "-P", "-m", module, *args]
    return [python, "-c", _BOOTSTRAP.format(module=module), *args]


def python_path(first: str, inherited: str | None) -> str:
    """PYTHONPATH with `first` ahead of the absolute entries of `inherited` (relative ones dropped)."""
    entries = [first, *(p for p in (inherited or "").split(os.pathsep) if os.path.isabs(p))]
    return os.pathsep.join(dict.fromkeys(entries))
