"""The disk's side of launch latency: how long an fdatasync takes here.

    python bench/bench_disk.py                   # 60 s in $TMPDIR, one every 50 ms
    python bench/bench_disk.py --seconds 300 --every 0.02 --dir /var/lib/wfsched

Every launch waits for one durable commit between its due instant and its
command's start (the attempt is marked before the command runs: SQLite's
WAL `fdatasync`, or PostgreSQL's WAL flush on the server's disk). So no
launch on a host can be reliably faster than that host's `fdatasync`: a
disk (or a virtual disk) that stalls a flush for 100 ms now and then puts
100 ms into the launch latency's maximum, whatever the scheduler does.

This writes one 4 KiB page at the end of a scratch file and fdatasyncs it,
every --every seconds for --seconds (the shape of a small WAL commit), in
--dir (default $TMPDIR), and prints the distribution and how many flushes
took longer than 10 and 20 ms: the latency bench's maximum target is 10 ms.
Run it on the file system that holds the store, on an otherwise idle host.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from common import load_note, percentile, summary_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long [60]")
    parser.add_argument("--every", type=float, default=0.05, help="seconds between flushes [0.05]")
    parser.add_argument("--dir", default=None, help="where the scratch file goes [$TMPDIR]")
    args = parser.parse_args()
    print(f"fdatasync of a 4 KiB append every {args.every * 1000:.0f} ms for {args.seconds:.0f} s;")
    print(f"  in {args.dir or tempfile.gettempdir()}; {load_note()}")
    page = os.urandom(4096)
    took: list[float] = []
    with tempfile.NamedTemporaryFile(dir=args.dir, prefix="wfsched-bench-disk-") as scratch:
        fd = scratch.fileno()
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            os.write(fd, page)
            started = time.perf_counter()
            os.fdatasync(fd)
            took.append(time.perf_counter() - started)
            time.sleep(args.every)
    if not took:
        print("no flush measured", file=sys.stderr)
        return 1
    ms = [t * 1000 for t in took]
    print(f"  {summary_ms(took)}; p99={percentile(ms, 99):.1f} ms")
    for bound in (10, 20, 100):
        slow = sum(1 for value in ms if value > bound)
        print(f"  over {bound:>3} ms: {slow} of {len(ms)} ({slow / len(ms):.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
