"""The archive: every candidate of a run in one SQLite file (`archive.sqlite` in the run dir).

One row per proposal (table `candidates`), plus the base itself as the first row (mutator
"base", not counted as a proposal). Rows are written before evaluation (status "pending") and
updated with the verdict after it, so a run killed mid-evaluation finds its one pending row on
`--resume` and completed evaluations are never repeated. Writes commit immediately (autocommit),
except inside `transaction()`: a generation's rows and its `made` mark, or a tally, commit together
or not at all (SQLite's journal makes each commit atomic under kill -9), so a resume never finds a
generation half recorded. A SQLite failure (a damaged file, a full disk) is an ArchiveError naming
the file; `Archive(path, read_only=True)` (report, export) never creates or alters the file.

Columns (docs/design.md): id, parent_id, island, generation, mutator, code, diff, inspiration_ids
(JSON list), prompt, response, verdict (JSON), feedback, status ("pending" | "evaluated" |
"duplicate"), speedup (geomean or NULL), accepted (0/1), code_hash, created_at, evaluated_at.
Extra columns: params (JSON: the params mutator's configuration), timing ("none" | "screen" |
"full": depth of the stored verdict), awaiting_full (1 while a screened contender still needs its
full measurement: set by runs before the staged referee call, which the evaluator still honours on
resume), duplicate_of, reason (first rejection name), eval_s. Rows come back as Candidates
(search/candidate.py), decoded once here.
`code` is NULL for a malformed proposal (the model's answer is in `response`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from kernelsmith import faultpoint
from kernelsmith.errors import ConfigError
from kernelsmith.search.candidate import Candidate

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY,
    parent_id INTEGER,
    island INTEGER NOT NULL DEFAULT 0,
    generation INTEGER NOT NULL DEFAULT 0,
    mutator TEXT NOT NULL,
    code TEXT,
    diff TEXT,
    inspiration_ids TEXT NOT NULL DEFAULT '[]',
    prompt TEXT,
    response TEXT,
    verdict TEXT,
    feedback TEXT,
    status TEXT NOT NULL DEFAULT 'pending',
    speedup REAL,
    accepted INTEGER NOT NULL DEFAULT 0,
    code_hash TEXT,
    created_at TEXT NOT NULL,
    evaluated_at TEXT,
    params TEXT,
    timing TEXT,
    awaiting_full INTEGER NOT NULL DEFAULT 0,
    duplicate_of INTEGER,
    reason TEXT,
    eval_s REAL
);
CREATE INDEX IF NOT EXISTS candidates_hash ON candidates(code_hash);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS migrations (
    generation INTEGER NOT NULL,
    candidate_id INTEGER NOT NULL,
    to_island INTEGER NOT NULL,
    PRIMARY KEY (generation, candidate_id, to_island)
);
"""

_JSON_COLUMNS = ("inspiration_ids", "verdict", "params")


def code_hash(code: str | None) -> str | None:
    """sha256 of the code with trailing whitespace per line ignored (so re-indented tails match)."""
    if code is None:
        return None
    norm = "\n".join(line.rstrip() for line in code.strip("\n").splitlines())
    return hashlib.sha256(norm.encode()).hexdigest()


def now_iso() -> str:
    """The current UTC time, ISO 8601."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class _Result:
    """A statement's rows, read completely while the lock was held."""

    def __init__(self, rows: list, lastrowid: int | None):
        self._rows, self.lastrowid = rows, lastrowid

    def fetchone(self):
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list:
        return list(self._rows)

    def __iter__(self):
        return iter(self._rows)


class ArchiveError(ConfigError):
    """archive.sqlite could not be read or written (damaged, truncated, not an archive, disk full)."""

    def __init__(self, path: Path, error: Exception):
        text = str(error)
        if "full" in text:
            todo = "free disk space, then continue the run with --resume"
        elif "readonly" in text or "unable to open" in text:
            todo = "make the run directory writable, then continue the run with --resume"
        else:
            todo = "the file is damaged: keep it for inspection and start a new run with another --out"
        super().__init__(path, f"{text}; {todo}")


