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


def test_speedup_capped_at_the_roofline_is_marked(tmp_path):
    import json

    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    result = json.loads((run / "result.json").read_text())
    result["shapes"][0]["pct_roofline"] = 101.2
    (run / "result.json").write_text(json.dumps(result))
    assert main(["report", str(run)]) == 0
    rows = [line for line in (run / "report.md").read_text().splitlines() if line.startswith("| ")]
    assert sum("x† |" in line for line in rows) == 1
    assert "the speedup is capped there" in (run / "report.md").read_text()


def test_a_shape_slower_than_the_base_is_called_out(tmp_path):
    import json

    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    result = json.loads((run / "result.json").read_text())
    result["shapes"][0].update(speedup=0.90, ci95=[0.89, 0.91])
    result["shapes"][1].update(speedup=0.99, ci95=[0.97, 1.01])  # within noise: not called out
    (run / "result.json").write_text(json.dumps(result))
    assert main(["report", str(run)]) == 0
    lines = [x for x in (run / "report.md").read_text().splitlines() if x.startswith("**Slower")]
    assert len(lines) == 1 and "1 shape(s)" in lines[0] and "0.90x [0.89–0.91]" in lines[0]


def test_a_shape_whose_ci_holds_an_aa_bias_is_marked_and_a_hostile_value_is_not_rendered(tmp_path):
    import json

    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    result = json.loads((run / "result.json").read_text())
    result["shapes"][0]["aa_bias"] = 1.0145
    result["shapes"][1]["aa_bias"] = "1.5; see https://evil.example"  # result.json is read back from disk
    (run / "result.json").write_text(json.dumps(result))
    assert main(["report", str(run)]) == 0
    text = (run / "report.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert sum("x‡ |" in line for line in rows) == 1
    assert "strayed here by up to 1.4%" in text and "evil.example" not in text
