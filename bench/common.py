"""Shared helpers for the supervisor benchmarks (bench_latency, bench_burst,
bench_idle, bench_catchup).

Everything here drives the product the way an operator does: definitions go
through `wfsched apply` (or the `Admin` API where the CLI would dominate the
setup time), the supervisor is the real `wfsched supervise` process, stopped
with SIGTERM, and results are read back from the store and from files the
jobs themselves wrote.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wfsched.process.launcher import (
    ExitRecord,
    LaunchSpec,
    ShimHandle,
    read_exit_record,
    read_shim_record,
)

CLK_TCK = os.sysconf("SC_CLK_TCK")

# The job of every latency/burst benchmark: its first instruction records the
# wall clock into a file named after the run (`date` is a fresh exec, so this
# is "due instant to the job's first instruction" within ~1 ms of dash + date).
STAMP_COMMAND = 'date +%s.%N > "$BENCH_OUT/$WFSCHED_RUN_ID"'


def wfsched_argv() -> list[str]:
    """The console script beside this interpreter (not a pyenv shim, which
    adds a bash start-up to every call); $BENCH_WFSCHED (a command line)
    replaces it, e.g. to A/B a patched build of the same store format."""
    if os.environ.get("BENCH_WFSCHED"):
        return shlex.split(os.environ["BENCH_WFSCHED"])
    beside = Path(sys.executable).with_name("wfsched")
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-m", "wfsched"]


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def temp_store(keep: bool, prefix: str) -> Iterator[Path]:
    """A scratch directory holding `store/`, `defs/`, `out/` and the logs.

    On disk (not tmpfs) unless TMPDIR says otherwise: fsync costs are part of
    what the supervisor does per admission.
    """
    root = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield root
    finally:
        if keep:
            print(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def write_definitions(folder: Path, documents: Iterable[tuple[str, str]]) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    count = 0
    for name, text in documents:
        (folder / f"{name}.toml").write_text(text)
        count += 1
    return count


def one_shot_definition(
    schedule_id: str,
    at: float,
    command: str = STAMP_COMMAND,
    out_dir: Path | None = None,
    extra: str = "",
) -> str:
    env = f'env = {{ BENCH_OUT = "{out_dir}" }}\n' if out_dir is not None else ""
    return (
        f'id = "{schedule_id}"\n'
        "[trigger]\n"
        f'at = "{rfc3339(at)}"\n'
        "[run]\n"
        f"command = {json.dumps(command)}\n"
        f"{env}"
        f"{extra}"
    )


def cron_definition(
    schedule_id: str,
    cron: str,
    command: str | list[str],
    out_dir: Path | None = None,
    extra: str = "",
) -> str:
    env = f'env = {{ BENCH_OUT = "{out_dir}" }}\n' if out_dir is not None else ""
    return (
        f'id = "{schedule_id}"\n'
        "[trigger]\n"
        f'cron = "{cron}"\n'
        "[run]\n"
        f"command = {json.dumps(command)}\n"
        f"{env}"
        f"{extra}"
    )


def cli(store: Path | str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*wfsched_argv(), "--store", str(store), *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"wfsched {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
        )
    return proc


# -- PostgreSQL stores (`--store URL`) -------------------------------------------


def reset_postgres(url: str) -> None:
    """Drop wfsched's tables and functions in the scratch database `url`: the
    next open creates a fresh store there (the `--store URL` benchmarks start
    every measurement from an empty store, as on SQLite)."""
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


def scratch_store(url: str | None, root: Path) -> Path | str:
    """The store a benchmark writes: the database `url`, wiped (PostgreSQL), or
    `root/store` (a new SQLite store).

    A PostgreSQL store keeps this host's side (config, run directories) under
    the local state directory: pointed into `root` for this process and the
    commands it starts, so run directories of an earlier measurement (whose
    run ids the wiped database hands out again) are not in the way."""
    if url is None:
        return root / "store"
    reset_postgres(url)
    os.environ["XDG_STATE_HOME"] = str(root / "state")
    return url


def open_bench_store(store: Path | str, *, create: bool = False) -> Any:
    """The store behind `store` (a directory or a URL) through the same factory
    the CLI uses, so a benchmark's checks read either backend."""
    from wfsched.store import open_location, resolve_store

    opened = open_location(resolve_store(store), create=create)
    if opened is None:
        raise RuntimeError(f"no store at {store}")
    return opened


SUPERVISOR_APP = "wfsched-bench-supervisor"
"""The application_name the benchmarks give the supervisor's PostgreSQL
sessions, so its database backends can be told from the CLI's."""


