"""Launch latency: the run keeper against a fresh interpreter per run.

Each job is `date +%s.%N` with stdout going to the attempt's stdout.log, so
the log holds the wall-clock instant the command was running; latency is that
instant minus the instant spawn() was called ("request to first
instruction", including the exec of `date` itself).

    python bench/bench_spawn.py            # 200 paced runs each way
    python bench/bench_spawn.py --burst 1000
    python bench/bench_spawn.py --bare     # without the supervisor's modules loaded
    python bench/bench_spawn.py --pipeline-pairs 7 --pipeline-count 200

`--pipeline-pairs N` instead compares, on one keeper, N alternating pairs of
back-to-back spawns one request at a time (`spawn()`, each reply awaited)
and pipelined in chunks of 64 (`spawn_many()`, as the supervisor launches a
burst chunk): medians of the last job's start after the first request and
of CPU per launch of the caller and the keeper.

By default this process first imports what `wfsched supervise` imports (the
CLI, the supervisor, the store), so it is as big as a real supervisor (about
27 MB resident) when it starts the launcher (the keeper is a fresh
interpreter, so its size does not depend on it; the figure is kept comparable
with earlier runs).

Paced runs wait for each job to finish before the next, so they measure one
launch on an idle host. A burst spawns back to back without waiting (the
issue's "1,000 launches must all start, the last < 5 s").

Besides latency, the warm runs and the burst report CPU per launch, split as
the kernel accounts it: the caller (this process, inside spawn() only), the
run keeper (its own utime + stime), and jobs (what the keeper reaped: its
cutime + cstime), with minor page faults of the keeper and per job. The
"job alone" line is the same `date` started directly by posix_spawn, so
"jobs" minus it is what spawning from the keeper adds to the job itself. CPU figures are far less
sensitive to other load on the host than latencies; the load average is
printed with them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wfsched.process.launcher import Launcher, LaunchSpec, read_exit_record

# What a per-run interpreter shim would minimally do: import the launcher and
# run the command with its logs redirected.
FRESH_SHIM = """
import os, subprocess, sys
import wfsched.process.launcher
with open(os.path.join(sys.argv[1], "stdout.log"), "ab") as out:
    subprocess.run(["date", "+%s.%N"], stdout=out, stdin=subprocess.DEVNULL, check=False)
