"""Idle cost: 10,000 hourly schedules, none due, real supervisor.

    python bench/bench_idle.py                    # 10,000 schedules, 60 s (~90 s)
    python bench/bench_idle.py --seconds 20 --schedules 2000
    python bench/bench_idle.py --create apply     # create through `wfsched apply DIR`
    python bench/bench_idle.py --profile 30       # also profile 30 in-process ticks
    python bench/bench_idle.py --metrics          # with --metrics; then time scrapes
    python bench/bench_idle.py --store postgresql:///scratch   # on PostgreSQL (wiped)

The schedules are `M * * * *` with M the minute 30 minutes from now (or
--cron), so none is due while measuring. They are created through
`Admin.create` in one store transaction (default; timed), or by writing
10,000 files and running `wfsched apply` on the folder (--create apply).

`wfsched supervise` (default poll interval 1 s) is started, given --warmup
seconds for its startup tick, then measured for --seconds: CPU from
/proc/<pid>/stat utime+stime deltas (the supervisor process alone; its run
keeper reported beside it), RSS from VmRSS in /proc/<pid>/status, sampled
every second. Stopped with SIGTERM.

With `--store URL` the store is that PostgreSQL database (emptied of
wfsched's schema first), and the idle cost includes the database's side: the
supervisor's sessions carry their own application_name, their server
processes (pg_stat_activity's pid, each session's `pg_backend_pid()`) are
sampled like the supervisor, and the CPU target applies to the supervisor
plus its backends.

With --metrics the supervisor serves /metrics (`--metrics 127.0.0.1:0`), so
the idle CPU includes publishing a snapshot every tick; after the idle span
the bench times scrapes over HTTP: the first one (the renderer thread
rendered every series when the loop first published, so it only sends),
then --scrapes more (nothing changed; with the supervisor's CPU per scrape),
then scrapes after `wfsched pause` of one schedule (its series re-rendered by
the renderer thread on that tick).

Targets (issue): supervisor CPU < 0.5 % of one core, RSS < 100 MB; with
--metrics a scrape of 10,000 schedules < 20 ms; on PostgreSQL, supervisor
plus its database backends < 1 % of one core. With 1,000 schedules or
fewer and no --metrics, also issue 10's: <= 10 ms of CPU per minute (from
/proc/<pid>/task/*/schedstat, nanoseconds: utime+stime count 10 ms ticks)
and RSS <= 28 MB. Wake-ups per minute are the main thread's voluntary
context switches.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from common import (
    SUPERVISOR_APP,
    NullControl,
    SupervisorProcess,
    Verdicts,
    backend_pids,
    children,
    cli,
    cpu_seconds,
    cron_definition,
    exact_cpu_seconds,
    load_note,
    metrics_url,
    open_bench_store,
    report_log_problems,
    rss_kib,
    scrape,
    scratch_store,
    start_supervisor,
    stop_supervisor,
    summary_ms,
    supervisor_store,
    temp_store,
    wakeups,
    write_definitions,
)

from wfsched.api.admin import Admin
from wfsched.daemon.supervisor import Supervisor
from wfsched.domain.config import SupervisorConfig
from wfsched.domain.definition import parse_definition


def create_schedules(store_dir: Path | str, defs: Path, n: int, cron: str, method: str) -> float:
    docs = (
        (f"idle-{i:05d}", cron_definition(f"idle-{i:05d}", cron, ["/bin/true"])) for i in range(n)
    )
    t0 = time.perf_counter()
    if method == "apply":
        write_definitions(defs, docs)
        t1 = time.perf_counter()
        cli(store_dir, "apply", str(defs))
        print(
            f"setup: wrote {n} files in {t1 - t0:.2f}s;"
            f" `wfsched apply` took {time.perf_counter() - t1:.2f}s"
        )
        return time.perf_counter() - t0
    store = open_bench_store(store_dir, create=True)
    admin = Admin(store)
    with store.atomic():
        for name, text in docs:
            admin.create(parse_definition(text, f"{name}.toml", now=int(time.time())))
    store.close()
    elapsed = time.perf_counter() - t0
    print(
        f"setup: {n} x Admin.create in one transaction took {elapsed:.2f}s"
        f" ({elapsed / n * 1e3:.2f} ms each)"
    )
    return elapsed


def time_scrapes(sup: SupervisorProcess, store: Path | str, count: int) -> dict[str, list[float]]:
    url = metrics_url(sup)
    first, size = scrape(url)
    print(f"\nfirst scrape (rendered in advance): {first * 1e3:.1f} ms, {size / 1e6:.2f} MB")
    cpu0 = cpu_seconds(sup.pid)
    unchanged = [scrape(url)[0] for _ in range(count)]
    cpu = (cpu_seconds(sup.pid) - cpu0) / max(1, count)
    print(f"scrapes, nothing changed: {summary_ms(unchanged)}")
    print(f"  supervisor CPU per scrape (idle ticks included): {cpu * 1e3:.2f} ms")
    changed = []
    for index in range(min(count, 10)):
        cli(store, "pause", f"idle-{index:05d}")
        time.sleep(1.5)  # a poll interval: the loop sees the change and publishes
        changed.append(scrape(url)[0])
    print(f"scrapes after pausing one schedule: {summary_ms(changed)}")
    return {"unchanged": unchanged, "changed": changed}


def profile_ticks(store_dir: Path | str, ticks: int) -> None:
    """The same store, ticked in-process under cProfile (no process starts)."""
    store = open_bench_store(store_dir)
    control = NullControl()
    sup = Supervisor(store, SupervisorConfig(), control, log=lambda *a, **k: None)
    sup.recover()
    sup.tick()  # the startup tick
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for _ in range(ticks):
        sup.tick()
        sup._sleep_seconds()  # the loop asks this after every tick
    prof.disable()
    per = (time.perf_counter() - t0) / ticks
    print(
        f"\nin-process: {ticks} idle ticks (+ _sleep_seconds), {per * 1e3:.2f} ms per tick"
        f" under cProfile"
    )
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    print("\n".join(line for line in out.getvalue().splitlines()[4:] if line.strip()))
    control.stop()
    store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000, help="[10000]")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured span [60]")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring [5]")
    parser.add_argument("--cron", help="expression [the minute 30 minutes from now, hourly]")
    parser.add_argument("--create", choices=("admin", "apply"), default="admin")
    parser.add_argument("--poll-interval", type=float, help="passed to supervise [default 1]")
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="TICKS",
        help="afterwards, profile TICKS in-process ticks [0]",
    )
    parser.add_argument("--metrics", action="store_true", help="serve and time /metrics")
    parser.add_argument("--scrapes", type=int, default=30, help="timed scrapes [30]")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    parser.add_argument(
        "--store", metavar="URL", help="a scratch PostgreSQL database (postgresql://...; wiped)"
    )
    args = parser.parse_args()

    now = datetime.now(UTC)
    cron = args.cron or f"{(now.minute + 30) % 60} * * * *"
    verdicts = Verdicts()
    with temp_store(args.keep, "wfsched-bench-idle-") as root:
        store = scratch_store(args.store, root)
        create_schedules(store, root / "defs", args.schedules, cron, args.create)
        print(f"cron {cron!r}; {load_note()}")
        extra = ["--metrics", "127.0.0.1:0"] if args.metrics else []
        sup = start_supervisor(
            supervisor_store(store),
            root / "supervisor.log",
            poll_interval=args.poll_interval,
            extra=extra,
        )
        scrapes: dict[str, list[float]] = {}
        try:
            time.sleep(args.warmup)
            server = children(sup.pid)
            backends = backend_pids(args.store) if args.store else []
            if args.store and not backends:
                print(f"!! no database session named {SUPERVISOR_APP}: backend CPU not sampled")
            cpu0, t0 = cpu_seconds(sup.pid), time.monotonic()
            exact0, wakes0 = exact_cpu_seconds(sup.pid), wakeups(sup.pid)
            srv0 = cpu_seconds(server[0]) if server else 0.0
            db0 = sum(cpu_seconds(pid) for pid in backends)
            rss, srv_rss = [], []
            while time.monotonic() - t0 < args.seconds:
                time.sleep(min(1.0, args.seconds - (time.monotonic() - t0)) or 0.01)
                rss.append(rss_kib(sup.pid))
                if server:
                    srv_rss.append(rss_kib(server[0]))
            cpu1, t1 = cpu_seconds(sup.pid), time.monotonic()
            exact1, wakes1 = exact_cpu_seconds(sup.pid), wakeups(sup.pid)
            srv1 = cpu_seconds(server[0]) if server else 0.0
            db1 = sum(cpu_seconds(pid) for pid in backends)
            if args.store and backend_pids(args.store) != backends:
                print("!! the supervisor's database sessions changed while measuring")
            if args.metrics:
                scrapes = time_scrapes(sup, store, args.scrapes)
            db = open_bench_store(store)
            last_tick = float(db.get_meta("last_tick_at") or 0)
            stamp_interval = db.get_meta("stamp_interval")
            runs = len(db.list_runs(limit=10))
            db.close()
        finally:
            rc = stop_supervisor(sup)
        span = t1 - t0
        cpu_pct = (cpu1 - cpu0) / span * 100
        print(
            f"\nsupervisor pid {sup.pid}: CPU {cpu1 - cpu0:.3f}s over {span:.1f}s ="
            f" {cpu_pct:.3f}% of one core; RSS max {max(rss) / 1024:.1f} MB"
            f" (last {rss[-1] / 1024:.1f} MB)"
        )
        per_minute = (exact1 - exact0) / span * 60
        print(
            f"supervisor CPU per minute (schedstat, all threads): {per_minute * 1e3:.2f} ms;"
            f" {(wakes1 - wakes0) / span * 60:.1f} wake-ups per minute;"
            f" stamp_interval recorded: {stamp_interval}"
        )
        if server:
            print(
                f"run keeper pid {server[0]}: CPU {(srv1 - srv0) / span * 100:.3f}% ;"
                f" RSS max {max(srv_rss) / 1024:.1f} MB"
            )
        print(
            f"last tick recorded {time.time() - last_tick:.1f}s before the stop; runs: {runs}"
            f"; {load_note()}"
        )
        if backends:
            db_pct = (db1 - db0) / span * 100
            print(
                f"database backends {backends}: CPU {db1 - db0:.3f}s = {db_pct:.3f}% ;"
                f" supervisor + backends {cpu_pct + db_pct:.3f}% of one core"
            )
        report_log_problems(sup)
        verdicts.check("supervisor CPU", cpu_pct, 0.5, "%", ".3f")
        if backends:
            verdicts.check("supervisor + database backends CPU", cpu_pct + db_pct, 1.0, "%", ".3f")
        verdicts.check("supervisor RSS", max(rss) / 1024, 100, "MB")
        if args.schedules <= 1000 and not args.metrics:
            # Issue 10's targets, stated for 1,000 dormant schedules.
            verdicts.check("supervisor CPU per minute", per_minute * 1e3, 10, "ms", ".2f")
            verdicts.check("supervisor RSS (issue 10)", max(rss) / 1024, 28, "MB")
        verdicts.require("nothing ran", runs == 0, f"{runs} runs")
        if scrapes:
            verdicts.check(
                "scrape, nothing changed (median)",
                statistics.median(scrapes["unchanged"]) * 1000,
                20,
                "ms",
            )
            verdicts.check(
                "scrape, one schedule changed (median)",
                statistics.median(scrapes["changed"]) * 1000,
                20,
                "ms",
            )
        verdicts.require("SIGTERM exit", rc == 0, f"rc={rc}")
        if args.profile:
            profile_ticks(store, args.profile)
        return verdicts.print()


if __name__ == "__main__":
    sys.exit(main())
