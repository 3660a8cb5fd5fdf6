"""`kernelsmith report` re-renders a run directory without losing verify's evidence."""

import shutil
from pathlib import Path

from kernelsmith.cli import main

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example_run"


def test_rerender_keeps_the_upstream_tests_section(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    (run / "report.md").write_text("stale\n")
    assert main(["report", str(run)]) == 0
    text = (run / "report.md").read_text()
    assert "stale" not in text and "<!-- kernelsmith:op=" in text
    assert text.count("## Upstream tests") == 1 and "**pass**" in text
    assert main(["report", str(run)]) == 0  # idempotent
    assert (run / "report.md").read_text() == text