def supervisor_store(store: Path | str) -> Path | str:
    """`store` as the supervisor is started on: a URL gets application_name
    SUPERVISOR_APP (the store keeps an application_name the URL sets)."""
    if isinstance(store, Path):
        return store
    return f"{store}{'&' if '?' in store else '?'}application_name={SUPERVISOR_APP}"


def backend_pids(url: str, application_name: str = SUPERVISOR_APP) -> list[int]:
    """The server processes serving `application_name`'s sessions on `url`'s
    database (pg_stat_activity's pid is the backend's pid: `pg_backend_pid()`
    of each such session)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND datname = current_database() ORDER BY pid",
            (application_name,),
        ).fetchall()
    return [int(pid) for (pid,) in rows]


# -- the supervisor process ----------------------------------------------------


@dataclass
class SupervisorProcess:
    proc: subprocess.Popen[bytes]
    log_path: Path
    started_wall: float

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def start_supervisor(
    store: Path | str,
    log_path: Path,
    *,
    max_concurrent_runs: int | None = None,
    poll_interval: float | None = None,
    extra: Sequence[str] = (),
    ready_timeout: float = 30.0,
    wake_early: float | None = None,
) -> SupervisorProcess:
    """`wfsched --store STORE supervise ...`, stderr to log_path; returns once
    the `started` event is logged (lock taken, recovery done).

    `wake_early` (seconds) replaces the supervisor's pre-wake spin
    (`wfsched.daemon.wakeup.WAKE_EARLY`) for an A/B of it: the supervisor is
    then started through `python -c` with the Waiter's default patched."""
    prefix = wfsched_argv()
    if wake_early is not None:
        patch = (
            "import sys, time, wfsched.daemon.wakeup as w;"
            " d = w.Waiter.__init__.__defaults__;"
            " w.Waiter.__init__.__defaults__ = (float(sys.argv.pop(1)), *d[1:]);"
            " from wfsched.entry import main; sys.argv[0] = 'wfsched'; main()"
        )
        prefix = [sys.executable, "-c", patch, repr(wake_early)]
    argv = [*prefix, "--store", str(store), "supervise", "--log-format", "json"]
    if max_concurrent_runs is not None:
        argv += ["--max-concurrent-runs", str(max_concurrent_runs)]
    if poll_interval is not None:
        argv += ["--poll-interval", str(poll_interval)]
    argv += list(extra)
    log = open(log_path, "wb")  # noqa: SIM115 - owned by the child from here on
    started = time.time()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    log.close()
    sup = SupervisorProcess(proc, log_path, started)
    deadline = time.monotonic() + ready_timeout
    while '"event": "ready"' not in sup.log_text():
        if proc.poll() is not None:
            raise RuntimeError(f"supervisor exited {proc.returncode}:\n{sup.log_text()}")
        if time.monotonic() > deadline:
            stop_supervisor(sup)
            raise RuntimeError(f"supervisor not ready after {ready_timeout}s:\n{sup.log_text()}")
        time.sleep(0.02)
    return sup


def stop_supervisor(sup: SupervisorProcess, timeout: float = 60.0) -> int:
    """SIGTERM (the documented stop), then wait; SIGKILL only if it hangs."""
    if sup.proc.poll() is None:
        sup.proc.send_signal(signal.SIGTERM)
        try:
            sup.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"!! supervisor {sup.pid} ignored SIGTERM for {timeout}s; SIGKILL")
            sup.proc.kill()
            sup.proc.wait()
    return sup.proc.returncode


def log_events(sup: SupervisorProcess) -> list[dict[str, Any]]:
    events = []
    for line in sup.log_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append({"event": "non-json-line", "line": line})
    return events


BAD_EVENTS = {
    "failed",
    "blocked",
    "preflight-rejected",
    "skipped-misfire",
    "skipped-overlap",
    "non-json-line",
}


def report_log_problems(sup: SupervisorProcess, expected: Iterable[str] = ()) -> int:
    """Print supervisor log lines that signal trouble; returns their number."""
    allowed = set(expected)
    bad = [e for e in log_events(sup) if e.get("event") in BAD_EVENTS - allowed]
    if bad:
        print(f"  supervisor log: {len(bad)} problem event(s), first ones:")
        for event in bad[:8]:
            print(f"    {json.dumps(event)[:300]}")
    return len(bad)


def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


# -- /proc -----------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of pid (not its children), in seconds."""
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    fields = raw[raw.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def exact_cpu_seconds(pid: int) -> float:
    """CPU time of all of pid's threads from /proc/<pid>/task/*/schedstat
    (nanoseconds): utime+stime count whole 10 ms clock ticks, too coarse for
    an idle process that runs well under a millisecond at a time."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def wakeups(pid: int) -> int:
    """Voluntary context switches of pid's main thread: one per sleep."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def reaped_cpu_seconds(pid: int) -> float:
    """cutime + cstime of pid: CPU of its children it has reaped (and theirs)."""
    raw = Path(f"/proc/{pid}/stat").read_bytes()
    fields = raw[raw.rindex(b")") + 2 :].split()
    return (int(fields[13]) + int(fields[14])) / CLK_TCK


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(p) for p in text.split()]


