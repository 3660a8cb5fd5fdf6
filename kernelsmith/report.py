"""report.md (the PR body): the evidence a reviewer needs, rendered from a run directory.

Per-shape table (base ms, winner ms, speedup, 95% CI, % of roofline), environment, base sha, how
to reproduce, search statistics, a mermaid chart GitHub renders, the diff, and a hidden marker
the bot reads: `<!-- kernelsmith:op=<target>/<op> source=<sha256 of base file> run=<run id> -->`.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

from kernelsmith.benchjson import benchmark_json
from kernelsmith.errors import ConfigError
from kernelsmith.mdtext import safe_text
from kernelsmith.referee.verdict import aa_bias_factor
from kernelsmith.reproduce import checkout_placeholder, join, local_path, target_arg
from kernelsmith.rundir import RunDir, load_run, write_json, write_text
from kernelsmith.runspec import RunSpec
from kernelsmith.search.candidate import candidates

if TYPE_CHECKING:
    from kernelsmith.search.result import SearchResult

NO_TIMING = "No timing was done (no CUDA device: correctness and integrity only)."


def marker(
    run: RunSpec, result: dict | None, run_id: str, base_code: str | None, prior: str | None = None
) -> str:
    """The hidden HTML comment identifying target/op, the operator source hash and the run."""
    source = (result or {}).get("source_sha256") or (
        hashlib.sha256(base_code.encode()).hexdigest() if base_code is not None else None
    )
    if source is None:  # re-rendered without archive or result hash: keep what the last report said
        m = re.search(r"<!-- kernelsmith:op=\S+ source=([0-9a-f]{64}) ", prior or "")
        source = m.group(1) if m else "unknown"
    return f"<!-- kernelsmith:op={Path(run.target).stem}/{run.op} source={source} run={run_id} -->"


def _f(x, fmt: str, none: str = "n/a") -> str:
    return none if x is None else format(x, fmt)


def _shape(shape: dict) -> str:
    # Shape fields come from the harness (target-repository content) and, in a published run,
    # from a run directory untrusted code wrote: escaped like every other artifact text.
    return ", ".join(f"{safe_text(k, 60)}={safe_text(v, 60)}" for k, v in shape.items())


def shape_table(shapes: list[dict], timed: bool) -> str:
    """The per-shape markdown table (speedups to 2 decimals)."""
    if not timed:
        lines = ["| shape | correct | max abs error |", "|---|---|---|"]
        lines += [f"| {_shape(s['shape'])} | yes | {_f(s.get('max_abs_err'), '.2e')} |" for s in shapes]
        return "\n".join(lines)
    lines = [
        "| shape | base ms | winner ms | speedup | 95% CI | % roofline |",
        "|---|---:|---:|---:|---|---:|",
    ]
    capped, biases = False, []
    for s in shapes:
        ci = s.get("ci95")
        ci_text = f"{ci[0]:.2f}–{ci[1]:.2f}" if ci and None not in ci else "n/a"
        # Faster than the measured ceiling: the referee counts the speedup only up to the roofline.
        mark = "†" if (s.get("pct_roofline") or 0) > 100 else ""
        capped = capped or bool(mark)
        bias = aa_bias_factor(s.get("aa_bias"))  # result.json is read back: None for a hostile value
        if bias is not None and bias > 1.0:
            mark += "‡"
            biases.append(bias)
        lines.append(
            f"| {_shape(s['shape'])} | {_f(s.get('baseline_ms'), '.4f')} | {_f(s.get('winner_ms'), '.4f')} "
            f"| {_f(s.get('speedup'), '.2f')}x{mark} | {ci_text} | {_f(s.get('pct_roofline'), '.1f')} |"
        )
    if capped:
        lines += ["", "† measured faster than the device's measured copy bandwidth allows; base and "
                      "winner times count only down to the roofline time, so the speedup is capped there."]
    if biases:
        lines += ["", f"‡ the A/A control (the base timed against a second copy of itself) strayed here by "
                      f"up to {100 * (max(biases) - 1):.1f}%; the speedup dwarfs that, so the measurement "
                      "stands with the bias inside its 95% CI."]
    return "\n".join(lines)


def mermaid(shapes: list[dict], series: list[float]) -> str:
    """A mermaid xychart: per-shape speedup bars, or best-so-far over evaluations."""
    if shapes and all(s.get("speedup") is not None for s in shapes):
        labels = ", ".join(f'"s{i + 1}"' for i in range(len(shapes)))
        vals = [round(s["speedup"], 2) for s in shapes]
        top = max(vals + [1.0]) * 1.15
        return (
            '```mermaid\nxychart-beta\n    title "Speedup over the base per shape (s1.. as in the table)"\n'
            f'    x-axis [{labels}]\n    y-axis "speedup (x)" 0 --> {top:.2f}\n    bar {vals}\n```'
        )
    if series:
        xs = ", ".join(str(i + 1) for i in range(len(series)))
        top = max(series + [1.0]) * 1.15
        return (
            '```mermaid\nxychart-beta\n    title "Best geomean speedup so far"\n'
            f'    x-axis [{xs}]\n    y-axis "speedup (x)" 0 --> {top:.2f}\n'
            f"    line {[round(v, 3) for v in series]}\n```"
        )
    return ""


def search_stats(rows, result: dict) -> str:
    """Proposals, evaluations, outcomes by mutator and rejection reason, rate, stop reason."""
    props = [r for r in candidates(rows) if not r.is_base]
    by_mut: dict[str, list[int]] = {}
    for r in props:
        c = by_mut.setdefault(r["mutator"], [0, 0, 0])
        c[0] += 1
        c[1] += int(r.referee_ran)
        c[2] += int(r.accepted)
    wall = result.get("wall_s") or 0
    evals = result.get("evaluations") or 0
    lines = [
        f"- proposals: {result.get('proposals')}, evaluations: {evals}, accepted: {result.get('accepted')}",
        f"- wall time: {wall / 60:.1f} min, {evals / (wall / 60) if wall else 0:.1f} evaluations/min",
        f"- stopped: {result.get('stop_reason') or 'n/a'}",
    ]
    llm = result.get("llm")
    if llm:
        lines.append(
            f"- llm requests: {llm.get('requests')} ({llm.get('retries')} retries: "
            f"{llm.get('timeouts')} timeouts, "
            f"{llm.get('rate_limited')} rate-limited, {llm.get('server_errors')} server errors; "
            f"{llm.get('failed')} gave no answer)"
        )
    rejected = result.get("rejected") or {}
    if rejected:
        lines.append("- rejected: " + ", ".join(f"{k} {v}" for k, v in rejected.items()))
    lines += ["", "| mutator | proposals | evaluated | accepted |", "|---|---:|---:|---:|"]
    lines += [f"| {m} | {c[0]} | {c[1]} | {c[2]} |" for m, c in sorted(by_mut.items())]
    final = result.get("final_measurements") or []
    if final:
        lines += [
            "",
            "Finalists re-measured with new input seeds (the winner: among measured wins, whose geomean "
            "95% CI lies above 1.0 and no shape is slower than 0.98x beyond its CI, the smallest change "
            "within 1% of the fastest):",
            "",
            "| candidate | search geomean | re-measured geomean | changed lines | outcome |",
            "|---|---:|---:|---:|---|",
        ]
        for f in final:
            outcome = "accepted" if f.get("accepted") else f"rejected ({f.get('reason')})"
            outcome = f"not re-measured: {f['skipped']}" if f.get("skipped") else outcome
            outcome += ", not a measured win" if f.get("accepted") and f.get("measured_win") is False else ""
            outcome += " (noisy)" if f.get("noisy") else ""
            outcome += ", **winner**" if f.get("chosen") else ""
            lines.append(
                f"| #{f['id']} | {_f(f.get('search_speedup'), '.2f')} | {_f(f.get('final_speedup'), '.2f')} "
                f"| {_f(f.get('changed_lines'), 'd')} | {outcome} |"
            )
    return "\n".join(lines)


def repro(run: RunSpec, rd_path: Path) -> str:
    """Commands that reproduce the run and re-check the winner, as they work when pasted from the
    project's folder: the target by name (or repository-relative path), the `--checkout` the run
    used as a placeholder (a folder of the machine that ran it), no absolute path of that machine."""
    target = target_arg(run.target)
    where = []
    if _checkout_given(run):
        where = ["--checkout", checkout_placeholder(run.repo)]
    cmd = ["kernelsmith", "optimize", target, run.op, *where,
           "--seed", str(run.seed), "--mutator", run.mutator, "--device", run.device]
    if run.command == "sweep":  # the grid: no mutator or budget to choose
        i = cmd.index("--mutator")
        cmd[1], cmd[i:i + 2] = "sweep", []
    if run.budget is not None:
        cmd += ["--budget", str(run.budget)]
    if run.minutes is not None:
        cmd += ["--minutes", str(run.minutes)]
    rd = local_path(rd_path)
    rd = "<run dir>" if Path(rd).is_absolute() else rd
    winner = f"{rd}/winner/{Path(run.file).name}"
    check = ["kernelsmith", "evaluate", target, run.op, *where, "--candidate", winner]
    return "```sh\n" + join(cmd) + "\n" + join(check) + "\n```"


def _checkout_given(run: RunSpec) -> bool:
    """Whether the run was given `--checkout` (run.json says so; older runs: a checkout outside
    the cache folder, where only a given folder lies)."""
    if run.checkout_given is not None:
        return run.checkout_given
    from kernelsmith.paths import cache_dir

    return cache_dir().resolve() not in Path(run.checkout).resolve().parents


def slower_shapes(shapes: list[dict]) -> list[str]:
    """The shapes where the winner is slower than the base beyond doubt (95% CI entirely below 1)."""
    out = []
    for s in shapes:
        ci = s.get("ci95") or [None, None]
        if s.get("speedup") is not None and ci[1] is not None and ci[1] < 1.0:
            out.append(f"{_shape(s.get('shape') or {})} {s['speedup']:.2f}x [{ci[0]:.2f}–{ci[1]:.2f}]")
    return out


def sweep_section(sweep: dict) -> str:
    """The grid sweep's numbers (`kernelsmith sweep`): size, coverage, best single and per-shape bests."""
    done = "the whole grid" if sweep.get("complete") else "cut short by the time budget"
    sizes = " x ".join(str(len(d)) for d in sweep["knobs"].values())
    grid = (f"- grid: {sweep['grid_size']} configurations ({sizes} values), {sweep['evaluated']} evaluated "
            f"({done})" + (", a uniform sample of a larger grid" if sweep.get("sampled") else ""))
    distinct = sweep.get("distinct_launches")  # absent in runs made before launch twins were skipped
    if distinct is not None and distinct < sweep["grid_size"]:
        grid += f"; {distinct} distinct launches on the listed shapes, each swept once"
    if sweep.get("best_single_geomean") is None:
        return grid + "\n- no timing: every configuration was checked for correctness only"
    best_id = sweep.get("best_single_id")
    lines = [
        grid,
        f"- best single configuration: {sweep['best_single_geomean']:.2f}x "
        + (f"(candidate #{best_id})" if best_id is not None else "(the base: none was faster)"),
        f"- a configuration per shape (the best measured on each shape, a maximum over single "
        f"measurements and so an upper guess, not a kernel): "
        f"{_f(sweep.get('per_shape_best_geomean'), '.2f')}x; a per-shape table "
        + ("beats the best single configuration by the params mutator's margin"
           if sweep.get("per_shape_table_beats_single") else "does not pay by the params mutator's margin"),
    ]
    if sweep.get("table_id") is not None:
        got = sweep.get("table_geomean")
        when = "after the grid" if sweep.get("complete") else "once the time budget was spent"
        lines.append(f"- that table, measured {when} (candidate #{sweep['table_id']}): "
                     + (f"{got:.2f}x" if got else "not faster than the best at the screen (no all-shape "
                        "geomean)"))
    return "\n".join(lines)


