"""Requests for a run go to its host (PostgreSQL, two real supervisors).

Host a leads and starts the jobs; its supervisor is SIGKILLed (its run
keeper and the jobs live on) and host b takes the lease. `runs cancel` and
`runs resume` must then be carried out by host a's agent, a standby once it
is back: the job's process group is really terminated on a, and a resumed
attempt runs on a in its own state directory. While host a is lost, a cancel
fails the run at once saying so, and a resume is refused (exit 4) naming a.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psycopg

from tests.daemon import Daemon, utc_in, wait_for, wfsched, wfsched_json, write_definition
from tests.ha import Host, check_invariants, leader_then_standby, wait_leader


def _loop_job(folder: Path, name: str, pidfile: Path, out: Path, at: str) -> Path:
    """Runs until it is terminated (at most about 2 minutes): its pid in `pidfile`, a
    line in `out` when SIGTERM reaches it, another if it ran to its end."""
    script = (
        f"echo $$ > {pidfile}; trap 'echo terminated >> {out}; exit 143' TERM;"
        f" i=0; while [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo ran-to-end >> {out}"
    )
    return write_definition(
        folder,
        name,
        f'id = "{name}"\n[trigger]\nat = "{at}"\n[run]\ncommand = ["sh", "-c", "{script}"]\n',
    )


def _step_job(folder: Path, name: str, go: Path, out: Path, at: str) -> Path:
    """Keeps its progress in $WFSCHED_STATE_DIR: the first attempt does step 1,
    waits for `go` (at most 30 s) and exits with its interrupt_exit_code;
    an attempt that finds step 1 done says so and completes."""
    script = (
        'state=\\"$WFSCHED_STATE_DIR/progress\\";'
        ' if [ -f \\"$state\\" ]; then'
        ' echo \\"attempt $WFSCHED_ATTEMPT found $(cat \\"$state\\")'
        f' in $WFSCHED_RUN_DIR\\" >> {out};'
        " exit 0; fi;"
        ' echo step-1 > \\"$state\\";'
        f' echo \\"attempt $WFSCHED_ATTEMPT did step-1 in $WFSCHED_RUN_DIR\\" >> {out};'
        f" i=0; while [ ! -f {go} ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; exit 75"
    )
    return write_definition(
        folder,
        name,
        f'id = "{name}"\n[trigger]\nat = "{at}"\n'
        f'[run]\ncommand = ["sh", "-c", "{script}"]\ninterrupt_exit_code = 75\n',
    )


def _run(url: str, run_id: str) -> dict[str, object]:
    return wfsched_json(url, "runs", "show", run_id)


def _run_of(url: str, schedule: str) -> str:
    """The run id of the schedule's one run."""
    (item,) = wfsched_json(url, "runs", "--schedule", schedule)["items"]
    return str(item["run_id"])


def _column(url: str, sql: str, *params: object) -> str | None:
    """One value straight from the database: the polls below read the store
    this way, as a CLI process per poll costs seconds on a loaded machine."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()  # type: ignore[call-overload]
    return None if row is None else str(row[0])


def _state_of(url: str, schedule: str) -> str | None:
    return _column(url, "SELECT state FROM runs WHERE schedule_id = %s", schedule)


def _state(url: str, run_id: str) -> str:
    return str(_column(url, "SELECT state FROM runs WHERE seq = %s", int(run_id.split("-")[1])))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _requests(url: str) -> list[tuple[str, int, str, str | None]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [
            (str(kind), int(run), str(state), result)
            for kind, run, state, result in conn.execute(
                "SELECT kind, run_seq, state, result FROM requests ORDER BY seq"
            )
        ]


def _kill_leader_a(url: str, first: Daemon, second: Daemon) -> None:
    """SIGKILL host a's supervisor (its keeper and jobs live on); b leads."""
    first.proc.send_signal(signal.SIGKILL)
    first.wait_exit()
    wait_leader(url, [second])


def _end_jobs(*pidfiles: Path, go: Path | None = None) -> None:
    """Whatever a failed test left running ends now."""
    if go is not None:
        go.touch()
    for pidfile in pidfiles:
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)


