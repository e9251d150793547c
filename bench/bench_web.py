"""The web view over a big store: does every page answer within 300 ms?

    python bench/bench_web.py                                  # 10,000 schedules, 1,000,000 rows
    python bench/bench_web.py --schedules 1000 --rows 100000   # quick

A SQLite store seeded through `SQLiteStore` methods (not the CLI, which
would take an hour): `--schedules` schedules (one, `hot`, every minute;
the others hourly), `--rows` ledger rows ending now: `hot` holds a tenth of
them (one instant a minute), the others share the rest; every tenth row is
an admitted run that completed (every seventh of those failed), the rest
are skipped-overlap. Then each page is requested `--repeat` times through
the view's WSGI application in this process, over a read-only connection
as `wfsched web` opens it (the server's own cost, a few hundred
microseconds a request in waitress, is not included), and the median and
95th percentile are printed against the 300 ms target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import load_note, percentile, temp_store  # noqa: E402
from tests.webworld import WsgiClient  # noqa: E402
from wfsched.domain.definition import parse_definition  # noqa: E402
from wfsched.store import SQLiteStore, open_location, resolve_store  # noqa: E402
from wfsched.web.app import WebConfig  # noqa: E402
from wfsched.web.site import make_app  # noqa: E402

TARGET_MS = 300.0
MINUTE = 60
HOUR = 3600
INVOCATION = json.dumps(
    {
        "command": ["true"],
        "cwd": None,
        "env": {"TOKEN": "x"},
        "input": {},
        "timeout": None,
        "kill_grace": 10,
        "interrupt_exit_code": None,
    }
)


def definition_json(schedule_id: str, cron: str) -> str:
    text = (
        f'id = "{schedule_id}"\ndescription = "bench schedule {schedule_id}"\n'
        f'[trigger]\ncron = "{cron}"\ntimezone = "Europe/Berlin"\n'
        '[run]\ncommand = ["true"]\nenv = { TOKEN = "x" }\n'
    )
    return json.dumps(parse_definition(text, "bench").to_document(), sort_keys=True)


def seed(root: Path, schedules: int, rows: int, now: int) -> None:
    store = SQLiteStore(root)
    hot_rows = rows // 10
    other_each = max(1, (rows - hot_rows) // max(1, schedules - 1))
    template = definition_json("other-00000", "7 * * * *")
    with store.atomic():
        store.insert_schedules(
            [
                (
                    "hot",
                    definition_json("hot", "* * * * *"),
                    now - 100 * 86400,
                    now,
                    now + MINUTE,
                    False,
                )
            ]
            + [
                (
                    f"other-{i:05d}",
                    template.replace("other-00000", f"other-{i:05d}"),
                    now - 100 * 86400,
                    now - now % HOUR,
                    now - now % HOUR + HOUR + i % 3600,
                    False,
                )
                for i in range(1, schedules)
            ]
        )
    plans = [("hot", MINUTE, hot_rows)] + [
        (f"other-{i:05d}", HOUR, other_each) for i in range(1, schedules)
    ]
    batch: list[tuple[Any, ...]] = []
    count = 0
    store.defer_checkpoints()
    for schedule_id, step, total in plans:
        with store.atomic():
            for k in range(total):
                at = now - (total - k) * step
                count += 1
                if count % 10 == 0:
                    failed = count % 70 == 0
                    state = "failed" if failed else "completed"
                    seq = store.insert_run(schedule_id, "scheduled", at, 1, INVOCATION, at + 0.01)
                    store.insert_attempt(seq, 1, at + 0.02)
                    store.update_attempt(
                        seq, 1, state=state, finished_at=at + 4, exit_code=1 if failed else 0
                    )
                    store.update_run(
                        seq,
                        state=state,
                        exit_code=1 if failed else 0,
                        started_at=at + 0.02,
                        finished_at=at + 4 + count % 7,
                        attempt=1,
                        host="bench-host",
                    )
                    batch.append((schedule_id, at, None, None, 0, "admitted", None, 1, seq, at))
                else:
                    batch.append(
                        (
                            schedule_id,
                            at,
                            None,
                            None,
                            0,
                            "skipped-overlap",
                            "unfinished",
                            1,
                            None,
                            at,
                        )
                    )
                if len(batch) >= 50_000:
                    store.insert_occurrences(batch)
                    batch = []
            if batch:
                store.insert_occurrences(batch)
                batch = []
    store.checkpoint(quiet=False)
    store.close()


def measure(client: WsgiClient, url: str, repeat: int) -> list[float]:
    reply = client.get(url)  # warm: templates compiled, pages cached by SQLite
    assert reply.status == 200, (url, reply.status, reply.body[:300])
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        reply = client.get(url)
        samples.append((time.perf_counter() - started) * 1000)
        assert reply.status == 200
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--keep", action="store_true", help="keep the store")
    args = parser.parse_args()
    now = int(time.time())
    with temp_store(args.keep, "wfsched-bench-web-") as root:
        started = time.perf_counter()
        seed(root, args.schedules, args.rows, now)
        print(
            f"seeded {args.schedules:,} schedules, {args.rows:,} ledger rows"
            f" in {time.perf_counter() - started:.0f} s ({load_note()})"
        )
        location = resolve_store(str(root))
        app = make_app(
            WebConfig(open_store=lambda: open_location(location, create=False, read_only=True))
        )
        client = WsgiClient(app)
        first_run = app.store().find_runs(_filter(schedule_id="hot"), limit=1)[0].run_id
        last = f"other-{args.schedules - 1:05d}"
        pages = [
            ("schedules, first page", "/schedules"),
            ("schedules, a middle page", f"/schedules?after=other-{args.schedules // 2:05d}"),
            ("schedules, state filter (paused: none)", "/schedules?state=paused"),
            ("schedules, text filter", "/schedules?q=" + last),
            ("schedule hot (100k-row ledger)", "/schedules/hot"),
            ("runs, first page", "/runs"),
            ("runs of one schedule", "/runs?schedule=hot"),
            ("runs, state and host", "/runs?state=failed&host=bench-host"),
            ("runs, last 24 hours", f"/runs?since={_instant(now - 86400)}"),
            ("run", f"/runs/{first_run}"),
            ("timeline, 24 hours", "/timeline"),
            ("calendar, 90 days", "/calendar"),
            ("hosts", "/hosts"),
            ("status", "/status"),
        ]
        print(f"{'page':<42} {'median':>9} {'p95':>9}")
        worst = 0.0
        for label, url in pages:
            samples = measure(client, url, args.repeat)
            median, p95 = statistics.median(samples), percentile(samples, 95)
            worst = max(worst, p95)
            flag = "" if p95 <= TARGET_MS else "  over the target"
            print(f"{label:<42} {median:7.1f}ms {p95:7.1f}ms{flag}")
        app.close()
        print(f"worst p95 {worst:.1f} ms; target {TARGET_MS:.0f} ms")
        return 0 if worst <= TARGET_MS else 1


def _filter(**where: Any) -> Any:
    from wfsched.store.web_queries import RunFilter

    return RunFilter(**where)


def _instant(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


if __name__ == "__main__":
    sys.exit(main())
