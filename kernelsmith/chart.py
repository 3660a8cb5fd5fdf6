"""speedup.png: per-shape speedup bars of the winner (with 95% CIs) and best-so-far over evaluations."""

from __future__ import annotations

from pathlib import Path

from kernelsmith.search.candidate import Candidate


def progress_series(rows) -> tuple[list[int], list[float | None], list[float | None]]:
    """(evaluation index, candidate geomean or None, best full-measured geomean so far) per
    evaluation, over archive rows (Candidates, or their columns as dicts)."""
    xs, ys, best_so_far = [], [], []
    best = None
    n = 0
    for c in map(Candidate.of, rows):
        if not c.referee_ran:
            continue
        n += 1
        g = c.speedup if c.accepted else None
        trusted = c.trusted_speedup
        if trusted is not None:
            best = trusted if best is None else max(best, trusted)
        xs.append(n)
        ys.append(g)
        best_so_far.append(best)
    return xs, ys, best_so_far


def render_chart(path: Path, result: dict, rows: list[dict]) -> Path:
    """Draw speedup.png; says so in the picture when no timing was done."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    title = f"{result.get('op')} ({result.get('repo')})"
    shapes = [s for s in result.get("shapes") or [] if s.get("speedup") is not None]
    if shapes:
        labels = ["\n".join(f"{k}={v}" for k, v in s["shape"].items()) for s in shapes]
        vals = [s["speedup"] for s in shapes]
        err = [
            [max(0.0, v - (s.get("ci95") or [v, v])[0]) for v, s in zip(vals, shapes, strict=True)],
            [max(0.0, (s.get("ci95") or [v, v])[1] - v) for v, s in zip(vals, shapes, strict=True)],
        ]
        colors = ["tab:green" if v >= 1 else "tab:red" for v in vals]
        ax1.bar(range(len(vals)), vals, yerr=err, capsize=4, color=colors)
        ax1.set_xticks(range(len(vals)), labels, fontsize=7)
        ax1.axhline(1.0, color="black", linewidth=0.8)
        ax1.set_ylabel("speedup over base (x)")
        ax1.set_title(f"winner per shape, geomean {result.get('geomean_speedup') or 0:.2f}x")
    else:
        msg = (
            "no timing was done\n(correctness and integrity only)" if not result.get("timed") else "no winner"
        )
        ax1.text(0.5, 0.5, msg, ha="center", va="center", fontsize=12)
        ax1.set_axis_off()
    xs, ys, best = progress_series(rows)
    if result.get("timed") and xs:
        ax2.scatter(
            [x for x, y in zip(xs, ys, strict=True) if y is not None],
            [y for y in ys if y is not None],
            s=12,
            color="tab:gray",
            label="accepted candidate (geomean)",
        )
        ax2.step(
            xs,
            [b if b is not None else 1.0 for b in best],
            where="post",
            color="tab:blue",
            label="best so far (full measurement)",
        )
        ax2.axhline(1.0, color="black", linewidth=0.8)
        ax2.set_ylabel("geomean speedup (x)")
        ax2.legend(fontsize=8, loc="lower right")
    else:
        counts, k = [], 0
        for c in map(Candidate.of, rows):
            if c.referee_ran:
                k += int(c.accepted)
                counts.append(k)
        if counts:
            ax2.step(range(1, len(counts) + 1), counts, where="post", label="accepted candidates")
            ax2.legend(fontsize=8, loc="upper left")
        ax2.set_ylabel("accepted so far")
    ax2.set_xlabel("evaluation")
    ax2.set_title("search progress")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
