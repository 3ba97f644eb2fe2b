"""The query recipes of the README and ``docs/querying.md``, executed.

Every ```sql block after a ``<!-- recipe: NAME -->`` marker in README.md (the
first query) and docs/querying.md (the others) runs
as written in DuckDB over the Parquet files of the captured small fixture
(only the ``'warehouse/`` prefix is pointed at the test's warehouse), and its
answer is checked against the same figure computed another way: from the
store itself, or from the files with pyarrow. The two usage recipes answer
the same question at two grains and must give the same totals, also on a
store where a session switched model midway and another is still open.
``make query``, the README's way in, opens the DuckDB shell where the
recipes' ``warehouse/`` paths resolve.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import dagster as dg
import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.defs.harness import SMALL_DAYS, copy_small, new_capture, read_all
from tests.support.environ import use_environment
from tests.support.hermes_writer import DAY_S, START_S, HermesWriter
from tests.support.hosts import HOST_FILES
from tests.support.skips import unavailable
from tests.support.v022 import ALL_ASSETS, V022, capture_fixture
from tests.support.v022 import oracle as v022_oracle

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
#: the README holds the first query; docs/querying.md every other recipe
PAGES = (README, REPO / "docs" / "querying.md")
RECIPES = (
    "tokens_and_cost_per_day",
    "tokens_and_cost_per_model_per_day",
    "tool_calls_by_tool_name",
    "sessions_per_channel",
    "transcript_of_one_session",
    "transcript_as_hermes_shows_it",
    "channels_over_a_range",
    "skills_over_a_range",
    "activity_by_weekday_and_hour",
    "top_sessions_of_a_range",
    "secrets_to_rotate",
    "where_a_secret_was_seen",
)
_BLOCK = re.compile(r"<!-- recipe: (\w+) -->\s*```sql\n(.*?)```", re.S)
USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def recipes() -> dict[str, str]:
    found: dict[str, str] = {}
    for page in PAGES:
        for name, sql in _BLOCK.findall(page.read_text(encoding="utf-8")):
            assert name not in found, f"recipe {name} twice"
            found[name] = textwrap.dedent(sql)  # a recipe in a list item is indented
    return found


def run(name: str, warehouse: Path) -> list[dict]:
    sql = recipes()[name].replace("'warehouse/", f"'{warehouse}/")
    con = duckdb.connect()
    try:
        cur = con.execute(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]
    finally:
        con.close()


def test_the_readme_has_every_recipe():
    found = recipes()
    assert sorted(found) == sorted(RECIPES)
    for name, sql in found.items():
        assert "read_parquet('warehouse/" in sql, name  # the path `make run` writes to


def test_tokens_and_cost_per_model_per_day(small_capture):
    got = run("tokens_and_cost_per_model_per_day", small_capture.warehouse)
    want: dict[tuple, dict] = defaultdict(lambda: defaultdict(float))
    for s in read_all(small_capture.warehouse, "hermes_sessions"):
        entries = s["usage_by_model"] or [{k: s[k] for k in (*USAGE, "model", "estimated_cost_usd", "actual_cost_usd")}]
        for u in entries:
            acc = want[(s["_day"], u["model"] or "(unknown)")]
            for k in (*USAGE, "estimated_cost_usd", "actual_cost_usd"):
                acc[k] += u.get(k) or 0
    assert [(str(r["day"]), r["model"]) for r in got] == sorted(want)
    for r in got:
        w = want[(str(r["day"]), r["model"])]
        for k in USAGE:
            assert (r[k] or 0) == w[k], (r, k)
        for k in ("estimated_cost_usd", "actual_cost_usd"):
            assert math.isclose(r[k] or 0.0, w[k], abs_tol=1e-6), (r, k)
    assert sum(r["output_tokens"] for r in got) > 0
    assert any(r["estimated_cost_usd"] for r in got)


def test_tool_calls_by_tool_name(small_capture):
    got = run("tool_calls_by_tool_name", small_capture.warehouse)
    rows = [r for r in read_all(small_capture.warehouse, "ai_gateway_messages_hermes") if r["part_type"] == "tool_call"]
    calls, sessions = defaultdict(int), defaultdict(set)
    for r in rows:
        calls[r["tool_name"]] += 1
        sessions[r["tool_name"]].add(r["session_id"])
    assert {r["tool_name"]: (r["calls"], r["sessions"]) for r in got} == {
        t: (n, len(sessions[t])) for t, n in calls.items()
    }
    assert [r["calls"] for r in got] == sorted((r["calls"] for r in got), reverse=True)
    assert len(got) > 5 and None not in calls  # D1: every call has its name


def test_sessions_per_channel_match_the_store(small_capture):
    got = run("sessions_per_channel", small_capture.warehouse)
    conn = sqlite3.connect(f"file:{small_capture.capture.store}?mode=ro", uri=True)
    try:
        store = {
            src: (n, m)
            for src, n, m in conn.execute("SELECT source, count(*), sum(message_count) FROM sessions GROUP BY source")
        }
    finally:
        conn.close()
    assert {r["channel"]: (r["sessions"], r["messages"]) for r in got} == store
    assert {"cli", "telegram", "cron", "subagent"} <= set(store)


def test_transcript_of_one_session_in_order(small_capture):
    sql = recipes()["transcript_of_one_session"]
    (session_id,) = re.findall(r"SET VARIABLE session_id = '([^']+)'", sql)
    got = run("transcript_of_one_session", small_capture.warehouse)
    table = None
    for day_file in sorted((small_capture.warehouse / "ai_gateway_messages_hermes").glob(HOST_FILES)):
        t = pq.read_table(day_file)
        t = t.filter(pc.equal(t.column("session_id"), session_id))
        if t.num_rows:
            table = t
    assert table is not None, f"{session_id} (the README's example) is not in the small fixture"
    assert [r["message_index"] for r in got] == list(range(table.num_rows))
    by_index = {r["message_index"]: r for r in table.to_pylist()}
    for r in got:
        want = by_index[r["message_index"]]
        assert (r["role"], r["part_type"]) == (want["role"], want["part_type"])
        if want["content_text"] is not None:
            assert r["text"] == want["content_text"]
        elif want["part_type"] == "tool_call":
            assert r["text"].startswith(want["tool_name"] + "(")
            assert json.loads(r["text"][len(want["tool_name"]) + 1 : -1]) == json.loads(want["tool_args"])
    # Hermes's own order: message ids never go back along the transcript
    mids = [int(by_index[i]["provider_uuid"]) for i in range(len(got)) if by_index[i]["provider_uuid"]]
    assert mids == sorted(mids)
    assert got[-1]["part_type"] == "status" and got[0]["role"] == "user"
    assert {"tool_call", "tool_result", "reasoning", "text"} <= {r["part_type"] for r in got}


def run_for_session(name: str, warehouse: Path, sid: str) -> list[dict]:
    """A recipe that sets ``session_id``, for another session than its example."""
    sql = re.sub(r"SET VARIABLE session_id = '[^']+'", f"SET VARIABLE session_id = '{sid}'", recipes()[name])
    con = duckdb.connect()
    try:
        cur = con.execute(sql.replace("'warehouse/", f"'{warehouse}/"))
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row)) for row in cur.fetchall()]
    finally:
        con.close()


def test_transcript_as_hermes_shows_it_on_a_019_store(small_capture):
    """A schema-22 store has no copies and no model-only rows: the transcript is every row
    Hermes keeps visible (live, or archived by a compaction), rewound rows out, in id order.
    (Against Hermes v0.22's own display view: tests/fidelity/test_hermes_v022.py.)"""
    messages = [r for r in read_all(small_capture.warehouse, "hermes_messages") if not r["source_deleted"]]
    rewound = {r["session_id"] for r in messages if r["active"] == 0 and not r["compacted"]}
    compacted = {r["session_id"] for r in messages if r["compacted"]}
    sids = sorted(rewound & compacted) or sorted(rewound)[:1] + sorted(compacted)[:1]
    assert sids, "the small fixture has a rewound and a compacted session"
    for sid in sids:
        want = sorted(r["id"] for r in messages if r["session_id"] == sid and (r["active"] != 0 or r["compacted"]))
        got = run_for_session("transcript_as_hermes_shows_it", small_capture.warehouse, sid)
        assert [r["id"] for r in got] == want, sid


@pytest.fixture(scope="module")
def v022_capture(tmp_path_factory):
    return capture_fixture(tmp_path_factory.mktemp("recipes-v022"))


def test_transcript_as_hermes_shows_it_is_hermes_display_view(v022_capture):
    """On the store Hermes v0.22.2 wrote, for every session: the rows of its own display view
    (``get_messages(sid, include_compacted=True)``, exported as the oracle), in its order:
    copies folded into their live row, compacted history kept, rewound and model-only rows out."""
    display = v022_oracle("display")
    assert sum(len(rows) for rows in display.values()) >= 100
    for sid, rows in display.items():
        got = run_for_session("transcript_as_hermes_shows_it", v022_capture.warehouse, sid)
        assert [r["id"] for r in got] == [m["id"] for m in rows], sid
        assert [r["role"] for r in got] == [m["role"] for m in rows], sid


# --------------------------------------------------------------------------
# what `hermes insights` answers: the recipes give Hermes's own report (v0.22.2's, of its store)
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hermes_insights():
    """Hermes v0.22.2's ``InsightsEngine.generate`` of the store (tests/fixtures/insights_oracle.py)."""
    return json.loads((V022 / "oracle" / "insights.json").read_text(encoding="utf-8"))


def test_channels_over_a_range_is_hermes_platforms(v022_capture, hermes_insights):
    got = {r["channel"]: r for r in run("channels_over_a_range", v022_capture.warehouse)}
    want = {p["platform"]: p for p in hermes_insights["platforms"]}
    assert sorted(got) == sorted(want) and len(want) > 1
    for name, p in want.items():
        row = got[name]
        assert (row["sessions"], row["messages"], row["tool_calls"], row["tokens"]) == (
            p["sessions"],
            p["messages"],
            p["tool_calls"],
            p["total_tokens"],
        ), name
    assert sum(r["hermes_cost_usd"] for r in got.values()) == pytest.approx(
        hermes_insights["overview"]["estimated_cost"], abs=1e-5
    )


@pytest.fixture(scope="module")
def small_analytics(tmp_path_factory):
    """The small fixture (hermes-agent 0.19's writer, skills loaded) captured with every asset in one run."""
    cap = new_capture(tmp_path_factory.mktemp("recipes-small-analytics"))
    copy_small(cap.home)
    with pytest.MonkeyPatch.context() as mp, dg.DagsterInstance.ephemeral() as instance:
        use_environment(mp, {**cap.environ(), "HERMES_ASSETS_WORKERS": "1"})
        assert cap.materialize(SMALL_DAYS[0], SMALL_DAYS[-1], instance=instance, select=ALL_ASSETS).success
    return cap


def test_skills_over_a_range_is_hermes_skills(small_analytics):
    got = run("skills_over_a_range", small_analytics.warehouse)
    want = json.loads((V022.parent / "small" / "insights.json").read_text(encoding="utf-8"))["skills"]["top_skills"]
    assert want, "the fixture loads skills"
    assert [(r["skill"], r["loads"], r["edits"], r["actions"]) for r in got] == sorted(
        ((s["skill"], s["view_count"], s["manage_count"], s["total_count"]) for s in want),
        key=lambda s: (-s[3], s[0]),
    )


def test_activity_by_weekday_and_hour_is_hermes_activity(v022_capture, hermes_insights):
    """Hermes's report ran in UTC (its clock pinned to a day boundary): its weekdays and hours are ours."""
    got = run("activity_by_weekday_and_hour", v022_capture.warehouse)
    by_day: dict[str, int] = defaultdict(int)
    by_hour: dict[int, int] = defaultdict(int)
    for r in got:
        by_day[r["weekday_name"]] += r["sessions"]
        by_hour[r["hour"]] += r["sessions"]
    activity = hermes_insights["activity"]
    assert {d["day"]: d["count"] for d in activity["by_day"] if d["count"]} == dict(by_day)
    assert {h["hour"]: h["count"] for h in activity["by_hour"] if h["count"]} == dict(by_hour)
    assert [(r["weekday"], r["hour"]) for r in got] == sorted((r["weekday"], r["hour"]) for r in got)


@pytest.mark.parametrize(
    ("ranking", "label"),
    [("hermes_messages", "Most messages"), ("hermes_tokens", "Most tokens"), ("hermes_tool_calls", "Most tool calls")],
)
def test_top_sessions_of_a_range_leads_with_hermes_notable_session(v022_capture, hermes_insights, ranking, label):
    sql = recipes()["top_sessions_of_a_range"].replace("'tokens';", f"'{ranking}';", 1)
    con = duckdb.connect()
    try:
        cur = con.execute(sql.replace("'warehouse/", f"'{v022_capture.warehouse}/"))
        got = [dict(zip([d[0] for d in cur.description], row)) for row in cur.fetchall()]
    finally:
        con.close()
    (notable,) = [t for t in hermes_insights["top_sessions"] if t["label"] == label]
    assert 0 < len(got) <= 10 and got[0]["session_id"][:16] == notable["session_id"]


def test_top_sessions_of_a_range_by_tokens(v022_capture):
    got = run("top_sessions_of_a_range", v022_capture.warehouse)
    assert 0 < len(got) <= 10
    assert [r["total_tokens"] for r in got] == sorted((r["total_tokens"] for r in got), reverse=True)


@pytest.mark.parametrize("name", RECIPES)
def test_recipes_on_a_warehouse_not_yet_written_fail_loudly(name, tmp_path):
    """Before the first capture the folders do not exist: DuckDB says so clearly (no silent zero)."""
    with pytest.raises(duckdb.IOException, match="No files found"):
        run(name, tmp_path / "warehouse")


# --------------------------------------------------------------------------
# the two usage recipes: one question, two grains, the same totals
# --------------------------------------------------------------------------

COSTS = ("estimated_cost_usd", "actual_cost_usd")


def _fold_models(per_model: list[dict]) -> dict[str, dict[str, float]]:
    """The per-model recipe's rows summed over the models of each day."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in per_model:
        for k in (*USAGE, *COSTS):
            out[str(r["day"])][k] += r[k] or 0
    return out


def assert_same_totals(per_day: list[dict], per_model: list[dict]) -> None:
    folded = _fold_models(per_model)
    assert [str(r["day"]) for r in per_day] == sorted(folded)
    for r in per_day:
        want = folded[str(r["day"])]
        for k in USAGE:
            assert (r[k] or 0) == want[k], (r, k)
        for k in COSTS:
            assert math.isclose(r[k] or 0.0, want[k], abs_tol=1e-5), (r, k)


def test_tokens_and_cost_per_day_is_the_per_model_recipe_summed_over_models(small_capture):
    per_day = run("tokens_and_cost_per_day", small_capture.warehouse)
    assert_same_totals(per_day, run("tokens_and_cost_per_model_per_day", small_capture.warehouse))
    sessions = defaultdict(int)
    for s in read_all(small_capture.warehouse, "hermes_sessions"):
        sessions[s["_day"]] += 1
    assert {str(r["day"]): r["sessions"] for r in per_day} == sessions
    assert sum(r["output_tokens"] for r in per_day) > 0


def _store_usage(db: Path) -> dict[tuple[str, str], dict[str, float]]:
    """(the session's start day, model) -> summed ``session_model_usage``, straight from the store."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT strftime('%Y-%m-%d', s.started_at, 'unixepoch'), u.model, "
            + ", ".join(f"sum(u.{k})" for k in (*USAGE, *COSTS))
            + " FROM session_model_usage u JOIN sessions s ON s.id = u.session_id GROUP BY 1, 2"
        ).fetchall()
    finally:
        conn.close()
    return {(day, model): dict(zip((*USAGE, *COSTS), values)) for day, model, *values in rows}


def test_both_usage_recipes_agree_on_a_model_switch_and_an_open_session(capture, monkeypatch):
    """Day 1: a session switches from model-a to model-b midway (plus an auxiliary title by
    model-small) and ends after midnight; another uses model-a. Day 2: a session is still
    open. Both recipes count every model's usage, the open session's too, on the start day."""
    monkeypatch.setenv("HERMES_ASSETS_WORKERS", "1")
    w = HermesWriter(capture.store, home=capture.home)
    try:
        w.session("switch", "cli", model="model-a")
        w.msg("switch", "user", "q")
        w.db.update_token_counts(
            "switch",
            input_tokens=100,
            output_tokens=20,
            cache_read_tokens=5,
            api_call_count=1,
            estimated_cost_usd=0.5,
            model="model-a",
            billing_provider="openrouter",
        )
        w.tick()
        w.db.update_session_model("switch", "model-b")
        w.msg("switch", "user", "again, with the other model")
        w.db.update_token_counts(
            "switch",
            input_tokens=300,
            output_tokens=40,
            reasoning_tokens=4,
            api_call_count=1,
            estimated_cost_usd=1.25,
            model="model-b",
            billing_provider="anthropic",
        )
        w.db.record_auxiliary_usage(
            "switch",
            "title_generation",
            model="model-small",
            billing_provider="openrouter",
            input_tokens=7,
            output_tokens=3,
            estimated_cost_usd=0.01,
        )
        w.session("plain", "cli", model="model-a")
        w.msg("plain", "user", "q")
        w.db.update_token_counts(
            "plain",
            input_tokens=50,
            output_tokens=10,
            api_call_count=1,
            estimated_cost_usd=0.2,
            model="model-a",
            billing_provider="openrouter",
        )
        w.end("plain")
        w.at(START_S + 16 * 3600)  # 2026-06-02T01:00Z: the switching session ends the next day
        w.end("switch")
        w.at(START_S + DAY_S + 3600)
        w.session("open", "tui", model="model-b")
        w.msg("open", "user", "q")
        w.db.update_token_counts(
            "open",
            input_tokens=70,
            output_tokens=9,
            api_call_count=1,
            estimated_cost_usd=0.3,
            model="model-b",
            billing_provider="anthropic",
        )
    finally:
        w.close()
    assert capture.materialize("2026-06-01", "2026-06-02").success

    per_model = run("tokens_and_cost_per_model_per_day", capture.warehouse)
    store = _store_usage(capture.store)
    assert sorted(store) == [
        ("2026-06-01", "model-a"),
        ("2026-06-01", "model-b"),
        ("2026-06-01", "model-small"),
        ("2026-06-02", "model-b"),
    ]
    assert {(str(r["day"]), r["model"]): {k: r[k] or 0 for k in USAGE} for r in per_model} == {
        key: {k: v[k] for k in USAGE} for key, v in store.items()
    }
    per_day = run("tokens_and_cost_per_day", capture.warehouse)
    assert_same_totals(per_day, per_model)
    assert [(str(r["day"]), r["sessions"], r["input_tokens"], r["output_tokens"]) for r in per_day] == [
        ("2026-06-01", 2, 100 + 300 + 7 + 50, 20 + 40 + 3 + 10),
        ("2026-06-02", 1, 70, 9),
    ]


# --------------------------------------------------------------------------
# make query: the README's way to a DuckDB shell
# --------------------------------------------------------------------------


def test_make_query_opens_duckdb_where_the_recipes_paths_resolve(small_capture):
    venv = Path(sys.prefix)
    if not (venv / "bin" / "duckdb").exists():
        unavailable(f"the DuckDB shell is not installed in {venv} (pip install -e '.[query]')")
    if shutil.which("make") is None:
        unavailable("make is not installed")
    home = small_capture.warehouse.parent  # the fixture's warehouse is <root>/warehouse, like $DAGSTER_HOME's
    stamps = [f"-o{venv}/.installed", f"-o{venv}/.installed-query"]  # use this venv as it is
    proc = subprocess.run(
        ["make", "-s", "-C", str(README.parent), *stamps, "query", f"VENV={venv}", f"DAGSTER_HOME={home}"],
        input=recipes()["sessions_per_channel"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"DuckDB in {home}" in proc.stdout
    want = {r["channel"]: r["sessions"] for r in run("sessions_per_channel", small_capture.warehouse)}
    assert all(
        any(f" {channel} " in line and f" {n} " in line for line in proc.stdout.splitlines())
        for channel, n in want.items()
    ), proc.stdout


# --------------------------------------------------------------------------
# what to rotate: the exposures and the sightings
# --------------------------------------------------------------------------


def test_the_secrets_recipes_list_what_the_store_held(capture, monkeypatch):
    """Hermes's writer stores a GitHub token in two sessions and a Stripe key in one Hermes
    then deletes: the first recipe lists both, the one still stored first, each by its
    provider's prefix and last four; the second lists every cell of the token's marker."""
    import dagster as dg

    from hermes_assets.lib.redaction.redactor import Redactor
    from tests.defs.harness import EXPOSURES
    from tests.support import fake_keys

    monkeypatch.setenv("HERMES_ASSETS_WORKERS", "1")
    token, stripe = fake_keys.github(), fake_keys.stripe()
    with HermesWriter(capture.store, home=capture.home, start_s=START_S) as w:
        first = w.msg(w.session("s1", "cli"), "user", f"token {token}")
        second = w.msg(w.session("s2", "telegram"), "user", f"again {token}")
        w.msg(w.session("s3", "cli"), "user", f"pay with {stripe}")
    day = "2026-06-01"
    assert capture.materialize(day).success
    with HermesWriter(capture.store, home=capture.home) as w:
        w.delete_session("s3")
    with dg.DagsterInstance.ephemeral() as instance:
        assert capture.materialize(day, instance=instance).success
        job = capture.defs().resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(instance=instance, asset_selection=[dg.AssetKey(EXPOSURES)]).success
    key = (capture.dagster_home / "redaction.key").read_bytes()

    def marker(value: str) -> tuple[str, str]:
        redactor = Redactor(key)
        redactor.text(value)
        (seen,) = redactor.take_sightings()
        return seen.marker, seen.kind

    rows = run("secrets_to_rotate", capture.warehouse)
    got = [(r["marker"], r["kind"], r["still_in_store"], r["sessions"]) for r in rows]
    assert got == [(*marker(token), True, 2), (*marker(stripe), False, 1)]
    for row, value in zip(rows, (token, stripe)):  # the provider's prefix (its rule's), the last four
        prefix, last4 = row["key"].split("…")
        assert prefix and value.startswith(prefix) and last4 == value[-4:], row["key"]
    assert rows[0]["channels"] == ["cli", "telegram"]
    sql = recipes()["where_a_secret_was_seen"]
    example = re.search(r"SET VARIABLE marker = '(.*?)';", sql).group(1)
    con = duckdb.connect()
    try:
        cur = con.execute(sql.replace(example, marker(token)[0]).replace("'warehouse/", f"'{capture.warehouse}/"))
        seen = [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]
    finally:
        con.close()
    assert [(r["session_id"], r["message_id"], r["field"], r["channel"], r["source_deleted"]) for r in seen] == [
        ("s1", str(first), "messages.content", "cli", False),
        ("s2", str(second), "messages.content", "telegram", False),
    ]
