"""The analytics layer, ``hermes_daily_usage`` and ``hermes_daily_tools`` (SPEC §11).

Each test materializes the three datasets and the two analytics assets in one
ranged run (as a backfill of "everything" does), then holds the analytics
files up against an independent DuckDB query over the captured Parquet
files: the SPEC §11 rules written in SQL, and tool errors judged by Hermes's
own ``_detect_tool_failure`` (hermes-agent, called from DuckDB as a Python
function), not by the project's re-implementation of it.
"""

import json
from collections import Counter

import dagster as dg
import duckdb
import pyarrow.parquet as pq
import pytest
import structlog

from hermes_assets.lib.basics import schemas
from tests.defs.harness import (
    ANALYTICS,
    DATASETS,
    SMALL_DAYS,
    SMALL_SESSIONS,
    day_path,
    days_on_disk,
    partition_metadata,
    step_output_metadata,
)
from tests.support import accumulator
from tests.support.hermes_writer import DAY_S, START_S, openai_call

#: slow: every test but one materializes through Dagster; the last evaluates the sensors after captures
pytestmark = pytest.mark.slow

USAGE, TOOLS, _, SKILLS = ANALYTICS[:4]
EVERYTHING = (*DATASETS, *ANALYTICS)
FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[-1]
DAY1 = "2026-06-01"  # the writer's clock starts 2026-06-01T09:00Z
DAY2 = "2026-06-02"
USAGE_COLUMNS = schemas.HERMES_DAILY_USAGE.names
TOOLS_COLUMNS = schemas.HERMES_DAILY_TOOLS.names


def hermes_failed(tool_name, content) -> bool:
    """Hermes's own verdict on a tool result (the red cross of its CLI)."""
    from agent.display import _detect_tool_failure

    return _detect_tool_failure(tool_name, content)[0]


def connect(warehouse) -> duckdb.DuckDBPyConnection:
    """DuckDB over the warehouse: one view per captured dataset, with the partition day."""
    con = duckdb.connect()
    con.create_function("hermes_failed", hermes_failed, ["VARCHAR", "VARCHAR"], "BOOLEAN", null_handling="special")
    for name in DATASETS:
        con.execute(
            f"CREATE VIEW {name} AS SELECT *, regexp_extract(filename, 'day=([0-9-]+)', 1) AS partition_day "
            f"FROM read_parquet('{warehouse}/{name}/*/*/*.parquet', hive_partitioning=false, filename=true)"
        )
    return con