class _LockedConnection:
    """A sqlite3 connection whose statements run one at a time, whichever thread calls; SQLite
    failures become ArchiveErrors naming the file."""

    def __init__(self, conn: sqlite3.Connection, path: Path):
        self._conn = conn
        self._path = path
        self._lock = threading.RLock()

    def execute(self, sql: str, args: tuple = ()) -> _Result:
        with self._lock:
            try:
                cur = self._conn.execute(sql, args)
                return _Result(cur.fetchall(), cur.lastrowid)
            except sqlite3.DatabaseError as e:
                raise ArchiveError(self._path, e) from None

    def executescript(self, script: str) -> None:
        with self._lock:
            try:
                self._conn.executescript(script)
            except sqlite3.DatabaseError as e:
                raise ArchiveError(self._path, e) from None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """The block's statements commit together, or none does; other threads wait for it (they
        share this connection, so a statement of theirs would otherwise join the transaction)."""
        with self._lock:
            if self._conn.in_transaction:  # nested: the outer block commits
                yield
                return
            self.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.rollback()
                raise
            self.execute("COMMIT")
            faultpoint.hit("commit")

    def close(self) -> None:
        with self._lock:
            self._conn.close()


@dataclass(frozen=True)
class NewRow:
    """A candidate as `Archive.add` stores it: pending, or with the verdict it was rejected with at
    once (a malformed proposal, a duplicate)."""

    code: str | None  # None: a malformed proposal (the model's answer is in `response`)
    mutator: str
    parent_id: int | None = None
    island: int = 0
    generation: int = 0
    diff: str | None = None
    inspiration_ids: list[int] | None = None
    prompt: str | None = None
    response: str | None = None
    params: dict | None = None  # the params mutator's configuration
    status: str = "pending"  # or "evaluated", "duplicate"
    verdict: dict | None = None  # Verdict.to_json()
    feedback: str | None = None
    duplicate_of: int | None = None


