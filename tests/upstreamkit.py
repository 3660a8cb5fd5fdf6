"""The upstream LMDeploy, SGLang, Liger-Kernel and Unsloth sources the real-target tests read (and
small wheels for tests of release checkouts).

LMDEPLOY_CHECKOUT / SGLANG_CHECKOUT / LIGER_CHECKOUT / UNSLOTH_CHECKOUT name a folder (a git archive
with the upstream tests, on the GPU machine); else the release checkout that `kernelsmith checkout
NAME --from-package` left in the kernelsmith cache (scripts/test.sh makes them before the tests).
Looked up at import, before conftest.py gives each test a private cache.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import pytest

from kernelsmith.onboard.config import load_target
from kernelsmith.onboard.release import base_release, cached_checkout

TARGETS = Path(__file__).resolve().parents[1] / "targets"


def _find(name: str) -> Path | None:
    env = os.environ.get(f"{name.upper()}_CHECKOUT")
    if env:
        return Path(env) if Path(env).is_dir() else None
    return cached_checkout(load_target(TARGETS / f"{name}.yaml"))


CHECKOUTS = {name: _find(name) for name in ("lmdeploy", "sglang", "liger", "unsloth")}


def checkout(name: str) -> Path | None:
    """The `name` sources, or None where there are none."""
    return CHECKOUTS[name]


def require(name: str) -> Path:
    """The `name` sources, or skip the test saying how to get them."""
    path = CHECKOUTS[name]
    if path is None:
        pytest.skip(f"no {name} sources: run `kernelsmith checkout {name} --from-package` (scripts/test.sh "
                    f"does) or set {name.upper()}_CHECKOUT")
    return path


def require_upstream_tests(name: str, rel: str) -> Path:
    """The `name` sources holding upstream's test folder `rel`; a release has none (skipped so)."""
    path = require(name)
    if not (path / rel).is_dir():
        release = base_release(path)
        pytest.skip(f"upstream tests not in the release ({release} ships no {rel})" if release
                    else f"no upstream tests at {path / rel}")
    return path


def require_file(rel: str) -> Path:
    """`<name>/<path in its repository>` in the `name` sources, or skip the test."""
    name, _, inner = rel.partition("/")
    path = require(name) / inner
    if not path.is_file():
        pytest.skip(f"no {inner} in the {name} sources at {CHECKOUTS[name]}")
    return path


def write_wheel(path: Path, files: dict[str, str], links: dict[str, str] | None = None) -> Path:
    """A wheel with fixed entry dates (the same bytes on every run); `links` become symlink entries."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            z.writestr(info, text)
        for name, to in (links or {}).items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, to)
    return path