#: hermes_daily_usage by the rules of SPEC §11, in SQL
USAGE_SQL = """
WITH s AS (
    SELECT partition_day AS day, store, id, NULLIF(model, '') AS model, usage_by_model,
           api_call_count, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
           estimated_cost_usd, actual_cost_usd, 'hermes-' || CASE WHEN store_label = '' THEN id
                                                               ELSE store_label || ':' || id END AS canonical
    FROM hermes_sessions WHERE NOT source_deleted
),
usage AS (  -- per-model usage, else the session's own model and totals
    SELECT s.day, s.store, s.id, NULLIF(e->>'model', '') AS model,
           (e->>'api_call_count')::BIGINT AS api_calls,
           (e->>'input_tokens')::BIGINT AS input_tokens, (e->>'output_tokens')::BIGINT AS output_tokens,
           (e->>'cache_read_tokens')::BIGINT AS cache_read_tokens,
           (e->>'cache_write_tokens')::BIGINT AS cache_write_tokens,
           (e->>'reasoning_tokens')::BIGINT AS reasoning_tokens,
           (e->>'estimated_cost_usd')::DOUBLE AS estimated_cost_usd, (e->>'actual_cost_usd')::DOUBLE AS actual_cost_usd
    FROM s, unnest(CAST(s.usage_by_model AS JSON[])) AS u(e)
    WHERE json_array_length(s.usage_by_model) > 0
    UNION ALL
    SELECT day, store, id, model, api_call_count, input_tokens, output_tokens, cache_read_tokens,
           cache_write_tokens, reasoning_tokens, estimated_cost_usd, actual_cost_usd
    FROM s WHERE usage_by_model IS NULL OR json_array_length(usage_by_model) = 0
),
members AS (SELECT day, model, store, id FROM usage UNION SELECT day, model, store, id FROM s),
msgs AS (
    SELECT s.day, s.model, count(*) AS n FROM hermes_messages m JOIN s ON m.store = s.store AND m.session_id = s.id
    WHERE NOT m.source_deleted AND m.role IS DISTINCT FROM 'session_meta' GROUP BY ALL
),
calls AS (
    SELECT s.day, s.model, count(*) AS n FROM ai_gateway_messages_hermes g JOIN s ON g.session_id = s.canonical
    WHERE g.part_type = 'tool_call'
      AND NOT coalesce(json_extract(g.attributes, '$.hermes.source_deleted')::BOOLEAN, false)
    GROUP BY ALL
),
totals AS (
    SELECT day, model, sum(api_calls) AS api_calls, sum(input_tokens) AS input_tokens,
           sum(output_tokens) AS output_tokens, sum(cache_read_tokens) AS cache_read_tokens,
           sum(cache_write_tokens) AS cache_write_tokens, sum(reasoning_tokens) AS reasoning_tokens,
           round(sum(estimated_cost_usd), 6) AS estimated_cost_usd, round(sum(actual_cost_usd), 6) AS actual_cost_usd
    FROM usage GROUP BY ALL
)
SELECT m.day, m.model, count(*) AS sessions, coalesce(any_value(msgs.n), 0) AS messages,
       coalesce(any_value(calls.n), 0) AS tool_calls, coalesce(any_value(t.api_calls), 0) AS api_calls,
       coalesce(any_value(t.input_tokens), 0) AS input_tokens, coalesce(any_value(t.output_tokens), 0) AS output_tokens,
       coalesce(any_value(t.cache_read_tokens), 0) AS cache_read_tokens,
       coalesce(any_value(t.cache_write_tokens), 0) AS cache_write_tokens,
       coalesce(any_value(t.reasoning_tokens), 0) AS reasoning_tokens,
       coalesce(any_value(t.input_tokens + t.cache_read_tokens + t.cache_write_tokens + t.output_tokens), 0)
           AS total_tokens,
       any_value(t.estimated_cost_usd) AS estimated_cost_usd, any_value(t.actual_cost_usd) AS actual_cost_usd
FROM members m
LEFT JOIN totals t ON t.day = m.day AND t.model IS NOT DISTINCT FROM m.model
LEFT JOIN msgs ON msgs.day = m.day AND msgs.model IS NOT DISTINCT FROM m.model
LEFT JOIN calls ON calls.day = m.day AND calls.model IS NOT DISTINCT FROM m.model
GROUP BY m.day, m.model
ORDER BY m.day, m.model NULLS LAST
"""

#: hermes_daily_tools: canonical tool rows, errors judged by Hermes itself
TOOLS_SQL = """
SELECT partition_day AS day, tool_name,
       count(*) FILTER (WHERE part_type = 'tool_call') AS calls,
       count(*) FILTER (WHERE part_type = 'tool_result') AS results,
       count(*) FILTER (WHERE part_type = 'tool_result'
                        AND coalesce(is_error, hermes_failed(tool_name, content_text))) AS error_results,
       count(DISTINCT session_id) AS sessions
FROM ai_gateway_messages_hermes
WHERE part_type IN ('tool_call', 'tool_result')
  AND NOT coalesce(json_extract(attributes, '$.hermes.source_deleted')::BOOLEAN, false)
GROUP BY ALL
ORDER BY day, tool_name NULLS LAST
"""


def expected(con, sql: str) -> list[dict]:
    cursor = con.execute(sql)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def written(con, warehouse, dataset: str) -> list[dict]:
    """The analytics files as DuckDB reads them (the way a user queries them)."""
    order = "day, model NULLS LAST" if dataset == USAGE else "day, tool_name NULLS LAST"
    return expected(
        con,
        f"SELECT * FROM read_parquet('{warehouse}/{dataset}/*/*.parquet', hive_partitioning=false) ORDER BY {order}",
    )


def assert_agree(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w) or set(w) <= set(g)
        for name, value in w.items():
            if isinstance(value, float) or isinstance(g[name], float):
                assert g[name] == pytest.approx(value, rel=1e-9, abs=1e-12), (g["day"], name)
            else:
                assert g[name] == value, (g["day"], g.get("model", g.get("tool_name")), name)


