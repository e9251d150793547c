"""The supervisor's sleep between ticks (`wfsched.daemon.wakeup.Waiter`): woken by
a watched fd or a signal, never by nothing, and awake before a due instant."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from wfsched.daemon.wakeup import Waiter


@pytest.fixture
def waiter() -> Iterator[Waiter]:
    made = Waiter(early=0.05)
    yield made
    made.close()


def never() -> bool:
    return False


def test_a_quiet_wait_lasts_its_timeout(waiter: Waiter) -> None:
    started = time.monotonic()
    assert waiter.wait(0.05, never) is False
    assert time.monotonic() - started >= 0.05
    assert waiter.overslept >= 0


def test_a_watched_fd_ends_the_wait_at_once(waiter: Waiter) -> None:
    read_end, write_end = os.pipe()
    try:
        waiter.watch(read_end)
        os.write(write_end, b"x")
        started = time.monotonic()
        assert waiter.wait(30, never) is True
        assert time.monotonic() - started < 5
        waiter.unwatch(read_end)
        waiter.unwatch(read_end)  # twice, or never watched: ignored
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_watched_fd_with_a_drain_is_drained_by_the_wait_it_ends(waiter: Waiter) -> None:
    """The store's commit watch stays readable until read: the wait it ends
    reads it, so the next wait (a drain's, a fault episode's) sleeps."""
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    drained: list[bytes] = []
    try:
        waiter.watch(read_end, lambda: drained.append(os.read(read_end, 64)))
        os.write(write_end, b"x")
        assert waiter.wait(30, never) is True
        assert drained == [b"x"]
        assert waiter.wait(0.01, never) is False
    finally:
        waiter.unwatch(read_end)
        os.close(read_end)
        os.close(write_end)


def test_a_signal_ends_the_wait_at_once(waiter: Waiter) -> None:
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        started = time.monotonic()
        assert waiter.wait(30, never) is True
        assert time.monotonic() - started < 5
        # The wakeup byte was consumed: the next wait sleeps again.
        assert waiter.wait(0.01, never) is False
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_stop_request_means_no_sleep_at_all(waiter: Waiter) -> None:
    started = time.monotonic()
    assert waiter.wait(30, lambda: True) is False
    assert waiter.wait_until_due(30, True, lambda: True, pytest.fail) is False
    assert time.monotonic() - started < 5


def test_before_a_due_instant_it_prewakes_once_and_sleeps_to_the_instant(
    waiter: Waiter,
) -> None:
    prewakes: list[float] = []
    started = time.monotonic()
    woken = waiter.wait_until_due(0.1, True, never, lambda: prewakes.append(time.monotonic()))
    assert woken is False
    ended = time.monotonic()
    assert len(prewakes) == 1
    assert prewakes[0] - started >= 0.1 - 0.05  # epoll slept until `early` before it
    assert ended - started >= 0.1 - 0.05 and ended >= prewakes[0]


def test_the_sleep_after_the_prewake_is_in_epoll_and_still_woken_by_an_exit() -> None:
    """After the prewake it sleeps (no CPU burnt spinning), and an fd that
    becomes readable then still ends the wait at once."""
    waiter = Waiter(early=5.0)
    read_end, write_end = os.pipe()
    try:
        waiter.watch(read_end)
        cpu = time.process_time()
        started = time.monotonic()
        woken = waiter.wait_until_due(
            5.0, True, never, lambda: threading.Timer(0.3, os.write, (write_end, b"x")).start()
        )
        assert woken is True
        assert 0.2 < time.monotonic() - started < 4
        assert time.process_time() - cpu < 0.1
    finally:
        waiter.close()
        os.close(read_end)
        os.close(write_end)


def test_no_prewake_when_not_due_or_when_woken_early(waiter: Waiter) -> None:
    assert waiter.wait_until_due(0.01, False, never, pytest.fail) is False
    read_end, write_end = os.pipe()
    try:
        waiter.watch(read_end)
        os.write(write_end, b"x")
        assert waiter.wait_until_due(30, True, never, pytest.fail) is True
    finally:
        waiter.unwatch(read_end)
        os.close(read_end)
        os.close(write_end)


def test_close_unhooks_the_signal_wakeup() -> None:
    made = Waiter()
    made.close()
    assert signal.set_wakeup_fd(-1) == -1


@pytest.mark.parametrize(
    ("early", "timeout", "epoll"), [(0.0, 0.0105, [0.009]), (0.005, 0.0205, [0.0155, 0.004])]
)
def test_the_last_milliseconds_before_a_due_instant_are_slept_to_the_microsecond(
    early: float, timeout: float, epoll: list[float]
) -> None:
    """epoll's timeout is whole milliseconds rounded up, so a wake at the
    instant was up to a millisecond late: epoll now sleeps to within one or
    two milliseconds of it (after the prewake, when there is one) and a
    nanosecond-timer sleep does the rest. The clock here stands still, so
    the plain sleep is asked for everything epoll was not."""
    now = 100.0
    slept: list[float] = []
    waiter = Waiter(early=early, monotonic=lambda: now, sleep=slept.append)
    selects: list[float | None] = []
    real = waiter._selector.select

    def select(timeout: float | None = None) -> list[object]:
        selects.append(timeout)
        return real(0)

    waiter._selector.select = select  # type: ignore[method-assign]
    prewakes: list[int] = []
    try:
        assert waiter.wait_until_due(timeout, True, never, lambda: prewakes.append(1)) is False
    finally:
        waiter.close()
    assert selects == [pytest.approx(t) for t in epoll]
    assert slept == [pytest.approx(early or timeout)]
    assert prewakes == ([1] if early else [])
