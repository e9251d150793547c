"""Numbered schema migrations, applied with their version in one transaction.

Each entry is (version, why, statements). Opening a store applies, in
version order, every entry above its `user_version` (numbers need not be
consecutive: branches reserve theirs). A store whose `user_version` is newer
than the highest entry is refused: a downgrade must never guess.
"""

from __future__ import annotations

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        # Everything the supervisor needs exists from the start (watermark,
        # candidate, flags, ledger, runs, attempts, requests), so later work
        # adds logic, not half-designed tables.
        "initial schema",
        [
            """
            CREATE TABLE schedules (
                id TEXT PRIMARY KEY,
                revision INTEGER NOT NULL CHECK (revision >= 1),
                definition TEXT NOT NULL,
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                paused INTEGER NOT NULL DEFAULT 0,
                deleted_at REAL,
                exhausted INTEGER NOT NULL DEFAULT 0,
                blocked_reason TEXT,
                consumed_through INTEGER NOT NULL,
                candidate_at INTEGER,
                candidate_why TEXT
                    CHECK (candidate_why IN ('misfire', 'capacity', 'queued')),
                next_due INTEGER
            )
            """,
            # The tick reads only schedules that are due or hold a candidate.
            "CREATE INDEX schedules_next_due ON schedules(next_due) WHERE next_due IS NOT NULL",
            "CREATE INDEX schedules_candidate ON schedules(candidate_at)"
            " WHERE candidate_at IS NOT NULL",
            # The watermark is the whole replay guard: refuse to move it back,
            # whatever code path tries.
            """
            CREATE TRIGGER schedules_watermark_monotone
            BEFORE UPDATE OF consumed_through ON schedules
            WHEN NEW.consumed_through < OLD.consumed_through
            BEGIN
                SELECT RAISE(ABORT, 'consumed_through may not move back');
            END
            """,
            """
            CREATE TABLE revisions (
                schedule_id TEXT NOT NULL REFERENCES schedules(id),
                revision INTEGER NOT NULL,
                definition TEXT NOT NULL,
                created_at REAL NOT NULL,
                PRIMARY KEY (schedule_id, revision)
            )
            """,
            """
            CREATE TABLE runs (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                schedule_id TEXT NOT NULL REFERENCES schedules(id),
                kind TEXT NOT NULL CHECK (kind IN ('scheduled', 'manual')),
                scheduled_at INTEGER NOT NULL,
                state TEXT NOT NULL CHECK (state IN
                    ('admitted', 'running', 'interrupted', 'completed', 'failed')),
                reason TEXT,
                exit_code INTEGER,
                revision INTEGER NOT NULL,
                invocation TEXT NOT NULL,
                admitted_at REAL NOT NULL,
                started_at REAL,
                finished_at REAL,
                attempt INTEGER NOT NULL DEFAULT 0
            )
            """,
            "CREATE INDEX runs_schedule ON runs(schedule_id, seq)",
            "CREATE INDEX runs_unfinished ON runs(state, schedule_id)"
            " WHERE state IN ('admitted', 'running', 'interrupted')",
            """
            CREATE TABLE attempts (
                run_seq INTEGER NOT NULL REFERENCES runs(seq),
                attempt INTEGER NOT NULL CHECK (attempt >= 1),
                state TEXT NOT NULL CHECK (state IN
                    ('running', 'interrupted', 'completed', 'failed')),
                started_at REAL,
                finished_at REAL,
                exit_code INTEGER,
                reason TEXT,
                shim_pid INTEGER,
                shim_start_time INTEGER,
                PRIMARY KEY (run_seq, attempt)
            )
            """,
            """
            CREATE TABLE occurrences (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                schedule_id TEXT NOT NULL REFERENCES schedules(id),
                scheduled_at INTEGER NOT NULL,
                last_at INTEGER,
                count INTEGER,
                summary INTEGER NOT NULL DEFAULT 0,
                state TEXT NOT NULL,
                reason TEXT,
                revision INTEGER NOT NULL,
                run_seq INTEGER REFERENCES runs(seq),
                recorded_at REAL NOT NULL
            )
            """,
            # One decision per instant: the database itself refuses a second
            # admission (or any second verdict) of the same occurrence.
            "CREATE UNIQUE INDEX occurrences_instant ON occurrences(schedule_id, scheduled_at)"
            " WHERE summary = 0",
            "CREATE INDEX occurrences_page ON occurrences(schedule_id, scheduled_at, seq)",
            "CREATE UNIQUE INDEX occurrences_run ON occurrences(run_seq) WHERE run_seq IS NOT NULL",
            """
            CREATE TABLE requests (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                kind TEXT NOT NULL CHECK (kind IN ('trigger', 'resume', 'cancel')),
                schedule_id TEXT,
                run_seq INTEGER,
                payload TEXT,
                created_at REAL NOT NULL,
                state TEXT NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'done', 'refused')),
                result TEXT,
                handled_at REAL
            )
            """,
            "CREATE INDEX requests_pending ON requests(seq) WHERE state = 'pending'",
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        ],
    ),
    (
        2,
        # History pages are read in record order, keyed by a position that a
        # later write can never fall behind: a row recorded late for an older
        # instant (a candidate superseded or admitted after newer rows) is
        # appended, never slipped behind a cursor that already passed it.
        "ledger positions: occurrences paged in record order",
        [
            "ALTER TABLE occurrences ADD COLUMN ledger_pos INTEGER",
            # Existing history keeps the order it was shown in (instant, then
            # seq). Per-schedule ranks never exceed the rows ever inserted, so
            # every position here lies below the next row's seq.
            "CREATE TEMP TABLE ledger_rank (seq INTEGER PRIMARY KEY, pos INTEGER NOT NULL)",
            "INSERT INTO temp.ledger_rank SELECT seq, ROW_NUMBER() OVER"
            " (PARTITION BY schedule_id ORDER BY scheduled_at, seq) FROM occurrences",
            "UPDATE occurrences SET ledger_pos ="
            " (SELECT pos FROM temp.ledger_rank r WHERE r.seq = occurrences.seq)",
            "DROP TABLE temp.ledger_rank",
            "CREATE UNIQUE INDEX occurrences_ledger ON occurrences(schedule_id, ledger_pos)",
            # A new row takes its own seq (AUTOINCREMENT: above every seq ever
            # used) as its position, whatever code path inserts it. Only
            # retention places a row explicitly: a `pruned` row stands where
            # the first row it replaces stood.
            """
            CREATE TRIGGER occurrences_ledger_position
            AFTER INSERT ON occurrences WHEN NEW.ledger_pos IS NULL
            BEGIN
                UPDATE occurrences SET ledger_pos = NEW.seq WHERE seq = NEW.seq;
            END
            """,
        ],
    ),
    (
        3,
        # The watermark an edit started the new revision from: the revision
        # owes the calendar instants after it. `audit` cannot rebuild it from
        # the ledger when the clock was rolled back before the edit (the
        # watermark then sits ahead of both the edit's time and the last
        # ledger row). NULL for revisions written before this version.
        "revisions.watermark",
        ["ALTER TABLE revisions ADD COLUMN watermark INTEGER"],
    ),
    (
        4,
        # Operator visibility (issue 8). A failure hook's outcome is recorded,
        # so `runs show` can say whether the alert went out after the log is
        # gone. Preflight rejections are found per schedule through a small
        # partial index, so `list`/`status` can flag them until a run
        # succeeds. `applied` remembers the revision each schedule got from
        # `apply`, so an apply can warn when it replaces a revision made
        # outside the folder (by `edit` or `update`).
        # (Version 2 is another change's; the runner applies every version
        # above the stored one, in order.)
        "failure-hook outcomes, preflight-rejection index, applied revisions",
        [
            """
            CREATE TABLE notifications (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                schedule_id TEXT NOT NULL,
                run_seq INTEGER,
                scheduled_at INTEGER,
                attempt INTEGER NOT NULL,
                state TEXT NOT NULL CHECK (state IN ('running', 'succeeded', 'failed')),
                reason TEXT,
                started_at REAL NOT NULL,
                finished_at REAL
            )
            """,
            "CREATE INDEX notifications_run ON notifications(run_seq, attempt)"
            " WHERE run_seq IS NOT NULL",
            "CREATE INDEX occurrences_rejected ON occurrences(schedule_id, seq)"
            " WHERE state = 'preflight-rejected'",
            """
            CREATE TABLE applied (
                schedule_id TEXT PRIMARY KEY REFERENCES schedules(id),
                revision INTEGER NOT NULL,
                applied_at REAL NOT NULL
            )
            """,
        ],
    ),
    (
        5,
        # Beyond one host (runs and hosts). Each run records the host whose
        # supervisor admitted and executed it (NULL for runs recorded before
        # this version), so an operator elsewhere knows where its run directory
        # and full logs are. Each attempt's exit record keeps the last 64 KiB of
        # its stdout and stderr, taken when the supervisor ingests the exit, so
        # `runs logs` shows output on any host (NULL: not recorded).
        "run hosts, output tails of attempts",
        [
            "ALTER TABLE runs ADD COLUMN host TEXT",
            "ALTER TABLE attempts ADD COLUMN stdout_tail BLOB",
            "ALTER TABLE attempts ADD COLUMN stderr_tail BLOB",
        ],
    ),
    (
        6,
        # High availability on a PostgreSQL store (version 5 is another
        # change's): the leader's lease, with its epoch (the fencing token),
        # and one heartbeat row per host. A SQLite store has one supervisor,
        # fenced by its lock file, and leaves both tables empty; they exist
        # here so both schemas stay the same.
        "leader lease, host heartbeats",
        [
            """
            CREATE TABLE leader_lease (
                id INTEGER PRIMARY KEY CHECK (id = 1),
                epoch INTEGER NOT NULL CHECK (epoch >= 1),
                host TEXT NOT NULL,
                pid INTEGER NOT NULL,
                acquired_at REAL NOT NULL,
                renewed_at REAL NOT NULL,
                expires_at REAL NOT NULL,
                released INTEGER NOT NULL DEFAULT 0
            )
            """,
            """
            CREATE TABLE hosts (
                host TEXT PRIMARY KEY,
                pid INTEGER NOT NULL,
                started_at REAL NOT NULL,
                last_seen REAL NOT NULL,
                clock_offset REAL NOT NULL,
                executing INTEGER NOT NULL DEFAULT 0,
                stopped INTEGER NOT NULL DEFAULT 0
            )
            """,
        ],
    ),
    (
        7,
        # A faster unchanged `apply` (issue 10): each schedule remembers the
        # path and the digest of the file bytes that apply last wrote or found
        # unchanged, so the next apply skips parsing and validating a file
        # whose path and bytes are the same while the schedule still has the
        # revision apply gave it (an `edit` or `update` since then is still
        # detected by revision). NULL: not known; that file is parsed.
        "apply source digests",
        [
            "ALTER TABLE applied ADD COLUMN source_path TEXT",
            "ALTER TABLE applied ADD COLUMN source_digest TEXT",
        ],
    ),
]


def ordered() -> list[tuple[int, str, list[str]]]:
    """The migrations by version, whatever order the list was assembled in."""
    return sorted(MIGRATIONS, key=lambda migration: migration[0])


def latest_version() -> int:
    return max(number for number, _why, _statements in MIGRATIONS)


LATEST_VERSION = latest_version()
