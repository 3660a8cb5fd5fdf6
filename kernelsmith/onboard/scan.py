"""What a target offers to optimize: its operators (yaml + the repo's `.kernelsmith.yml`), the
`# kernelsmith: hotspot` marks in its source, each operator's source hash and whether it is stale.

Harnesses are target code: they are checked from their syntax tree (`static`) or imported in
sandboxed children (harness/box.py), never in this process.
"""

from __future__ import annotations

import ast
import copy
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelsmith import gitsafe
from kernelsmith.errors import ConfigError
from kernelsmith.harness.static import check_harness_static
from kernelsmith.onboard.checkout import Checkout, git_dir_for, has_git, is_commit
from kernelsmith.onboard.config import Operator, Target, merge_repo_operators, parse_yaml
from kernelsmith.onboard.release import base_release
from kernelsmith.onboard.state import entry as state_entry
from kernelsmith.onboard.state import source_hash, staleness
from kernelsmith.pysource import parse, reachable
from kernelsmith.referee.checks.static import defines
from kernelsmith.reproduce import harness_line

REPO_CONFIG = ".kernelsmith.yml"
_MARK_RE = re.compile(r"^\s*#\s*kernelsmith:\s*hotspot\s*$")
_SKIP_DIRS = {"node_modules", "build", "dist", "__pycache__", "site-packages", "third_party", "3rdparty"}


@dataclass
class OperatorStatus:
    """One operator as scan sees it in a checkout."""

    name: str
    source: str
    file: str
    entry: str
    harness: str
    harness_ok: bool
    source_hash: str | None
    stale: bool
    stale_reason: str
    ignored: bool = False
    last_result: dict | None = None
    pr: dict | None = None
    problems: list[str] = field(default_factory=list)


@dataclass
class Hotspot:
    """A function marked `# kernelsmith: hotspot`, and the operator (with a harness) covering it."""

    file: str
    line: int
    function: str
    operator: str | None

    @property
    def status(self) -> str:
        """"harness: <op>" when an operator covers its file, else "needs a harness"."""
        return f"harness: {self.operator}" if self.operator else "needs a harness"


@dataclass
class ScanResult:
    """Everything `kernelsmith scan` reports for one target."""

    target: str
    repo: str
    checkout: str
    base_sha: str
    operators: list[OperatorStatus]
    hotspots: list[Hotspot]
    warnings: list[str] = field(default_factory=list)
    sandbox: dict | None = None  # how harnesses were imported (None: --static, none was)
    # TARGET, `--checkout DIR` and `--targets DIR` as suggested commands repeat them (keys target,
    # checkout, targets; default: the target's name alone)
    where: dict = field(default_factory=dict)
    base_release: str | None = None  # name==version: the checkout holds a release, not a commit

    @property
    def ok(self) -> bool:
        """True when no operator has a problem (missing file, entry or harness)."""
        return not any(op.problems for op in self.operators)

    def to_json(self) -> dict:
        """Plain data for `scan --json`."""
        return {
            "target": self.target, "repo": self.repo, "checkout": self.checkout, "base_sha": self.base_sha,
            "base_release": self.base_release, "ok": self.ok,
            "operators": [asdict(o) for o in self.operators],
            "hotspots": [dict(asdict(h), status=h.status) for h in self.hotspots],
            "warnings": list(self.warnings),
            "suggestions": self.suggestions(),
            **({"sandbox": self.sandbox} if self.sandbox is not None else {}),
        }

    def suggestions(self) -> list[str]:
        """How to give a harness to each operator without one and each uncovered hotspot mark."""
        out = []
        where = {"target": self.target, **self.where}

        def cmd(action: str, op: str) -> str:
            # The target and `--checkout` as this scan was given them: the line works when pasted.
            return "`" + harness_line(action, op, **where) + "`"

        for op in self.operators:
            if not Path(op.harness).exists():
                out.append(f"{op.name} has no harness file yet: {cmd('new', op.name)} "
                           f"writes a skeleton to {op.harness}, then {cmd('check', op.name)}")
        for h in self.hotspots:
            if h.operator is None:
                out.append(f"{h.function} ({h.file}:{h.line}) needs a harness: add an operator to the target "
                           f"(file: {h.file}, entry: the Python function that runs it, harness: a path), "
                           f"then {cmd('new', 'NAME')} and {cmd('check', 'NAME')}")
        return out


