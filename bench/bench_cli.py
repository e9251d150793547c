"""CLI benchmarks: whole-process wall time of real `wfsched` invocations.

    python bench/bench_cli.py            # all four measurements
    python bench/bench_cli.py --quick    # fewer repetitions, 2,000 definitions
    python bench/bench_cli.py --store postgresql:///scratch --only list,copy

With `--store URL` (a PostgreSQL database the benchmark may wipe: it drops
wfsched's tables there before each use) the list measurement runs on both
stores, and `copy` times `wfsched store copy` of a realistic SQLite store
(10,000 schedules, 1,000,000 ledger rows) into that database and back into a
new SQLite directory: the rows and files (`seconds` of the copy's JSON) and
the whole command, whose audit of the copy walks every ledger row.

Prints the median of:
- `wfsched list --json` over 100 schedules (budget: < 150 ms per process);
- `wfsched apply DIR` of 10,000 definitions into an empty store, and the
  second, unchanged apply of the same folder;
- `wfsched occurrences ID --page CURSOR --json` deep inside a history of
  1,000,000 rows seeded through `SQLiteStore.insert_occurrences`.

Everything lives in a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wfsched.api.admin import Admin
from wfsched.api.paging import encode_cursor
from wfsched.domain.definition import parse_definition
from wfsched.store import SQLiteStore, Store

DEFINITION = """\
id = "{id}"
[trigger]
cron = "{minute} * * * *"
timezone = "Europe/Berlin"
[run]
command = ["/bin/true"]
[[input]]
target = "at"
occurrence = "scheduled_at"
"""


def wfsched_binary() -> str:
    beside = Path(sys.executable).with_name("wfsched")
    if beside.exists():
        return str(beside)
    found = shutil.which("wfsched")
    if found is None:
        sys.exit("wfsched console script not found; `pip install -e .` first")
    return found


CPU: dict[str, list[float]] = {}
"""CPU seconds (user + system) per measured command, next to the wall time:
on a busy machine wall time swings, CPU time much less."""


def timed(argv: list[str], store: Path | str, repeat: int, label: str = "") -> float:
    """Median wall seconds of `repeat` runs; any failure aborts the benchmark."""
    env = {**os.environ, "WFSCHED_STORE": str(store)}
    samples = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True)
        LAST_OUTPUT[0] = done.stdout
        samples.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        CPU.setdefault(label or argv[1], []).append(cpu)
        if done.returncode != 0:
            sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()}")
    return statistics.median(samples)


def cpu_ms(command: str) -> str:
    samples = CPU.pop(command, [])
    return f"cpu {statistics.median(samples) * 1000:7.1f} ms" if samples else ""


def write_definitions(folder: Path, count: int) -> None:
    folder.mkdir(parents=True)
    for index in range(count):
        text = DEFINITION.format(id=f"job-{index:05d}", minute=index % 60)
        (folder / f"job-{index:05d}.toml").write_text(text)


LAST_OUTPUT = [b""]
"""stdout of the last timed command."""


def bench_list(binary: str, work: Path, repeat: int, url: str | None = None) -> float:
    """`list --json` over 100 schedules, in a SQLite store or in the database `url`."""
    store_path: Path | str = work / "list-store"
    if url is None:
        store = SQLiteStore(store_path)
    else:
        reset_postgres(url)
        store_path = url
        store = open_store_url(url)
    admin = Admin(store)
    for index in range(100):
        admin.create(
            parse_definition(DEFINITION.format(id=f"job-{index:03d}", minute=index % 60), "bench")
        )
    store.close()
    return timed(
        [binary, "list", "--json"], store_path, repeat, "list" if url is None else "list-pg"
    )


def open_store_url(url: str) -> Store:
    from wfsched.store import open_location, resolve_store

    store = open_location(resolve_store(url), create=True)
    assert store is not None
    return store


def reset_postgres(url: str) -> None:
    """Drop wfsched's tables and functions in the scratch database `url`."""
    import psycopg

    from wfsched.store.copying import COPY_TABLES

    # The leadership tables are not copied (a copy starts without a leader) but
    # are the schema's: left behind, the next migration finds them and fails.
    kept = ("schema_version", "leader_lease", "hosts")
    tables = ", ".join([*kept, *(table for table, _ in COPY_TABLES)])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {tables} CASCADE")  # type: ignore[arg-type]
        conn.execute(
            "DROP FUNCTION IF EXISTS schedules_watermark_monotone(), occurrences_ledger_position()"
        )


def build_realistic(root: Path, schedules: int, rows_each: int) -> None:
    """A SQLite store of `schedules` hourly schedules (created through `Admin`), each
    with `rows_each` ledger rows for its consecutive instants and its watermark on
    the last, so the copy's audit finds it clean."""
    start = 1_000_000_000
    store = SQLiteStore(root)
    admin = Admin(store, clock=lambda: float(start))
    with store.atomic():
        for index in range(schedules):
            text = DEFINITION.format(id=f"job-{index:05d}", minute=index % 60).replace(
                "Europe/Berlin", "UTC"
            )
            admin.create(parse_definition(text, "bench", now=start))
    rows: list[tuple[object, ...]] = []
    with store.atomic():
        for index in range(schedules):
            first = start // 3600 * 3600 + (index % 60) * 60
            first += 3600 if first <= start else 0
            instants = [first + 3600 * k for k in range(rows_each)]
            schedule_id = f"job-{index:05d}"
            rows.extend(
                (schedule_id, at, None, None, 0, "skipped-misfire", "supervisor-down", 1, None, at)
                for at in instants
            )
            store.update_schedule(
                schedule_id, consumed_through=instants[-1], next_due=instants[-1] + 3600
            )
            if len(rows) >= 100_000:
                store.insert_occurrences(rows)
                rows = []
        if rows:
            store.insert_occurrences(rows)
    store.close()