def agree_with_duckdb(warehouse) -> tuple[duckdb.DuckDBPyConnection, list[dict], list[dict]]:
    """Both analytics datasets equal the DuckDB queries; -> (connection, usage rows, tools rows)."""
    con = connect(warehouse)
    usage, tools = written(con, warehouse, USAGE), written(con, warehouse, TOOLS)
    assert_agree(usage, expected(con, USAGE_SQL))
    assert_agree(tools, expected(con, TOOLS_SQL))
    return con, usage, tools


def materialize_everything(cap, start, end=None, instance=None):
    result = cap.materialize(start, end, instance=instance, select=EVERYTHING)
    assert result.success
    return result


# --------------------------------------------------------------------------
# the small fixture, against DuckDB
# --------------------------------------------------------------------------


@pytest.fixture
def small_everything(small):
    result = materialize_everything(small, FIRST, LAST)
    return small, result


def test_both_agree_with_duckdb_over_the_small_fixture(small_everything):
    cap, _ = small_everything
    con, usage, tools = agree_with_duckdb(cap.warehouse)
    assert [list(r) for r in usage[:1]] == [USAGE_COLUMNS] and [list(r) for r in tools[:1]] == [TOOLS_COLUMNS]
    per_day = {
        name: {d: sum(1 for r in rows if r["day"] == d) for d in SMALL_DAYS}
        for name, rows in ((USAGE, usage), (TOOLS, tools))
    }
    print("\nrows per day (= DuckDB):", json.dumps(per_day))
    assert [d for d, n in per_day[USAGE].items() if n] == days_on_disk(cap.warehouse, USAGE) == SMALL_DAYS
    # the fixture holds both kinds of session: with usage_by_model (some with 2-3 models) and without
    counts = con.execute(
        "SELECT count(*) FILTER (WHERE usage_by_model IS NULL), count(*) FILTER "
        "(WHERE json_array_length(usage_by_model) > 1) FROM hermes_sessions"
    ).fetchone()
    assert counts[0] > 0 and counts[1] > 0
    # every message but Hermes's session_meta rows, every tool call: nothing lost, nothing counted twice
    totals = con.execute("SELECT count(*) FILTER (WHERE role <> 'session_meta') FROM hermes_messages").fetchone()[0]
    assert sum(r["messages"] for r in usage) == totals
    calls = con.execute("SELECT count(*) FROM ai_gateway_messages_hermes WHERE part_type = 'tool_call'").fetchone()[0]
    assert sum(r["tool_calls"] for r in usage) == sum(r["calls"] for r in tools) == calls
    # tool errors, as Hermes itself judges them (DuckDB calls hermes-agent's own check)
    errors = sum(r["error_results"] for r in tools)
    print(
        f"hermes_daily_usage: {len(usage)} rows, {sum(r['total_tokens'] for r in usage)} tokens, "
        f"{sum(r['messages'] for r in usage)} messages; hermes_daily_tools: {len(tools)} rows, {calls} calls, "
        f"{sum(r['results'] for r in tools)} results, {errors} errors (= DuckDB)"
    )
    assert errors > 0  # the fixture has failed terminal commands: the rule is exercised
    assert con.execute("SELECT count(*) FROM ai_gateway_messages_hermes WHERE is_error IS NOT NULL").fetchone()[0] == 0


def test_each_day_carries_its_totals_as_numeric_metadata(small_everything):
    cap, result = small_everything
    con = connect(cap.warehouse)
    md = partition_metadata(result)
    assert {day for (asset, day) in md if asset in ANALYTICS} == set(SMALL_DAYS)
    for day in SMALL_DAYS:
        usage, tools = md[(USAGE, day)], md[(TOOLS, day)]
        rows = pq.read_table(day_path(cap.warehouse, USAGE, day)).to_pylist()
        assert usage["dagster/row_count"] == usage["models"] == len(rows)
        for name in ("messages", "tool_calls", "api_calls", "input_tokens", "output_tokens", "total_tokens"):
            assert usage[name] == sum(r[name] for r in rows), (day, name)
            assert isinstance(usage[name], int)
        assert usage["estimated_cost_usd"] == pytest.approx(sum(r["estimated_cost_usd"] or 0 for r in rows))
        assert isinstance(usage["estimated_cost_usd"], float)
        # money to the micro-dollar, in the files and the metadata alike (no 0.19228399999999998)
        for value in [
            usage["estimated_cost_usd"],
            usage["actual_cost_usd"],
            *(r[c] for r in rows for c in ("estimated_cost_usd", "actual_cost_usd") if r[c] is not None),
        ]:
            assert value == round(value, 6) and len(repr(value).partition(".")[2]) <= 6, (day, value)
        sessions = con.execute("SELECT count(*) FROM hermes_sessions WHERE partition_day = ?", [day]).fetchone()[0]
        assert usage["sessions"] == sessions, day
        tools_file = day_path(cap.warehouse, TOOLS, day)
        tool_rows = pq.read_table(tools_file).to_pylist() if tools_file.exists() else []
        assert tools["dagster/row_count"] == len(tool_rows)
        assert tools["tool_calls"] == sum(r["calls"] for r in tool_rows)
        assert tools["error_results"] == sum(r["error_results"] for r in tool_rows)
        assert usage["tool_calls"] == tools["tool_calls"], day  # the same tool calls, counted two ways
    assert sum(md[(USAGE, d)]["sessions"] for d in SMALL_DAYS) == SMALL_SESSIONS


