"""Our analytics against Hermes's own report, ``hermes insights``, on stores Hermes's real writer made.

Two stores: ``tests/fixtures/small`` (hermes-agent 0.19's ``SessionDB``) and
``tests/fixtures/hermes_v022`` (Hermes v0.22.2's CLI and ``SessionDB``). Beside each
lies Hermes's report of it (``insights.json``, ``oracle/insights.json``), written by
``tests/fixtures/insights_oracle.py`` with Hermes's own ``InsightsEngine.generate``
(its clock pinned to the day boundary after the store's last day, its time zone UTC);
the test first makes the report again with that Hermes, in its venv, and holds the
file to it: the expected figures are Hermes's, never ours.

Each store is captured by one real Dagster run over its days (every asset), and
every figure of the report is held against our assets summed over the range:
equal, or differing by the rule docs/contract.md §11 gives for it (each such
place below names the difference it allows).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.basics import schemas
from tests.defs.harness import new_capture
from tests.fixtures.insights_oracle import window
from tests.support.environ import use_environment
from tests.support.hermes_venv import hermes_python

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = FIXTURES.parents[1]
#: (fixture folder, where its report lies, Hermes's interpreter)
STORES = {
    "hermes-0.19": (FIXTURES / "small", Path("insights.json"), lambda: Path(sys.executable)),
    "hermes-v0.22.2": (FIXTURES / "hermes_v022", Path("oracle") / "insights.json", hermes_python),
}
EVERY_ASSET = (*schemas.DATASETS, *schemas.ANALYTICS)
#: a sum of figures each rounded to the micro-dollar
COST_TOLERANCE = 1e-5
#: Hermes's notable sessions and the ranking of ours that holds each
NOTABLE = {
    "Longest session": "duration",
    "Most messages": "hermes_messages",
    "Most tokens": "hermes_tokens",
    "Most tool calls": "hermes_tool_calls",
}


def _days(folder: Path) -> list[str]:
    end, n = window(folder)
    last = dt.datetime.fromtimestamp(end, dt.UTC).date()
    return [(last - dt.timedelta(days=n - i)).isoformat() for i in range(n)]


@pytest.fixture(scope="module", params=sorted(STORES))
def both(request, tmp_path_factory):
    """(Hermes's report as saved, our analytics rows over the same days, by asset)."""
    folder, saved, python = STORES[request.param]
    root = tmp_path_factory.mktemp(request.param)
    today = root / "insights.json"
    subprocess.run(
        [str(python()), "-m", "tests.fixtures.insights_oracle", str(folder), "--out", str(today)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    report = json.loads((folder / saved).read_text(encoding="utf-8"))
    assert json.loads(today.read_text(encoding="utf-8")) == report, "the saved report is not Hermes's any more"
    cap = new_capture(root)
    shutil.copyfile(folder / "state.db", cap.store)
    days = _days(folder)
    with pytest.MonkeyPatch.context() as mp, dg.DagsterInstance.ephemeral() as instance:
        use_environment(mp, {**cap.environ(), "HERMES_ASSETS_WORKERS": "1"})
        assert cap.materialize(days[0], days[-1], instance=instance, select=EVERY_ASSET).success
    ours = {
        name: [
            row
            for path in sorted((cap.warehouse / name).glob("day=*/*.parquet"))
            for row in pq.read_table(path).to_pylist()
        ]
        for name in schemas.ANALYTICS
    }
    return report, ours


def _sum(rows: list[dict], key, names: tuple[str, ...]) -> dict:
    out: dict = defaultdict(lambda: dict.fromkeys(names, 0))
    for row in rows:
        for name in names:
            out[key(row)][name] += row[name] or 0
    return dict(out)


def _display(model: str | None) -> str:
    """A model as Hermes's report names it: its last path segment, ``unknown`` for none."""
    model = model or "unknown"
    return model.split("/")[-1] if "/" in model else model


def test_the_overview(both):
    report, ours = both
    overview, usage, channels = report["overview"], ours["hermes_daily_usage"], ours["hermes_daily_channels"]
    assert overview["total_sessions"] == sum(r["sessions"] for r in channels)
    assert overview["total_messages"] == sum(r["hermes_messages"] for r in channels)
    assert overview["total_tool_calls"] == sum(r["hermes_tool_calls"] for r in channels)
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert overview[f"total_{name}"] == sum(r[name] for r in usage), name
        assert overview[f"total_{name}"] == sum(r[name] for r in channels), name
    assert overview["total_tokens"] == sum(r["total_tokens"] for r in usage)
    assert overview["estimated_cost"] == pytest.approx(sum(r["hermes_cost_usd"] for r in usage), abs=COST_TOLERANCE)
    assert overview["actual_cost"] == pytest.approx(sum(r["actual_cost_usd"] or 0 for r in usage), abs=COST_TOLERANCE)
    assert overview["total_hours"] == pytest.approx(sum(r["session_seconds"] for r in channels) / 3600, abs=1e-6)


def test_the_models(both):
    report, ours = both
    names = (
        "hermes_sessions",
        "api_calls",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
        "total_tokens",
        "hermes_tool_calls",
        "hermes_cost_usd",
        "actual_cost_usd",
    )
    mine = _sum(ours["hermes_daily_usage"], lambda r: _display(r["model"]), names)
    theirs = {m["model"]: m for m in report["models"]}
    # a model with no figure Hermes counts (only sessions whose own model it is, with nothing beyond their
    # usage rows): a row of ours, none of Hermes's
    assert set(theirs) == {m for m, f in mine.items() if any(f[n] for n in names)}
    for model, hermes in theirs.items():
        got = mine[model]
        assert hermes["sessions"] == got["hermes_sessions"], model
        assert hermes["tool_calls"] == got["hermes_tool_calls"], model
        for name in ("api_calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            assert hermes[name] == got[name], (model, name)
        assert hermes["total_tokens"] == got["total_tokens"], model
        # documented: a session's own reasoning counter beyond its usage rows counts in ours only
        assert hermes["reasoning_tokens"] <= got["reasoning_tokens"], model
        assert hermes["cost"] == pytest.approx(got["hermes_cost_usd"], abs=COST_TOLERANCE), model
        assert hermes["actual_cost"] == pytest.approx(got["actual_cost_usd"], abs=COST_TOLERANCE), model


def test_the_platforms(both):
    report, ours = both
    names = ("sessions", "hermes_messages", "hermes_tool_calls", "hermes_total_tokens")
    mine = _sum(ours["hermes_daily_channels"], lambda r: r["channel"] or "unknown", names)
    theirs = {p["platform"]: p for p in report["platforms"]}
    assert set(theirs) == set(mine)
    for platform, hermes in theirs.items():
        got = mine[platform]
        assert hermes["sessions"] == got["sessions"], platform
        assert hermes["messages"] == got["hermes_messages"], platform
        assert hermes["tool_calls"] == got["hermes_tool_calls"], platform
        assert hermes["total_tokens"] == got["hermes_total_tokens"], platform


def test_the_tools(both):
    report, ours = both
    mine = {
        k: v["hermes_calls"]
        for k, v in _sum(ours["hermes_daily_tools"], lambda r: r["tool_name"], ("hermes_calls",)).items()
    }
    theirs = {t["tool"]: t["count"] for t in report["tools"]}
    assert theirs == {k: v for k, v in mine.items() if v}


def test_the_skills(both):
    report, ours = both
    rows = ours["hermes_daily_skills"]
    mine = _sum(rows, lambda r: r["skill"], ("loads", "edits", "actions"))
    last: dict[str, dt.datetime] = {}
    for r in rows:
        if r["last_used_at"] is not None:
            last[r["skill"]] = max(last.get(r["skill"], r["last_used_at"]), r["last_used_at"])
    summary = report["skills"]["summary"]
    assert summary["distinct_skills_used"] == len(mine)
    assert summary["total_skill_loads"] == sum(f["loads"] for f in mine.values())
    assert summary["total_skill_edits"] == sum(f["edits"] for f in mine.values())
    assert summary["total_skill_actions"] == sum(f["actions"] for f in mine.values())
    for skill in report["skills"]["top_skills"]:
        got = mine[skill["skill"]]
        assert (skill["view_count"], skill["manage_count"], skill["total_count"]) == (
            got["loads"],
            got["edits"],
            got["actions"],
        )
        if skill["last_used_at"] is not None:
            assert last[skill["skill"]].timestamp() == pytest.approx(skill["last_used_at"], abs=1e-3)


def test_the_activity(both):
    report, ours = both
    rows, activity = ours["hermes_activity"], report["activity"]
    by_day = _sum(rows, lambda r: r["weekday_name"], ("sessions",))
    by_hour = _sum(rows, lambda r: r["hour"], ("sessions",))
    assert {d["day"]: d["count"] for d in activity["by_day"]} == {
        d["day"]: by_day.get(d["day"], {"sessions": 0})["sessions"] for d in activity["by_day"]
    }
    assert {h["hour"]: h["count"] for h in activity["by_hour"]} == {
        h: by_hour.get(h, {"sessions": 0})["sessions"] for h in range(24)
    }
    active = sorted({r["day"] for r in rows})
    assert activity["active_days"] == len(active)
    streak = best = 1 if active else 0
    for a, b in zip(active, active[1:]):
        streak = streak + 1 if (dt.date.fromisoformat(b) - dt.date.fromisoformat(a)).days == 1 else 1
        best = max(best, streak)
    assert activity["max_streak"] == best


def test_the_top_sessions(both):
    report, ours = both
    rows = ours["hermes_top_sessions"]
    for notable in report["top_sessions"]:
        ranking = NOTABLE[notable["label"]]
        firsts = [r for r in rows if r["ranking"] == ranking and r["rank"] == 1]
        measure = "duration_seconds" if ranking == "duration" else ranking
        # Hermes takes the first largest of the sessions, the latest start first
        best = max(firsts, key=lambda r: (r[measure], r["started_at"]))
        assert notable["session_id"] == best["session_id"][:16], notable["label"]
        assert notable["date"] == best["started_at"].strftime("%b %d"), notable["label"]
        if ranking != "duration":
            unit = {"hermes_messages": "msgs", "hermes_tokens": "tokens", "hermes_tool_calls": "calls"}[ranking]
            value = f"{best[measure]:,}" if ranking == "hermes_tokens" else str(best[measure])
            assert notable["value"] == f"{value} {unit}", notable["label"]
