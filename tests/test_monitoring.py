"""docs/monitoring.md's alert rules and docs/grafana-dashboard.json against the
exporter: every name they use is exported with those labels, and each rule,
run by `promtool test rules` against sample series, fires where it should
and stays quiet where it should not."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from wfsched.daemon.metrics import (
    DURATION_BUCKETS,
    LATENCY_BUCKETS,
    SCHEDULE_GAUGES,
    TICK_BUCKETS,
    Buckets,
    Published,
    Snapshot,
)
from wfsched.daemon.metrics_render import Renderer

DOCS = Path(__file__).resolve().parent.parent / "docs"
TARGET_LABELS = {"job", "instance"}
"""Labels Prometheus adds to every scraped series."""


def rules_document() -> dict[str, Any]:
    text = (DOCS / "monitoring.md").read_text()
    after = text.split("<!-- alert-rules -->", 1)[1]
    block = after.split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


RULES = [rule for group in rules_document()["groups"] for rule in group["rules"]]


def exported() -> dict[str, set[str]]:
    """Sample name -> label names, from a snapshot with every family populated."""
    one = Published({"s": 1.0})
    snapshot = Snapshot(
        host="h",
        store_kind="sqlite",
        leader=True,
        lease_epoch=0,
        started_at=1.0,
        poll_interval=1.0,
        last_tick_at=2.0,
        last_tick_monotonic=2.0,
        executing=0,
        interrupted=0,
        blocked=0,
        tick_seconds=Buckets.empty(TICK_BUCKETS).observe(0.001),
        launch_latency=Buckets.empty(LATENCY_BUCKETS).observe(0.01),
        occurrences=Published({("s", "admitted", ""): 1}),
        runs=Published({("s", "completed"): 1}),
        schedule_gauges=MappingProxyType({name: one for name in SCHEDULE_GAUGES}),
        run_duration=Published({"s": Buckets.empty(DURATION_BUCKETS).observe(3.0)}),
    )
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(Renderer().render(snapshot).decode()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


EXPORTED = exported()
SELECTOR = re.compile(r"\b(wfsched_[a-z_]+|up)\b(\{[^}]*\})?")
GROUPING = re.compile(r"\b(?:by|on|without|ignoring)\s*\(([^)]*)\)")


def check_expression(expr: str) -> list[str]:
    """Problems with one PromQL expression: unknown names or labels."""
    problems = []
    used: set[str] = set(TARGET_LABELS)
    for name, matchers in SELECTOR.findall(expr):
        if name == "up":
            labels = set(TARGET_LABELS)
        elif name not in EXPORTED:
            problems.append(f"{name} is not exported")
            continue
        else:
            labels = EXPORTED[name] | TARGET_LABELS
        used |= labels
        for label in re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", matchers):
            if label not in labels:
                problems.append(f"{name} has no label {label}")
    for clause in GROUPING.findall(expr):
        for label in filter(None, (part.strip() for part in clause.split(","))):
            if label not in used:
                problems.append(f"grouping by {label}, which no series in it has")
    return problems


def test_the_rules_are_well_formed() -> None:
    names = [rule["alert"] for rule in RULES]
    assert len(names) == len(set(names)) >= 8
    for rule in RULES:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in ("page", "warn"), rule["alert"]
        assert rule["annotations"]["summary"].startswith("wfsched: "), rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "0s")), rule["alert"]
        assert not check_expression(rule["expr"]), (rule["alert"], check_expression(rule["expr"]))
        result_labels = set(TARGET_LABELS)
        for name, _ in SELECTOR.findall(rule["expr"]):
            result_labels |= EXPORTED.get(name, set())
        for text in rule["annotations"].values():
            for label in re.findall(r"\$labels\.([a-z_]+)", text):
                assert label in result_labels, (rule["alert"], label)


def test_the_checker_catches_unknown_names_and_labels() -> None:
    assert check_expression("wfsched_nonexistent > 0") == ["wfsched_nonexistent is not exported"]
    assert check_expression('wfsched_runs_total{status="x"}') == [
        "wfsched_runs_total has no label status"
    ]
    assert check_expression("sum by (host) (wfsched_runs_total)") == [
        "grouping by host, which no series in it has"
    ]


def test_the_dashboard_uses_only_exported_names() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    assert exprs and dashboard["title"] == "wfsched"
    for expr in exprs:
        assert SELECTOR.search(expr), expr
        assert not check_expression(expr), (expr, check_expression(expr))


# ------------------------------------------------------------ promtool


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    labels = {"job": "wfsched", "instance": "h:9464", **labels}
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def expect(alert: str, at: str, *firing: dict[str, str], value: str = "") -> dict[str, Any]:
    rule = next(rule for rule in RULES if rule["alert"] == alert)

    def annotations(labels: dict[str, str]) -> dict[str, str]:
        rendered = {}
        for key, text in rule["annotations"].items():
            text = re.sub(r"\{\{ \$labels\.([a-z_]+) \}\}", lambda m: labels[m[1]], text)
            rendered[key] = text.replace("{{ $value }}", value)
        return rendered

    alerts = []
    for labels in firing:
        full = {"severity": rule["labels"]["severity"], **labels}
        alerts.append({"exp_labels": full, "exp_annotations": annotations(full)})
    return {"eval_time": at, "alertname": alert, "exp_alerts": alerts}


TARGET = {"job": "wfsched", "instance": "h:9464"}
STORE = {"job": "wfsched"}
"""The labels of a store-wide alert: one per store, whichever supervisor reported it."""


def on(instance: str, name: str, values: str, **labels: str) -> dict[str, str]:
    """A series scraped from another supervisor of the same store."""
    every = {"job": "wfsched", "instance": instance, **labels}
    inner = ",".join(f'{key}="{value}"' for key, value in sorted(every.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


HA_PAIR: dict[str, Any] = {
    # A leader (h) and a standby (h2) of one store, both reporting the
    # store's series. "fine" succeeded recently on both: nothing fires,
    # though the standby of an older release reported a stale success
    # (h3, still scraped). "stuck" has not succeeded for two periods and
    # failed last: each alert fires once for the pair, not once a supervisor.
    "interval": "1m",
    "input_series": [
        *(
            on(instance, name, values, schedule=schedule)
            for instance in ("h:9464", "h2:9464")
            for schedule, name, values in (
                ("fine", "wfsched_schedule_period_seconds", "3600x300"),
                ("fine", "wfsched_schedule_last_success_timestamp_seconds", "0+60x300"),
                ("fine", "wfsched_schedule_created_timestamp_seconds", "0x300"),
                ("fine", "wfsched_schedule_next_due_timestamp_seconds", "3600+60x300"),
                ("fine", "wfsched_schedule_lateness_seconds", "60x300"),
                ("stuck", "wfsched_schedule_period_seconds", "3600x300"),
                ("stuck", "wfsched_schedule_last_success_timestamp_seconds", "0x300"),
                ("stuck", "wfsched_schedule_last_failure_timestamp_seconds", "60x300"),
                ("stuck", "wfsched_schedule_created_timestamp_seconds", "0x300"),
            )
        ),
        on("h3:9464", "wfsched_schedule_last_success_timestamp_seconds", "0x300", schedule="fine"),
        on("h3:9464", "wfsched_schedule_created_timestamp_seconds", "0x300", schedule="fine"),
        on("h3:9464", "wfsched_schedule_period_seconds", "3600x300", schedule="fine"),
        *(
            on(instance, "wfsched_occurrences_total", "0 0 0 1 1 1 1 1 1 1", **missed)
            for instance in ("h:9464", "h2:9464")
            for missed in ({"schedule": "m", "state": "skipped-misfire", "reason": "late"},)
        ),
        *(
            on(instance, "wfsched_supervisor_start_time_seconds", "0x300")
            for instance in ("h:9464", "h2:9464", "h3:9464")
        ),
        *(on(instance, "wfsched_schedules_blocked", "2x300") for instance in ("h:9464", "h2:9464")),
        on("h:9464", "wfsched_leader", "1x300", host="a"),
        on("h2:9464", "wfsched_leader", "0x300", host="b"),
    ],
    "alert_rule_test": [
        expect("WfschedNoRecentSuccess", "3h", {**STORE, "schedule": "stuck"}),
        expect("WfschedRunFailed", "1h", {**STORE, "schedule": "stuck"}),
        expect("WfschedRunOverdue", "3h"),
        expect(
            "WfschedRunsMissed",
            "5m",
            {**STORE, "schedule": "m", "state": "skipped-misfire", "reason": "late"},
        ),
        expect("WfschedScheduleBlocked", "3h", STORE, value="2"),
        expect("WfschedNoLeader", "3h"),
    ],
}

CASES: list[dict[str, Any]] = [
    {
        "interval": "1m",
        "input_series": [
            # late: due at 60 s, lateness 60 s; fine: due far ahead.
            series("wfsched_schedule_next_due_timestamp_seconds", "60x10", schedule="late"),
            series("wfsched_schedule_lateness_seconds", "60x10", schedule="late"),
            series("wfsched_schedule_next_due_timestamp_seconds", "100000x10", schedule="fine"),
            series("wfsched_schedule_lateness_seconds", "60x10", schedule="fine"),
            # Misses: one counted on a steady supervisor; on h2 the counter
            # drops at a restart (retention pruned history) and must not fire.
            series(
                "wfsched_occurrences_total",
                "0 0 0 1 1 1 1 1 1 1",
                schedule="s",
                state="skipped-misfire",
                reason="late",
            ),
            series("wfsched_supervisor_start_time_seconds", "0x10"),
            {
                "series": 'wfsched_occurrences_total{job="wfsched",instance="h2:9464",'
                'schedule="s",state="skipped-misfire",reason="late"}',
                "values": "5 5 5 3 3 3 3 3 3 3",
            },
            {
                "series": 'wfsched_supervisor_start_time_seconds{job="wfsched",instance="h2:9464"}',
                "values": "0 0 0 170 170 170 170 170 170 170",
            },
            # Latest outcome: broken failed after its success; recovered
            # succeeded after; never-ok failed and never succeeded.
            series("wfsched_schedule_last_failure_timestamp_seconds", "100x10", schedule="broken"),
            series("wfsched_schedule_last_success_timestamp_seconds", "50x10", schedule="broken"),
            series("wfsched_schedule_created_timestamp_seconds", "1x10", schedule="broken"),
            series(
                "wfsched_schedule_last_failure_timestamp_seconds", "100x10", schedule="recovered"
            ),
            series(
                "wfsched_schedule_last_success_timestamp_seconds", "200x10", schedule="recovered"
            ),
            series("wfsched_schedule_created_timestamp_seconds", "1x10", schedule="recovered"),
            series(
                "wfsched_schedule_last_failure_timestamp_seconds", "100x10", schedule="never-ok"
            ),
            series("wfsched_schedule_created_timestamp_seconds", "10x10", schedule="never-ok"),
            series("wfsched_schedules_blocked", "1x10"),
            # The loop's last tick stuck at 0 on h; h3 ticks (value = scrape time).
            series("wfsched_last_tick_timestamp_seconds", "0x10"),
            series("wfsched_poll_interval_seconds", "1x10"),
            {
                "series": 'wfsched_last_tick_timestamp_seconds{job="wfsched",instance="h3:9464"}',
                "values": "0+60x10",
            },
            {
                "series": 'wfsched_poll_interval_seconds{job="wfsched",instance="h3:9464"}',
                "values": "1x10",
            },
            series("up", "0x10"),
            series("wfsched_leader", "0x10", host="a"),
            # A disk-full episode from 1m on; an unreachable one over in a minute.
            series("wfsched_resource_fault", "0 1 1 1 1 1 1 1 1 1", kind="disk-full"),
            series("wfsched_resource_fault", "0 1 0 0 0 0 0 0 0 0", kind="unreachable"),
            series("wfsched_resource_fault", "0x10", kind="locked"),
        ],
        "alert_rule_test": [
            expect("WfschedRunOverdue", "1m"),
            expect("WfschedRunOverdue", "6m", {**STORE, "schedule": "late"}),
            expect(
                "WfschedRunsMissed",
                "5m",
                {**STORE, "schedule": "s", "state": "skipped-misfire", "reason": "late"},
            ),
            expect(
                "WfschedRunFailed",
                "1m",
                {**STORE, "schedule": "broken"},
                {**STORE, "schedule": "never-ok"},
            ),
            expect("WfschedScheduleBlocked", "3m", STORE, value="1"),
            expect("WfschedSupervisorStalled", "4m", TARGET),
            expect("WfschedSupervisorDown", "3m", TARGET),
            expect("WfschedNoLeader", "3m", {}),
            expect("WfschedResourceFault", "1m"),
            expect("WfschedResourceFault", "3m", {**TARGET, "kind": "disk-full"}),
        ],
    },
    {
        "interval": "1m",
        # Minute samples (hourly ones would go stale between samples).
        "input_series": [
            series("wfsched_schedule_period_seconds", "86400x3100", schedule="daily"),
            series("wfsched_schedule_last_success_timestamp_seconds", "0x3100", schedule="daily"),
            series("wfsched_schedule_created_timestamp_seconds", "0x3100", schedule="daily"),
            series("wfsched_schedule_period_seconds", "86400x3100", schedule="never"),
            series("wfsched_schedule_created_timestamp_seconds", "3600x3100", schedule="never"),
            series("wfsched_schedule_period_seconds", "86400x3100", schedule="healthy"),
            series(
                "wfsched_schedule_last_success_timestamp_seconds", "0+60x3100", schedule="healthy"
            ),
            series("wfsched_schedule_created_timestamp_seconds", "0x3100", schedule="healthy"),
            series("wfsched_leader", "1x3100", host="a"),
        ],
        "alert_rule_test": [
            expect("WfschedNoRecentSuccess", "47h"),
            expect(
                "WfschedNoRecentSuccess",
                "51h",
                {**STORE, "schedule": "daily"},
                {**STORE, "schedule": "never"},
            ),
            expect("WfschedNoLeader", "2h"),
        ],
    },
]


CASES.append(HA_PAIR)


def test_every_rule_has_a_promtool_case() -> None:
    tested = {item["alertname"] for case in CASES for item in case["alert_rule_test"]}
    assert tested == {rule["alert"] for rule in RULES}


def test_the_rules_fire_as_documented_under_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian/Ubuntu: apt-get install prometheus)")
    rules = tmp_path / "wfsched-rules.yml"
    rules.write_text(yaml.safe_dump(rules_document()))
    tests = tmp_path / "wfsched-rules-test.yml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": CASES},
            sort_keys=False,
        )
    )
    check = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    result = subprocess.run(
        [promtool, "test", "rules", tests.name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


STORE_WIDE = re.compile(
    r"\bwfsched_(?:runs_total|occurrences_total|schedule_[a-z_]+|runs_executing"
    r"|runs_interrupted|schedules_blocked)\b"
)
"""Series every supervisor of a store reports alike (docs/monitoring.md,
"Store-wide series"): summed over an HA pair they would count twice."""


def test_store_wide_series_are_taken_with_max_across_supervisors() -> None:
    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    exprs += [rule["expr"] for rule in RULES]
    for expr in exprs:
        for found in STORE_WIDE.finditer(expr):
            before = expr[: found.start()]
            assert re.search(r"\bmax(?: by \([^)]*\))? ?\((?:\s*increase\()?\s*$", before), expr
