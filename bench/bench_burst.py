"""Burst: N schedules due at the same instant, capacity N, real supervisor.

    python bench/bench_burst.py                  # N = 100, then N = 1000 (~1 min)
    python bench/bench_burst.py --sizes 100 --repeat 3
    python bench/bench_burst.py --store postgresql:///scratch   # on PostgreSQL (wiped)

For each N: a fresh store (with `--store URL`, that database emptied of
wfsched's schema before each burst), N one-shot schedules (`at` = the same whole
second), created with `wfsched apply`; `wfsched supervise
--max-concurrent-runs N` is started before the instant and stopped with
SIGTERM once every run is recorded. Each job runs
`date +%s.%N > "$BENCH_OUT/$WFSCHED_RUN_ID"`; "started" is that stamp.

Checks: every run wrote its file, the store (and `wfsched runs --json`)
holds N runs, all completed; the starts within the targets.
Targets on SQLite (launch cost): N=100 -> the first started <= 10 ms and the
100th <= 100 ms after the instant; N=1000 -> the last <= 1.0 s; CPU per run
of the supervisor and its run keeper together <= 1.0 ms.
Targets on PostgreSQL: N=100 -> the 100th < 500 ms; N=1000 -> the last < 5 s.

The job's own cost bounds what any scheduler can reach here: after each
burst the same command is started 200 times by a bare `subprocess.Popen`
loop, one at a time, and its CPU per run is printed with the floor it puts
under the burst (N jobs' CPU spread over every core).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import (
    STAMP_COMMAND,
    Verdicts,
    backend_pids,
    children,
    cli,
    cpu_seconds,
    exact_cpu_seconds,
    load_note,
    log_events,
    one_shot_definition,
    open_bench_store,
    percentile,
    read_stamps,
    reaped_cpu_seconds,
    report_log_problems,
    scratch_store,
    start_supervisor,
    stop_supervisor,
    supervisor_store,
    temp_store,
    wait_for,
    write_definitions,
)

from wfsched.domain.timeutil import parse_instant

TARGETS = {100: 0.5, 1000: 5.0}
"""PostgreSQL: the last start, seconds after the instant."""
SQLITE_TARGETS = {100: {1: 0.010, 100: 0.100}, 1000: {1000: 1.0}}
"""SQLite: the k-th start, seconds after the instant, per N."""
CPU_PER_RUN_TARGET = 1.0
"""SQLite: milliseconds of CPU per run, supervisor and run keeper together."""
FLOOR_RUNS = 200


def job_floor(directory: Path) -> float:
    """CPU seconds per run of STAMP_COMMAND alone, started by a bare Popen
    loop (vfork, own session) one at a time: what each job costs this
    machine whoever starts it."""
    directory.mkdir()
    env = dict(os.environ, BENCH_OUT=str(directory))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for index in range(FLOOR_RUNS):
        env["WFSCHED_RUN_ID"] = f"floor-{index}"
        command = ["/bin/sh", "-c", STAMP_COMMAND]
        subprocess.run(command, env=env, start_new_session=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return spent / FLOOR_RUNS


def cli_run_count(store: Path | str) -> int:
    """Runs as `wfsched runs --json` pages them (100 per page)."""
    total, cursor = 0, None
    while True:
        args = ["runs", "--json", "--limit", "100"]
        if cursor:
            args += ["--page", cursor]
        page = json.loads(cli(store, *args).stdout)
        total += len(page["items"])
        cursor = page["next_cursor"]
        if not cursor:
            return total


def burst(n: int, lead: float, keep: bool, verdicts: Verdicts, label: str, url: str | None) -> None:
    with temp_store(keep, f"wfsched-bench-burst{n}-") as root:
        defs, out = root / "defs", root / "out"
        store = scratch_store(url, root)
        out.mkdir()
        instant = math.ceil(time.time() + lead)
        write_definitions(
            defs,
            (
                (f"b-{i:05d}", one_shot_definition(f"b-{i:05d}", instant, STAMP_COMMAND, out))
                for i in range(n)
            ),
        )
        t0 = time.perf_counter()
        cli(store, "apply", str(defs))
        setup = time.perf_counter() - t0
        sup = start_supervisor(
            supervisor_store(store), root / "supervisor.log", max_concurrent_runs=n
        )
        backends = backend_pids(url) if url else []
        ahead = instant - time.time()
        print(
            f"\nN={n}: `wfsched apply` {setup:.2f}s; supervisor ready {ahead:.1f}s before the"
            f" instant; {load_note()}"
        )
        if ahead < 1:
            print("!! the supervisor was not asleep before the instant: raise --lead")
        try:
            server = (children(sup.pid) or [sup.pid])[0]  # the run keeper
            # The supervisor's and the keeper's from schedstat (nanoseconds):
            # utime + stime count 10 ms ticks, 0.1 ms per run at N = 100.
            cpu0 = (
                exact_cpu_seconds(sup.pid),
                exact_cpu_seconds(server),
                reaped_cpu_seconds(server),
            )
            db0 = sum(cpu_seconds(pid) for pid in backends)
            wait_for(lambda: time.time() > instant, lead + 5, 0.05)
            wait_for(lambda: sum(1 for _ in out.iterdir()) >= n, 60, 0.1)
            db = open_bench_store(store)
            wait_for(lambda: db.run_state_counts() == {} and bool(db.list_runs(limit=1)), 60, 0.2)
            db.close()
            time.sleep(0.5)  # the keeper reaps the last jobs
            if server not in children(sup.pid):
                print("!! the run keeper was replaced during the burst; CPU split is partial")
            cpu1 = (
                exact_cpu_seconds(sup.pid),
                exact_cpu_seconds(server),
                reaped_cpu_seconds(server),
            )
            db1 = sum(cpu_seconds(pid) for pid in backends)
        finally:
            rc = stop_supervisor(sup)

        stamps = read_stamps(out)
        db = open_bench_store(store)
        runs = db.list_runs(limit=n * 2 + 10)
        attempts = {run.seq: db.get_attempt(run.seq, 1) for run in runs}
        db.close()
        states: dict[str, int] = {}
        for run in runs:
            states[run.state] = states.get(run.state, 0) + 1
        listed = cli_run_count(store)
        lat = sorted(stamps[r.run_id] - instant for r in runs if r.run_id in stamps)
        admitted = sorted(r.admitted_at - instant for r in runs)
        marked = sorted(a.started_at - instant for a in attempts.values() if a and a.started_at)
        events = log_events(sup)
        times = [
            parse_instant(e["time"][:19] + "Z") + float("0." + e["time"][20:23])
            for e in events
            if e.get("event") == "admitted"
        ]
        print(
            f"  runs in store: {len(runs)} {states}; `wfsched runs --json` lists {listed};"
            f" stamps written: {len(stamps)}"
        )
        if lat:
            print(
                f"  job started after the instant (ms): first {lat[0] * 1e3:.1f}"
                f"  median {statistics.median(lat) * 1e3:.1f}"
                f"  p95 {percentile(lat, 95) * 1e3:.1f}  last {lat[-1] * 1e3:.1f}"
            )
            for k in (1, 10, 50, 100, 500, 1000):
                if k <= len(lat):
                    print(f"    {k:>5}th started at +{lat[k - 1] * 1e3:8.1f} ms")
        if admitted:
            print(
                f"  tick time (admitted_at): +{admitted[0] * 1e3:.1f} ms;"
                f" admission log events from +{(min(times) - instant) * 1e3:.0f} to"
                f" +{(max(times) - instant) * 1e3:.0f} ms"
                if times
                else ""
            )
        if marked:
            print(
                f"  attempts marked running: first +{marked[0] * 1e3:.1f} ms,"
                f" last +{marked[-1] * 1e3:.1f} ms"
            )
        ticks = len({round(a, 3) for a in admitted})
        print(f"  admitted over {ticks} tick(s)")
        per_run = [(after - before) / n * 1e3 for before, after in zip(cpu0, cpu1, strict=True)]
        total = sum(per_run)
        print(
            f"  CPU per run (ms): supervisor {per_run[0]:.2f}, run keeper {per_run[1]:.2f},"
            f" jobs {per_run[2]:.2f}; wfsched (supervisor + keeper)"
            f" {per_run[0] + per_run[1]:.2f}; total {total:.2f} ms -> {n} runs need"
            f" >= {total * n / 1e3 / (os.cpu_count() or 1):.2f}s on {os.cpu_count()} idle CPUs"
        )
        cpus = os.cpu_count() or 1
        floor = job_floor(root / "floor") * 1e3
        print(
            f"  the job alone ({FLOOR_RUNS} runs of a bare Popen loop): {floor:.2f} ms CPU per run"
            f" -> {n} such jobs need >= {floor * n / 1e3 / cpus:.2f}s of {cpus} CPUs by"
            f" themselves, >= {(floor + CPU_PER_RUN_TARGET) * n / 1e3 / cpus:.2f}s with"
            f" wfsched at {CPU_PER_RUN_TARGET} ms per run"
        )
        if backends:
            print(
                f"  CPU per run of the supervisor's database backends {backends}:"
                f" {(db1 - db0) / n * 1e3:.2f} ms (not in the total above)"
            )
        report_log_problems(sup)
        limit = None if url is None else TARGETS.get(n)
        verdicts.require(f"{label}: all started", len(stamps) == n, f"{len(stamps)}/{n}")
        verdicts.require(
            f"{label}: runs recorded",
            len(runs) == n and listed == n and states.get("completed", 0) == n,
            f"{states.get('completed', 0)}/{n} completed",
        )
        if limit is not None and lat:
            verdicts.check(f"{label}: last start", lat[-1] * 1000, limit * 1000, "ms")
        if url is None and lat:
            for k, target in SQLITE_TARGETS.get(n, {}).items():
                if k <= len(lat):
                    verdicts.check(
                        f"{label}: start {k}", lat[k - 1] * 1e3, target * 1e3, "ms", inclusive=True
                    )
            wfsched_cpu = per_run[0] + per_run[1]
            verdicts.check(
                f"{label}: CPU per run", wfsched_cpu, CPU_PER_RUN_TARGET, "ms", ".2f", True
            )
        verdicts.require(f"{label}: SIGTERM exit", rc == 0, f"rc={rc}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000", help="comma-separated N [100,1000]")
    parser.add_argument("--repeat", type=int, default=1, help="bursts per size [1]")
    parser.add_argument(
        "--lead",
        type=float,
        default=0.0,
        help="seconds from setup to the instant [4 + N/250; twice that with --store]",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directories")
    parser.add_argument(
        "--store",
        metavar="URL",
        help="a scratch PostgreSQL database (postgresql://...; wiped before each burst)",
    )
    args = parser.parse_args()
    verdicts = Verdicts()
    for n in (int(s) for s in args.sizes.split(",")):
        for r in range(args.repeat):
            label = f"N={n}" + (f" #{r + 1}" if args.repeat > 1 else "")
            lead = args.lead or (4 + n / 250) * (2 if args.store else 1)
            burst(n, lead, args.keep, verdicts, label, args.store)
    return verdicts.print()


if __name__ == "__main__":
    sys.exit(main())
