"""Launch latency: due instant to the job's first instruction, real supervisor.

    python bench/bench_latency.py                 # 30 one-shots, 2 s apart (~75 s)
    python bench/bench_latency.py --samples 60 --spacing 3
    python bench/bench_latency.py --cron-minutes 2   # plus a `* * * * *` schedule
    python bench/bench_latency.py --scrape-every 0.1 # with --metrics, scraped every 100 ms
    python bench/bench_latency.py --wake-early 0     # without the pre-wake spin (A/B)

Each sample is a one-shot schedule (`[trigger] at = "<RFC 3339 Z>"`) whose
command is `date +%s.%N > "$BENCH_OUT/$WFSCHED_RUN_ID"`: the job's own clock
reading, minus the scheduled instant, is the latency. One-shot instants are
whole seconds (an `at` keeps whole seconds: docs/definitions.md), so
they are spaced by whole seconds, >= 2 by default: between two of them the
supervisor has nothing due and sleeps (poll interval 1 s, its default, unless --poll-interval).

The schedules are created with `wfsched apply`, the supervisor is
`wfsched supervise` (default settings), stopped with SIGTERM at the end.
The breakdown per sample comes from the store (run admitted_at, attempt
started_at) and the exit record (when the run keeper began the launch).
CPU per sample is the supervisor's and the run keeper's own CPU time over the
whole run divided by the samples (idle ticks between them included; the jobs
excluded): compare `--wake-early 0` with the default to price the pre-wake
spin per due instant.

With --scrape-every S the supervisor runs with `--metrics 127.0.0.1:0` and a
thread scrapes /metrics every S seconds for the whole run: compare the
latencies with a run without it (target: within 10 %).

Targets: on SQLite (launch cost) median <= 4 ms, max <= 10 ms; on
PostgreSQL over a Unix socket median < 20 ms, max < 60 ms.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from common import (
    STAMP_COMMAND,
    Scraper,
    Verdicts,
    children,
    cli,
    cpu_seconds,
    cron_definition,
    metrics_url,
    one_shot_definition,
    read_stamps,
    report_log_problems,
    scratch_store,
    start_supervisor,
    stop_supervisor,
    summary_ms,
    temp_store,
    wait_for,
    write_definitions,
)

from wfsched.process.launcher import read_exit_record
from wfsched.store import open_location, resolve_store

TARGETS_MS = {False: (4.0, 10.0), True: (20.0, 60.0)}
"""(median, max) in milliseconds, keyed by "on PostgreSQL"."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=30, help="one-shot schedules [30]")
    parser.add_argument("--spacing", type=int, default=2, help="whole seconds apart [2]")
    parser.add_argument("--lead", type=int, default=5, help="seconds before the first [5]")
    parser.add_argument("--poll-interval", type=float, help="passed to supervise [default 1]")
    parser.add_argument(
        "--cron-minutes",
        type=int,
        default=0,
        help="also sample a `* * * * *` schedule for N minutes [0]",
    )
    parser.add_argument(
        "--scrape-every",
        type=float,
        metavar="S",
        help="serve --metrics and scrape /metrics every S seconds [off]",
    )
    parser.add_argument(
        "--wake-early",
        type=float,
        metavar="S",
        help="replace the supervisor's pre-wake spin (0.02 s) with S seconds [default]",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--store",
        metavar="URL",
        help="a scratch PostgreSQL database (postgresql://...; wiped) instead of a SQLite store",
    )
    args = parser.parse_args()

    verdicts = Verdicts()
    scraper = None
    with temp_store(args.keep, "wfsched-bench-latency-") as root:
        defs, out = root / "defs", root / "out"
        store = scratch_store(args.store, root)
        out.mkdir()
        first = math.ceil(time.time()) + args.lead
        instants = [first + i * args.spacing for i in range(args.samples)]
        if args.cron_minutes:  # keep the one-shots off the cron's minute boundaries
            instants = [at + 1 if at % 60 == 0 else at for at in instants]
        docs = [
            (f"lat-{i:03d}", one_shot_definition(f"lat-{i:03d}", at, STAMP_COMMAND, out))
            for i, at in enumerate(instants)
        ]
        if args.cron_minutes:
            docs.append(("lat-cron", cron_definition("lat-cron", "* * * * *", STAMP_COMMAND, out)))
        write_definitions(defs, docs)
        t0 = time.perf_counter()
        cli(store, "apply", str(defs))
        print(
            f"setup: `wfsched apply` of {len(docs)} definitions took "
            f"{time.perf_counter() - t0:.2f}s; first instant in {first - time.time():.1f}s"
        )
        if first - time.time() < 1.5:
            print("!! the first instant is too close; raise --lead")

        extra = ["--metrics", "127.0.0.1:0"] if args.scrape_every else []
        sup = start_supervisor(
            store,
            root / "supervisor.log",
            poll_interval=args.poll_interval,
            extra=extra,
            wake_early=args.wake_early,
        )
        keeper = (children(sup.pid) or [sup.pid])[0]
        cpu0 = (cpu_seconds(sup.pid), cpu_seconds(keeper))
        if args.scrape_every:
            scraper = Scraper(metrics_url(sup), args.scrape_every)
            scraper.start()
        end = instants[-1] if instants else time.time()
        if args.cron_minutes:
            end = max(end, (math.floor(time.time() / 60) + args.cron_minutes) * 60 + 1)
        try:
            expected = args.samples + args.cron_minutes
            while time.time() < end + 1:
                time.sleep(0.25)
            wait_for(lambda: len(list(out.iterdir())) >= expected, 10)
            cpu1 = (cpu_seconds(sup.pid), cpu_seconds(keeper))
            per = [(b - a) / max(1, expected) * 1e3 for a, b in zip(cpu0, cpu1, strict=True)]
            print(
                f"CPU per sample (ms, idle ticks included): supervisor {per[0]:.2f},"
                f" run keeper {per[1]:.2f}; wake_early"
                f" {'0.02 (default)' if args.wake_early is None else args.wake_early}"
            )
        finally:
            if scraper is not None:
                scraper.stop()
            rc = stop_supervisor(sup)
        if scraper is not None:
            print(
                f"scraper: {len(scraper.times)} scrapes every {args.scrape_every:g}s,"
                f" {summary_ms(scraper.times)}; errors: {len(scraper.errors)}"
            )
            verdicts.require("scrapes answered", not scraper.errors, f"{scraper.errors[:2]}")

        stamps = read_stamps(out)
        db = open_location(resolve_store(store), create=False)
        assert db is not None
        runs = {run.run_id: run for run in db.list_runs(limit=10_000)}
        rows = []
        for run_id, run in sorted(runs.items()):
            stamp = stamps.get(run_id)
            attempt = db.get_attempt(run.seq, 1)
            record = read_exit_record(str(db.root / "records" / run_id / "attempt-1"))
            rows.append((run, stamp, attempt, record))
        db.close()

        one_shot = [r for r in rows if r[0].schedule_id != "lat-cron"]
        cron = [r for r in rows if r[0].schedule_id == "lat-cron"]
        problems = []
        for label, group in (("one-shot", one_shot), ("cron * * * * *", cron)):
            if not group:
                continue
            lat = [stamp - run.scheduled_at for run, stamp, _, _ in group if stamp is not None]
            missing = [run.run_id for run, stamp, _, _ in group if stamp is None]
            early = [v for v in lat if v < 0]
            print(f"\n{label}: due instant -> job's first instruction: {summary_ms(lat)}")
            admit = [run.admitted_at - run.scheduled_at for run, _, _, _ in group]
            mark = [a.started_at - run.scheduled_at for run, _, a, _ in group if a]
            shim = [rec.started_at - run.scheduled_at for run, _, _, rec in group if rec]
            print(f"  breakdown (from the instant): admitted  {summary_ms(admit)}")
            print(f"                                attempt mark {summary_ms(mark)}")
            print(f"                                launch begins {summary_ms(shim)}")
            print("  per sample (ms): " + " ".join(f"{v * 1000:.0f}" for v in lat))
            if missing:
                problems.append(
                    f"{label}: {len(missing)} run(s) never wrote a stamp: {missing[:5]}"
                )
            if early:
                problems.append(f"{label}: {len(early)} job(s) started BEFORE their instant")
            if label == "one-shot":
                verdicts.require(
                    "all one-shots ran",
                    len(group) == args.samples and not missing,
                    f"{len(lat)}/{args.samples}",
                )
            if lat:
                name = "" if label == "one-shot" else "cron "
                median_limit, max_limit = TARGETS_MS[args.store is not None]
                inclusive = args.store is None  # SQLite's are written "at most"
                verdicts.check(
                    f"{name}median latency",
                    statistics.median(lat) * 1000,
                    median_limit,
                    "ms",
                    inclusive=inclusive,
                )
                verdicts.check(
                    f"{name}max latency", max(lat) * 1000, max_limit, "ms", inclusive=inclusive
                )
        failed_runs = [r[0].run_id for r in rows if r[0].state != "completed"]
        if failed_runs:
            problems.append(f"runs not completed: {failed_runs[:5]}")
        report_log_problems(sup)
        verdicts.require("supervisor exit on SIGTERM", rc == 0, f"rc={rc}")
        for problem in problems:
            print(f"!! {problem}")
        return verdicts.print()


if __name__ == "__main__":
    sys.exit(main())
