"""The SQLite archive: rows, verdicts, duplicates by code hash, counts, resume state."""

from __future__ import annotations

import sqlite3

from kernelsmith.search.archive import Archive, NewRow, code_hash, rejected_counts

COLUMNS = {
    "id",
    "parent_id",
    "island",
    "generation",
    "mutator",
    "code",
    "diff",
    "inspiration_ids",
    "prompt",
    "response",
    "verdict",
    "feedback",
    "status",
    "speedup",
    "accepted",
    "code_hash",
    "created_at",
    "evaluated_at",
}


def test_schema_and_rows(tmp_path):
    path = tmp_path / "archive.sqlite"
    with Archive(path) as a:
        base = a.add(NewRow("x = 1\n", mutator="base"))
        a.set_verdict(
            base,
            {
                "accepted": True,
                "geomean_speedup": 1.0,
                "reason": None,
                "timed": True,
                "timing": {"aa_ratio": 1.001},
            },
            "ok",
        )
        c = a.add(NewRow(
            "x = 2\n",
            mutator="params",
            parent_id=base,
            island=1,
            generation=1,
            inspiration_ids=[base],
            prompt="p",
            response="r",
            params={"values": {"B": 2}},
        ))
        assert a.get(c)["status"] == "pending" and [r["id"] for r in a.pending()] == [c]
        a.set_verdict(c, {"accepted": False, "reason": "incorrect", "geomean_speedup": None}, "bad")
        m = a.add(NewRow(
            None,
            mutator="llm",
            parent_id=base,
            status="evaluated",
            response="junk",
            verdict={"accepted": False, "reason": "malformed_proposal"},
        ))
        row = a.get(c)
        assert row["inspiration_ids"] == [base] and row["params"] == {"values": {"B": 2}}
        assert a.get(base)["timing"] == "full" and a.get(base)["speedup"] == 1.0
        assert a.proposals() == 2 and a.evaluations() == 1 and a.get(m)["code"] is None
        assert rejected_counts(a.all()) == {"incorrect": 1, "malformed_proposal": 1}
        a.set_meta("since_best", 3)
        a.add_migration(3, c, 0)
        assert a.get_meta("since_best") == 3 and a.migrations() == [(3, c, 0)]
    cols = {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(candidates)")}
    assert COLUMNS <= cols


def test_duplicates_found_by_normalised_hash(tmp_path):
    with Archive(tmp_path / "a.sqlite") as a:
        first = a.add(NewRow("def f():\n    return 1\n", mutator="base"))
        assert a.find_code("def f():\n    return 1   \n\n")["id"] == first
        assert a.find_code("def f():\n    return 2\n") is None
        assert a.known_hashes() == {code_hash("def f():\n    return 1\n")}


def test_screened_contender_stays_pending_for_its_full_measurement(tmp_path):
    with Archive(tmp_path / "a.sqlite") as a:
        c = a.add(NewRow("y = 1\n", mutator="params"))
        a.set_verdict(
            c,
            {"accepted": True, "geomean_speedup": 1.3, "timed": True},
            "fb",
            timing="screen",
            awaiting_full=True,
        )
        assert [r["id"] for r in a.pending()] == [c] and a.get(c)["status"] == "evaluated"
        a.set_verdict(c, {"accepted": True, "geomean_speedup": 1.25, "timed": True}, "fb", timing="full")
        assert a.pending() == [] and a.get(c)["speedup"] == 1.25


def test_a_row_read_again_unchanged_is_not_decoded_again_and_a_change_is_seen(tmp_path):
    """The loop reads every row each generation: an unchanged row comes back as the Candidate
    decoded before; a verdict stored or a generation moved (by any thread, on this archive or
    another connection to the same file) is read as it now is."""
    with Archive(tmp_path / "archive.sqlite") as a:
        base = a.add(NewRow("x = 1\n", mutator="base"))
        c = a.add(NewRow("x = 2\n", mutator="params", parent_id=base, generation=1,
                         params={"values": {"B": 2}}))
        first = a.all()
        assert a.all()[1] is first[1] and a.get(c) is first[1]
        a.set_verdict(c, {"accepted": True, "geomean_speedup": 1.5, "timed": True}, "ok")
        after = a.get(c)
        assert after is not first[1] and after.status == "evaluated" and after.speedup == 1.5
        assert first[1].status == "pending"  # what was handed out earlier is not changed under it
        a.move_generation([c], 4)
        assert a.all()[1].generation == 4
        with sqlite3.connect(tmp_path / "archive.sqlite") as other:  # another writer of the file
            other.execute("UPDATE candidates SET feedback='elsewhere' WHERE id=?", (c,))
        assert a.get(c)["feedback"] == "elsewhere"