def test_analytics_files_follow_the_dataset_file_rules(small_everything, instance):
    """zstd, one file per day; a re-run rewrites nothing; a day with no rows has no file."""
    cap, _ = small_everything
    # 2026-06-12's one session used no tool: that day has usage but no tools file
    tool_days = [d for d in SMALL_DAYS if d != "2026-06-12"]
    assert days_on_disk(cap.warehouse, TOOLS) == tool_days and days_on_disk(cap.warehouse, USAGE) == SMALL_DAYS
    for dataset in ANALYTICS:
        for day in days_on_disk(cap.warehouse, dataset):
            meta = pq.read_metadata(day_path(cap.warehouse, dataset, day))
            assert meta.row_group(0).column(0).compression == "ZSTD"
    before = cap.files()
    result = cap.materialize("2026-05-30", LAST, instance=instance, select=ANALYTICS)
    assert result.success
    assert cap.files() == before  # byte-identical, and the two empty days wrote no file
    md = partition_metadata(result)
    assert days_on_disk(cap.warehouse, TOOLS) == tool_days and days_on_disk(cap.warehouse, USAGE) == SMALL_DAYS
    for dataset in ANALYTICS:
        assert md[(dataset, "2026-05-30")]["dagster/row_count"] == 0
    assert md[(TOOLS, "2026-06-12")]["dagster/row_count"] == 0 < md[(USAGE, "2026-06-12")]["dagster/row_count"]
    changed = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    assert changed  # the run did run


def test_a_run_of_everything_computes_the_analytics_from_the_days_it_built(small, instance, monkeypatch):
    """A first capture's analytics come from the tables the capture built (on its worker processes),
    not from its files read back; the files are the ones computed from the files (the analytics
    again, alone: unchanged), each day read once for every analytics dataset of the run."""
    from hermes_assets.defs.resources import CaptureRuntime
    from hermes_assets.lib.analytics import daily
    from hermes_assets.lib.warehouse.datasets import Warehouse

    reads: list[str] = []
    read_day = daily.read_day

    def counted(warehouse, day, read):
        reads.append(day)
        return read_day(warehouse, day, read)

    monkeypatch.setattr(daily, "read_day", counted)
    parallel = small.defs(capture_runtime=CaptureRuntime(workers=2, parallel_min_sessions=0))
    with structlog.testing.capture_logs() as events:
        assert small.materialize(FIRST, LAST, instance=instance, defs=parallel, select=EVERYTHING).success
    (written,) = [e for e in events if e["event"] == "hermes.analytics.written"]  # one step for them all
    assert written["datasets"] == list(ANALYTICS) and written["days_from_capture"] == len(SMALL_DAYS)
    assert reads == []
    before = small.files()
    looked: Counter[tuple[str, str]] = Counter()
    day_stamp = Warehouse.day_stamp

    def stamp(self, dataset, day):
        looked[(dataset, day)] += 1
        return day_stamp(self, dataset, day)

    monkeypatch.setattr(Warehouse, "day_stamp", stamp)
    with structlog.testing.capture_logs() as events:
        assert small.materialize(FIRST, LAST, instance=instance, select=ANALYTICS).success
    (again,) = [e for e in events if e["event"] == "hermes.analytics.written"]
    # each input day's files listed twice for the six datasets: before its read, after their writes
    assert looked == {(name, day): 2 for name in DATASETS for day in SMALL_DAYS}
    assert again["days_from_capture"] == 0 and again["files_changed"] == dict.fromkeys(ANALYTICS, 0)
    assert small.files() == before
    # the files are read once per day for every analytics of the run
    assert sorted(reads) == SMALL_DAYS
    # a day captured again (its files exist) reads them back, once
    reads.clear()
    with structlog.testing.capture_logs() as events:
        materialize_everything(small, FIRST, instance=instance)
    (written,) = [e for e in events if e["event"] == "hermes.analytics.written"]
    assert written["days_from_capture"] == 0 and reads == [FIRST]
    assert small.files() == before


