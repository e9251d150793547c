"""CLI benchmarks: whole-process wall time of real `wfsched` invocations.

    python bench/bench_cli.py            # all four measurements
    python bench/bench_cli.py --quick    # fewer repetitions, 2,000 definitions

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
from wfsched.store import SQLiteStore

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


def timed(argv: list[str], store: Path, repeat: int) -> float:
    """Median wall seconds of `repeat` runs; any failure aborts the benchmark."""
    env = {**os.environ, "WFSCHED_STORE": str(store)}
    samples = []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        samples.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        CPU.setdefault(argv[1], []).append(cpu)
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


def bench_list(binary: str, work: Path, repeat: int) -> float:
    store_path = work / "list-store"
    store = SQLiteStore(store_path)
    admin = Admin(store)
    for index in range(100):
        admin.create(
            parse_definition(DEFINITION.format(id=f"job-{index:03d}", minute=index % 60), "bench")
        )
    store.close()
    return timed([binary, "list", "--json"], store_path, repeat)


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
    args = parser.parse_args()
    repeat = 5 if args.quick else 21
    apply_count = 2_000 if args.quick else 10_000
    apply_repeat = 1 if args.quick else 3
    binary = wfsched_binary()
    with tempfile.TemporaryDirectory(prefix="wfsched-bench-") as scratch:
        work = Path(scratch)
        report("list --json, 100 schedules", bench_list(binary, work, repeat), "list")
        first, second = bench_apply(binary, work, apply_count, apply_repeat)
        apply_cpu = CPU.pop("apply", [])
        CPU["apply"] = apply_cpu[0::2]
        report(f"apply {apply_count:,} definitions (new)", first, "apply")
        CPU["apply"] = apply_cpu[1::2]
        report(f"apply {apply_count:,} definitions (unchanged)", second, "apply")
        deep = bench_occurrences(binary, work, 1_000_000, repeat)
        report("occurrences --page, 1,000,000 rows", deep, "occurrences")


def report(label: str, wall: float, command: str) -> None:
    print(f"{label:<42} wall {wall * 1000:9.1f} ms   {cpu_ms(command)}   (medians)")


if __name__ == "__main__":
    main()
