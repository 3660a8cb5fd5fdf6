"""A checkout built from a released package (yaml `package:`), for when no git checkout is at hand.

The wheel is downloaded without its dependencies and treated as untrusted content: only the files
the yaml needs are read from it (each operator file, the files it imports within the package,
the real sources of the yaml's `stubs:`, and the `__init__.py` of every package on the way), with
safe names only. They are committed as a one-commit git repository with a fixed identity and date,
so the same wheel gives the same commit id on every machine. The checkout's root carries
MARKER, which names the release: every run on it says its base is that release, not an
upstream commit.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from kernelsmith import gitsafe
from kernelsmith.errors import ConfigError, KernelsmithError
from kernelsmith.onboard.package import PYTHON, SPEC_RE, Package, check_spec, safe_name
from kernelsmith.paths import cache_dir, cache_lock
from kernelsmith.pysource import parse
from kernelsmith.sandbox.spawn import run

MARKER = ".kernelsmith-release.json"
FORMAT = 1  # bump when the selection or the commit changes: cached checkouts are then rebuilt
# pip does not widen a --platform to the older manylinux tags a wheel may carry: list them.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(40, 16, -1)] + ["manylinux2014_x86_64"]
MAX_FILE = 16 << 20  # no kernel source is near this; a larger entry is refused, not inflated
IDENTITY = {  # fixed author, committer and date: the commit id depends on the files only
    "GIT_AUTHOR_NAME": "kernelsmith", "GIT_AUTHOR_EMAIL": "kernelsmith@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "kernelsmith", "GIT_COMMITTER_EMAIL": "kernelsmith@users.noreply.github.com",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


# ---------------------------------------------------------------------------- the wheel


def download_wheel(pkg: Package, dest: Path) -> Path:
    """pip-download the release's wheel (no dependencies, binaries only, manylinux x86_64) into
    `dest`; returns its path, or a KernelsmithError with pip's last lines."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--dest", str(dest), "--python-version", pkg.python, "--implementation", "cp",
           "--abi", "cp" + pkg.python.replace(".", ""), "--abi", "abi3", "--abi", "none"]
    for platform in PLATFORMS:
        cmd += ["--platform", platform]
    proc = run([*cmd, pkg.spec], None, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
               text=True)
    if proc.returncode != 0:
        tail = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
        raise KernelsmithError(f"pip download {pkg.spec} failed (exit {proc.returncode}): "
                               + " | ".join(tail[-3:]))
    stem = re.sub(r"[-_.]+", "_", pkg.name).lower()
    wheels = [p for p in dest.iterdir() if p.suffix == ".whl"
              and p.name.lower().startswith(f"{stem}-{pkg.version.lower()}-")]
    if len(wheels) != 1:
        raise KernelsmithError(f"pip download {pkg.spec}: expected one {stem}-{pkg.version} wheel in {dest}, "
                               f"found {sorted(p.name for p in dest.iterdir())}")
    return wheels[0]


