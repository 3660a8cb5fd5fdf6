"""docs/results.md's table and docs/results.csv hold the same rows, and every row says where it was
measured (an H100 or H200, by name), at which commit, and the command that produced it."""

from __future__ import annotations

import csv
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CSV_COLUMNS = ["operator", "repository", "speedup", "ci95", "roofline_pct", "device", "commit", "command"]
MD_COLUMNS = ["operator", "repository", "speedup", "95% CI", "% of roofline", "device", "commit", "command"]
NUMBER = r"\d+\.\d+"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _md_table() -> list[list[str]]:
    """The page's one table, header and separator left out, the command's backticks removed."""
    lines = (DOCS / "results.md").read_text(encoding="utf-8").splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith("|")]
    assert at == list(range(at[0], at[-1] + 1)), "results.md holds one table, its rows together"
    assert _cells(lines[at[0]]) == MD_COLUMNS
    assert set(lines[at[1]]) <= set("|-: "), "the second line is the separator"
    rows = [_cells(lines[i]) for i in at[2:]]
    for row in rows:
        assert len(row) == len(MD_COLUMNS), row
        assert row[-1].startswith("`") and row[-1].endswith("`"), f"the command as code: {row}"
        row[-1] = row[-1].strip("`")
    return rows


def _csv_rows() -> list[list[str]]:
    with (DOCS / "results.csv").open(encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        assert next(reader) == CSV_COLUMNS
        return [row for row in reader]


def test_the_page_and_the_csv_hold_the_same_rows_in_the_same_order():
    md, table = _md_table(), _csv_rows()
    assert len(md) >= 10
    assert md == table


def test_every_row_names_a_gpu_a_commit_and_the_command_that_produced_it():
    for op, repo, _speedup, _ci, roofline, device, commit, command in _csv_rows():
        assert device in {"H100", "H200"}, (op, device)
        assert re.fullmatch(r"[0-9a-f]{7,40}", commit), (op, commit)
        assert command.startswith(("kernelsmith optimize ", "kernelsmith sweep ")), (op, command)
        assert f" {op.split(' (')[0]} " in f"{command} ", f"the command runs {op}: {command}"
        assert repo and roofline, op


def test_every_speedup_is_a_number_inside_its_own_ci():
    for op, _, speedup, ci, *_ in _csv_rows():
        found = re.search(rf"({NUMBER})x", speedup)
        assert found, (op, speedup)
        if ci == "–":
            continue
        low, high = (float(x) for x in re.fullmatch(rf"({NUMBER})–({NUMBER})", ci).groups())
        assert low <= float(found.group(1)) <= high, (op, speedup, ci)


def test_the_page_links_the_methods_page_and_the_csv():
    text = (DOCS / "results.md").read_text(encoding="utf-8")
    assert "(measuring.md)" in text and (DOCS / "measuring.md").is_file()
    assert "(results.csv)" in text


def _svs_rows() -> list[dict]:
    """docs/search-vs-sweep.md's table as dicts keyed by its header."""
    lines = [line for line in (DOCS / "search-vs-sweep.md").read_text(encoding="utf-8").splitlines()
             if line.startswith("|")]
    header = _cells(lines[0])
    return [dict(zip(header, _cells(line), strict=True)) for line in lines[2:]]


def test_each_search_vs_sweep_row_names_its_gpu_commit_and_a_ratio_that_matches_its_geomeans():
    rows = _svs_rows()
    assert len(rows) >= 4
    for row in rows:
        assert row["device"] in {"H100", "H200"}, row
        assert re.fullmatch(r"[0-9a-f]{7,40}", row["commit"]), row
        sweep = re.match(rf"({NUMBER})x", row["sweep"])
        opt = re.match(rf"({NUMBER})x", row["optimize"])
        if sweep and opt:
            ratio = float(opt.group(1)) / float(sweep.group(1))
            assert abs(float(row["ratio"]) - ratio) < 0.002, row
    assert "(search-vs-sweep.md)" in (DOCS / "results.md").read_text(encoding="utf-8")