def test_cancel_and_resume_of_runs_on_a_standby_host_are_carried_out_by_its_agent(
    pg_url: str, tmp_path: Path
) -> None:
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    defs, pidfile, out, go = tmp_path / "defs", tmp_path / "pid", tmp_path / "out", tmp_path / "go"
    steps, other_pid = tmp_path / "steps", tmp_path / "other-pid"
    first = a.supervise(pg_url, "--host-timeout", "30")
    first.wait_started()
    wait_leader(pg_url, [first])
    # b has one slot; a run still executing on a holds as many when the
    # resume comes: the resumed attempt takes a slot on a, its own host.
    second = b.supervise(pg_url, "--host-timeout", "30", "--max-concurrent-runs", "1")
    second.wait_started()
    again = None
    try:
        at = utc_in(1)
        for path in (
            _loop_job(defs, "loop", pidfile, out, at),
            _step_job(defs, "steps", go, steps, at),
            _loop_job(defs, "other", other_pid, tmp_path / "other-out", at),
        ):
            assert wfsched(pg_url, "create", str(path)).returncode == 0
        wait_for(
            lambda: pidfile.exists() and steps.exists() and other_pid.exists(),
            what="the jobs to start on host a",
        )
        loop, step = _run_of(pg_url, "loop"), _run_of(pg_url, "steps")
        assert {_run(pg_url, r)["host"] for r in (loop, step, _run_of(pg_url, "other"))} == {"a"}
        _kill_leader_a(pg_url, first, second)
        again = a.supervise(pg_url, "--host-timeout", "30")
        again.wait_started()

        job = int(pidfile.read_text())
        cancelled = wfsched(pg_url, "runs", "cancel", loop)
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.strip() == f"{loop} cancelled"
        # Recorded cancelled only once the process group was terminated on a.
        assert not _alive(job)
        assert out.read_text() == "terminated\n"
        run = _run(pg_url, loop)
        assert (run["state"], run["reason"], run["host"]) == ("failed", "cancelled", "a")
        assert f" cancelling run={loop}" in again.text()

        go.touch()  # attempt 1 of the step job exits 75, recorded by a's agent
        wait_for(lambda: _state(pg_url, step) == "interrupted", what="the interruption")
        assert _state_of(pg_url, "other") == "running"
        resumed = wfsched(pg_url, "runs", "resume", step)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert resumed.stdout.strip() == f"{step} attempt 2"
        wait_for(lambda: _state(pg_url, step) == "completed", what="attempt 2")
        run_dir = a.state / "wfsched"
        lines = steps.read_text().splitlines()
        assert len(lines) == 2, lines
        assert lines[0].startswith("attempt 1 did step-1 in ")
        assert lines[1].startswith("attempt 2 found step-1 in ")
        assert all(str(run_dir) in line for line in lines), lines
        run = _run(pg_url, step)
        assert run["host"] == "a"
        assert str(run["run_dir"]).startswith(str(run_dir))
        assert f" started run={step} schedule=steps attempt=2" in again.text()
        assert f"run={step}" not in second.text()
        assert [(kind, state) for kind, _, state, _ in _requests(pg_url)] == [
            ("cancel", "done"),
            ("resume", "done"),
        ]
    finally:
        _end_jobs(pidfile, other_pid, go=go)
        assert second.stop() == 0
        if again is not None:
            assert again.stop() == 0
        first.kill()
    check_invariants(pg_url, None, [a, b], resumed={int(step.split("-")[1]): 2})


def test_while_its_host_is_lost_a_cancel_fails_the_run_at_once_and_a_resume_is_refused(
    pg_url: str, tmp_path: Path
) -> None:
    a, b = Host(tmp_path, "a"), Host(tmp_path, "b")
    defs, pidfile, out, go = tmp_path / "defs", tmp_path / "pid", tmp_path / "out", tmp_path / "go"
    steps = tmp_path / "steps"
    # Long enough for the cancel to be asked while host a is silent, not lost.
    first, second = leader_then_standby(pg_url, a, b, "--host-timeout", "10")
    again = None
    try:
        at = utc_in(1)
        for path in (
            _step_job(defs, "steps", go, steps, at),
            _loop_job(defs, "loop", pidfile, out, at),
        ):
            assert wfsched(pg_url, "create", str(path)).returncode == 0
        wait_for(lambda: pidfile.exists() and steps.exists(), what="both jobs on host a")
        loop, step = _run_of(pg_url, "loop"), _run_of(pg_url, "steps")
        go.touch()
        wait_for(lambda: _state(pg_url, step) == "interrupted", what="the interruption")
        assert _state(pg_url, loop) == "running"
        _kill_leader_a(pg_url, first, second)
        job = int(pidfile.read_text())

        # Asked before host a counts as lost: answered once it does.
        cancelled = wfsched(pg_url, "runs", "cancel", loop)
        assert cancelled.returncode == 0, cancelled.stderr
        wait_for(
            lambda: _state(pg_url, loop) == "failed",
            timeout=30,
            what="the cancel of a run whose host is lost",
        )
        run = _run(pg_url, loop)
        reason = str(run["reason"])
        assert reason.startswith("abandoned: its host a could not be reached to cancel it")
        assert "its process may still run there" in reason
        assert _alive(job), "nobody could reach it"
        answer = _requests(pg_url)[0]
        assert answer[2] == "done"
        assert (answer[3] or "").startswith(
            f"{loop} failed: its host a could not be reached (no heartbeat since"
        )
        if "waits for host a's agent" not in cancelled.stdout:
            assert cancelled.stdout.strip() == answer[3]

        refused = wfsched(pg_url, "runs", "resume", step)
        assert refused.returncode == 4, refused.stdout + refused.stderr
        assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
        assert "host a is lost" in refused.stderr and "state directory" in refused.stderr
        assert len(_requests(pg_url)) == 1, "nothing recorded for a refused resume"
        assert _state(pg_url, step) == "interrupted"

        # Host a back: its agent terminates what the cancel could not reach
        # and discloses how it ended; the run stays failed.
        again = a.supervise(pg_url, "--host-timeout", "10")
        again.wait_started()
        wait_for(lambda: not _alive(job), what="host a's agent to terminate the job")
        wait_for(
            lambda: (
                "reported later"
                in str(_column(pg_url, "SELECT reason FROM runs WHERE schedule_id = 'loop'"))
            ),
            what="the disclosure of its real end",
        )
        run = _run(pg_url, loop)
        assert run["state"] == "failed"
        assert out.read_text() == "terminated\n"
    finally:
        _end_jobs(pidfile, go=go)
        assert second.stop() == 0
        if again is not None:
            assert again.stop() == 0
        first.kill()
    check_invariants(pg_url, None, [a, b])
