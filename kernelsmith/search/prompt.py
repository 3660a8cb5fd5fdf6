"""Prompts for the llm mutator, built from the template files in kernelsmith/search/prompts/.

Every piece of repository or run text (code, feedback, error output) is fenced as data with a
marker derived from its own hash, so the text cannot close its own fence; the system prompt tells
the model that fenced text is data, never instructions. The export command reuses
`build_messages`, so training prompts are exactly what the mutator sends.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from string import Template

from kernelsmith.referee.verdict import subset_geomean
from kernelsmith.search.edits import unified_diff

PROMPTS = Path(__file__).parent / "prompts"


@cache
def template(name: str) -> Template:
    """A prompt template file (`$name` placeholders) from kernelsmith/search/prompts/."""
    return Template((PROMPTS / f"{name}.txt").read_text())


def fence(text: str, label: str) -> str:
    """Fence `text` as data; the id comes from its hash, so the text cannot forge the end line."""
    body = (text or "").rstrip("\n")
    tag = hashlib.sha256(f"{label}\0{body}".encode()).hexdigest()[:12]
    return f"<<<DATA id={tag} {label}>>>\n{body}\n<<<END DATA id={tag}>>>"


def status_line(row: dict) -> str:
    """A candidate's outcome in words: accepted with its speedup, or the rejection reason."""
    verdict = row.get("verdict") or {}
    if row.get("status") == "pending" or not verdict:
        return "not evaluated yet"
    if verdict.get("accepted"):
        sub = subset_geomean(verdict)
        if sub is not None:
            return (f"accepted, screened on representative shapes only ({sub:.3f}x there): "
                    "not faster than the best, no all-shape geomean")
        g = verdict.get("geomean_speedup")
        return f"accepted, geomean speedup {g:.3f}x over the base" if g else "accepted (no timing)"
    return f"rejected: {verdict.get('reason') or 'rejected'}"


def _shapes_text(task) -> str:
    shapes = task.harness.shapes if task.harness is not None else []
    return "\n".join(f"- {json.dumps(s, sort_keys=True)}" for s in shapes) or "- (none listed)"


def _reference_section(task) -> str:
    src = task.harness.reference_source if task.harness is not None else None
    if not src:
        return ""
    return "The harness's reference (the truth for correctness):\n" + fence(src, "reference.py") + "\n"


def _label(row: dict) -> str:
    return "base" if row.get("mutator") == "base" else f"#{row.get('id')}"


def build_messages(
    task,
    parent_row: dict,
    inspirations: list[dict],
    feedback: str | None,
    *,
    device_hint: str = "an NVIDIA GPU",
) -> list[dict]:
    """System and user messages asking for one improvement of `parent_row`'s code."""
    op = task.operator
    parent_code = parent_row.get("code") or task.base_code
    insp_parts = []
    for row in inspirations:
        code = row.get("code")
        if not code:
            continue
        diff = unified_diff(parent_code, code, op.file)
        # A diff against the parent is shorter and shows exactly what the other candidate did.
        use_diff = diff and len(diff) < len(code)
        insp_parts.append(
            template("inspiration")
            .substitute(
                label=_label(row),
                kind="diff against the current file" if use_diff else "whole file",
                status=status_line(row),
                code=fence(
                    diff if use_diff else code, f"candidate-{row.get('id')}{'.diff' if use_diff else '.py'}"
                ),
            )
            .rstrip()
        )
    inspirations_section = ""
    if insp_parts:
        inspirations_section = (
            "\n# Other candidates (for ideas; the best first, then different ones)\n"
            + "\n\n".join(insp_parts)
            + "\n"
        )
    fb = feedback if feedback is not None else parent_row.get("feedback")
    user = template("user").substitute(
        op=op.name,
        repo=task.target.repo,
        file=op.file,
        entry=op.entry,
        shapes=_shapes_text(task),
        reference_section=_reference_section(task),
        parent_label=_label(parent_row),
        parent_status=f"Status: {status_line(parent_row)}.",
        parent_code=fence(parent_code, op.file),
        feedback=fence(fb or "(no feedback yet)", "referee-feedback"),
        inspirations_section=inspirations_section,
        device_hint=device_hint,
    )
    return [
        {"role": "system", "content": template("system").template.strip()},
        {"role": "user", "content": user.strip()},
    ]


def retry_message(problem: str) -> dict:
    """The follow-up user message after an unusable answer."""
    text = template("retry").substitute(problem=fence(problem, "problem"))
    return {"role": "user", "content": text.strip()}


def render_prompt(messages: list[dict]) -> str:
    """Messages as one text (the archive's `prompt` column)."""
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)
