"""Layer 2: what is left of a dead shim's session is terminated, and only that.

A dead shim's pid names its session only while something of that session
lives (the kernel keeps the pid allocated meanwhile). Once the session is
empty the pid is free: after a long downtime it may belong to an unrelated
process that started its own session, which must never be signalled.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from tests.daemon import wait_for
from tests.fakes import FakeControl
from tests.test_supervisor_loop import T0, Harness
from wfsched.process import launcher
from wfsched.process.launcher import ShimHandle


class ProcControl(FakeControl):
    """The fake launcher, with liveness and session signals from the real /proc."""

    def alive(self, handle: ShimHandle) -> bool:
        return launcher.process_alive(handle)

    def signal_session(self, handle: ShimHandle, signum: int) -> bool:
        self.session_signals.append((handle.pid, signum))
        return launcher.signal_session(handle, signum)


def test_a_reused_shim_pid_that_leads_another_session_is_never_signalled(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    _, fake = h.control.spec("run-000001")
    h.control.alive_pids.discard(fake.pid)  # the shim died, with no exit record
    # Its pid now belongs to an unrelated session leader (pid reuse).
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        started = launcher.process_start_time(stranger.pid)
        assert started is not None
        with h.store.atomic():
            h.store.update_attempt(1, 1, shim_pid=stranger.pid, shim_start_time=started - 1)
        control = ProcControl(clock=h.clock)
        h.control = control
        h.supervisor = h.new_supervisor()
        h.supervisor.control = control
        h.supervisor.recover()
        run = h.runs.show("run-000001")
        assert run["state"] == "failed" and "abandoned" in run["reason"]
        assert stranger.poll() is None, "an unrelated process was signalled"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_dead_shims_own_session_is_still_terminated(tmp_path: Path) -> None:
    h = Harness(tmp_path / "store")
    h.define("a", cron="0 * * * *")
    h.tick_at(T0)
    _, fake = h.control.spec("run-000001")
    h.control.alive_pids.discard(fake.pid)
    # A "shim" that led its own session, started a job in it and died: the
    # job is left in the session whose id is the dead shim's pid.
    leader = subprocess.Popen(
        ["setsid", "sh", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True
    )
    assert leader.stdout is not None
    orphan = int(leader.stdout.readline())
    leader.wait()
    try:
        assert launcher.session_members(leader.pid) == [orphan]
        with h.store.atomic():
            h.store.update_attempt(1, 1, shim_pid=leader.pid, shim_start_time=12345)
        control = ProcControl(clock=h.clock)
        h.control = control
        h.supervisor = h.new_supervisor()
        h.supervisor.control = control
        h.supervisor.recover()
        assert (leader.pid, signal.SIGTERM) in control.session_signals
        wait_for(lambda: not launcher.session_members(leader.pid), 10, "the orphan's end")
        h.tick_at(T0 + 1)
        run = h.runs.show("run-000001")
        assert run["state"] == "failed" and "abandoned" in run["reason"]
    finally:
        subprocess.run(["kill", "-9", str(orphan)], check=False, capture_output=True)