# -- the jobs' own timestamps ------------------------------------------------------


def read_stamps(out_dir: Path) -> dict[str, float]:
    stamps = {}
    for path in out_dir.iterdir():
        text = path.read_text().strip()
        if text:
            stamps[path.name] = float(text)
    return stamps


# -- statistics and verdicts -----------------------------------------------------------


def load_note() -> str:
    """The machine's load: benchmark figures mean little on a busy host."""
    one, five, _ = os.getloadavg()
    return f"loadavg {one:.2f} (1 min) {five:.2f} (5 min) on {os.cpu_count()} CPUs"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary_ms(values: Sequence[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"n={len(ms)} min={min(ms):.1f} median={statistics.median(ms):.1f}"
        f" p95={percentile(ms, 95):.1f} max={max(ms):.1f} ms"
    )


class Verdicts:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, bool]] = []

    def check(
        self,
        name: str,
        measured: float,
        limit: float,
        unit: str,
        fmt: str = ".1f",
        inclusive: bool = False,
    ) -> bool:
        """measured < limit, or <= with `inclusive` (a target written "at most")."""
        ok = measured <= limit if inclusive else measured < limit
        ratio = measured / limit if limit else math.inf
        bound = "<=" if inclusive else "<"
        self.rows.append(
            (name, f"{measured:{fmt}} {unit}", f"{bound} {limit:{fmt}} {unit} (x{ratio:.2f})", ok)
        )
        return ok

    def require(self, name: str, ok: bool, detail: str) -> bool:
        self.rows.append((name, detail, "", ok))
        return ok

    def print(self) -> int:
        print("\nTargets:")
        width = max(len(r[0]) for r in self.rows) if self.rows else 0
        for name, measured, target, ok in self.rows:
            print(f"  {'PASS' if ok else 'FAIL'}  {name:<{width}}  {measured:>14}  {target}")
        return 0 if all(r[3] for r in self.rows) else 1


# -- an in-process ProcessControl for Supervisor.tick() measurements ----------------


class NullControl:
    """Starts nothing: each spawn is recorded and its 'shim' exits at once
    with status 0, written as the real shim writes it (so ingestion is the
    production path)."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self.spawned: list[LaunchSpec] = []
        self._next_pid = 50000
        self._exited: list[int] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def spawn(self, spec: LaunchSpec) -> ShimHandle:
        self.spawned.append(spec)
        self._next_pid += 1
        return ShimHandle(self._next_pid, 1)

    def fileno(self) -> int:
        return self._read

    def warm(self) -> None:
        pass

    def encode_ahead(self, specs: Sequence[LaunchSpec]) -> None:
        pass

    def drain_exits(self) -> list[int]:
        exited, self._exited = self._exited, []
        return exited

    def alive(self, handle: ShimHandle) -> bool:
        return False

    def cancel(self, handle: ShimHandle) -> bool:
        return False

    def read_exit(self, record_dir: str) -> ExitRecord | None:
        return read_exit_record(record_dir)

    def read_shim(self, record_dir: str) -> ShimHandle | None:
        return read_shim_record(record_dir)

    def launch_locked(self, record_dir: str) -> bool:
        return False

    def signal_session(self, sid: int, signum: int) -> bool:
        return False


# -- metrics scrapes -----------------------------------------------------------


def metrics_url(sup: SupervisorProcess, timeout: float = 10.0) -> str:
    """The supervisor's /metrics URL, from its `metrics` log event (`--metrics
    127.0.0.1:0` lets the kernel choose the port)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in log_events(sup):
            if event.get("event") == "metrics":
                return f"http://{event['listen']}/metrics"
        time.sleep(0.02)
    raise RuntimeError(f"no metrics event in the supervisor log:\n{sup.log_text()}")


def scrape(url: str) -> tuple[float, int]:
    """One GET of /metrics: (seconds from request to the last byte, bytes)."""
    import urllib.request

    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
    return time.perf_counter() - t0, len(body)


class Scraper:
    """A thread scraping `url` every `every` seconds, as Prometheus would."""

    def __init__(self, url: str, every: float) -> None:
        import threading

        self.url, self.every = url, every
        self.times: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.times.append(scrape(self.url)[0])
            except OSError as exc:
                self.errors.append(str(exc))
