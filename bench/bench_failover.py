"""Failover of the leader on a PostgreSQL store: SIGKILL, then SIGTERM.

Two supervisors ("hosts" a and b, each with its own local state directory
and runs root) share an empty PostgreSQL store. One-shots fall due two per
whole second (one-shot instants are whole seconds, so "every 0.5 s" is two
schedules per second) for `--duration` seconds. At random moments the
leader is SIGKILLed (`--kills` times) and restarted at once as the new
standby. At the end the leader gets SIGTERM and the handover is timed.

Reported, per kill: the takeover time from the SIGKILL to the standby
holding the lease (read from the database every 20 ms) and to its first
admission (the earliest run admitted after the kill), and the lateness
(admission time minus instant) of every instant that fell due during the
handover. Then: duplicates (an instant with more than one admission, a run
with more than one attempt) and instants without a ledger row, and the
SIGTERM handover time. Targets at the default lease (5 s, renewed every
1 s): takeover max <= 6 s after SIGKILL, < 1 s after SIGTERM, 0 duplicates,
0 instants without a ledger row.

    python bench/bench_failover.py --store postgresql:///wfsched_bench?host=/run/postgresql
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from common import Verdicts, cli, load_note, one_shot_definition, wfsched_argv, write_definitions


@dataclass
class Host:
    name: str
    state: Path
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)

    def start(self, store: str, args: argparse.Namespace) -> None:
        log = self.state / f"supervisor-{len(self.logs)}.log"
        self.logs.append(log)
        argv = [*wfsched_argv(), "--store", store, "supervise", "--host", self.name]
        argv += ["--lease", str(args.lease), "--lease-renew", str(args.lease_renew)]
        argv += ["--log-format", "json"]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env={**os.environ, "XDG_STATE_HOME": str(self.state)},
            )


def lease(conn: psycopg.Connection[tuple[int, int]]) -> tuple[int, int] | None:
    row = conn.execute(
        "SELECT epoch, pid FROM leader_lease WHERE released = 0"
        " AND expires_at > EXTRACT(EPOCH FROM clock_timestamp())"
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else None


def wait_leader(conn: psycopg.Connection[tuple[int, int]], not_pid: int, limit: float) -> float:
    """Seconds until a supervisor other than `not_pid` holds a live lease."""
    started = time.time()
    while time.time() - started < limit:
        held = lease(conn)
        if held is not None and held[1] != not_pid:
            return time.time()
        time.sleep(0.02)
    raise RuntimeError(f"no new leader after {limit}s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="an empty PostgreSQL store URL")
    parser.add_argument("--duration", type=float, default=120, help="seconds of instants [120]")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs of the leader [10]")
    parser.add_argument("--lease", type=float, default=5.0, help="lease seconds [5]")
    parser.add_argument("--lease-renew", type=float, default=1.0, help="renewal seconds [1]")
    parser.add_argument("--seed", type=int, default=None, help="random seed for kill moments")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"# bench_failover: {load_note()}")
    root = Path(tempfile.mkdtemp(prefix="wfsched-bench-failover-"))
    hosts = [Host(name, root / f"host-{name}") for name in ("a", "b")]
    for host in hosts:
        host.state.mkdir(parents=True)
    lead = 8
    start = math.ceil(time.time()) + lead
    seconds = int(args.duration)
    documents = [
        (
            f"s{second:04d}{half}",
            one_shot_definition(f"s{second:04d}{half}", start + second, "true"),
        )
        for second in range(seconds)
        for half in "ab"
    ]
    write_definitions(root / "defs", documents)
    cli(args.store, "apply", str(root / "defs"))
    instants = {name: start + int(name[1:5]) for name, _ in documents}
    conn = psycopg.connect(args.store, autocommit=True)
    for host in hosts:
        host.start(args.store, args)
        time.sleep(0.5)  # a first, then b: a leads
    kills: list[tuple[float, float]] = []
    try:
        spacing = args.duration / (args.kills + 1)
        for index in range(args.kills):
            moment = start + spacing * (index + 1) + rng.uniform(-spacing / 3, spacing / 3)
            time.sleep(max(0.0, moment - time.time()))
            held = lease(conn)
            if held is None:
                continue
            victim = next(h for h in hosts if h.proc is not None and h.proc.pid == held[1])
            assert victim.proc is not None
            victim.proc.send_signal(signal.SIGKILL)
            killed = time.time()
            victim.proc.wait()
            taken = wait_leader(conn, held[1], args.lease * 4)
            kills.append((killed, taken))
            victim.start(args.store, args)
        time.sleep(max(0.0, start + seconds + 3 - time.time()))
        held = lease(conn)
        assert held is not None
        leader = next(h for h in hosts if h.proc is not None and h.proc.pid == held[1])
        assert leader.proc is not None
        leader.proc.send_signal(signal.SIGTERM)
        termed = time.time()
        handed = wait_leader(conn, held[1], args.lease * 4)
        leader.proc.wait(60)
    finally:
        for host in hosts:
            if host.proc is not None and host.proc.poll() is None:
                host.proc.send_signal(signal.SIGTERM)
                host.proc.wait(60)
    return report(conn, args, instants, kills, handed - termed)


def report(
    conn: psycopg.Connection[tuple[int, int]],
    args: argparse.Namespace,
    instants: dict[str, int],
    kills: list[tuple[float, float]],
    sigterm: float,
) -> int:
    admitted: dict[str, list[float]] = {}
    for schedule_id, admitted_at in conn.execute(
        "SELECT r.schedule_id, r.admitted_at FROM runs r JOIN occurrences o ON o.run_seq = r.seq"
    ):
        admitted.setdefault(schedule_id, []).append(float(admitted_at))
    rows = {
        schedule_id: count
        for schedule_id, count in conn.execute(
            "SELECT schedule_id, COUNT(*) FROM occurrences WHERE summary = 0 GROUP BY schedule_id"
        )
    }
    attempts_twice = conn.execute(
        "SELECT COUNT(*) FROM (SELECT run_seq FROM attempts GROUP BY run_seq HAVING COUNT(*) > 1) t"
    ).fetchone()[0]
    duplicates = sum(1 for times in admitted.values() if len(times) > 1) + int(attempts_twice)
    missing = [name for name in instants if rows.get(name, 0) == 0]
    not_admitted = [name for name in instants if name not in admitted]
    all_admissions = sorted(t for times in admitted.values() for t in times)
    to_lease = [taken - killed for killed, taken in kills]
    to_admission = []
    settings = f"lease {args.lease:g}s, renew {args.lease_renew:g}s"
    print(f"\n{len(kills)} SIGKILLs of the leader ({settings})")
    for number, (killed, taken) in enumerate(kills, 1):
        first = next((t for t in all_admissions if t > killed), math.nan)
        to_admission.append(first - killed)
        during = sorted(
            (name for name, at in instants.items() if killed - 1 < at <= taken + 1),
            key=lambda name: instants[name],
        )
        late = [admitted[name][0] - instants[name] for name in during if name in admitted]
        print(
            f"  kill {number:2d}: lease taken after {taken - killed:.2f}s, first admission"
            f" after {first - killed:.2f}s; {len(during)} instants due during the handover,"
            f" lateness {', '.join(f'{x:.2f}' for x in late) or '-'} s"
        )
    verdicts = Verdicts()
    if to_lease:
        print(
            f"\ntakeover (SIGKILL to lease held): median {statistics.median(to_lease):.2f}s,"
            f" max {max(to_lease):.2f}s"
        )
        print(
            f"takeover (SIGKILL to first admission): median {statistics.median(to_admission):.2f}s,"
            f" max {max(to_admission):.2f}s"
        )
        verdicts.check("max takeover after SIGKILL", max(to_admission), 6.0 + 1e-9, "s", ".2f")
    print(f"handover after SIGTERM (to lease held): {sigterm:.3f}s")
    print(
        f"instants: {len(instants)}; admitted: {len(admitted)}; not admitted: {len(not_admitted)}"
    )
    verdicts.check("handover after SIGTERM", sigterm, 1.0, "s", ".3f")
    verdicts.require("duplicates", duplicates == 0, str(duplicates))
    verdicts.require("instants without a ledger row", not missing, str(len(missing)))
    return verdicts.print()


if __name__ == "__main__":
    sys.exit(main())