def test_figures_the_capture_kept_count_only_while_their_inputs_hold(small_everything):
    """Figures the capture kept for the run's analytics are used only while the input files they
    were computed from are the same (their stamps): else the day is read again."""
    from hermes_assets.defs import analytics_assets, precomputed
    from hermes_assets.lib.analytics import daily
    from hermes_assets.lib.analytics.captured_days import KnownDay
    from hermes_assets.lib.warehouse.datasets import Warehouse
    from hermes_assets.lib.warehouse.loading import DatasetDays

    cap, _ = small_everything
    wh = Warehouse(str(cap.warehouse))
    inputs = {name: DatasetDays(wh, name, [], cols) for name, cols in daily.DATASET_INPUTS[USAGE].items()}
    before = cap.files()
    stamps = {name: wh.day_stamp(name, DAY1) for name in daily.INPUTS}
    real = daily.compute_day(USAGE, DAY1, daily.read_inputs(inputs, DAY1))
    fewer = daily.DayFigures(real.table.slice(1), real.totals)  # not what these files give

    def write_usage():
        written, from_capture = analytics_assets._write_day(wh, [USAGE], inputs, DAY1, lambda _: False)
        result, figures = written[USAGE]
        return result, figures, from_capture

    # stamps that no longer hold (a file written since): the day is read and computed again
    precomputed.remember(wh, DAY1, KnownDay({**stamps, schemas.MESSAGES: ("another file",)}, {USAGE: fewer}))
    result, figures, from_capture = write_usage()
    assert not from_capture and figures is not fewer and cap.files() == before and not result.changed
    # figures of other datasets only: the day is read
    precomputed.remember(wh, DAY1, KnownDay(stamps, {TOOLS: fewer}))
    result, figures, from_capture = write_usage()
    assert not from_capture and figures is not fewer and not result.changed
    # stamps that hold: the kept figures are taken as the day's (so they must be computed from those files)
    precomputed.remember(wh, DAY1, KnownDay(stamps, {USAGE: fewer}))
    result, figures, from_capture = write_usage()
    assert from_capture and figures is fewer and result.changed
    assert result.rows == real.table.num_rows - 1
    # nothing kept any more: read and computed from the files, as they were
    result, _, from_capture = write_usage()
    assert not from_capture and result.changed and cap.files() == before


def test_a_run_of_some_analytics_writes_and_materializes_those_alone(small_everything, instance):
    """The six datasets are one step that can run any subset of them: the others' files and
    materializations are left as they were."""
    cap, _ = small_everything
    for dataset in (USAGE, TOOLS):
        for day in days_on_disk(cap.warehouse, dataset):
            day_path(cap.warehouse, dataset, day).unlink()
    before = cap.files()
    result = cap.materialize(FIRST, LAST, instance=instance, select=[TOOLS])
    assert result.success
    md = partition_metadata(result)
    assert {asset for asset, _ in md} == {TOOLS} and {day for _, day in md} == set(SMALL_DAYS)
    after = cap.files()
    written = {path for path in after if path not in before}
    assert written and written == {path for path in after if path.startswith(f"{TOOLS}/")}
    assert before.items() <= after.items()
    assert days_on_disk(cap.warehouse, USAGE) == []


