"""The README's query recipes, executed (issue 7, item 7).

Every ```sql block after a ``<!-- recipe: NAME -->`` marker in README.md runs
as written in DuckDB over the Parquet files of the captured small fixture
(only the ``'warehouse/`` prefix is pointed at the test's warehouse), and its
answer is checked against the same figure computed another way: from the
store itself, or from the files with pyarrow.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections import defaultdict
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tests.defs.harness import read_all

README = Path(__file__).resolve().parents[2] / "README.md"
RECIPES = ("tokens_and_cost_per_model_per_day", "tool_calls_by_tool_name", "sessions_per_channel",
           "transcript_of_one_session")
_BLOCK = re.compile(r"<!-- recipe: (\w+) -->\s*```sql\n(.*?)```", re.S)
USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def recipes() -> dict[str, str]:
    return dict(_BLOCK.findall(README.read_text(encoding="utf-8")))


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
        t: (n, len(sessions[t])) for t, n in calls.items()}
    assert [r["calls"] for r in got] == sorted((r["calls"] for r in got), reverse=True)
    assert len(got) > 5 and None not in calls  # D1: every call has its name


def test_sessions_per_channel_match_the_store(small_capture):
    got = run("sessions_per_channel", small_capture.warehouse)
    conn = sqlite3.connect(f"file:{small_capture.capture.store}?mode=ro", uri=True)
    try:
        store = {src: (n, m) for src, n, m in conn.execute(
            "SELECT source, count(*), sum(message_count) FROM sessions GROUP BY source")}
    finally:
        conn.close()
    assert {r["channel"]: (r["sessions"], r["messages"]) for r in got} == store
    assert {"cli", "telegram", "cron", "subagent"} <= set(store)


def test_transcript_of_one_session_in_order(small_capture):
    sql = recipes()["transcript_of_one_session"]
    (session_id,) = re.findall(r"SET VARIABLE session_id = '([^']+)'", sql)
    got = run("transcript_of_one_session", small_capture.warehouse)
    table = None
    for day_file in sorted((small_capture.warehouse / "ai_gateway_messages_hermes").glob("day=*/part-0.parquet")):
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
            assert json.loads(r["text"][len(want["tool_name"]) + 1:-1]) == json.loads(want["tool_args"])
    # Hermes's own order: message ids never go back along the transcript
    mids = [int(by_index[i]["provider_uuid"]) for i in range(len(got)) if by_index[i]["provider_uuid"]]
    assert mids == sorted(mids)
    assert got[-1]["part_type"] == "status" and got[0]["role"] == "user"
    assert {"tool_call", "tool_result", "reasoning", "text"} <= {r["part_type"] for r in got}


@pytest.mark.parametrize("name", RECIPES)
def test_recipes_on_a_warehouse_not_yet_written_fail_loudly(name, tmp_path):
    """Before the first capture the folders do not exist: DuckDB says so clearly (no silent zero)."""
    with pytest.raises(duckdb.IOException, match="No files found"):
        run(name, tmp_path / "warehouse")
