"""Shape fields are artifact text: a harness (target-repository content) names them and a run
directory that untrusted code wrote carries them, so report.md and the bot's PR body escape them
like every other such text (no mentions, references, autolinks, emphasis or raw HTML)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from kernelsmith.cli import main
from kernelsmith.mdtext import ZWJ

EXAMPLE_RUN = Path(__file__).resolve().parents[1] / "data" / "example_run"
HOSTILE = {"who": "@user", "ref": "GH-1", "issue": "#12", "bold": "**bold**", "link": "https://x.y",
           "html": "<b>", "under": "__b__", "site": "www.x.y", "pipe": "a|b"}
# Live markdown each of those would make on GitHub: what must not survive.
LIVE = [r"(?<![\\\w])@user", r"\bGH-1\b", r"(?<!\\)#12", r"(?<!\\)\*\*bold", r"https://x\.y", "<b>",
        r"(?<!\\)__b", r"\bwww\.x\.y", r"a\|b(?<!\\\|b)"]


def _run(tmp_path: Path, shape: dict) -> Path:
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE_RUN, run)
    result = json.loads((run / "result.json").read_text())
    for row in result["shapes"]:
        row["shape"] = dict(shape, **row["shape"])
    # One shape slower than the base beyond its CI: its fields are listed in a sentence too.
    result["shapes"][0].update(speedup=0.8, ci95=[0.7, 0.9])
    (run / "result.json").write_text(json.dumps(result))
    return run


def _shape_text(md: str) -> str:
    """The lines of the markdown that show shape fields (table rows and the slower-shapes line)."""
    return "\n".join(line for line in md.splitlines() if "tokens=" in line)


def test_report_md_escapes_every_shape_field(tmp_path, capsys):
    run = _run(tmp_path, HOSTILE)
    assert main(["report", str(run)]) == 0
    shown = _shape_text((run / "report.md").read_text())
    assert shown.count("\n") >= 3 and "Slower than the base" in shown
    for pattern in LIVE:
        assert not re.search(pattern, shown), pattern
    # Still readable: the text is there, broken by a zero-width joiner or a backslash only.
    assert f"@{ZWJ}user" in shown and f"GH{ZWJ}-1" in shown and f"#{ZWJ}12" in shown
    assert r"\*\*bold\*\*" in shown and "&lt;b&gt;" in shown and r"a\|b" in shown
    # Each row keeps the table's columns: an escaped `|` opens no new cell.
    row = next(line for line in shown.splitlines() if line.startswith("| "))
    assert len(re.findall(r"(?<!\\)\|", row)) == 7


def test_a_hostile_shape_key_is_escaped_too(tmp_path):
    run = _run(tmp_path, {"@user": 1, "GH-1": 2})
    assert main(["report", str(run)]) == 0
    shown = _shape_text((run / "report.md").read_text())
    assert f"@{ZWJ}user=1" in shown and f"GH{ZWJ}-1=2" in shown


@pytest.mark.skipif(importlib.util.find_spec("github") is None, reason="the bot needs PyGithub")
def test_the_pr_body_escapes_the_shape_fields_publishing_accepts(tmp_path):
    from bot.artifact import UnsafeArtifact, load_evidence
    from bot.prbody import render_body

    # Publishing accepts only plain names as shape values; of the hostile ones, these pass it.
    passing = {k: HOSTILE[k] for k in ("ref", "under", "site")}
    ev = load_evidence(_run(tmp_path / "a", passing))
    body = render_body(repo="kernelsmith/demo", base="main", file="miniserve/kernels/rms_norm.py",
                       target="demo", op="rms_norm", ev=ev, diff="--- a\n+++ b\n")
    shown = _shape_text(body)
    assert shown.count("\n") >= 3 and "Slower than the base" in shown
    for pattern in LIVE:
        assert not re.search(pattern, shown), pattern
    assert f"GH{ZWJ}-1" in shown and r"\_\_b\_\_" in shown and f"www{ZWJ}.x.y" in shown
    # The rest never reach the body: the run is refused, naming the field, not echoing the value.
    for key in ("who", "issue", "bold", "link", "html", "pipe"):
        with pytest.raises(UnsafeArtifact, match=rf"shape\.{key} is not an accepted name") as e:
            load_evidence(_run(tmp_path / key, {key: HOSTILE[key]}))
        assert HOSTILE[key] not in str(e.value)
