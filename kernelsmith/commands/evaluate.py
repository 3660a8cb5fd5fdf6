"""`kernelsmith evaluate TARGET OP [--candidate FILE]`: one verdict for one candidate."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelsmith.errors import ConfigError


def register(subparsers) -> None:
    """Add the `evaluate` subcommand."""
    p = subparsers.add_parser("evaluate", help="judge one candidate (default: the base itself)",
                              description=__doc__)
    p.add_argument("target", help="target yaml path or name under the targets folder")
    p.add_argument("op", help="operator name in the target")
    p.add_argument("--candidate", help="a full copy of the operator's file (default: the base itself)")
    p.add_argument("--checkout", help="use this folder as the target's source instead of a clone")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "interpret"])
    p.add_argument("--gpu", type=int, default=None, help="CUDA device index for the worker")
    p.add_argument("--timing", default="full", choices=["full", "screen", "none"])
    p.add_argument("--seed", type=int, default=0, help="run seed (input seeds derive from it)")
    p.add_argument("--timeout", type=float, default=None, help="wall-clock seconds per evaluation")
    p.add_argument("--json", action="store_true", help="print the verdict JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Evaluate and print; exit 0 accepted, 1 rejected, 2 when the base itself fails (the harness or
    the environment is at fault) or on config errors."""
    from kernelsmith.onboard.task import load_task
    from kernelsmith.referee import Referee, RefereeError
    from kernelsmith.referee.checks.diagnose import base_failure

    code = None
    if args.candidate:
        path = Path(args.candidate)
        try:
            code = path.read_text()
        except FileNotFoundError:
            raise ConfigError(path, "candidate file not found", "--candidate") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(path, f"cannot read: {e}", "--candidate") from None
    # The referee's worker loads the harness inside the sandbox; this process never imports it.
    task = load_task(args.target, args.op, args.checkout, getattr(args, "targets", None), harness=None)
    base_verdict = None
    with Referee(task, device=args.device, gpu=args.gpu, seed=args.seed, timeout_s=args.timeout) as referee:
        try:
            verdict = referee.evaluate(code, candidate_id=0 if code is None else 1, timing=args.timing)
            if code is None:
                base_verdict = verdict
            elif not verdict.accepted:
                # A rejected candidate: is the base itself sound on this harness?
                base_verdict = referee.evaluate(None, candidate_id=0, timing="none")
        except RefereeError as e:  # the worker cannot load the base file or its harness, or the base fails
            raise RefereeError(f"{base_failure(e.verdict())}\n{e}") from None
    if args.json:
        from kernelsmith.sandbox import summary

        print(json.dumps({**verdict.to_json(), "sandbox": summary()}, indent=2))
    else:
        print_verdict(verdict, task.operator.name)
    if base_verdict is not None and not base_verdict.accepted:
        print(base_failure(base_verdict), file=sys.stderr)
        return 2
    return 0 if verdict.accepted else 1


def print_verdict(verdict, op_name: str) -> None:
    """A readable table of the verdict (rich)."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    state = "[green]ACCEPTED[/green]" if verdict.accepted else f"[red]REJECTED[/red] ({verdict.reason})"
    console.print(f"{op_name}: {state}   device: {verdict.device.get('name')}   {verdict.eval_s:.1f} s")
    for msg in (verdict.details or {}).get("messages", []):
        console.print(f"  - {msg}", markup=False)
    if verdict.error:
        console.print(verdict.error.strip()[-1500:], markup=False, highlight=False)
    timed_cols = ("base ms", "cand ms", "speedup", "95% CI", "host ms", "% roofline")
    cols = ("shape", "max abs err", "bitwise = base", "check s") + (timed_cols if verdict.timed else ())
    table = Table(show_header=True, header_style="bold")
    for col in cols:
        table.add_column(col, justify="left" if col == "shape" else "right")
    for s in verdict.shapes:
        def f(key, fmt="{:.4f}", s=s):
            v = s.get(key)
            return "-" if v is None else fmt.format(v)
        ci = s.get("ci95")
        row = [", ".join(f"{k}={v}" for k, v in s["shape"].items()), f("max_abs_err", "{:.2e}"),
               "-" if s.get("bitwise_identical") is None else ("yes" if s["bitwise_identical"] else "no"),
               f("check_s", "{:.1f}")]
        if verdict.timed:
            row += [f("baseline_ms"), f("candidate_ms"), f("speedup", "{:.3f}x"),
                    f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-", f("host_ms"), f("pct_roofline", "{:.0f}%")]
        table.add_row(*row)
    if verdict.shapes:
        console.print(table)
    if verdict.fresh_shapes:
        console.print(f"fresh shapes checked: {len(verdict.fresh_shapes)}")
    if verdict.timed:
        t = verdict.timing
        gm = verdict.geomean_speedup
        console.print(f"geomean speedup ({t.get('metric')} time): {gm:.3f}x   A/A control: "
                      f"{t.get('aa_ratio') if t.get('aa_ratio') is None else format(t['aa_ratio'], '.4f')}"
                      + ("   [yellow]NOISY: not a win[/yellow]" if verdict.noisy else ""))
    else:
        console.print("No timing was done: correctness and integrity only"
                      + (" (no CUDA device)." if verdict.device.get("driver") is None else "."))
