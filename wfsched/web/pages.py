"""The pages: each reads through the operator API and renders one template.

Every URL is stable and carries its whole state in the query (filters,
page cursors), so a bookmarked or refreshed page shows the same view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from wfsched.api.admin import Admin
from wfsched.api.log_tail import STREAMS, log_tail
from wfsched.api.overview import RUN_KINDS, SCHEDULE_STATES, Overview
from wfsched.api.reads import Reads
from wfsched.api.run_ops import RUN_STATES, Runs
from wfsched.api.status import status
from wfsched.domain.timeutil import parse_instant, wall_clock
from wfsched.errors import UsageError
from wfsched.store.web_queries import RunFilter
from wfsched.web import charts
from wfsched.web.app import Response
from wfsched.web.timefmt import epoch_of, span_text, utc_text, zone_text

if TYPE_CHECKING:
    from wfsched.web.app import Request, WebApp

PAGE = 50
LANES = 25
NEXT_INSTANTS = 10
RUNNING_REFRESH = 2
MASK = "••••••"

ROUTES = [
    ("/", "schedules"),
    ("/schedules", "schedules"),
    ("/schedules/([^/]+)", "schedule"),
    ("/runs", "runs"),
    ("/runs/(run-[0-9]+)", "run"),
    ("/runs/(run-[0-9]+)/log", "log"),
    ("/timeline", "timeline"),
    ("/calendar", "calendar"),
    ("/hosts", "hosts"),
    ("/status", "status"),
]
"""(path pattern, Pages method): the one table of what the view serves."""

NAV = [
    ("/schedules", "Schedules"),
    ("/runs", "Runs"),
    ("/timeline", "Timeline"),
    ("/calendar", "Calendar"),
    ("/hosts", "Hosts"),
    ("/status", "Status"),
]


def template_globals() -> dict[str, Any]:
    return {
        "nav": NAV,
        "countdown": countdown_text,
        "utc": utc_text,
        "in_zone": zone_text,
        "epoch": epoch_of,
        "span": span_text,
        "link": _link,
    }


def countdown_text(seconds: float | None) -> str:
    """`in 2 h 03 min 05 s`, `in 42 s`, `due now`: what the page's script
    keeps counting (the same format, every second)."""
    if seconds is None:
        return ""
    if seconds <= 0:
        return "due now"
    whole = int(seconds)
    hours, minutes, rest = whole // 3600, whole % 3600 // 60, whole % 60
    if hours:
        return f"in {hours} h {minutes:02d} min {rest:02d} s"
    return f"in {minutes} min {rest:02d} s" if minutes else f"in {rest} s"


def _link(path: str, **query: Any) -> str:
    """`path?query` with the blank values left out (a stable, minimal URL)."""
    kept = {key: value for key, value in query.items() if value not in (None, "")}
    return f"{path}?{urlencode(kept)}" if kept else path


def _instant_arg(request: Request, name: str) -> float | None:
    value = request.arg(name)
    if value is None:
        return None
    try:
        return float(parse_instant(value))
    except ValueError as exc:
        raise UsageError(f"{name}: {exc} (write it like 2026-12-08T00:00:00Z)") from None


class Pages:
    def __init__(self, app: WebApp) -> None:
        self.app = app

    def _page(self, request: Request, name: str, title: str, **context: Any) -> Response:
        refresh = context.pop("refresh", self.app.config.refresh_seconds)
        return self.app.render(
            name,
            title=title,
            request=request,
            here=request.path,
            self_url=request.url,
            refresh=refresh,
            show_env=self.app.config.show_env,
            now=wall_clock(),
            **context,
        )

    def _masked(self, env: dict[str, str] | None) -> dict[str, str]:
        if not env:
            return {}
        return dict(env) if self.app.config.show_env else dict.fromkeys(env, MASK)

    def _runs_api(self) -> Runs:
        return Runs(self.app.store(), host=self.app.config.host)

    # -- 1. schedules ----------------------------------------------------------------

    def schedules(self, request: Request) -> Response:
        state = request.arg("state")
        text = request.arg("q")
        items, next_after = Overview(self.app.store()).schedules(
            state=state, text=text, after=request.arg("after"), limit=PAGE
        )
        return self._page(
            request,
            "schedules.html",
            "Schedules",
            items=items,
            states=SCHEDULE_STATES,
            state=state,
            q=text,
            next_url=_link("/schedules", state=state, q=text, after=next_after)
            if next_after
            else None,
        )

    # -- 2. a schedule ---------------------------------------------------------------

    def schedule(self, request: Request) -> Response:
        schedule_id = request.match[0]
        store = self.app.store()
        view = Reads(store).get(schedule_id)
        view["run"]["env"] = self._masked(view["run"].get("env"))
        try:
            upcoming = (
                Admin(store).next(schedule_id, NEXT_INSTANTS)
                if view["state"] not in ("deleted", "exhausted")
                else []
            )
        except UsageError:
            upcoming = []
        cursor = request.arg("cursor")
        ledger, next_cursor = Reads(store).occurrences(schedule_id, PAGE, cursor)
        runs, _ = Overview(store).runs(RunFilter(schedule_id=schedule_id), limit=10)
        durations = Overview(store).durations(schedule_id)
        return self._page(
            request,
            "schedule.html",
            f"Schedule {schedule_id}",
            s=view,
            upcoming=upcoming,
            ledger=ledger,
            cursor=cursor,
            next_url=_link(f"/schedules/{schedule_id}", cursor=next_cursor)
            if next_cursor
            else None,
            runs=runs,
            chart=charts.duration_chart(durations),
            next_epoch=epoch_of(view["next_due"]),
        )

    # -- 3. runs ---------------------------------------------------------------------

    def runs(self, request: Request) -> Response:
        state = request.arg("state")
        if state is not None and state not in RUN_STATES:
            raise UsageError(f"state must be one of {', '.join(RUN_STATES)}")
        where = RunFilter(
            schedule_id=request.arg("schedule"),
            state=state,
            host=request.arg("host"),
            kind=request.arg("kind"),
            since=_instant_arg(request, "since"),
            until=_instant_arg(request, "until"),
        )
        before = request.int_arg("before", 0) or None
        items, next_before = Overview(self.app.store()).runs(where, before, PAGE)
        for item in items:
            item["invocation"]["env"] = self._masked(item["invocation"].get("env"))
        filters = {
            "state": state,
            "schedule": where.schedule_id,
            "host": where.host,
            "kind": where.kind,
            "since": request.arg("since"),
            "until": request.arg("until"),
        }
        return self._page(
            request,
            "runs.html",
            "Runs",
            items=items,
            filters=filters,
            states=RUN_STATES,
            kinds=RUN_KINDS,
            next_url=_link("/runs", **filters, before=next_before) if next_before else None,
        )

    # -- 4. a run --------------------------------------------------------------------

    def run(self, request: Request) -> Response:
        api = self._runs_api()
        view = api.show(request.match[0])
        view["invocation"]["env"] = self._masked(view["invocation"].get("env"))
        attempt = request.int_arg("attempt", 0) or None
        logs = {}
        if view["attempts"]:
            for stream in STREAMS:
                logs[stream] = log_tail(api, view["run_id"], stream, attempt)
        unfinished = view["state"] in ("admitted", "running")
        return self._page(
            request,
            "run.html",
            f"Run {view['run_id']}",
            r=view,
            logs=logs,
            attempt=attempt,
            refresh=RUNNING_REFRESH if unfinished else self.app.config.refresh_seconds,
        )

    def log(self, request: Request) -> Response:
        """The tail of one stream as plain text (the page's link; no script needed)."""
        stream = request.arg("stream") or "stdout"
        attempt = request.int_arg("attempt", 0) or None
        tail = log_tail(self._runs_api(), request.match[0], stream, attempt)
        return Response(tail.text.encode("utf-8"), content_type="text/plain; charset=utf-8")

    # -- 5. timeline -----------------------------------------------------------------

    def timeline(self, request: Request) -> Response:
        hours = request.int_arg("hours", 24)
        after = request.arg("after")
        start, end, lanes, next_after, cut = Overview(self.app.store()).timeline(
            hours=hours, after=after, limit=LANES
        )
        return self._page(
            request,
            "timeline.html",
            "Timeline",
            chart=charts.timeline_chart(start, end, lanes),
            hours=hours,
            start=start,
            end=end,
            cut=cut,
            next_url=_link("/timeline", hours=hours, after=next_after) if next_after else None,
        )

    # -- 6. calendar -----------------------------------------------------------------

    def calendar(self, request: Request) -> Response:
        days = request.int_arg("days", 90)
        day_list, rows, next_after = Overview(self.app.store()).calendar(
            days=days, after=request.arg("after"), limit=LANES
        )
        return self._page(
            request,
            "calendar.html",
            "Calendar",
            chart=charts.calendar_chart(day_list, rows),
            days=days,
            next_url=_link("/calendar", days=days, after=next_after) if next_after else None,
        )

    # -- 7. hosts and leadership ------------------------------------------------------

    def hosts(self, request: Request) -> Response:
        return self._page(request, "hosts.html", "Hosts", st=status(self.app.store()))

    # -- 8. status -------------------------------------------------------------------

    def status(self, request: Request) -> Response:
        return self._page(request, "status.html", "Status", st=status(self.app.store()))