@pytest.mark.parametrize("threads", [1, 4])
def test_a_dataset_that_fails_on_a_day_fails_the_step_and_the_others_are_written(
    small_everything, instance, monkeypatch, threads
):
    """One dataset's file cannot be written on a day (a full disk): its days after it are not
    started (one thread: none of them), every other dataset is written and materialized, and the
    step fails naming the dataset and its day."""
    from hermes_assets.defs import analytics_assets
    from hermes_assets.lib.warehouse.datasets import Warehouse

    cap, _ = small_everything
    for dataset in ANALYTICS:
        for day in days_on_disk(cap.warehouse, dataset):
            day_path(cap.warehouse, dataset, day).unlink()
    bad = SMALL_DAYS[1]
    replace_day = Warehouse.replace_day

    def full_disk(self, dataset, day, table, read):
        if (dataset, day) == (TOOLS, bad):
            raise OSError(28, "No space left on device")
        return replace_day(self, dataset, day, table, read)

    monkeypatch.setattr(Warehouse, "replace_day", full_disk)
    monkeypatch.setattr(analytics_assets, "WRITE_THREADS", threads)
    result = cap.materialize(FIRST, LAST, instance=instance, select=ANALYTICS, raise_on_error=False)
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert f"{TOOLS} {bad}" in failure.event_specific_data.error.message
    md = partition_metadata(result)
    assert {asset for asset, _ in md} == set(ANALYTICS) - {TOOLS}
    for dataset in set(ANALYTICS) - {TOOLS}:
        assert {day for asset, day in md if asset == dataset} == set(SMALL_DAYS)
    tools = days_on_disk(cap.warehouse, TOOLS)
    assert bad not in tools and SMALL_DAYS[0] in tools
    if threads == 1:
        assert all(day < bad for day in tools)


def test_analytics_load_through_the_io_manager_too(small_everything, instance):
    cap, _ = small_everything
    frame = cap.defs().load_asset_value(USAGE, partition_key=DAY1, instance=instance)
    assert list(frame.columns) == USAGE_COLUMNS
    assert len(frame) == pq.read_metadata(day_path(cap.warehouse, USAGE, DAY1)).num_rows
    assert str(frame["total_tokens"].dtype) == "Int64" and str(frame["model"].dtype) == "str"


# --------------------------------------------------------------------------
# scenarios written by the real Hermes writer
# --------------------------------------------------------------------------


def _usage_scenario(w) -> None:
    """Day 1: a session that switched models (per-model usage), a session whose per-model
    rows are gone (an older store: its own totals count), tool calls that fail and succeed.
    Day 2: one more session."""
    s1 = w.session("s-switch", "cli", model="model-a", cwd="/work/a")
    w.msg(s1, "user", "run the tests")
    w.msg(
        s1,
        "assistant",
        None,
        tool_calls=[
            openai_call("c1", "terminal", {"command": "pytest"}),
            openai_call("c2", "read_file", {"path": "x.py"}),
        ],
        finish_reason="tool_calls",
    )
    w.msg(
        s1,
        "tool",
        json.dumps({"output": "1 failed", "exit_code": 1, "error": None}),
        tool_call_id="c1",
        tool_name="terminal",
    )
    w.msg(s1, "tool", json.dumps({"error": "File not found: x.py"}), tool_call_id="c2", tool_name="read_file")
    w.update_token_counts(
        s1,
        input_tokens=100,
        output_tokens=20,
        model="model-a",
        cache_read_tokens=5,
        estimated_cost_usd=0.5,
        api_call_count=1,
    )
    w.update_session_model(s1, "model-b")
    w.update_token_counts(
        s1,
        input_tokens=300,
        output_tokens=40,
        model="model-b",
        reasoning_tokens=7,
        estimated_cost_usd=1.25,
        actual_cost_usd=1.0,
        api_call_count=2,
    )
    w.msg(s1, "assistant", "one test fails", finish_reason="stop")
    s2 = w.session("s-old", "cli", model="model-b", cwd="/work/b")
    w.msg(s2, "user", "hello")
    w.msg(
        s2, "assistant", None, tool_calls=[openai_call("c3", "terminal", {"command": "ls"})], finish_reason="tool_calls"
    )
    w.msg(
        s2,
        "tool",
        json.dumps({"output": "a b", "exit_code": 0, "error": None}),
        tool_call_id="c3",
        tool_name="terminal",
    )
    w.update_token_counts(s2, input_tokens=50, output_tokens=5, model="model-b", api_call_count=1)
    w.raw_sql("DELETE FROM session_model_usage WHERE session_id = 's-old'")
    w.at(START_S + DAY_S)
    s3 = w.session("s-next", "tui", model="model-c", cwd="/work/c")
    w.msg(s3, "user", "and tomorrow")


def _rows(cap, dataset: str, day: str, key: str) -> dict:
    return {r[key]: r for r in pq.read_table(day_path(cap.warehouse, dataset, day)).to_pylist()}


