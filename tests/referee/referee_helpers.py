"""Helpers for the referee tests: demo tasks built from the bundled miniserve folder."""

from pathlib import Path

from kernelsmith.target.task import load_task

ROOT = Path(__file__).resolve().parents[2]
DEMO_YAML = ROOT / "targets" / "demo.yaml"
MINISERVE = ROOT / "examples" / "miniserve"
CORPUS = Path(__file__).resolve().parent


def demo_task(op: str):
    """The demo operator `op`, using the bundled folder itself as the checkout (no clone)."""
    return load_task(str(DEMO_YAML), op, checkout=str(MINISERVE))


def expected_outcome(path: Path) -> str | None:
    """The violation a corpus file must be rejected with (its docstring's first word after
    CHEAT/BROKEN), or None for an honest rewrite that must be accepted."""
    first = path.read_text().split('"""')[1].strip()
    kind, _, rest = first.partition(" ")
    if kind.startswith("HONEST"):
        return None
    return rest.split(":")[0].strip()