def bench_copy(binary: str, work: Path, url: str, schedules: int, rows_each: int) -> None:
    """`store copy` SQLite -> PostgreSQL -> SQLite, each once (a copy is minutes of
    setup); the rows-and-files seconds from the copy's JSON, the whole command's
    wall and CPU time (the audit of the copy included)."""
    source = work / "copy-source"
    started = time.perf_counter()
    build_realistic(source, schedules, rows_each)
    print(
        f"built {schedules:,} schedules, {schedules * rows_each:,} ledger rows"
        f" in {time.perf_counter() - started:.0f} s"
    )
    reset_postgres(url)
    for label, origin, destination in (
        ("store copy SQLite -> PostgreSQL", source, url),
        ("store copy PostgreSQL -> SQLite", url, work / "copy-back"),
    ):
        wall = timed(
            [binary, "store", "copy", "--to", str(destination), "--json"], origin, 1, "copy"
        )
        rows = json.loads(LAST_OUTPUT[0])["seconds"]
        print(
            f"{label:<42} rows+files {rows:6.1f} s, whole command wall {wall:6.1f} s,"
            f" {cpu_ms('copy').strip()}"
        )


def bench_apply(binary: str, work: Path, count: int, repeat: int) -> tuple[float, float]:
    folder = work / "definitions"
    write_definitions(folder, count)
    first, second = [], []
    for attempt in range(repeat):
        store_path = work / f"apply-store-{attempt}"
        first.append(timed([binary, "apply", str(folder)], store_path, 1))
        second.append(timed([binary, "apply", str(folder)], store_path, 1))
    return statistics.median(first), statistics.median(second)


def bench_occurrences(binary: str, work: Path, rows: int, repeat: int) -> float:
    store_path = work / "history-store"
    store = SQLiteStore(store_path)
    Admin(store, clock=lambda: 1_000_000_000.0).create(
        parse_definition(DEFINITION.format(id="deep", minute="*"), "bench")
    )
    start = 1_000_000_020 // 60 * 60 + 60
    batch = 100_000
    with store.atomic():
        for offset in range(0, rows, batch):
            store.insert_occurrences(
                [
                    (
                        "deep",
                        start + 60 * i,
                        None,
                        None,
                        0,
                        "skipped-overlap",
                        "bench",
                        1,
                        None,
                        1_000_000_000.0,
                    )
                    for i in range(offset, min(rows, offset + batch))
                ]
            )
    store.close()
    # A cursor in the middle of the history: what `--page` hands back after
    # paging half-way through (a row's ledger position is its seq here).
    middle = rows // 2
    cursor = encode_cursor(pos=middle + 1)
    argv = [binary, "occurrences", "deep", "--page", cursor, "--limit", "100", "--json"]
    return timed(argv, store_path, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and definitions")
    parser.add_argument(
        "--store",
        metavar="URL",
        help="a scratch PostgreSQL database (wiped): list on both stores, and `copy`",
    )
    parser.add_argument(
        "--only",
        default="list,apply,occurrences,copy",
        help="comma-separated: list, apply, occurrences, copy (copy needs --store)",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    repeat = 5 if args.quick else 21
    apply_count = 2_000 if args.quick else 10_000
    apply_repeat = 1 if args.quick else 3
    binary = wfsched_binary()
    with tempfile.TemporaryDirectory(prefix="wfsched-bench-") as scratch:
        work = Path(scratch)
        if "list" in only:
            sqlite = bench_list(binary, work, repeat)
            report("list --json, 100 schedules (SQLite)", sqlite, "list")
            if args.store:
                pg = bench_list(binary, work, repeat, args.store)
                report("list --json, 100 schedules (PostgreSQL)", pg, "list-pg")
                print(f"PostgreSQL / SQLite: {pg / sqlite:.2f}")
        if "copy" in only and args.store:
            if args.quick:
                bench_copy(binary, work, args.store, 1_000, 100)
            else:
                bench_copy(binary, work, args.store, 10_000, 100)
        if "apply" in only:
            first, second = bench_apply(binary, work, apply_count, apply_repeat)
            apply_cpu = CPU.pop("apply", [])
            CPU["apply"] = apply_cpu[0::2]
            report(f"apply {apply_count:,} definitions (new)", first, "apply")
            CPU["apply"] = apply_cpu[1::2]
            report(f"apply {apply_count:,} definitions (unchanged)", second, "apply")
        if "occurrences" in only:
            deep = bench_occurrences(binary, work, 1_000_000, repeat)
            report("occurrences --page, 1,000,000 rows", deep, "occurrences")


def report(label: str, wall: float, command: str) -> None:
    print(f"{label:<42} wall {wall * 1000:9.1f} ms   {cpu_ms(command)}   (medians)")


if __name__ == "__main__":
    main()