def test_usage_by_model_per_model_and_fallback_and_tool_errors(capture, writer, instance):
    _usage_scenario(writer)
    materialize_everything(capture, DAY1, DAY2, instance)
    usage = _rows(capture, USAGE, DAY1, "model")
    assert set(usage) == {"model-a", "model-b"}
    a, b = usage["model-a"], usage["model-b"]
    # s-switch used both models; its messages and tool calls count under its current model
    assert (a["sessions"], a["input_tokens"], a["cache_read_tokens"], a["api_calls"]) == (1, 100, 5, 1)
    assert (a["messages"], a["tool_calls"], a["total_tokens"]) == (0, 0, 125)
    assert a["estimated_cost_usd"] == pytest.approx(0.5)
    # model-b: s-switch's share plus s-old's own totals (no per-model rows)
    assert (b["sessions"], b["input_tokens"], b["output_tokens"], b["reasoning_tokens"]) == (2, 350, 45, 7)
    assert (b["messages"], b["tool_calls"], b["api_calls"]) == (5 + 3, 3, 3)
    # s-old recorded no cost: only s-switch's share counts, and a day with no cost at all says NULL
    assert (b["estimated_cost_usd"], b["actual_cost_usd"]) == (pytest.approx(1.25), pytest.approx(1.0))
    c = _rows(capture, USAGE, DAY2, "model")["model-c"]
    assert (c["messages"], c["total_tokens"], c["estimated_cost_usd"], c["actual_cost_usd"]) == (1, 0, None, None)
    tools = _rows(capture, TOOLS, DAY1, "tool_name")
    assert (tools["terminal"]["calls"], tools["terminal"]["results"], tools["terminal"]["error_results"]) == (2, 2, 1)
    assert (tools["read_file"]["results"], tools["read_file"]["error_results"]) == (1, 1)
    assert tools["terminal"]["sessions"] == 2
    agree_with_duckdb(capture.warehouse)


def test_rows_flagged_source_deleted_are_left_out(capture, writer, instance):
    """A session Hermes deleted stays in the captured datasets, flagged (D13), and
    drops out of both analytics tables; a day left with no rows loses its files."""
    _usage_scenario(writer)
    materialize_everything(capture, DAY1, DAY2, instance)
    assert "model-c" in _rows(capture, USAGE, DAY2, "model")
    writer.delete_session("s-old")
    writer.delete_session("s-next")
    materialize_everything(capture, DAY1, DAY2, instance)
    con, _, _ = agree_with_duckdb(capture.warehouse)
    flagged = con.execute("SELECT count(*) FROM hermes_sessions WHERE source_deleted").fetchone()[0]
    assert flagged == 2  # kept, flagged
    usage = _rows(capture, USAGE, DAY1, "model")
    assert usage["model-b"]["sessions"] == 1 and usage["model-b"]["input_tokens"] == 300
    assert _rows(capture, TOOLS, DAY1, "tool_name")["terminal"]["calls"] == 1
    for dataset in ANALYTICS:
        assert not day_path(capture.warehouse, dataset, DAY2).exists(), dataset


def test_the_purge_job_takes_purged_sessions_out_of_the_analytics(capture, writer, instance):
    _usage_scenario(writer)
    materialize_everything(capture, DAY1, DAY2, instance)
    job = capture.defs().resolve_job_def("purge_job")
    result = job.execute_in_process(
        run_config={"ops": {"purge_scope": {"config": {"scope": "/work/b"}}}}, instance=instance
    )
    assert result.success
    (md,) = step_output_metadata(result, "purge_scope")
    assert md["analytics_days_rebuilt"] == 1
    usage = _rows(capture, USAGE, DAY1, "model")
    assert usage["model-b"]["sessions"] == 1 and usage["model-b"]["input_tokens"] == 300
    agree_with_duckdb(capture.warehouse)
    # the rebuilt days are recorded as materializations of the analytics assets (those with a file that
    # day: a day without rows has none, and is left to the assets)
    rebuilt = [name for name in ANALYTICS if day_path(capture.warehouse, name, DAY1).exists()]
    assert USAGE in rebuilt and TOOLS in rebuilt
    events = instance.get_latest_materialization_events([dg.AssetKey(name) for name in rebuilt])
    for dataset in rebuilt:
        mat = events[dg.AssetKey(dataset)].asset_materialization
        assert mat.partition == DAY1 and mat.metadata["rebuilt_by"].value == "purge_job"


