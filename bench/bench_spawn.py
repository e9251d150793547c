"""Launch latency: the warm fork server against a fresh interpreter per run.

Each job is `date +%s.%N` with stdout going to the attempt's stdout.log, so
the log holds the wall-clock instant the command was running; latency is that
instant minus the instant spawn() was called ("request to first
instruction", including the exec of `date` itself).

    python bench/bench_spawn.py            # 200 paced runs each way
    python bench/bench_spawn.py --burst 1000

Paced runs wait for each job to finish before the next, so they measure one
launch on an idle host. A burst spawns back to back without waiting (the
issue's "1,000 launches must all start, the last < 5 s").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wfsched.launcher import Launcher, LaunchSpec, read_exit_record

# What a per-run interpreter shim would minimally do: import the launcher and
# run the command with its logs redirected.
FRESH_SHIM = """
import os, subprocess, sys
import wfsched.launcher
with open(os.path.join(sys.argv[1], "stdout.log"), "ab") as out:
    subprocess.run(["date", "+%s.%N"], stdout=out, stdin=subprocess.DEVNULL, check=False)
"""


def _attempt_dir(root: Path, name: str) -> str:
    path = root / name
    path.mkdir()
    return str(path)


def _started(attempt_dir: str, deadline: float) -> float:
    """The job's own timestamp, waiting (bounded) for it to appear."""
    log = os.path.join(attempt_dir, "stdout.log")
    while True:
        try:
            text = Path(log).read_text().strip()
        except FileNotFoundError:
            text = ""
        if text:
            return float(text)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{attempt_dir}: job never wrote its timestamp")
        time.sleep(0.001)


def _wait_exit(attempt_dir: str, deadline: float) -> None:
    while read_exit_record(attempt_dir) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{attempt_dir}: no exit record")
        time.sleep(0.001)


def _spec(root: Path, name: str, stdin: str) -> LaunchSpec:
    return LaunchSpec(
        run_id=name,
        attempt=1,
        argv=("date", "+%s.%N"),
        cwd=None,
        env={"PATH": os.environ.get("PATH", os.defpath)},
        stdin_path=stdin,
        attempt_dir=_attempt_dir(root, name),
        timeout=60,
        kill_grace=1,
    )


def bench_warm(root: Path, count: int, stdin: str) -> tuple[list[float], list[float]]:
    calls, latencies = [], []
    with Launcher() as launcher:
        for i in range(count):
            spec = _spec(root, f"warm-{i}", stdin)
            requested = time.time()
            t0 = time.perf_counter()
            launcher.spawn(spec)
            calls.append(time.perf_counter() - t0)
            deadline = time.monotonic() + 10
            latencies.append(_started(spec.attempt_dir, deadline) - requested)
            _wait_exit(spec.attempt_dir, deadline)
    return calls, latencies


def bench_fresh(root: Path, count: int) -> tuple[list[float], list[float]]:
    calls, latencies = [], []
    for i in range(count):
        attempt_dir = _attempt_dir(root, f"fresh-{i}")
        requested = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", FRESH_SHIM, attempt_dir])
        calls.append(time.perf_counter() - t0)
        latencies.append(_started(attempt_dir, time.monotonic() + 10) - requested)
        proc.wait(timeout=10)
    return calls, latencies


def bench_burst(root: Path, count: int, stdin: str) -> tuple[float, float, float]:
    """(seconds to issue all spawns, median start latency, last start latency)."""
    specs = [_spec(root, f"burst-{i}", stdin) for i in range(count)]
    with Launcher() as launcher:
        begin = time.time()
        requested = []
        for spec in specs:
            requested.append(time.time())
            launcher.spawn(spec)
        issued = time.time() - begin
        deadline = time.monotonic() + 60
        starts = [_started(spec.attempt_dir, deadline) for spec in specs]
        for spec in specs:
            _wait_exit(spec.attempt_dir, deadline)
    lat = [s - r for s, r in zip(starts, requested, strict=True)]
    return issued, statistics.median(lat), max(starts) - begin


def _summary(name: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return (
        f"{name:<34} median {statistics.median(ms):8.2f} ms   p95 {p95:8.2f} ms"
        f"   max {ms[-1]:8.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--count", type=int, default=200, help="paced warm runs")
    parser.add_argument("--fresh", type=int, default=None, help="fresh runs (default: count)")
    parser.add_argument("--burst", type=int, default=0, help="also spawn N back to back")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wfsched-bench-") as tmp:
        root = Path(tmp)
        stdin = str(root / "input.json")
        Path(stdin).write_text("{}\n")
        warm_calls, warm_lat = bench_warm(root, args.count, stdin)
        fresh_calls, fresh_lat = bench_fresh(root, args.fresh or args.count)
        print(f"{args.count} warm runs, {args.fresh or args.count} fresh runs (paced)")
        print(_summary("warm spawn() call", warm_calls))
        print(_summary("warm request -> first instruction", warm_lat))
        print(_summary("fresh Popen() call", fresh_calls))
        print(_summary("fresh request -> first instruction", fresh_lat))
        ratio = statistics.median(fresh_lat) / statistics.median(warm_lat)
        print(f"latency ratio fresh/warm (medians): {ratio:.1f}x")
        if args.burst:
            issued, median, last = bench_burst(root, args.burst, stdin)
            print(
                f"burst of {args.burst}: all spawn() calls issued in {issued:.2f} s,"
                f" median start latency {median * 1000:.1f} ms,"
                f" last job started {last:.2f} s after the first request"
            )


if __name__ == "__main__":
    main()