def render_report(rd: RunDir, rows: list[dict]) -> str:
    """The report.md text for a run directory."""
    run, result = rd.run, rd.result or {}
    base_row = next((r for r in rows if r["mutator"] == "base"), None)
    base_code = base_row["code"] if base_row else None
    timed = bool(result.get("timed", run.device == "cuda"))
    winner = result.get("winner")
    g = result.get("geomean_speedup")
    prior = (rd.path / "report.md").read_text() if (rd.path / "report.md").is_file() else None
    out = [marker(run, result, rd.path.name, base_code, prior)]
    if winner and timed:
        out.append(
            f"## kernelsmith: `{run.op}` is {g:.2f}x faster (geomean over {len(result['shapes'])} shapes)"
        )
    elif winner:
        out.append(f"## kernelsmith: `{run.op}`: an accepted candidate (correctness and integrity only)")
    else:
        out.append(f"## kernelsmith: `{run.op}`: no faster candidate found")
    out.append("")
    if not winner and result.get("no_winner_reason"):
        out += [f"**No winner:** {result['no_winner_reason']}.", ""]
    if not timed:
        out += [f"**{NO_TIMING}** No speedup is claimed.", ""]
    if (result.get("sandbox") or {}).get("enabled") is False:
        out += [f"**Warning: {result['sandbox'].get('note')}.**", ""]
    out.append(f"Repository `{run.repo}`, file `{run.file}`, base `{run.base_sha}`.")
    if run.base_release or result.get("base_release"):
        out.append(f"The base is the release `{run.base_release or result.get('base_release')}` (its "
                   "published package's files in a one-commit repository), not an upstream commit.")
    if winner:
        out.append(
            f"Winner: candidate #{winner['id']} (parent #{winner['parent']}), re-checked on new inputs "
            "before this report."
        )
    out.append("")
    shapes = result.get("shapes") or []
    if shapes:
        out += ["### Per shape", "", shape_table(shapes, timed), ""]
        if timed:
            gci = result.get("geomean_ci95")
            gci_text = f" (95% CI {gci[0]:.2f}–{gci[1]:.2f})" if gci else ""
            out += [
                f"Geomean speedup: **{g:.2f}x**{gci_text}. 95% CIs are bootstrapped over interleaved "
                "base/winner pairs (the geomean's over every shape's pairs at once); % roofline is the "
                "winner against the measured copy bandwidth (or matmul rate).",
                "",
            ]
            slower = slower_shapes(shapes)
            if slower:
                out += [f"**Slower than the base on {len(slower)} shape(s):** " + "; ".join(slower)
                        + ". The geomean hides this; weigh it before merging.", ""]
    from kernelsmith.chart import progress_series

    _, _, best = progress_series(rows)
    chart = mermaid(shapes if timed else [], [b for b in best if b is not None])
    if chart:
        out += ["### Chart", "", chart, ""]
    dev = result.get("device") or {}
    out += [
        "### Environment",
        "",
        "| device | driver | torch | triton |",
        "|---|---|---|---|",
        f"| {dev.get('name') or 'n/a'} | {dev.get('driver') or 'n/a'} | {dev.get('torch') or 'n/a'} "
        f"| {dev.get('triton') or 'n/a'} |",
        "",
    ]
    out += ["### Search", "", search_stats(rows, result), ""]
    if result.get("sweep"):
        out += ["### Sweep", "", sweep_section(result["sweep"]), ""]
    out += ["### Reproduce", "", repro(run, rd.path), ""]
    if winner and winner.get("diff"):
        from kernelsmith.search.mutators.rewrite import explain_lineage

        # A structural rewrite (rewrite mutator) says in one sentence what it changed.
        for sentence in explain_lineage(rows, winner.get("id")):
            out += [f"**What changed:** {sentence}", ""]
        out += [
            "<details><summary>winner.diff</summary>",
            "",
            "```diff",
            winner["diff"].rstrip(),
            "```",
            "",
            "</details>",
            "",
        ]
    return "\n".join(out)