class Wheel:
    """The entries of a wheel by name, refusing unsafe names, links and duplicates when read."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except (OSError, zipfile.BadZipFile) as e:
            raise KernelsmithError(f"{self.path}: not a readable wheel ({e})") from None
        self.entries: dict[str, zipfile.ZipInfo] = {}
        self.duplicates: set[str] = set()
        for info in self._zip.infolist():
            if info.filename in self.entries:
                self.duplicates.add(info.filename)
            self.entries[info.filename] = info

    def __contains__(self, name: str) -> bool:
        return name in self.entries and not self.entries[name].is_dir()

    def read(self, name: str) -> bytes:
        """The bytes of one regular-file entry, after the safety checks."""
        info = self.entries.get(name)
        if info is None or info.is_dir():
            raise KernelsmithError(f"{self.path.name}: no file {name}")
        if not safe_name(name) or name in self.duplicates:
            raise KernelsmithError(f"{self.path.name}: refusing entry {name!r} (unsafe or duplicate name)")
        mode = info.external_attr >> 16
        if mode and not stat.S_ISREG(mode):
            raise KernelsmithError(f"{self.path.name}: refusing entry {name!r} (a link or special file)")
        if info.file_size > MAX_FILE:
            raise KernelsmithError(f"{self.path.name}: refusing entry {name!r} ({info.file_size} bytes)")
        with self._zip.open(info) as f:
            data = f.read(MAX_FILE + 1)
        if len(data) > MAX_FILE:
            raise KernelsmithError(f"{self.path.name}: refusing entry {name!r} (inflates past its size)")
        return data

    def close(self) -> None:
        """Close the archive."""
        self._zip.close()


# ---------------------------------------------------------------------------- which files


def _module_file(module: str, wheel: Wheel) -> str | None:
    base = module.replace(".", "/")
    for name in (f"{base}.py", f"{base}/__init__.py"):
        if name in wheel:
            return name
    return None


def _imported_modules(name: str, source: bytes) -> list[str]:
    """Every module `name` imports, at any depth (imports inside functions too), absolute names."""
    try:
        tree = parse(source, name)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # not Python the loader could run either; the file itself is still taken
    path = PurePosixPath(name)
    package = list(path.parent.parts)
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(package):
                    continue
                parts = package[: len(package) - (node.level - 1)]
                module = ".".join(parts + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module:
                out.append(module)
                out += [f"{module}.{a.name}" for a in node.names if a.name != "*"]
    return out


def _stubbed(module: str, stubs) -> bool:
    return any(module == s or module.startswith(s + ".") for s in stubs)


def select_files(wheel: Wheel, wanted: list[tuple[str, str]], stubs) -> list[str]:
    """Wheel entries for the (field, wheel path) pairs in `wanted`, the modules they import inside
    the wheel's packages (recursively, never into a stubbed module), the stubbed modules' own
    sources, and the `__init__.py` of each package on the way (their imports are not followed:
    the loader never runs them)."""
    tops = {n.split("/")[0] for n in wheel.entries if "/" in n}
    chosen: set[str] = set()
    queue: list[str] = []
    for field, name in wanted:
        if name not in wheel:
            raise KernelsmithError(f"{field}: {name} is not in {wheel.path.name}")
        queue.append(name)
    for stub in stubs:
        found = _module_file(stub, wheel)
        if found:
            chosen.add(found)
    while queue:
        name = queue.pop()
        if name in chosen:
            continue
        chosen.add(name)
        for module in _imported_modules(name, wheel.read(name)):
            if module.split(".")[0] not in tops or _stubbed(module, stubs):
                continue
            found = _module_file(module, wheel)
            if found and found not in chosen and not found.endswith("__init__.py"):
                queue.append(found)
    for name in list(chosen):
        parts = PurePosixPath(name).parent.parts
        for i in range(1, len(parts) + 1):
            init = "/".join(parts[:i]) + "/__init__.py"
            if init in wheel:
                chosen.add(init)
    return sorted(chosen)


def wanted_files(target, pkg: Package) -> list[tuple[str, str]]:
    """(yaml field, wheel path) of each operator file: the repository path less the package prefix."""
    out = []
    for i, op in enumerate(target.operators):
        field = f"{target.path}: operators[{i}].file"
        rel = op.file
        if pkg.prefix:
            if not rel.startswith(pkg.prefix + "/"):
                raise ConfigError(target.path, f"{rel} is not under the package prefix {pkg.prefix}/",
                                  f"operators[{i}].file")
            rel = rel[len(pkg.prefix) + 1:]
        out.append((field, rel))
    return out


# ---------------------------------------------------------------------------- the checkout


@dataclass
class ReleaseCheckout:
    """A checkout made from a release: its folder, commit (or content hash) and what it holds."""

    path: Path
    base_sha: str
    package: str
    wheel: str
    sha256: str
    files: list[str]
    cached: bool = False

    def to_json(self) -> dict:
        """The checkout as the `checkout --json` output."""
        return {"checkout": str(self.path), "base_sha": self.base_sha, "base_release": self.package,
                "wheel": self.wheel, "sha256": self.sha256, "files": self.files, "cached": self.cached}


def _git(folder: Path, *args: str) -> str:
    """git in the new repository at `folder` (gitsafe: no user or system configuration, no hooks;
    no signing or line-ending conversion, which would change the commit)."""
    git_dir = folder / ".git" if args[0] != "init" else None
    return gitsafe.out(git_dir, "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false", *args,
                       work_tree=folder if git_dir else None, cwd=folder, env={**IDENTITY, "LC_ALL": "C"})


def _write_tree(folder: Path, wheel: Wheel, files: list[str], pkg: Package, sha256: str, base: str) -> str:
    """Write `files` (under the prefix) and MARKER into the empty `folder`, commit them; the id."""
    for name in files:
        data = wheel.read(name)  # checks the name first: nothing is created for an unsafe one
        dest = folder / pkg.prefix / name if pkg.prefix else folder / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        dest.chmod(0o644)
    record = {"package": pkg.spec, "wheel": wheel.path.name, "sha256": sha256, "prefix": pkg.prefix,
              "files": files, "format": FORMAT}
    (folder / MARKER).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    if shutil.which("git") is None:  # a plain folder: identified by its content hash (checkout.tree_hash)
        from kernelsmith.onboard.checkout import tree_hash

        return tree_hash(folder)
    _git(folder, "init", "-q", "-b", base)
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "-m", f"{pkg.spec}: files of the released wheel {wheel.path.name} "
                                       f"(a release, not an upstream commit)")
    return _git(folder, "rev-parse", "HEAD")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def package_for(target, spec: str | None) -> Package:
    """The release to check out: `spec` (command line) with the yaml's prefix, else the yaml's."""
    yaml_pkg = getattr(target, "package", None)
    if spec:
        check_spec(spec, "--from-package", "SPEC")
        return Package(spec, yaml_pkg.prefix if yaml_pkg else "", yaml_pkg.python if yaml_pkg else PYTHON)
    if yaml_pkg is None:
        raise ConfigError(target.path, "missing: name==version of a release (or pass --from-package "
                                       "NAME==VERSION)", "package")
    return yaml_pkg


def cache_path(target, pkg: Package) -> Path:
    """Where the release checkout of `target` lives in the cache: keyed by release, layout and the
    files the yaml asks for (another operator list is another checkout)."""
    key = json.dumps([FORMAT, pkg.spec, pkg.prefix, pkg.python, target.base,
                      sorted(o.file for o in target.operators), sorted(target.stubs)])
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    return cache_dir() / "releases" / f"{target.name}-{pkg.name}-{pkg.version}-{digest}"


def read_marker(folder: Path) -> dict | None:
    """The release record at a checkout's root, or None for any other folder (or a bad record)."""
    path = Path(folder) / MARKER
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1 << 20:
            return None
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("package"), str):
        return None
    if not SPEC_RE.match(data["package"]):
        return None
    return data


