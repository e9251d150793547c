"""Back-to-back spawns on one run keeper: one request at a time (`spawn()`,
each reply awaited) against pipelined chunks (`spawn_many()`, as the
supervisor launches a burst chunk), alternating, on the same keeper.

    python bench/bench_pipeline.py                   # 7 pairs of 200 spawns
    python bench/bench_pipeline.py --pairs 5 --count 500 --chunk 64

Per side, medians over the pairs: seconds from the first request to the last
job's first instruction, and CPU per launch of the caller (inside the calls)
and of the keeper. Jobs are `date +%s.%N` (bench_spawn's)."""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench_spawn import _load_note, _proc_counters, _spec, _started, _wait_exit

from wfsched.process.launcher import Launcher


def one_side(
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--chunk", type=int, default=64, help="spawn_many chunk [64]")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, ...]]] = {"serial": [], "pipelined": []}
    with tempfile.TemporaryDirectory(prefix="wfsched-bench-") as tmp, Launcher() as launcher:
        root = Path(tmp)
        (root / "input.json").write_text("{}\n")
        print(_load_note())
        for pair in range(args.pairs):
            order = ["serial", "pipelined"] if pair % 2 == 0 else ["pipelined", "serial"]
            for side in order:
                chunk = 1 if side == "serial" else args.chunk
                results[side].append(one_side(launcher, root, f"{side}{pair}", args.count, chunk))
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


if __name__ == "__main__":
    main()