# --------------------------------------------------------------------------
# what keeps them current
# --------------------------------------------------------------------------


def test_the_analytics_follow_every_day_through_a_sensor_that_runs_from_the_start(capture):
    """``eager()`` minus its latest-day restriction (SPEC §11), evaluated by a sensor that is
    on by default, on an instance (dagster.yaml, and the Postgres one) whose daemon runs it."""
    import yaml

    from tests.e2e.conftest import REPO

    defs = capture.defs()
    graph = defs.resolve_asset_graph()
    for name in ANALYTICS:
        condition = graph.get(dg.AssetKey(name)).automation_condition
        assert condition.get_label() == "eager" or "eager" in str(condition)
        assert "in_latest_time_window" not in str(condition) and "InLatestTimeWindow" not in str(condition), name
    sensor = defs.resolve_sensor_def("hermes_automation")
    assert isinstance(sensor, dg.AutomationConditionSensorDefinition)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert {k.to_user_string() for k in sensor.asset_selection.resolve(graph)} >= set(ANALYTICS)
    for config in (REPO / "dagster.yaml", REPO / "deploy" / "postgres" / "dagster.yaml"):
        settings = yaml.safe_load(config.read_text()).get("auto_materialize", {})
        assert settings.get("enabled", True) and settings.get("use_sensors", True), config


def test_the_capture_computes_the_analytics_only_for_a_run_that_computes_them_in_its_process():
    """The capture's workers compute a day's analytics when the run computes them too and its steps
    run in its process (the analytics step takes them there); not with steps in processes of their
    own (the multiprocess executor): nothing would take them."""
    from types import SimpleNamespace

    from hermes_assets.defs import precomputed

    def context(executor: str, *assets: str):
        run = SimpleNamespace(run_id="a-run", asset_selection={dg.AssetKey(n) for n in assets})
        return SimpleNamespace(run=run, job_def=SimpleNamespace(executor_def=SimpleNamespace(name=executor)))

    figures = precomputed.day_figures(context(dg.in_process_executor.name, *DATASETS, TOOLS, SKILLS))
    assert figures is not None
    assert precomputed.day_figures(context(dg.in_process_executor.name, *DATASETS)) is None
    # only the analytics the run computes (an empty day of the three datasets, as a worker holds it)
    empty = {name: schemas.schema_of(name).empty_table() for name in DATASETS}
    assert set(figures(DAY1, empty, {})) == {TOOLS, SKILLS}
    everything = precomputed.day_figures(context(dg.in_process_executor.name, *DATASETS, *ANALYTICS))
    assert everything is not None and set(everything(DAY1, empty, {})) == set(ANALYTICS)
    assert precomputed.day_figures(context(dg.multiprocess_executor.name, *DATASETS, TOOLS)) is None


def test_each_analytics_datasets_files_are_synced_before_it_is_reported(small, instance, monkeypatch):
    """Each file is put in place whole (its bytes synced first); the folders of a dataset's files
    are synced, once each, before the step reports the dataset's days (their metadata, then its
    materialization)."""

    from hermes_assets.defs import ranged_metadata
    from hermes_assets.lib.storage import local_files

    assert small.materialize(FIRST, LAST, instance=instance, select=DATASETS).success
    synced: list[str] = []
    monkeypatch.setattr(local_files, "_fsync_dir_now", synced.append)
    reported: dict[tuple[str, str], set[str]] = {}
    add = ranged_metadata.add_days_metadata

    def add_days_metadata(context, asset_key, days):
        for day, _ in days:
            reported[(asset_key, day)] = set(synced)
        return add(context, asset_key, days)

    monkeypatch.setattr(ranged_metadata, "add_days_metadata", add_days_metadata)
    # each day's metadata added without copying Dagster's accumulator once per day (quadratic in the days)
    copies = accumulator.count_copies(monkeypatch)
    assert small.materialize(FIRST, LAST, instance=instance, select=ANALYTICS).success
    assert not copies
    for dataset in ANALYTICS:
        days = days_on_disk(small.warehouse, dataset)
        assert days, dataset
        for day in days:
            assert str(day_path(small.warehouse, dataset, day).parent) in reported[(dataset, day)], (dataset, day)
    assert len(synced) == len(set(synced)), "a folder synced more than once"