def _git_show(git_dir: Path, ref: str, rel: str) -> str | None:
    out = gitsafe.run(git_dir, "cat-file", "blob", f"{ref}:{rel}", check=False)
    return out.stdout if out.returncode == 0 else None


def _ref_exists(git_dir: Path, ref: str) -> bool:
    return gitsafe.ok(git_dir, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}")


def read_repo_config(target: Target, co: Checkout) -> tuple[str | None, str]:
    """The text of the repo's `.kernelsmith.yml` on its base branch (never a PR head), and whence.

    In a git checkout it is read from `origin/<base>`, else the local `<base>` branch, else the
    checkout's base commit; a folder without git offers only its own copy.
    """
    root = Path(co.path)
    git_dir = git_dir_for(root) if co.is_git and has_git() and is_commit(co.base_sha) else None
    if git_dir is not None:  # the store, never a worktree's `.git` that setup could have rewritten
        for ref in (f"refs/remotes/origin/{target.base}", f"refs/heads/{target.base}"):
            if _ref_exists(git_dir, ref):
                return _git_show(git_dir, ref, REPO_CONFIG), ref
        return _git_show(git_dir, co.base_sha, REPO_CONFIG), co.base_sha[:12]
    path = root / REPO_CONFIG
    return (path.read_text() if path.is_file() else None), "working tree"


def with_repo_operators(target: Target, co: Checkout) -> Target:
    """A copy of `target` plus the operators of the repo's `.kernelsmith.yml` (clash: ConfigError)."""
    text, _ = read_repo_config(target, co)
    merged = copy.copy(target)
    merged.operators, merged.broken = list(target.operators), dict(target.broken)
    if text is None:
        return merged
    where = Path(co.path) / REPO_CONFIG
    return merge_repo_operators(merged, where, parse_yaml(text, where))


def _marked_functions(text: str, rel: str, warnings: list[str]) -> list[tuple[int, str]]:
    """(line, function) for each mark directly above a def or its first decorator."""
    marks = [i + 1 for i, line in enumerate(text.splitlines()) if _MARK_RE.match(line)]
    if not marks:
        return []
    try:
        tree = parse(text)
    except SyntaxError as e:
        warnings.append(f"{rel}: cannot parse ({e.msg} at line {e.lineno}); its marks are skipped")
        return []
    starts = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            starts[first] = node.name
    found = []
    for line in marks:
        if line + 1 in starts:
            found.append((line, starts[line + 1]))
        else:
            warnings.append(f"{rel}:{line}: hotspot mark is not directly above a def or @triton.jit")
    return found


def reachable_functions(text: str, entry: str) -> set[str]:
    """Functions `entry` reaches by name in its file (kernel launches included); none if unparsable."""
    try:
        return reachable(text, entry)
    except SyntaxError:
        return set()


def find_hotspots(root: Path, warnings: list[str] | None = None) -> list[tuple[str, int, str]]:
    """(repo-relative file, line, function) for every `# kernelsmith: hotspot` mark under `root`."""
    warnings = warnings if warnings is not None else []
    root = Path(root)
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = Path(folder) / name
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if "kernelsmith:" not in text:
                continue
            rel = path.relative_to(root).as_posix()
            found.extend((rel, line, fn) for line, fn in _marked_functions(text, rel, warnings))
    return found


def _has_entry(code: str, entry: str) -> bool:
    if "." in entry:  # `Class.method`, `Function.apply`: the class and the def it runs
        return defines(code, entry)
    tree = parse(code)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry:
            return True
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == entry for t in node.targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if entry in {a.asname or a.name for a in node.names}:
                return True
    return False