def render_all(rd: RunDir) -> list[Path]:
    """Write report.md, speedup.png and benchmark.json of a run directory; returns their paths.
    ConfigError (nothing written) for a run that did not finish or an archive that cannot be read."""
    from kernelsmith.chart import render_chart
    from kernelsmith.search.archive import Archive

    if rd.result is None:
        raise ConfigError(rd.path / "result.json", "not found: the run did not finish (killed, or still "
                          "running); continue it with `kernelsmith optimize TARGET OP --out "
                          f"{rd.path} --resume`, which writes the report; report.md is left as it was")
    rows, final = [], {}
    if rd.archive_path.is_file():  # a copied run directory may come without its archive
        # Read-only: a report never creates or alters an archive (an empty file stays empty).
        with Archive(rd.archive_path, read_only=True) as archive:
            rows = archive.all()
            final = archive.get_meta("final", {}) or {}
    result = rd.result or {}
    report = rd.path / "report.md"
    text = render_report(rd, rows)
    if rd.verify:  # keep verify's "Upstream tests" section across re-renders
        from kernelsmith.verify import render_section, replace_section

        text = replace_section(text, render_section(rd.verify))
    write_text(report, text)
    png = render_chart(
        rd.path / "speedup.png",
        {**result, "op": result.get("op") or rd.run.op, "repo": result.get("repo") or rd.run.repo},
        rows,
    )
    winner_id = (result.get("winner") or {}).get("id")
    shapes = []
    if winner_id is not None:
        verdict = final.get(str(winner_id)) or next((r["verdict"] for r in rows if r["id"] == winner_id), {})
        shapes = (verdict or {}).get("shapes") or []
    if not shapes:  # no archive: the per-shape medians of result.json are all there is
        shapes = [{**s, "candidate_ms": s.get("winner_ms")} for s in result.get("shapes") or []]
    bench = rd.path / "benchmark.json"
    write_json(bench, benchmark_json(rd.run, result, shapes))
    return [report, png, bench]


def write_reports(result: SearchResult) -> list[Path]:
    """Render report.md, speedup.png and benchmark.json of a finished search from its run directory."""
    return render_all(load_run(result.run_dir))
