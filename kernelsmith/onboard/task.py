"""A Task: one operator of one target, resolved against a checkout, ready for the referee."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernelsmith.errors import ConfigError
from kernelsmith.harness.facts import HarnessFacts
from kernelsmith.harness.model import Harness, load_harness
from kernelsmith.harness.static import check_harness_static
from kernelsmith.onboard.config import Operator, Target, load_target, resolve_target

HARNESS_MODES = ("import", "facts", None)


@dataclass
class Task:
    """Everything the referee and the search need to know about one operator."""

    target: Target
    operator: Operator
    root: Path
    base_sha: str
    base_code: str
    # The harness imported here ("import"), its facts from a sandboxed child ("facts"), or None.
    harness: Harness | HarnessFacts | None = field(default=None, repr=False)
    # name==version when the checkout was built from a release (onboard/release.py), not a commit.
    base_release: str | None = None

    @property
    def file_path(self) -> Path:
        """Absolute path of the operator's file in the checkout."""
        return self.root / self.operator.file

    def to_json(self) -> dict:
        """The task as plain data (what a worker process needs to rebuild it)."""
        return {
            "target": str(self.target.path), "op": self.operator.name, "root": str(self.root),
            "base_sha": self.base_sha,
        }


def make_task(target: Target, op_name: str, root: Path, base_sha: str,
              harness: str | None = "import") -> Task:
    """Resolve `op_name` in `target` against a checkout folder and validate file, entry, harness.

    `harness`: "import" imports the harness (target code) in this process (tests, tools);
    "facts" gathers what the search reads of it in one sandboxed child (harness/gather.py: the
    search and `export`); None leaves `task.harness` None (the referee's workers, and `harness
    check`'s child, load it inside the sandbox themselves)."""
    if harness not in HARNESS_MODES:
        raise ValueError(f"harness must be one of {HARNESS_MODES}, got {harness!r}")
    op = target.operator(op_name)
    file_path = Path(root) / op.file
    if not file_path.is_file():
        raise ConfigError(target.path, f"{op.file} not found in checkout {root}", f"operators.{op.name}.file")
    code = file_path.read_text()
    root = Path(root).resolve()
    # What can be known without running harness code, before any child starts: one line naming
    # the harness file, never a traceback from the referee's worker.
    check_harness_static(op.harness, f"operators.{op.name}.harness in {target.path}", op.variant)
    if harness == "facts":
        from kernelsmith.harness.gather import gather

        loaded = gather(op.harness, root, variant=op.variant)
    else:
        loaded = load_harness(op.harness, op.variant) if harness == "import" else None
    from kernelsmith.onboard.release import base_release

    return Task(target=target, operator=op, root=root, base_sha=base_sha, base_code=code, harness=loaded,
                base_release=base_release(root))


def load_task(target_arg: str, op_name: str, checkout: str | None = None, targets: str | None = None,
              harness: str | None = "import") -> Task:
    """Target argument + operator + optional checkout -> a validated Task (clones when needed);
    `harness` as in make_task."""
    from kernelsmith.onboard.checkout import prepare_checkout
    from kernelsmith.onboard.scan import with_repo_operators

    target = load_target(resolve_target(target_arg, targets))
    co = prepare_checkout(target, checkout)
    if not target.has_operator(op_name):
        # Operators may also come from the target repo's own .kernelsmith.yml (base branch only).
        target = with_repo_operators(target, co)
    return make_task(target, op_name, co.path, co.base_sha, harness=harness)
