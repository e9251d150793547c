"""Layer 2: the real supervisor against jobs that attack what it trusts, a
shim killed under its job, a launcher killed over and over, and a stop that
lands while the supervisor starts."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.daemon import Daemon, define, utc_ago, wait_for, wfsched, wfsched_json
from wfsched.daemon.supervisor import ABANDONED


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def show(store: Path, run: str) -> dict:
    return wfsched_json(store, "runs", "show", run)


def children(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and parent(int(name)) == pid:
            found.append(int(name))
    return found


def parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


# What a job may try on the places it knows: its attempt directory (where the
# records used to be), its run directory, and the next attempt's directory.
ATTACKS = {
    "directories": "mkdir -p $A/exit.json $A/shim.json $A/exit.json.tmp",
    "symlinks": "ln -s /dev/zero $A/exit.json; ln -s $A/shim.json $A/shim.json;"
    " ln -s /nonexistent $A/exit.json.tmp",
    "garbage": "printf 'garbage' > $A/exit.json; printf '{\"pid\": 1}' > $A/shim.json",
    "deletion": "rm -rf $A/*.json $WFSCHED_INPUT",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_job_cannot_forge_or_destroy_its_records(
    store: Path, tmp_path: Path, attack: str
) -> None:
    ran = tmp_path / "other-ran"
    script = (
        "A=$WFSCHED_RUN_DIR/attempt-$WFSCHED_ATTEMPT; "
        + ATTACKS[attack]
        # ...and what the next launch of this run would write.
        + "; mkdir -p $WFSCHED_RUN_DIR/attempt-2/stdout.log; exit 7"
    )
    define(
        store,
        tmp_path,
        "hostile",
        f'[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sh", "-c", "{_escape(script)}"]\n',
    )
    define(
        store,
        tmp_path,
        "other",
        f'[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sh", "-c", "echo x >> {ran}"]\n',
    )
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        assert wfsched(store, "trigger", "hostile").returncode == 0
        wait_for(lambda: show(store, "run-000001")["state"] == "failed", what="the hostile run")
        run = show(store, "run-000001")
        assert run["exit_code"] == 7 and run["reason"] == "exited with code 7", run
        assert wfsched(store, "trigger", "other").returncode == 0
        wait_for(lambda: ran.exists(), what="the other schedule to run")
        assert daemon.proc.poll() is None, daemon.text()
        assert wfsched_json(store, "status")["blocked"] == []
    finally:
        assert daemon.stop() == 0, daemon.text()
    # A restart has nothing to trip over either.
    again = Daemon(store)
    try:
        again.wait_started()
        assert wfsched(store, "trigger", "other").returncode == 0
        wait_for(lambda: len(ran.read_text().split()) == 2, what="a run after the restart")
    finally:
        assert again.stop() == 0, again.text()
    assert "Traceback" not in daemon.text() + again.text()
    records = store / "records"
    assert records.stat().st_mode & 0o777 == 0o700


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def test_killing_only_the_shim_terminates_the_job_before_the_run_is_recorded(
    store: Path, tmp_path: Path
) -> None:
    pidfile = tmp_path / "job.pid"
    # The job ignores SIGTERM (so do its children): only kill_grace's SIGKILL ends it.
    script = f"trap '' TERM; echo $$ > {pidfile}; while :; do sleep 0.1; done"
    define(
        store,
        tmp_path,
        "stubborn",
        # A scheduled run (due at once): the overlap slot it holds is what
        # would stop the schedule's next instant from starting a second copy.
        f'[trigger]\nat = "{utc_ago(1)}"\n[run]\n'
        f'command = ["sh", "-c", "{script}"]\nkill_grace = "2s"\n'
        '[policy]\noverlap = "skip"\nmisfire = "latest"\nlateness = "1h"\n',
    )
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        job = int(wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="job"))
        shim = parent(job)
        assert shim is not None
        os.kill(shim, signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            wait_for(
                lambda: "terminating" in daemon.text(), timeout=30, what="the termination to start"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}; parent {shim}\n{daemon.text()}") from None
        # The job outlives its SIGTERM for kill_grace, and the run stays
        # running while any of it is alive: once it shows failed, the job is gone.
        while True:
            # Read before the run: if the run is still running after it, it
            # was running when its overlap slot was counted.
            active = wfsched_json(store, "get", "stubborn")["active_runs"]
            if (run := show(store, "run-000001"))["state"] != "running":
                break
            assert active == 1, "the run lost its overlap slot while its job ran"
            assert time.monotonic() - killed_at < 40, "the run was never recorded"
            time.sleep(0.05)
        assert wfsched_json(store, "get", "stubborn")["active_runs"] == 0
        assert run["state"] == "failed"
        assert not alive(job), "recorded while its job still ran"
        assert time.monotonic() - killed_at >= 1.5  # SIGKILL came only after the grace
        assert "external effects" in run["reason"]
    finally:
        assert daemon.stop() == 0, daemon.text()


def catches_sigterm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            mask = next(line for line in status if line.startswith("SigCgt:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize("moment", ["handler-installed", "launcher-forked"])
def test_a_stop_while_the_supervisor_starts_is_a_clean_exit(store: Path, moment: str) -> None:
    daemon = Daemon(store)
    if moment == "handler-installed":
        # The earliest a Python program can catch it: its entry point, while
        # the CLI is still being imported.
        wait_for(lambda: catches_sigterm(daemon.proc.pid), timeout=30, what="a handler")
    else:
        # The run keeper is being started: the supervisor is at its first work.
        wait_for(lambda: children(daemon.proc.pid), timeout=30, what="the launcher to be forked")
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.wait_exit() == 0, daemon.text()
    assert "Traceback" not in daemon.text() and "Error" not in daemon.text()


def test_a_stop_while_the_cli_is_still_imported_is_a_clean_exit(
    store: Path, tmp_path: Path
) -> None:
    """SIGTERM exactly while `wfsched supervise` imports its CLI (the longest
    part of its start, long before the supervisor's own handlers exist): the
    entry point's early handler catches it, and the supervisor, once up,
    exits at once, 0 and quiet. Without that handler the signal kills it."""
    script = tmp_path / "stop_during_import.py"
    script.write_text(
        "import os, signal, sys\n"
        "class StopDuringImport:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'wfsched.cli.main':\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "        return None\n"
        "sys.meta_path.insert(0, StopDuringImport())\n"
        f"sys.argv = ['wfsched', '--store', {str(store)!r}, 'supervise']\n"
        "from wfsched.entry import main\n"
        "main()\n"
    )
    for _ in range(3):
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=60
        )
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_the_supervisor_outlives_launchers_killed_while_they_start(
    store: Path, tmp_path: Path
) -> None:
    out = tmp_path / "ran"
    define(
        store,
        tmp_path,
        "job",
        f'[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sh", "-c", "echo x >> {out}"]\n',
    )
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for pid in children(daemon.proc.pid):
                # A child listed a moment ago may already be gone (reaped).
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.005)
        assert daemon.proc.poll() is None, daemon.text()
        assert "launcher-down" in daemon.text()
        assert wfsched(store, "trigger", "job").returncode == 0
        wait_for(lambda: out.exists(), timeout=30, what="a launch once a launcher is up")
        launcher = wfsched_json(store, "status")["launcher"]
        assert launcher["state"] == "up"
        assert launcher["last_error"] and launcher["since"]
    finally:
        assert daemon.stop() == 0, daemon.text()


def test_status_reports_no_launcher_without_a_supervisor(store: Path, tmp_path: Path) -> None:
    define(store, tmp_path, "job", '[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["true"]\n')
    assert wfsched_json(store, "status")["launcher"] is None


def test_an_early_stop_caught_for_another_command_is_delivered_when_it_turns_out_so() -> None:
    from wfsched.daemon import early_stop

    received: list[int] = []
    previous = signal.signal(signal.SIGHUP, lambda n, _f: received.append(n))
    try:
        early_stop.arm(["get", "supervise"])  # a schedule named "supervise"
        os.kill(os.getpid(), signal.SIGHUP)
        assert early_stop.caught() and received == []
        early_stop.disarm()  # click resolved `get`: the signal acts as it would have
        assert received == [signal.SIGHUP] and not early_stop.caught()
        assert signal.getsignal(signal.SIGTERM) is not early_stop._catch
    finally:
        signal.signal(signal.SIGHUP, previous)


# What a job that goes looking for its records (the store's private tree, a
# path it is never given) does to each of them: before it exits, while the
# keeper holds the attempt, and (exit.json) once more from a detached child
# right after the keeper wrote it, racing the supervisor's ingestion.
TAMPER = {
    "garbage": "printf garbage > $F",
    "deletion": "rm -f $F",
    "directory": "rm -f $F; mkdir $F",
    "symlink": "rm -f $F; ln -s /dev/zero $F",
}
RECORDS = ("exit.json", "shim.json")


def _hunting_job(record: str, kind: str, marks: Path) -> str:
    name = f"{record[:4]}-{kind}"
    attack = TAMPER[kind]
    after_exit = ""
    if record == "exit.json":
        # Detached (its own session): it outlives the run and waits for the
        # keeper's record (the one with an outcome) to destroy it again.
        after_exit = (
            f"setsid sh -c 'i=0; until grep -qs outcome $F || [ $i -gt 200 ]; do"
            f" sleep 0.01; i=$((i+1)); done; {attack}' </dev/null >/dev/null 2>&1 & "
        )
    return (
        "R=$WFSCHED_RUN_DIR/../../records/$WFSCHED_RUN_ID/attempt-$WFSCHED_ATTEMPT; "
        f"F=$R/{record}; export F; [ -e $R/shim.json ] || exit 99; {attack}; "
        f"touch {marks}/{name}; until [ -e {marks}/go ]; do sleep 0.05; done; "
        f"{after_exit}exit 7"
    )


def test_a_job_that_hunts_down_its_records_never_stops_the_supervisor(
    store: Path, tmp_path: Path
) -> None:
    """Each record (exit.json, shim.json) overwritten with garbage, deleted,
    replaced by a directory and by a symlink, by the job itself, with a
    supervisor crash (SIGKILL) and restart while the jobs hold their attempts.
    The job runs as the supervisor's user, so it can reach the private tree
    by computing the path; what must hold then: the supervisor never stops,
    each run is recorded either as it really ended or failed closed naming
    the record (its schedule blocked), the rest keeps running, and nothing
    is left for a restart to trip over."""
    marks = tmp_path / "marks"
    marks.mkdir()
    ran = tmp_path / "other-ran"
    cases = [(record, kind) for record in RECORDS for kind in TAMPER]
    for record, kind in cases:
        script = _hunting_job(record, kind, marks)
        define(
            store,
            tmp_path,
            f"{record[:4]}-{kind}",
            f'[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sh", "-c", "{_escape(script)}"]\n',
        )
    define(
        store,
        tmp_path,
        "other",
        f'[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sh", "-c", "echo x >> {ran}"]\n',
    )
    first = Daemon(store)
    first.wait_started()
    runs = {}
    for record, kind in cases:
        name = f"{record[:4]}-{kind}"
        assert wfsched(store, "trigger", name).returncode == 0
    wait_for(
        lambda: all((marks / f"{r[:4]}-{k}").exists() for r, k in cases),
        timeout=30,
        what="every job to tamper with its record",
    )
    for run in wfsched_json(store, "runs", "list")["items"]:
        runs[run["schedule_id"]] = run["run_id"]
    first.kill()  # the keeper keeps the jobs; the next supervisor re-adopts them
    second = Daemon(store)
    try:
        second.wait_started()
        (marks / "go").touch()
        wait_for(
            lambda: all(show(store, run)["state"] != "running" for run in runs.values()),
            timeout=30,
            what="every hunting run to be recorded",
        )
        blocked = {b["schedule_id"]: b["reason"] for b in wfsched_json(store, "status")["blocked"]}
        for record, kind in cases:
            name = f"{record[:4]}-{kind}"
            run = show(store, runs[name])
            assert run["state"] == "failed", (name, run)
            if run["exit_code"] == 7:
                assert run["reason"] == "exited with code 7", (name, run)
                assert name not in blocked
            else:
                # Failed closed: the record and what was wrong with it named.
                assert record == "exit.json", (name, run)
                assert run["reason"] == ABANDONED or run["reason"].startswith(
                    "unreadable records: "
                ), (name, run)
        # The keeper holds each attempt's lock on the file it opened: what the
        # job did to shim.json changes nothing, before or after a restart.
        for kind in TAMPER:
            assert show(store, runs[f"shim-{kind}"])["exit_code"] == 7
        # The keeper writes exit.json by rename over whatever the job left,
        # except a directory, which fails that run closed.
        directory = show(store, runs["exit-directory"])
        assert directory["reason"].startswith("unreadable records: ")
        assert "exit.json: not a regular file" in directory["reason"]
        assert "exit-directory" in blocked and "exit.json" in blocked["exit-directory"]
        assert wfsched(store, "trigger", "other").returncode == 0
        wait_for(lambda: ran.exists(), what="the other schedule to run")
        assert second.proc.poll() is None, second.text()
    finally:
        assert second.stop() == 0, second.text()
    third = Daemon(store)
    try:
        third.wait_started()
        assert wfsched(store, "trigger", "other").returncode == 0
        wait_for(lambda: len(ran.read_text().split()) == 2, what="a run after the restart")
        assert third.proc.poll() is None, third.text()
    finally:
        assert third.stop() == 0, third.text()
    logs = first.text() + second.text() + third.text()
    assert "Traceback" not in logs, logs


def test_files_a_job_left_where_its_resume_writes_refuse_the_resume_not_the_tick(
    store: Path, tmp_path: Path
) -> None:
    """An interrupted job leaves a directory where its input file goes and a
    file where its next attempt's directory goes: `runs resume` is refused,
    naming what is in the way, the run stays resumable, the supervisor keeps
    running; once the operator clears them, the resume runs attempt 2."""
    ran = tmp_path / "other-ran"
    script = (
        "if [ $WFSCHED_ATTEMPT = 1 ]; then rm -f $WFSCHED_INPUT; mkdir $WFSCHED_INPUT;"
        " echo junk > $WFSCHED_RUN_DIR/attempt-2; exit 75; fi; exit 0"
    )
    define(
        store,
        tmp_path,
        "pausing",
        '[trigger]\ncron = "0 0 1 1 *"\n[run]\n'
        f'command = ["sh", "-c", "{_escape(script)}"]\ninterrupt_exit_code = 75\n',
    )
    define(
        store,
        tmp_path,
        "other",
        f'[trigger]\ncron = "0 0 1 1 *"\n[run]\ncommand = ["sh", "-c", "echo x >> {ran}"]\n',
    )
    daemon = Daemon(store)
    try:
        daemon.wait_started()
        assert wfsched(store, "trigger", "pausing").returncode == 0
        wait_for(lambda: show(store, "run-000001")["state"] == "interrupted", what="interrupted")
        for resume in (("runs", "resume", "run-000001"),) * 2:
            result = wfsched(store, *resume)
            assert result.returncode == 1, result
            assert "resume refused: cannot prepare its directories:" in result.stderr
            assert result.stderr.count("\n") == 1, result.stderr
            assert show(store, "run-000001")["state"] == "interrupted"
        assert wfsched(store, "trigger", "other").returncode == 0
        wait_for(lambda: ran.exists(), what="the other schedule to run")
        assert daemon.proc.poll() is None, daemon.text()
        run_dir = store / "runs" / "run-000001"
        (run_dir / "input.json").rmdir()
        (run_dir / "attempt-2").unlink()
        result = wfsched(store, "runs", "resume", "run-000001")
        assert result.returncode == 0, result.stderr
        wait_for(lambda: show(store, "run-000001")["state"] == "completed", what="attempt 2")
    finally:
        assert daemon.stop() == 0, daemon.text()
    assert "Traceback" not in daemon.text()