class Archive:
    """A run's candidates in SQLite; rows come back decoded once, as Candidates (search/candidate.py)."""

    def __init__(self, path: str | Path, *, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        # id -> (the raw row, its Candidate): a row read again unchanged is not decoded again (the
        # loop reads every row each generation; their JSON verdicts were most of its reading time).
        self._decoded: dict[int, tuple[tuple, Candidate]] = {}
        if read_only:
            self._db = _LockedConnection(_connect_read_only(self.path), self.path)
            self.count()  # a file that is no archive (empty, damaged) says so here, in one line
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection, autocommit (isolation_level None), shared by the loop (proposing) and the
        # evaluator's threads (storing verdicts) behind one lock.
        try:
            conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False, timeout=30)
        except sqlite3.DatabaseError as e:
            raise ArchiveError(self.path, e) from None
        conn.row_factory = sqlite3.Row
        self._db = _LockedConnection(conn, self.path)
        self._db.executescript(_SCHEMA)
        if self.get_meta("schema_version") is None:
            self.set_meta("schema_version", SCHEMA_VERSION)

    def transaction(self):
        """A block whose writes commit together or not at all (see the module docstring)."""
        return self._db.transaction()

    def close(self) -> None:
        """Close the database."""
        self._db.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- rows --------------------------------------------------------------------------------
    def _decode(self, row: sqlite3.Row) -> Candidate:
        """The row as a Candidate: the one decoded before when the raw row is the same."""
        raw = tuple(row)
        have = self._decoded.get(row["id"])
        if have is not None and have[0] == raw:
            return have[1]
        c = _decode(row)
        self._decoded[row["id"]] = (raw, c)
        return c

    def add(self, row: NewRow) -> int:
        """Insert one candidate and return its id (status "pending" unless given a verdict)."""
        verdict = row.verdict
        cur = self._db.execute(
            "INSERT INTO candidates (parent_id, island, generation, mutator, code, diff, inspiration_ids,"
            " prompt, response, verdict, feedback, status, speedup, accepted, code_hash, created_at,"
            " evaluated_at, params, duplicate_of, reason, timing)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                row.parent_id,
                row.island,
                row.generation,
                row.mutator,
                row.code,
                row.diff,
                json.dumps(row.inspiration_ids or []),
                row.prompt,
                row.response,
                json.dumps(verdict) if verdict is not None else None,
                row.feedback,
                row.status,
                verdict.get("geomean_speedup") if verdict else None,
                int(bool(verdict and verdict.get("accepted"))),
                code_hash(row.code),
                now_iso(),
                now_iso() if verdict is not None else None,
                json.dumps(row.params) if row.params is not None else None,
                row.duplicate_of,
                verdict.get("reason") if verdict else None,
                "none" if verdict is not None else None,
            ),
        )
        faultpoint.hit("add")
        return int(cur.lastrowid)

    def set_verdict(
        self,
        cid: int,
        verdict_json: dict,
        feedback: str | None,
        *,
        timing: str | None = None,
        awaiting_full: bool = False,
    ) -> None:
        """Store a verdict (dict as Verdict.to_json gives it): status becomes "evaluated"."""
        self._db.execute(
            "UPDATE candidates SET verdict=?, feedback=?, status='evaluated', speedup=?, accepted=?,"
            " reason=?, evaluated_at=?, timing=?, awaiting_full=?,"
            # A screened contender's full measurement adds to its time (eval_s is all referee time).
            " eval_s=CASE WHEN awaiting_full=1 THEN COALESCE(eval_s, 0) + ? ELSE ? END WHERE id=?",
            (
                json.dumps(verdict_json),
                feedback,
                verdict_json.get("geomean_speedup"),
                int(bool(verdict_json.get("accepted"))),
                verdict_json.get("reason"),
                now_iso(),
                timing or _timing_of(verdict_json),
                int(awaiting_full),
                verdict_json.get("eval_s") or 0.0,
                verdict_json.get("eval_s"),
                cid,
            ),
        )
        faultpoint.hit("verdict")

    def get(self, cid: int) -> Candidate | None:
        """One candidate (verdict, inspiration_ids and params decoded), or None."""
        row = self._db.execute("SELECT * FROM candidates WHERE id=?", (cid,)).fetchone()
        return self._decode(row) if row is not None else None

    def all(self) -> list[Candidate]:
        """Every row, in id order."""
        return [self._decode(r) for r in self._db.execute("SELECT * FROM candidates ORDER BY id")]

    def where(self, clause: str, args: tuple = ()) -> list[Candidate]:
        """Rows matching an SQL condition (written by this package, never by users), in id order."""
        q = f"SELECT * FROM candidates WHERE {clause} ORDER BY id"
        return [self._decode(r) for r in self._db.execute(q, args)]

    def base(self) -> Candidate | None:
        """The base's own row (mutator "base"), if recorded."""
        rows = self.where("mutator='base'")
        return rows[0] if rows else None

    def find_code(self, code: str) -> Candidate | None:
        """The earliest row holding this code (trailing whitespace ignored), or None."""
        h = code_hash(code)
        row = self._db.execute(
            "SELECT * FROM candidates WHERE code_hash=? AND status!='duplicate' ORDER BY id LIMIT 1", (h,)
        ).fetchone()
        return self._decode(row) if row is not None else None

    def known_hashes(self) -> set[str]:
        """Hashes of every code recorded so far."""
        q = "SELECT code_hash FROM candidates WHERE code_hash IS NOT NULL"
        return {r[0] for r in self._db.execute(q)}

    def pending(self) -> list[Candidate]:
        """Rows still to evaluate (pending, or screened contenders awaiting the full measurement)."""
        return self.where("status='pending' OR awaiting_full=1")

    def count(self, clause: str = "1", args: tuple = ()) -> int:
        """Number of rows matching an SQL condition."""
        return int(self._db.execute(f"SELECT COUNT(*) FROM candidates WHERE {clause}", args).fetchone()[0])

    def proposals(self) -> int:
        """Everything proposed (every row except the base)."""
        return self.count("mutator!='base'")

    def evaluations(self) -> int:
        """Candidates the referee ran (the base's own evaluation and malformed proposals not counted)."""
        return self.count(
            "status='evaluated' AND mutator!='base' AND (reason IS NULL OR reason!='malformed_proposal')"
        )

    def max_generation(self) -> int:
        """The highest generation recorded (0 when empty)."""
        v = self._db.execute("SELECT MAX(generation) FROM candidates").fetchone()[0]
        return int(v or 0)

    # -- migrations and run state ------------------------------------------------------------
    def move_generation(self, ids: list[int], generation: int) -> None:
        """Move candidates to a later generation (a build that held the window; loop.py),
        and keep the move in meta `moved` [{id, from, to}]."""
        with self.transaction():  # the rows and the record of their move, together
            moved = self.get_meta("moved", []) or []
            for cid in ids:
                row = self.get(cid)
                if row is None or row.generation >= generation:
                    continue
                self._db.execute("UPDATE candidates SET generation=? WHERE id=?", (generation, cid))
                moved.append({"id": cid, "from": row.generation, "to": generation})
            self.set_meta("moved", moved)

    def add_migration(self, generation: int, candidate_id: int, to_island: int) -> None:
        """Record that a candidate joined another island at a generation."""
        self._db.execute(
            "INSERT OR IGNORE INTO migrations VALUES (?,?,?)", (generation, candidate_id, to_island)
        )

    def migrations(self) -> list[tuple[int, int, int]]:
        """(generation, candidate_id, to_island) for every migration, in order."""
        return [
            tuple(r)
            for r in self._db.execute(
                "SELECT generation, candidate_id, to_island FROM migrations ORDER BY generation, candidate_id"
            )
        ]

    def get_meta(self, key: str, default=None):
        """A JSON value from the meta table."""
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row is not None else default

    def set_meta(self, key: str, value) -> None:
        """Store a JSON value in the meta table."""
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))
        faultpoint.hit(f"meta:{key}")


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """A connection that can neither create nor change the file (SQLite's mode=ro)."""
    if not path.is_file():
        raise ConfigError(path, "not found: the run directory holds no archive")
    try:
        uri = f"file:{quote(str(path))}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
    except sqlite3.DatabaseError as e:
        raise ArchiveError(path, e) from None
    conn.row_factory = sqlite3.Row
    return conn