"""


CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_counters(pid: int) -> dict[str, float]:
    """CPU seconds and minor faults of `pid` itself and of the children it reaped."""
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    f = raw[raw.rindex(b")") + 2 :].split()
    return {
        "minflt": int(f[7]),
        "cminflt": int(f[8]),
        "cpu": (int(f[11]) + int(f[12])) / CLK_TCK,
        "ccpu": (int(f[13]) + int(f[14])) / CLK_TCK,
    }


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class CpuSplit:
    """CPU per launch: caller (inside spawn()), run keeper, jobs."""

    def __init__(self, launcher: Launcher) -> None:
        assert launcher.server_pid is not None
        self.launcher = launcher
        self.server = launcher.server_pid
        self.caller = 0.0
        self.pids: set[int] = set()
        self.reported: set[int] = set()
        self.before = _proc_counters(self.server)

    def spawn(self, spec: LaunchSpec) -> None:
        t0 = time.process_time()
        self.pids.add(self.launcher.spawn(spec).pid)
        self.caller += time.process_time() - t0

    def finish(self, timeout: float = 60.0) -> str:
        """Wait until the keeper reaped every job (so their CPU is accounted)."""
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.launcher.fileno(), selectors.EVENT_READ)
            while not self.pids <= self.reported and time.monotonic() < deadline:
                if selector.select(timeout=0.5):
                    self.reported.update(self.launcher.drain_exits())
        after = _proc_counters(self.server)
        n = len(self.pids)
        server = (after["cpu"] - self.before["cpu"]) / n * 1e3
        shims = (after["ccpu"] - self.before["ccpu"]) / n * 1e3
        caller = self.caller / n * 1e3
        return (
            f"CPU per launch (ms): caller {caller:.2f}, run keeper {server:.2f},"
            f" jobs {shims:.2f}; total {caller + server + shims:.2f}."
            f" Minor faults per launch: keeper {(after['minflt'] - self.before['minflt']) / n:.0f},"
            f" job {(after['cminflt'] - self.before['cminflt']) / n:.0f}"
        )


def bench_job_alone(root: Path, count: int, stdin: str) -> str:
    """The benchmark's job without any shim: CPU and faults of `date` itself."""
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    before = os.times()
    faults0 = Path("/proc/self/stat").read_bytes()
    for i in range(count):
        out = os.open(str(root / f"alone-{i}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        inp = os.open(stdin, os.O_RDONLY)
        pid = os.posix_spawnp(
            "date",
            ["date", "+%s.%N"],
            env,
            file_actions=[(os.POSIX_SPAWN_DUP2, inp, 0), (os.POSIX_SPAWN_DUP2, out, 1)],
        )
        os.close(out)
        os.close(inp)
        os.waitpid(pid, 0)
    after = os.times()
    faults1 = Path("/proc/self/stat").read_bytes()
    cminflt = [int(raw[raw.rindex(b")") + 2 :].split()[8]) for raw in (faults0, faults1)]
    cpu = (after.children_user + after.children_system) - (
        before.children_user + before.children_system
    )
    return (
        f"job alone (`date` by posix_spawn): CPU {cpu / count * 1e3:.2f} ms,"
        f" minor faults {(cminflt[1] - cminflt[0]) / count:.0f} per run"
    )


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
    directory = _attempt_dir(root, name)  # logs and records side by side here
    return LaunchSpec(
        run_id=name,
        attempt=1,
        argv=("date", "+%s.%N"),
        cwd=None,
        env={"PATH": os.environ.get("PATH", os.defpath)},
        stdin_path=stdin,
        attempt_dir=directory,
        record_dir=directory,
        timeout=60,
        kill_grace=1,
    )


def bench_warm(root: Path, count: int, stdin: str) -> tuple[list[float], list[float], str]:
    calls, latencies = [], []
    launcher = Launcher()
    t0 = time.perf_counter()
    launcher.start()
    started = time.perf_counter() - t0
    try:
        assert launcher.server_pid is not None
        setup = (
            f"Launcher.start() {started * 1e3:.1f} ms;"
            f" run keeper RSS {_rss_kib(launcher.server_pid) / 1024:.1f} MiB"
        )
        # One unmeasured launch: the keeper's first spawn pays one-off costs.
        first = _spec(root, "warm-first", stdin)
        launcher.spawn(first)
        _wait_exit(first.attempt_dir, time.monotonic() + 10)
        time.sleep(0.1)
        launcher.drain_exits()
        split = CpuSplit(launcher)
        for i in range(count):
            spec = _spec(root, f"warm-{i}", stdin)
            requested = time.time()
            t0 = time.perf_counter()
            split.spawn(spec)
            calls.append(time.perf_counter() - t0)
            deadline = time.monotonic() + 10
            latencies.append(_started(spec.attempt_dir, deadline) - requested)
            _wait_exit(spec.attempt_dir, deadline)
        cpu = split.finish()
    finally:
        launcher.stop()
    return calls, latencies, f"{setup}\n{cpu}"


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


def bench_burst(root: Path, count: int, stdin: str) -> tuple[float, float, float, str]:
    """(seconds to issue all spawns, median start latency, last start latency, CPU split)."""
    specs = [_spec(root, f"burst-{i}", stdin) for i in range(count)]
    with Launcher() as launcher:
        split = CpuSplit(launcher)
        begin = time.time()
        requested = []
        for spec in specs:
            requested.append(time.time())
            split.spawn(spec)
        issued = time.time() - begin
        deadline = time.monotonic() + 60
        starts = [_started(spec.attempt_dir, deadline) for spec in specs]
        for spec in specs:
            _wait_exit(spec.attempt_dir, deadline)
        cpu = split.finish()
    lat = [s - r for s, r in zip(starts, requested, strict=True)]
    return issued, statistics.median(lat), max(starts) - begin, cpu


def _pipeline_side(
    launcher: Launcher, root: Path, name: str, count: int, chunk: int
) -> tuple[float, ...]:
    stdin = str(root / "input.json")
    specs = [_spec(root, f"{name}-{i}", stdin) for i in range(count)]
    server = launcher.server_pid or 0
    before = _proc_counters(server)
    begin = time.time()
    caller = time.process_time()
    if chunk <= 1:
        for spec in specs:
            launcher.spawn(spec)
    else:
        for at in range(0, count, chunk):
            answers = launcher.spawn_many(specs[at : at + chunk])
            assert all(hasattr(a, "pid") for a in answers), answers
    caller = time.process_time() - caller
    deadline = time.monotonic() + 120
    last = max(_started(spec.attempt_dir, deadline) for spec in specs) - begin
    for spec in specs:
        _wait_exit(spec.attempt_dir, deadline)
    after = _proc_counters(server)
    return last, caller / count * 1e3, (after["cpu"] - before["cpu"]) / count * 1e3


def pipeline_pairs(pairs: int, count: int, chunk: int = 64) -> None:
    results: dict[str, list[tuple[float, ...]]] = {"serial": [], "pipelined": []}
    with tempfile.TemporaryDirectory(prefix="wfsched-bench-") as tmp, Launcher() as launcher:
        root = Path(tmp)
        (root / "input.json").write_text("{}\n")
        print(_load_note())
        for pair in range(pairs):
            order = ["serial", "pipelined"] if pair % 2 == 0 else ["pipelined", "serial"]
            for side in order:
                size = 1 if side == "serial" else chunk
                results[side].append(_pipeline_side(launcher, root, f"{side}{pair}", count, size))
        print(_load_note())
    for side, rows in results.items():
        last, caller, keeper = (statistics.median(column) for column in zip(*rows, strict=True))
        print(
            f"{side:<10} last start {last * 1e3:8.1f} ms   CPU per launch: caller"
            f" {caller:.3f} ms, keeper {keeper:.3f} ms   (medians of {len(rows)})"
        )
    ratio = statistics.median(r[0] for r in results["pipelined"]) / statistics.median(
        r[0] for r in results["serial"]
    )
    print(f"last start, pipelined / serial: {ratio:.2f}")


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
    parser.add_argument(
        "--bare", action="store_true", help="do not import the supervisor's modules first"
    )
    parser.add_argument("--pipeline-pairs", type=int, default=0, help="serial vs pipelined")
    parser.add_argument("--pipeline-count", type=int, default=200, help="spawns per side")
    args = parser.parse_args()
    if args.pipeline_pairs:
        pipeline_pairs(args.pipeline_pairs, args.pipeline_count)
        return
    if not args.bare:
        for module in ("wfsched.cli.main", "wfsched.store", "wfsched.daemon.supervisor"):
            importlib.import_module(module)
    print(f"this process: {_rss_kib(os.getpid()) / 1024:.1f} MiB resident")
    with tempfile.TemporaryDirectory(prefix="wfsched-bench-") as tmp:
        root = Path(tmp)
        stdin = str(root / "input.json")
        Path(stdin).write_text("{}\n")
        print(_load_note())
        warm_calls, warm_lat, warm_cpu = bench_warm(root, args.count, stdin)
        alone = bench_job_alone(root, args.count, stdin)
        fresh_calls, fresh_lat = bench_fresh(root, args.fresh or args.count)
        print(f"{args.count} warm runs, {args.fresh or args.count} fresh runs (paced)")
        print(warm_cpu)
        print(alone)
        print(_summary("warm spawn() call", warm_calls))
        print(_summary("warm request -> first instruction", warm_lat))
        print(_summary("fresh Popen() call", fresh_calls))
        print(_summary("fresh request -> first instruction", fresh_lat))
        ratio = statistics.median(fresh_lat) / statistics.median(warm_lat)
        print(f"latency ratio fresh/warm (medians): {ratio:.1f}x")
        if args.burst:
            issued, median, last, cpu = bench_burst(root, args.burst, stdin)
            print(
                f"burst of {args.burst}: all spawn() calls issued in {issued:.2f} s,"
                f" median start latency {median * 1000:.1f} ms,"
                f" last job started {last:.2f} s after the first request"
            )
            print(f"  {cpu}")
        print(_load_note())


def _load_note() -> str:
    one, five, _ = os.getloadavg()
    return f"loadavg {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} CPUs"


if __name__ == "__main__":
    main()
