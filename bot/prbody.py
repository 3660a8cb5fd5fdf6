"""The PR body, rendered by publishing from validated numbers (bot/artifact.py), and its marker.

Nothing of the run's report.md is pasted: a rewrite winner's one-sentence explanation is rendered
here from its validated fields. Text that reaches the body from outside the bot's own code is
escaped: `safe_text` (no raw HTML, no pinging @mentions, no #123 / GH-123 references, no
markers) or a code block whose fence is longer than any backtick run inside it. The bot's marker
is the last line of the body and `read_marker` reads that line only, so a marker-like line inside
a diff or pasted anywhere else is never taken for it.
"""

from __future__ import annotations

import json
import re

from kernelsmith.mdtext import safe_text
from kernelsmith.report import NO_TIMING, mermaid, shape_table, slower_shapes
from kernelsmith.search.mutators.rewrites.explain import sentence

from .artifact import SHA_RE, Evidence

MARKER_PREFIX = "<!-- kernelsmith:pr "
_MARKER_LINE = re.compile(r"<!-- kernelsmith:pr (\{[^\n]*\}) -->\Z")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\Z")


def fence(text: str, info: str = "") -> str:
    """A fenced code block that the content cannot close: the fence outruns every backtick run."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}{info}\n{text.rstrip(chr(10))}\n{bar}"


def code(text: str) -> str:
    """Inline code for trusted names and commands (backticks cannot end it early)."""
    text = " ".join(str(text).split())
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    bar = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{bar}{pad}{text}{pad}{bar}"


def marker(target: str, op: str, source_hash: str | None, base_sha: str) -> str:
    """The hidden line that identifies the operator (and its source) in a bot PR body."""
    data = {"target": target, "op": op, "source_hash": source_hash, "base_sha": base_sha}
    return f"{MARKER_PREFIX}{json.dumps(data, sort_keys=True)} -->"


def with_marker(body: str, mark: str) -> str:
    """The body with the marker as its last line (the one place read_marker looks)."""
    return body.rstrip() + "\n\n" + mark + "\n"


def read_marker(body: str | None) -> dict | None:
    """The data of the bot's marker on the body's last non-empty line, validated, or None."""
    lines = [line.strip() for line in (body or "").replace("\r\n", "\n").split("\n") if line.strip()]
    m = _MARKER_LINE.match(lines[-1]) if lines else None
    if not m:
        return None
    try:
        data = json.loads(m.group(1))
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    out = {"target": data.get("target"), "op": data.get("op"), "source_hash": data.get("source_hash"),
           "base_sha": data.get("base_sha")}
    if not all(isinstance(out[k], str) and NAME_RE.match(out[k]) for k in ("target", "op")):
        return None
    if out["source_hash"] is not None and not (isinstance(out["source_hash"], str)
                                               and _HEX64.match(out["source_hash"])):
        out["source_hash"] = None
    sha = out["base_sha"]
    if sha is not None and not (isinstance(sha, str) and SHA_RE.match(sha)):
        out["base_sha"] = None
    return out


def _n(x, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def _checks(ev: Evidence, test: str | None, benchmark: str | None) -> list[str]:
    lines = [f"- Verify: **{ev.verify_status}** (the upstream test command on the base and on the winner)."]
    if test:
        sides = []
        for side in ("base", "winner"):
            s = ev.verify_sides.get(side) or {}
            sides.append(f"{side} {_n(s.get('passed'), 'd')} passed, {_n(s.get('failed'), 'd')} failed, "
                         f"{_n(s.get('errors'), 'd')} errors")
        lines.append(f"- Upstream tests, {code(test)}: " + "; ".join(sides) + ".")
    if benchmark:
        lines.append(f"- Upstream benchmark, {code(benchmark)}: run on both (output in the run's artifact).")
    return lines


def render_body(*, repo: str, base: str, file: str, target: str, op: str, ev: Evidence, diff: str,
                test: str | None = None, benchmark: str | None = None, max_chars: int = 60000) -> str:
    """The PR body from validated evidence, trusted names and the diff publishing computed itself."""
    n = len(ev.shapes)
    out = [f"## kernelsmith: {code(op)} is {ev.geomean:.2f}x faster (geomean over {n} shapes)", ""]
    if not ev.timed:
        out += [f"**{NO_TIMING}** No speedup is claimed.", ""]
    dev = ev.device
    shown = {k: safe_text(dev.get(k) or "n/a") for k in ("name", "driver", "torch", "triton")}
    out += [f"Repository {code(repo)}, file {code(file)}, base {code(ev.base_sha)} on {code(base)}.",
            f"Device {shown['name']}, driver {shown['driver']}, torch {shown['torch']}, "
            f"triton {shown['triton']}.", ""]
    if ev.shapes:
        out += ["### Per shape", "", shape_table(ev.shapes, ev.timed), ""]
        if ev.timed:
            out += [f"Geomean speedup: **{ev.geomean:.2f}x**. 95% CIs are bootstrapped over interleaved "
                    "base/winner pairs; % roofline is the winner against the measured copy bandwidth.", ""]
            slower = slower_shapes(ev.shapes)
            if slower:
                out += [f"**Slower than the base on {len(slower)} shape(s):** " + "; ".join(slower)
                        + ". The geomean hides this; weigh it before merging.", ""]
            chart = mermaid(ev.shapes, [])
            if chart:
                out += ["### Chart", "", chart, ""]
    out += ["### Checks", "", *_checks(ev, test, benchmark), ""]
    c = ev.counts
    search = [f"- proposals: {_n(c.get('proposals'), 'd')}, evaluations: {_n(c.get('evaluations'), 'd')}, "
              f"accepted: {_n(c.get('accepted'), 'd')}"]
    if c.get("wall_s") is not None:
        search.append(f"- wall time: {c['wall_s'] / 60:.1f} min")
    if ev.rejected:
        search.append("- rejected: " + ", ".join(f"{k} {v}" for k, v in ev.rejected.items()))
    if ev.winner and ev.winner.get("id") is not None:
        search.append(f"- winner: candidate {ev.winner['id']} (parent {_n(ev.winner.get('parent'), 'd')})")
    out += ["### Search", "", *search, ""]
    out += ["### Reproduce", "",
            fence(f"kernelsmith optimize {target} {op}\nkernelsmith evaluate {target} {op} "
                  f"--candidate RUN_DIR/winner/{file.rsplit('/', 1)[-1]}", "sh"), ""]
    # A structural rewrite says what it changed, in the sentence the bot renders from the validated
    # fields (transform, kernel, axis, knobs): never the run's own `explain` text.
    for r in ev.rewrites:
        said = sentence(r["transform"], r["kernel"], r["axis"], r["knobs"], name=code)
        out += [f"**What changed:** {said}", ""]
    tail = ["<details><summary>The change (base → winner)</summary>",
            "", fence(diff, "diff"), "", "</details>", ""]
    body = "\n".join(out) + "\n"
    if len(body) + sum(len(x) + 1 for x in tail) <= max_chars:
        return body + "\n".join(tail)
    return body + "The diff is too long for the description; it is the commit on this branch.\n"