def base_release(folder: Path) -> str | None:
    """`name==version` when `folder` is a checkout made from a release, else None."""
    data = read_marker(folder)
    return data["package"] if data else None


def _existing(path: Path, pkg: Package) -> ReleaseCheckout | None:
    data = read_marker(path)
    if not data or data.get("package") != pkg.spec or data.get("format") != FORMAT:
        return None
    from kernelsmith.onboard.checkout import head_sha

    sha, _ = head_sha(path)
    return ReleaseCheckout(path, sha, pkg.spec, data.get("wheel", ""), data.get("sha256", ""),
                           list(data.get("files", [])), cached=True)


def cached_checkout(target, spec: str | None = None) -> Path | None:
    """The cached release checkout of `target`, if one was made; never downloads."""
    pkg = package_for(target, spec)
    path = cache_path(target, pkg)
    return path if _existing(path, pkg) else None


def release_checkout(target, spec: str | None = None, into: str | Path | None = None,
                     wheel: str | Path | None = None) -> ReleaseCheckout:
    """Make (or reuse from the cache) the one-commit checkout of `target`'s release; `into` builds it
    in that folder instead (which must be new or empty), `wheel` uses a wheel file already at hand."""
    pkg = package_for(target, spec)
    if into is not None:
        dest = Path(into).resolve()
        if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
            raise ConfigError(dest, "must be a new or empty folder", "--into")
        try:
            return _build(target, pkg, dest, wheel)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)  # no half-made checkout left behind
            raise
    dest = cache_path(target, pkg)
    with cache_lock(dest.with_name(dest.name + ".lock")):
        found = _existing(dest, pkg)
        if found:
            return found
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(dest, ignore_errors=True)
        made = _build(target, pkg, tmp, wheel)
        tmp.rename(dest)
        made.path = dest
        return made


def _build(target, pkg: Package, dest: Path, wheel_path: str | Path | None) -> ReleaseCheckout:
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kernelsmith-wheel-") as tmp:
        path = Path(wheel_path) if wheel_path else download_wheel(pkg, Path(tmp))
        wheel = Wheel(path)
        try:
            files = select_files(wheel, wanted_files(target, pkg), target.stubs)
            digest = _sha256(path)
            sha = _write_tree(dest, wheel, files, pkg, digest, target.base)
        finally:
            wheel.close()
    return ReleaseCheckout(dest, sha, pkg.spec, path.name, digest, files)
