"""`kernelsmith scan TARGET [--checkout DIR] [--json]`: operators, hotspot marks, stale or not."""

from __future__ import annotations

import argparse
import json


def register(subparsers) -> None:
    """Add the `scan` subcommand."""
    p = subparsers.add_parser(
        "scan", help="list a target's operators, hotspot marks, source hashes and staleness",
        description="Operators come from the target yaml and from the repository's own "
                    ".kernelsmith.yml (read from its base branch). Functions marked "
                    "`# kernelsmith: hotspot` in files no operator covers are listed as needing a "
                    "harness. An operator is stale when it was never optimized or its source changed "
                    "since the last run in the state file. Exit 0, or 2 when an operator is broken "
                    "(missing file, entry or harness) or the configuration is wrong.")
    p.add_argument("target", help="target yaml path or name under the targets folder")
    p.add_argument("--checkout", metavar="DIR", help="use this folder instead of a cached clone")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--static", action="store_true",
                   help="run no target code: check harnesses from their syntax tree without importing "
                        "them and skip the target's setup (for jobs that hold credentials)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Scan one target and print tables (or JSON); 2 when an operator is broken."""
    from kernelsmith.onboard.checkout import prepare_checkout
    from kernelsmith.onboard.config import load_target, resolve_target
    from kernelsmith.onboard.scan import scan_target
    from kernelsmith.onboard.state import load_state

    target = load_target(resolve_target(args.target, getattr(args, "targets", None)))
    co = prepare_checkout(target, args.checkout, setup=not args.static)
    result = scan_target(target, co, load_state(), static=args.static, where=where_args(args))
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        render(result)
    return 0 if result.ok else 2


def where_args(args: argparse.Namespace) -> dict:
    """TARGET (as typed: it resolves the same from this folder), `--checkout DIR` and `--targets
    DIR` when given, for the commands this one suggests (reproduce.harness_line)."""
    from kernelsmith.reproduce import local_path

    targets = getattr(args, "targets", None)
    return {"target": args.target, "checkout": local_path(args.checkout) if args.checkout else None,
            "targets": local_path(targets) if targets else None}


def render(result) -> None:
    """Rich tables: operators, then hotspot marks, then warnings and problems."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{result.target}[/bold] ({result.repo}) at {result.base_sha[:17]} "
                  f"in {result.checkout}")
    if result.base_release:
        console.print(f"base: the release {escape(result.base_release)}, not an upstream commit")
    table = Table(title="operators")
    for col in ("operator", "source", "file", "harness", "hash", "stale", "last result"):
        table.add_column(col)
    for op in result.operators:
        last = op.last_result or {}
        speed = last.get("geomean_speedup")
        last_txt = f"{speed:.2f}x" if isinstance(speed, (int, float)) else ("run, no timing" if last else "-")
        if op.pr:
            last_txt += f" PR #{op.pr.get('number')}"
        stale = ("[yellow]yes[/yellow]: " if op.stale else "no: ") + op.stale_reason
        table.add_row(op.name, op.source, op.file, "ok" if op.harness_ok else "[red]error[/red]",
                      (op.source_hash or "-")[:12], stale, last_txt)
    console.print(table)
    if result.hotspots:
        marks = Table(title="hotspot marks")
        for col in ("location", "function", "status"):
            marks.add_column(col)
        for h in result.hotspots:
            status = h.status if h.operator else f"[yellow]{h.status}[/yellow]"
            marks.add_row(f"{h.file}:{h.line}", h.function, status)
        console.print(marks)
    else:
        console.print("no `# kernelsmith: hotspot` marks found")
    for w in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    for s in result.suggestions():
        console.print(f"[cyan]suggest:[/cyan] {s}", markup=True, highlight=False)
    for op in result.operators:
        for p in op.problems:  # may quote a harness's own error text: no markup of its own
            console.print(f"[red]problem:[/red] {escape(op.name)}: {escape(p)}", highlight=False)
    if result.sandbox is not None and not result.sandbox.get("enabled"):
        console.print(f"[red]warning:[/red] {escape(result.sandbox.get('note', ''))}", highlight=False)