def check_resumable(path: Path) -> None:
    """Refuse (ConfigError naming the file) to resume from an archive that is missing, empty or
    damaged: a resume never starts over in place of what was lost. (One this tool made that holds no
    row yet, a disk filled before the base was stored, resumes: nothing was recorded.)"""
    if not path.is_file():
        raise ConfigError(path, "not found: this run cannot be resumed (its candidates are gone); "
                          "start a new run with another --out")
    if path.stat().st_size == 0:
        raise ConfigError(path, "is empty: this run cannot be resumed (its candidates are gone); "
                          "keep the file for inspection and start a new run with another --out")
    with Archive(path, read_only=True) as archive:
        bad = archive._db.execute("PRAGMA quick_check").fetchone()[0]
        if bad != "ok":
            raise ArchiveError(path, sqlite3.DatabaseError(f"integrity check failed ({bad})"))


def _timing_of(verdict: dict) -> str:
    from kernelsmith.referee.verdict import fully_measured

    if not verdict.get("timed"):
        return "none"
    return "full" if fully_measured(verdict) else "screen"


def _decode(row: sqlite3.Row) -> Candidate:
    d = dict(row)
    for col in _JSON_COLUMNS:
        if d.get(col) is not None:
            d[col] = json.loads(d[col])
    return Candidate.from_row(d)


def rejected_counts(rows: list[dict]) -> dict[str, int]:
    """{reason: count} over rejected proposals (duplicates and malformed ones included)."""
    counts: dict[str, int] = {}
    for r in rows:
        if r["mutator"] == "base" or r["status"] == "pending" or r["accepted"]:
            continue
        reason = r.get("reason") or "rejected"
        counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items()))