def harness_problems(ops: list[Operator], root: Path, static: bool = False) -> list[str | None]:
    """Per operator, what is wrong with its harness (None: nothing): read from its syntax tree
    (`static`, runs no target code), else imported in a sandboxed child of its own (a crash or a
    hang is that harness's problem only)."""
    if not static:
        from kernelsmith.harness.box import load_harnesses

        return load_harnesses([op.harness for op in ops], root)
    out: list[str | None] = []
    for op in ops:
        try:
            check_harness_static(op.harness)
            out.append(None)
        except ConfigError as e:
            out.append(str(e))
    return out


def operator_status(target: Target, op: Operator, root: Path, state: dict,
                    static: bool = False, harness_problem: str | None | bool = False) -> OperatorStatus:
    """Check one operator's file, entry and harness in a checkout, and whether it is stale.

    `static`: check the harness from its syntax tree instead of importing it (runs no target code).
    `harness_problem`: what harness_problems found for it (None: nothing); False: check it here.
    """
    if harness_problem is False:
        (harness_problem,) = harness_problems([op], root, static)
    problems = []
    path = root / op.file
    digest = None
    if not path.is_file():
        problems.append(f"file {op.file} not found in the checkout")
    else:
        data = path.read_bytes()
        digest = source_hash(data)
        try:
            if not _has_entry(data.decode(errors="replace"), op.entry):
                where = "in" if "." in op.entry else "at the top level of"
                problems.append(f"entry {op.entry}() not defined {where} {op.file}")
        except SyntaxError as e:
            problems.append(f"{op.file} does not parse: {e.msg} (line {e.lineno})")
    harness_ok = harness_problem is None
    if not harness_ok:
        problems.append(f"harness: {harness_problem}")
    recorded = state_entry(state, target.name, op.name)
    ignored = bool(recorded.get("ignored"))
    if digest is None:
        stale, why = False, "source missing"
    elif ignored:
        stale, why = False, "ignored"
    else:
        stale, why = staleness(state, target.name, op.name, digest)
    return OperatorStatus(
        name=op.name, source=op.source, file=op.file, entry=op.entry, harness=str(op.harness),
        harness_ok=harness_ok, source_hash=digest, stale=stale, stale_reason=why, ignored=ignored,
        last_result=recorded.get("result"), pr=recorded.get("pr"), problems=problems,
    )


def _source_of(e: ConfigError, target: Target) -> str:
    """"yaml" or ".kernelsmith.yml": which file an operator's error is about."""
    return "yaml" if Path(e.file) == target.path else REPO_CONFIG


def scan_target(target: Target, co: Checkout, state: dict, static: bool = False,
                where: dict | None = None) -> ScanResult:
    """Operators (yaml + `.kernelsmith.yml`), their status and the hotspot marks of a checkout.

    `static`: harnesses are checked without being imported (see operator_status). `where`: the
    TARGET argument, `--checkout DIR` and `--targets DIR` the suggested commands repeat."""
    merged = with_repo_operators(target, co)
    root = Path(co.path)
    found = harness_problems(merged.operators, root, static)
    ops = [operator_status(merged, op, root, state, static, harness_problem=problem)
           for op, problem in zip(merged.operators, found, strict=True)]
    warnings: list[str] = []
    # A mark is covered when an operator's entry reaches the marked function (not merely its file).
    covered: dict[tuple[str, str], str] = {}
    for op, status in zip(merged.operators, ops, strict=True):
        if status.harness_ok and not status.problems:
            for fn in reachable_functions((root / op.file).read_text(), op.entry):
                covered.setdefault((op.file, fn), op.name)
    hotspots = [Hotspot(file=f, line=ln, function=fn, operator=covered.get((f, fn)))
                for f, ln, fn in find_hotspots(root, warnings)]
    # Operators the loader could not take are listed with their error; the others are scanned.
    ops += [OperatorStatus(name=name, source=_source_of(e, merged), file="", entry="", harness="",
                           harness_ok=False, source_hash=None, stale=False, stale_reason="not loaded",
                           problems=[str(e)]) for name, e in merged.broken.items()]
    from kernelsmith import sandbox

    return ScanResult(target=target.name, repo=target.repo, checkout=str(root), base_sha=co.base_sha,
                      operators=ops, hotspots=hotspots, warnings=warnings,
                      sandbox=None if static else sandbox.summary(), where=dict(where or {}),
                      base_release=base_release(root))
