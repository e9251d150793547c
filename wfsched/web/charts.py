"""Chart geometry, computed on the server: the templates draw it as SVG.

No chart library runs in the browser; each function turns what the API
returned into shapes with coordinates, a CSS class per outcome and a title
(the tooltip), and the template writes them out (escaped like all text).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote_plus

from wfsched.api.overview import DAY, CalendarRow, Lane
from wfsched.web.timefmt import span_text, utc_text

LABEL_WIDTH = 190
LANE_HEIGHT = 22
CELL = 11
PRECEDENCE = ("failed", "completed", "running", "skipped", "other")
"""A calendar cell takes the first of these its day holds: a failure shows."""


def duration_chart(
    runs: list[dict[str, Any]], width: int = 640, height: int = 170
) -> dict[str, Any]:
    """Bars of the runs' durations, oldest on the left, on a scale from 0
    to the longest (rounded up to a readable figure)."""
    left, bottom, top = 60, 22, 10
    plot_w, plot_h = width - left - 10, height - bottom - top
    longest = max((run["seconds"] for run in runs), default=0.0)
    scale = _nice(longest)
    slot = plot_w / max(len(runs), 1)
    bars = []
    for index, run in enumerate(runs):
        h = max(1.0, plot_h * run["seconds"] / scale) if scale else 1.0
        bars.append(
            {
                "x": round(left + index * slot + slot * 0.1, 2),
                "y": round(top + plot_h - h, 2),
                "w": round(max(1.0, slot * 0.8), 2),
                "h": round(h, 2),
                "class": run["class"],
                "href": f"/runs/{run['run_id']}",
                "title": f"{run['run_id']} {run['state']}: {span_text(run['seconds'])}"
                f", started {utc_text(run['started_at'])}",
            }
        )
    ticks = [
        {"y": round(top + plot_h - plot_h * part, 2), "label": span_text(scale * part)}
        for part in (0.0, 0.5, 1.0)
    ]
    return {
        "width": width,
        "height": height,
        "left": left,
        "top": top,
        "plot_w": plot_w,
        "plot_h": plot_h,
        "bars": bars,
        "ticks": ticks,
    }


def timeline_chart(
    start: float, end: float, lanes: list[Lane], width: int = 1100
) -> dict[str, Any]:
    """One lane per schedule: runs as bars from start to finish (to now while
    running), skips and rejections as marks at their instant (a summary row
    as a band over its span); hour lines labelled in UTC."""
    plot_w = width - LABEL_WIDTH - 10
    span = max(end - start, 1.0)

    def x_of(epoch: float) -> float:
        return round(LABEL_WIDTH + plot_w * min(max(epoch - start, 0.0), span) / span, 2)

    rows = []
    for index, lane in enumerate(lanes):
        y = 24 + index * LANE_HEIGHT
        bars = [
            {
                "x": x_of(bar["start"]),
                "w": round(max(2.0, x_of(bar["end"]) - x_of(bar["start"])), 2),
                "class": bar["class"],
                "href": f"/runs/{bar['run_id']}",
                "title": f"{bar['run_id']} {bar['state']} (instant {bar['at']}"
                + (f", host {bar['host']}" if bar["host"] else "")
                + f"): {utc_text(bar['start'])} to {utc_text(bar['end'])}",
            }
            for bar in lane.bars
        ]
        marks = _merged_marks(lane.marks, x_of)
        rows.append({"y": y, "schedule_id": lane.schedule_id, "bars": bars, "marks": marks})
    hours = span / 3600
    step = 3600 * max(1, math.ceil(hours / 12))
    first = math.ceil(start / step) * step
    grid = [
        {"x": x_of(tick), "label": datetime.fromtimestamp(tick, UTC).strftime("%H:%M")}
        for tick in range(int(first), int(end) + 1, int(step))
    ]
    return {
        "width": width,
        "height": 30 + max(len(lanes), 1) * LANE_HEIGHT,
        "label_width": LABEL_WIDTH,
        "plot_w": plot_w,
        "lane_height": LANE_HEIGHT,
        "rows": rows,
        "grid": grid,
        "now_x": x_of(end),
    }


def calendar_chart(days: list[int], rows: list[CalendarRow]) -> dict[str, Any]:
    """A cell per day and schedule, coloured by its outcome, linking to the
    schedule's runs admitted that day; month starts labelled. Day labels and
    link bounds are computed once per column, not once per cell."""
    labels = [datetime.fromtimestamp(day * DAY, UTC).strftime("%Y-%m-%d") for day in days]
    bounds = [
        f"since={label}T00%3A00%3A00Z&until="
        + datetime.fromtimestamp((day + 1) * DAY, UTC).strftime("%Y-%m-%dT00%%3A00%%3A00Z")
        for label, day in zip(labels, days, strict=True)
    ]
    cells_rows = []
    for index, row in enumerate(rows):
        y = 22 + index * (CELL + 3)
        schedule = quote_plus(row.schedule_id)
        cells = []
        for column, day in enumerate(days):
            counts = row.cell(day)
            x = LABEL_WIDTH + column * (CELL + 2)
            if not counts:
                cells.append({"x": x, "class": "none", "href": None, "title": None})
                continue
            kind = next((name for name in PRECEDENCE if counts.get(name)), "other")
            summary = ", ".join(f"{counts[name]} {name}" for name in PRECEDENCE if counts.get(name))
            cells.append(
                {
                    "x": x,
                    "class": kind,
                    "href": f"/runs?schedule={schedule}&{bounds[column]}",
                    "title": f"{row.schedule_id} {labels[column]} (UTC): {summary}",
                }
            )
        cells_rows.append({"y": y, "schedule_id": row.schedule_id, "cells": cells})
    months = [
        {"x": LABEL_WIDTH + column * (CELL + 2), "label": labels[column][5:]}
        for column, label in enumerate(labels)
        if label.endswith(("-01", "-15")) or column == 0
    ]
    return {
        "width": LABEL_WIDTH + len(days) * (CELL + 2) + 10,
        "height": 30 + max(len(rows), 1) * (CELL + 3),
        "cell": CELL,
        "rows": cells_rows,
        "months": months,
    }


MERGE_PX = 3.0
"""Marks of one kind closer than this on a lane are drawn as one (a skip a
minute over a day would otherwise be 1,440 shapes on 900 pixels)."""


def _merged_marks(marks: list[dict[str, Any]], x_of: Any) -> list[dict[str, Any]]:
    drawn: list[dict[str, Any]] = []
    for mark in marks:
        x = x_of(mark["at"])
        width = round(max(2.0, x_of(mark["until"]) - x), 2) if mark["until"] else 0
        title = f"{mark['label']} {mark['state']}" + (
            f": {mark['reason']}" if mark["reason"] else ""
        )
        last = drawn[-1] if drawn else None
        if (
            last is not None
            and not width
            and not last["w"]
            and last["class"] == mark["class"]
            and x - last["x_end"] < MERGE_PX
        ):
            last["count"] += 1
            last["x_end"] = x
            last["title"] = f"{last['first']} .. {title} ({last['count']} marks)"
            continue
        drawn.append(
            {
                "x": x,
                "x_end": x,
                "w": width,
                "class": mark["class"],
                "title": title,
                "first": mark["label"],
                "count": 1,
            }
        )
    return drawn


def _nice(value: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten at or above `value` (0 stays 0)."""
    if value <= 0:
        return 0.0
    power = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 5, 10):
        if factor * power >= value:
            return float(factor * power)
    return float(10 * power)
