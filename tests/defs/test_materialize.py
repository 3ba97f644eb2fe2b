"""Materializing the three assets in process (SPEC §2, §6, §7, §9).

Every run is a ranged run of the implicit asset job (one run for many days,
as a single-run backfill launches it), against a private copy of the small
fixture store or a scenario store written by the real Hermes writer.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import sqlite3

import dagster as dg
import duckdb
import pyarrow.parquet as pq
import pytest
import structlog

from hermes_assets.defs.resources import CaptureRuntime, HermesWarehouse, UsagePolicy
from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.plan import policy
from hermes_assets.lib.warehouse.host_layout import LAYOUT_LOCK, LAYOUT_MARK, REDACTION_STAMP, SIGHTINGS_STAMP
from tests.conftest import suite_days
from tests.defs.harness import (
    DATASETS,
    SIGHTINGS,
    SMALL_DAYS,
    SMALL_MESSAGES,
    SMALL_SESSIONS,
    channel_scope,
    check_results,
    day_path,
    days_on_disk,
    part_files,
    partition_metadata,
    raw_sid,
    read_all,
    read_day,
    row_key,
    sids_in,
    source_deleted,
    step_output_metadata,
    store_sessions,
    with_descendants,
)
from tests.support.hermes_writer import DAY_S, START_S, openai_call

#: the partitions of the suite's definitions (tests/conftest.py)
SUITE_PARTITIONS = suite_days().partitions

#: slow: every test materializes through Dagster (some look up git remotes in a subprocess)
pytestmark = pytest.mark.slow

FIRST, LAST = SMALL_DAYS[0], SMALL_DAYS[-1]
DAY1 = "2026-06-01"  # the scenario stores' day (the writer's clock starts 2026-06-01T09:00Z)
PLAN_STEP = "hermes_capture.plan"
POLICY_STEP = "hermes_capture.apply_usage_policy"
PROJECT_STEP = "hermes_capture.project_rows"
STATE = "hermes_state"
ALL_CHECKS = {
    (GATEWAY, "day_valid"),
    (SESSIONS, "day_valid"),
    (MESSAGES, "day_valid"),
    # the stores and the runs: every capture run reports them once (days_captured reads the sensor's runs)
    (STATE, "sessions_within_partition_range"),
    (STATE, "stores_readable"),
    (STATE, "days_captured"),
}
HINSIGHTS = "/home/dev/src/hermes-insights"


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _rows_total(warehouse, dataset) -> int:
    return sum(pq.read_metadata(day_path(warehouse, dataset, d)).num_rows for d in days_on_disk(warehouse, dataset))


def _policy_md(result) -> dict:
    (md,) = step_output_metadata(result, POLICY_STEP)
    return md


def _plan_md(result) -> dict:
    return next(md for md in step_output_metadata(result, PLAN_STEP) if "days" in md)


def _sessions_with_messages(db) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {str(r[0]) for r in conn.execute("SELECT DISTINCT session_id FROM messages")}
    finally:
        conn.close()


def _expected_classes(sessions: dict, rules: list[tuple[str, str]], home: str | None = None) -> dict[str, str]:
    """sid -> class by SPEC §7 for list-only rules (scope: channel path or cwd; inherited from ancestors)."""

    def own(s):
        scope = channel_scope(s["source"], home) if policy.is_channel(s["source"]) else (s["cwd"] or None)
        best_depth, best = -1, policy.FULL
        for d, cls in rules:
            if scope and (scope == d or scope.startswith(d + "/")) and d.count("/") > best_depth:
                best_depth, best = d.count("/"), cls
        return best

    out = {}
    for sid in sessions:
        chain, cur, seen = [], sid, set()
        while cur in sessions and cur not in seen:
            seen.add(cur)
            chain.append(own(sessions[cur]))
            cur = sessions[cur]["parent"]
        out[sid] = policy.most_restrictive(*chain)
    return out


# --------------------------------------------------------------------------
# a ranged run over the whole fixture
# --------------------------------------------------------------------------


def test_one_ranged_run_writes_every_day_of_the_three_datasets(small):
    before = _sha(small.store)
    result = small.materialize(FIRST, LAST)
    assert result.success

    for dataset in DATASETS:
        assert days_on_disk(small.warehouse, dataset) == SMALL_DAYS, dataset
        for day in SMALL_DAYS:
            folder = day_path(small.warehouse, dataset, day).parent
            # one data file per day; nothing else but the lock file beside it (no temp files left)
            assert {p.name for p in folder.iterdir()} <= {"part-0.parquet", ".lock", ".read_at"}, folder
    assert _rows_total(small.warehouse, SESSIONS) == SMALL_SESSIONS
    assert _rows_total(small.warehouse, MESSAGES) == SMALL_MESSAGES
    # beside the datasets: the sightings of the secrets the fixture's sessions hold, the hosts'
    # staging folders (each with its layout mark and its lock, and redaction and sightings
    # stamps, docs/redaction.md) and the hosts' claims on the ids
    assert {p.name for p in small.warehouse.iterdir()} - {".staging", ".hosts"} == {*DATASETS, SIGHTINGS}
    stamps = (LAYOUT_MARK, LAYOUT_LOCK, REDACTION_STAMP, SIGHTINGS_STAMP)
    staged = [p for p in small.warehouse.glob(".staging/*/*") if p.name not in stamps]
    assert not staged, "staged files left behind"

    # every session lands on its started_at day, in all three datasets
    sessions = store_sessions(small.store)
    for dataset in DATASETS:
        for row in read_all(small.warehouse, dataset):
            assert row["_day"] == sessions[raw_sid(row, dataset)]["day"], (dataset, row.get("part_id") or row["id"])
    assert {r["id"] for r in read_all(small.warehouse, SESSIONS)} == set(sessions)

    # R5: the store is only read
    assert _sha(small.store) == before
    assert {p.name for p in small.home.iterdir()} <= {"state.db", "state.db-wal", "state.db-shm"}


def test_rows_are_sorted_and_readable_with_duckdb(small):
    assert small.materialize(FIRST, LAST).success
    for dataset in DATASETS:
        sort = schemas.DATASETS[dataset].sort_keys
        for day in SMALL_DAYS:
            table = read_day(small.warehouse, dataset, day)
            assert table.equals(table.sort_by([(c, "ascending") for c in sort])), (dataset, day)
            assert (
                pq.ParquetFile(day_path(small.warehouse, dataset, day)).metadata.row_group(0).column(0).compression
                == "ZSTD"
            )
    con = duckdb.connect()
    n, days = con.execute(
        f"SELECT count(*), count(DISTINCT day) FROM read_parquet('{small.warehouse}/{GATEWAY}/*/*/*.parquet', hive_partitioning=true)"
    ).fetchone()
    assert n == _rows_total(small.warehouse, GATEWAY) and days == len(SMALL_DAYS)
    (bad,) = con.execute(
        f"SELECT count(*) FROM read_parquet('{small.warehouse}/{GATEWAY}/*/*/*.parquet', hive_partitioning=true) "
        "WHERE client_name <> 'hermes' OR schema_version <> 7 OR NOT starts_with(session_id, 'hermes-')"
    ).fetchone()
    assert bad == 0


def test_per_day_metadata_equals_the_parquet_files(small):
    with structlog.testing.capture_logs() as events:
        result = small.materialize(FIRST, LAST)
    per_day = partition_metadata(result)
    assert set(per_day) == {(d, day) for d in DATASETS for day in SMALL_DAYS}
    for (dataset, day), md in per_day.items():
        path = day_path(small.warehouse, dataset, day)
        rows = pq.read_metadata(path).num_rows
        assert md["rows_written"] == rows == md["dagster/row_count"], (dataset, day)
        assert md["rows_retained_source_deleted"] == 0
        assert md["bytes"] == path.stat().st_size
        assert md["path"] == str(path)
        assert not [k for k in md if k.startswith("run_")]  # a day shows its own figures, not the run's
    # the run's totals: in its log, once per dataset
    totals = {e["dataset"]: e for e in events if e["event"] == "hermes.capture.write"}
    for dataset in DATASETS:
        mds = [per_day[(dataset, day)] for day in SMALL_DAYS]
        assert totals[dataset]["rows"] == _rows_total(small.warehouse, dataset)
        assert totals[dataset]["bytes"] == sum(m["bytes"] for m in mds)
        assert totals[dataset]["files_changed"] == len(SMALL_DAYS) and totals[dataset]["retained"] == 0


def test_op_metadata_reports_plan_policy_projection_and_write_counts(small):
    result = small.materialize(FIRST, LAST)
    plan = _plan_md(result)
    assert plan["days"] == len(SMALL_DAYS)
    assert plan["stores"] == 1 and plan["stores_missing"] == [] and plan["stores_failed"] == []
    assert plan["sessions_in_range"] == SMALL_SESSIONS and plan["sessions_out_of_range"] == 0
    assert plan["sql_statements"]["sessions_scan"] == 1

    counts = _policy_md(result)
    assert {k: counts[k] for k in ("sessions", "kept", "ignored", "local_only", "errors")} == {
        "sessions": SMALL_SESSIONS,
        "kept": SMALL_SESSIONS,
        "ignored": 0,
        "local_only": 0,
        "errors": 0,
    }

    (proj,) = step_output_metadata(result, PROJECT_STEP)
    for dataset in DATASETS:
        assert proj[f"{dataset}.rows"] == _rows_total(small.warehouse, dataset), dataset
    assert proj[f"{GATEWAY}.errors_by_kind"] == {"bad_tool_calls": 2}  # the two RAW-SQL cells of the manifest
    assert proj[f"{GATEWAY}.errors"] == 2
    # hermes_messages keeps tool_calls as stored text: the malformed cells cost it nothing
    assert proj[f"{MESSAGES}.errors_by_kind"] == {} and proj[f"{SESSIONS}.errors_by_kind"] == {}
    samples = proj[f"{GATEWAY}.error_samples"]
    assert {(s["error_kind"], s["mid"]) for s in samples} == {("bad_tool_calls", 9), ("bad_tool_calls", 11)}
    for sample in samples:  # ids and counts only, never content (SPEC §9)
        assert set(sample) <= {"error_kind", "session_id", "mid", "column"}
    # the sessions table is scanned once per run: by the plan; the projection reads by id
    assert proj["sql_statements"]["sessions_scan"] == 1
    assert proj["sql_statements"]["sessions_by_id"] == len(SMALL_DAYS)


def test_a_bad_cell_is_counted_in_each_dataset_it_touches(capture, writer):
    """SPEC §9: with a bad timestamp and a bad envelope in a day, the raw
    datasets count them too (they keep NULL / the raw text), each partition's
    materialization shows its own counts, and every bad cell is logged once."""
    writer.session("s", "cli", cwd="/work/x")
    ok = writer.msg("s", "user", "fine")
    late = writer.msg("s", "assistant", "its timestamp goes bad")
    env = writer.msg("s", "user", [{"type": "text", "text": "an envelope"}])
    writer.at(START_S + DAY_S)
    writer.session("t", "cli", cwd="/work/x")
    writer.msg("t", "user", "a clean day")
    writer.raw_sql("UPDATE messages SET timestamp = 'not a time' WHERE id = ?", (late,))
    writer.raw_sql("UPDATE messages SET content = ? WHERE id = ?", ('\x00json:[{"type": "text", "te', env))
    result = capture.materialize(DAY1, "2026-06-02")
    assert result.success
    (proj,) = step_output_metadata(result, PROJECT_STEP)
    both = {"bad_envelope": 1, "bad_timestamp": 1}
    assert proj[f"{GATEWAY}.errors_by_kind"] == both
    assert proj[f"{MESSAGES}.errors_by_kind"] == both
    assert proj[f"{SESSIONS}.errors_by_kind"] == {}
    per_day = partition_metadata(result)
    assert per_day[(MESSAGES, DAY1)]["errors_by_kind"] == both and per_day[(MESSAGES, DAY1)]["errors"] == 2
    assert per_day[(GATEWAY, DAY1)]["errors"] == 2 and per_day[(SESSIONS, DAY1)]["errors"] == 0
    assert per_day[(MESSAGES, "2026-06-02")]["errors"] == 0
    raw = {r["id"]: r for r in read_all(capture.warehouse, MESSAGES)}
    assert raw[late]["timestamp"] is None and raw[ok]["timestamp"] is not None
    assert raw[env]["content_json"] is None and raw[env]["content_text"].startswith("\x00json:")


def test_rerun_leaves_byte_identical_files(small, instance):
    assert small.materialize(FIRST, LAST, instance=instance).success
    first = small.files()  # the three datasets' files, and the sightings of the days whose sessions hold secrets
    assert len([p for p in first if p.split("/")[0] in DATASETS]) == 3 * len(SMALL_DAYS)
    assert {p.split("/")[0] for p in first} == {*DATASETS, SIGHTINGS}
    second_run = small.materialize(FIRST, LAST, instance=instance)
    assert small.files() == first
    assert all(md["file_changed"] is False for md in partition_metadata(second_run).values())
    # a run of one day inside the range rewrites the same bytes
    assert small.materialize("2026-06-07", instance=instance).success
    assert small.files() == first
    for dataset in DATASETS:
        keys = [row_key(r, dataset) for r in read_all(small.warehouse, dataset)]
        assert len(keys) == len(set(keys)), dataset


def test_days_without_sessions_get_no_file(small):
    result = small.materialize("2026-05-30", "2026-06-02")
    assert result.success
    for dataset in DATASETS:
        assert days_on_disk(small.warehouse, dataset) == ["2026-06-01", "2026-06-02"], dataset
        assert not (small.warehouse / dataset / "day=2026-05-30").exists()
    per_day = partition_metadata(result)
    for dataset in DATASETS:
        assert per_day[(dataset, "2026-05-30")]["rows_written"] == 0
        assert per_day[(dataset, "2026-06-01")]["rows_written"] > 0


def test_parallel_days_write_the_same_bytes_as_one_worker(small, tmp_path):
    assert small.materialize(FIRST, LAST, defs=small.defs(capture_runtime=CaptureRuntime(workers=1))).success
    serial = small.files()
    parallel = small.defs(
        capture_runtime=CaptureRuntime(workers=2, parallel_min_sessions=0),
        warehouse=HermesWarehouse(root=str(tmp_path / "parallel")),
    )
    result = small.materialize(FIRST, LAST, defs=parallel)
    assert result.success
    assert part_files(tmp_path / "parallel") == serial
    # and a re-run merges into the existing files: the same bytes again
    assert small.materialize(FIRST, LAST, defs=parallel).success
    assert part_files(tmp_path / "parallel") == serial


def test_asset_checks_pass(small):
    result = small.materialize(FIRST, LAST)
    checks = check_results(result)
    assert set(checks) == ALL_CHECKS
    failed = {k: c.metadata for k, c in checks.items() if not c.passed}
    assert not failed


def test_files_written_before_generations_existed_pass_the_checks_and_merge(small):
    """Day files of an earlier version lack ``generation``/``replaced`` (D15): a re-run merges
    them into files that have both, and the write step's checks pass on what it wrote (a file
    left as it was is read with the defaults: tests/defs/test_write_checks.py)."""
    assert small.materialize(FIRST).success
    for dataset in (SESSIONS, MESSAGES):
        path = day_path(small.warehouse, dataset, FIRST)
        old = pq.read_table(path).drop_columns(list(schemas.ADDED_COLUMNS))
        pq.write_table(old, path)
    result = small.materialize(FIRST)
    assert result.success
    checks = check_results(result)
    for dataset in (SESSIONS, MESSAGES):
        check = checks[(dataset, "day_valid")]
        assert check.passed and check.metadata["rows_checked"].value > 0
        table = read_day(small.warehouse, dataset, FIRST)
        assert set(table.column("generation").to_pylist()) == {1}
        assert set(table.column("replaced").to_pylist()) == {False}


# --------------------------------------------------------------------------
# usage policy (SPEC §7)
# --------------------------------------------------------------------------


def test_policy_list_ignores_a_channel_and_marks_local_only(small):
    telegram = channel_scope("telegram")
    rules = [(telegram, policy.IGNORE), (HINSIGHTS, policy.LOCAL_ONLY)]
    small.write_policy(rules)
    sessions = store_sessions(small.store)
    classes = _expected_classes(sessions, rules)
    ignored = {s for s, c in classes.items() if c == policy.IGNORE}
    local = {s for s, c in classes.items() if c == policy.LOCAL_ONLY}
    assert ignored >= {s for s, v in sessions.items() if v["source"] == "telegram"} and len(ignored) == 9
    assert len(local) >= 5

    result = small.materialize(FIRST, LAST)
    assert result.success
    counts = _policy_md(result)
    assert (counts["sessions"], counts["ignored"], counts["local_only"], counts["kept"]) == (
        SMALL_SESSIONS,
        len(ignored),
        len(local),
        SMALL_SESSIONS - len(ignored),
    )

    # ignore: nothing of those sessions in any dataset
    with_messages = _sessions_with_messages(small.store)
    assert sids_in(small.warehouse, SESSIONS) == set(sessions) - ignored
    assert sids_in(small.warehouse, MESSAGES) == with_messages - ignored
    assert sids_in(small.warehouse, GATEWAY) <= set(sessions) - ignored
    assert not [r for r in read_all(small.warehouse, GATEWAY) if (r["cwd"] or "").startswith(telegram)]

    # local-only: written, marked on every row
    for row in read_all(small.warehouse, GATEWAY):
        marked = row["attributes"].get("hermes", {}).get("policy")
        assert marked == ("local-only" if raw_sid(row, GATEWAY) in local else None), row["part_id"]
    for row in read_all(small.warehouse, SESSIONS):
        assert row["policy_class"] == ("local-only" if row["id"] in local else "full"), row["id"]
    assert local <= sids_in(small.warehouse, SESSIONS)


def _policy_scenario(w, root):
    """Three projects: one `.hypignore`d (with a subagent child), one local-only, one plain."""
    secret, client, plain = root / "secret-proj", root / "client-proj", root / "open-proj"
    for d in (secret / "deep", client, plain):
        d.mkdir(parents=True)
    (secret / ".hypignore").write_text("# private work\n\nignore\n", encoding="utf-8")
    (client / ".hypignore").write_text("\ufefflocal-only  # client NDA\r\n", encoding="utf-8")
    for sid, cwd, parent, source in (
        ("s-secret", secret / "deep", None, "cli"),
        ("s-secret-child", None, "s-secret", "subagent"),
        ("s-client", client, None, "cli"),
        ("s-plain", plain, None, "cli"),
    ):
        w.session(sid, source, cwd=str(cwd) if cwd else None, parent_session_id=parent, model="gpt-5")
        w.msg(sid, "user", f"task for {sid}")
        w.msg(sid, "assistant", "working", tool_calls=[openai_call(f"c-{sid}", "terminal", {"cmd": "ls"})])
        w.msg(sid, "tool", "a.txt", tool_call_id=f"c-{sid}", tool_name="terminal")
        w.msg(sid, "assistant", "done", finish_reason="stop")
        w.end(sid)


def test_hypignore_in_the_cwd_ignores_a_session_and_its_subagents(capture, writer, tmp_path):
    _policy_scenario(writer, tmp_path / "projects")
    result = capture.materialize(DAY1)
    assert result.success
    counts = _policy_md(result)
    assert (counts["sessions"], counts["kept"], counts["ignored"], counts["local_only"]) == (4, 2, 2, 1)
    for dataset in DATASETS:
        assert sids_in(capture.warehouse, dataset) == {"s-client", "s-plain"}, dataset
    texts = " ".join(str(r["content_text"]) for r in read_all(capture.warehouse, GATEWAY))
    assert "s-secret" not in texts
    sessions = {r["id"]: r for r in read_all(capture.warehouse, SESSIONS)}
    assert sessions["s-client"]["policy_class"] == "local-only" and sessions["s-plain"]["policy_class"] == "full"
    for row in read_all(capture.warehouse, GATEWAY):
        want = "local-only" if raw_sid(row, GATEWAY) == "s-client" else None
        assert row["attributes"].get("hermes", {}).get("policy") == want


def test_a_session_turning_ignore_is_dropped_from_every_dataset(small):
    assert small.materialize(FIRST, LAST).success
    telegram = {s for s, v in store_sessions(small.store).items() if v["source"] == "telegram"}
    assert all(telegram & sids_in(small.warehouse, d) for d in DATASETS)
    small.write_policy([(channel_scope("telegram"), policy.IGNORE)])
    result = small.materialize(FIRST, LAST)
    assert result.success
    for dataset in DATASETS:
        assert not telegram & sids_in(small.warehouse, dataset), dataset
    dropped = sum(md["rows_dropped"] for md in partition_metadata(result).values())
    assert dropped > 0


def test_unreadable_policy_list_fails_the_run_and_changes_no_file(small):
    assert small.materialize(FIRST, LAST).success
    before = small.files()
    small.policy_list.parent.mkdir(parents=True, exist_ok=True)
    small.policy_list.write_text('{"version": 2, "entries": [', encoding="utf-8")
    result = small.materialize(FIRST, LAST, raise_on_error=False)
    assert not result.success
    failures = [e.event_specific_data.error for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failures
    for error in failures:
        text = error.message + str(error.cause or "")
        assert "usage-policy list" in text and str(small.policy_list) in text, text
    assert small.files() == before


def test_configured_user_home_is_the_channel_scope_home(small, tmp_path):
    """The usage_policy resource's ``user_home`` decides both the channel scope path
    the policy is resolved on and the ``cwd`` written (SPEC §5.7, §7: one resolver, D9)."""
    alice = str(tmp_path / "home-alice")
    telegram = channel_scope("telegram", alice)
    small.write_policy([(telegram, policy.IGNORE)])
    defs = small.defs(usage_policy=UsagePolicy(list_path=str(small.policy_list), user_home=alice))
    result = small.materialize(FIRST, LAST, defs=defs)
    assert result.success
    channel_cwds = {
        r["cwd"] for r in read_all(small.warehouse, GATEWAY) if r["cwd"] and "/.hermes/channels/" in r["cwd"]
    }
    assert channel_cwds and all(c.startswith(alice + "/") for c in channel_cwds)  # the projection uses alice's home
    scopes = {
        r["scope_path"]
        for r in read_all(small.warehouse, SESSIONS)
        if r["scope_path"] and "/.hermes/channels/" in r["scope_path"]
    }
    assert scopes and all(p.startswith(alice + "/") for p in scopes), (
        f"hermes_sessions.scope_path of channel sessions is not under the configured user_home {alice}: {sorted(scopes)[:3]}"
    )
    sessions = store_sessions(small.store)
    ignored = with_descendants(sessions, {s for s, v in sessions.items() if v["source"] == "telegram"})
    assert _policy_md(result)["ignored"] == len(ignored), (
        f"the policy was resolved on channel scopes of another home than the configured user_home {alice}"
    )
    for dataset in DATASETS:
        assert not ignored & sids_in(small.warehouse, dataset), dataset


# --------------------------------------------------------------------------
# retention (SPEC §6, D13)
# --------------------------------------------------------------------------


def _retention_scenario(w) -> None:
    for sid in ("s-keep", "s-del", "s-retry"):
        w.session(sid, "cli", cwd="/work/project", model="claude-sonnet-4")
        w.msg(sid, "user", f"question {sid}")
        w.msg(sid, "assistant", "let me look", tool_calls=[openai_call(f"c-{sid}", "read_file", {"path": "a.py"})])
        w.msg(sid, "tool", "print(1)", tool_call_id=f"c-{sid}", tool_name="read_file")
        w.msg(sid, "assistant", f"answer {sid}", finish_reason="stop")
        w.end(sid)


def test_rows_whose_source_vanished_are_kept_flagged_source_deleted(capture, writer, instance):
    """delete_session and replace_messages (/retry) by the real writer, then a
    re-materialization: the old rows stay, flagged, beside the new ones (D13)."""
    datasets = DATASETS
    _retention_scenario(writer)
    assert capture.materialize(DAY1, instance=instance).success
    first = {d: {row_key(r, d): r for r in read_all(capture.warehouse, d)} for d in datasets}
    old_retry_mids = set(writer.mids("s-retry"))

    writer.delete_session("s-del")
    writer.tick(60)
    writer.replace_messages(
        "s-retry",
        [
            {"role": "user", "content": "question s-retry (again)"},
            {"role": "assistant", "content": "a better answer", "finish_reason": "stop"},
        ],
    )
    new_retry_mids = set(writer.mids("s-retry"))
    assert new_retry_mids and not new_retry_mids & old_retry_mids

    result = capture.materialize(DAY1, instance=instance)
    assert result.success
    after = {d: read_all(capture.warehouse, d) for d in datasets}
    for dataset in datasets:
        keys = [row_key(r, dataset) for r in after[dataset]]
        assert len(keys) == len(set(keys)), f"duplicates in {dataset}"
        now = {row_key(r, dataset): r for r in after[dataset]}
        for key, old in first[dataset].items():
            sid = raw_sid(old, dataset)
            gone = sid == "s-del" or (sid == "s-retry" and _mid(old, dataset) in old_retry_mids)
            if gone:
                assert key in now, f"{dataset}: row {key} of a deleted source was lost"
        for key, row in now.items():
            sid, mid = raw_sid(row, dataset), _mid(row, dataset)
            expect = sid == "s-del" or (sid == "s-retry" and mid in old_retry_mids)
            assert source_deleted(row, dataset) is expect, (dataset, key)
            if expect:  # a retained row is the old row, only flagged
                assert _unflagged(row, dataset) == _unflagged(first[dataset][key], dataset), (dataset, key)
            elif sid == "s-retry" and mid in new_retry_mids:
                assert key not in first[dataset]
        md = partition_metadata(result)[(dataset, DAY1)]
        assert md["rows_retained_source_deleted"] == sum(source_deleted(r, dataset) for r in after[dataset]) > 0
        assert md["rows_written"] == len(after[dataset])
        assert sids_in(capture.warehouse, dataset) == {"s-keep", "s-del", "s-retry"}
    if MESSAGES in datasets:
        live = {r["id"] for r in after[MESSAGES] if r["session_id"] == "s-retry" and not r["source_deleted"]}
        assert live == new_retry_mids
    # and a third run changes nothing
    files = capture.files()
    assert capture.materialize(DAY1, instance=instance).success
    assert capture.files() == files


def _unflagged(row: dict, dataset: str) -> dict:
    row = json.loads(json.dumps(row, default=str))
    if dataset == GATEWAY:
        row["attributes"].get("hermes", {}).pop("source_deleted", None)
    else:
        row.pop("source_deleted")
    return row


def _mid(row: dict, dataset: str):
    if dataset == GATEWAY:
        return int(row["provider_uuid"]) if row["provider_uuid"] else None
    return row["id"] if dataset == MESSAGES else None


# --------------------------------------------------------------------------
# no Hermes installed (SPEC §1, R9)
# --------------------------------------------------------------------------


def test_missing_store_materializes_empty_partitions(capture):
    result = capture.materialize(FIRST, "2026-06-03")
    assert result.success
    assert capture.files() == {}
    assert list(capture.home.iterdir()) == [], "the Hermes home was touched"
    read_md = _plan_md(result)
    assert read_md["stores_missing"] == [str(capture.store)] and read_md["sessions_in_range"] == 0
    per_day = partition_metadata(result)
    assert set(per_day) == {(d, day) for d in DATASETS for day in ("2026-06-01", "2026-06-02", "2026-06-03")}
    assert all(md["rows_written"] == 0 for md in per_day.values())
    assert all(c.passed for c in check_results(result).values())


# --------------------------------------------------------------------------
# sessions outside the partitions (SPEC §2)
# --------------------------------------------------------------------------


def test_session_before_the_start_date_is_reported_not_written(capture, writer, instance):
    first = dt.datetime.fromisoformat(SUITE_PARTITIONS.get_first_partition_key()).replace(tzinfo=dt.UTC)
    writer.at(first.timestamp() - 30 * DAY_S)
    writer.session("s-old", "cli", cwd="/work/old")
    writer.msg("s-old", "user", "long ago")
    writer.at(START_S)
    writer.session("s-new", "cli", cwd="/work/new")
    writer.msg("s-new", "user", "today")
    result = capture.materialize(DAY1, instance=instance)
    assert result.success
    check = check_results(result)[(STATE, "sessions_within_partition_range")]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["sessions_out_of_range"].value == 1
    assert _plan_md(result)["sessions_out_of_range"] == 1
    # one event per such session, on every run: on stderr only, the run log holds their count and sample
    stored = [e.user_message for e in instance.all_logs(result.run_id) if e.user_message]
    assert any(m.startswith("hermes.capture.plan ") for m in stored)
    assert not [m for m in stored if m.startswith("hermes.capture.out_of_range_session")]
    for dataset in DATASETS:
        assert sids_in(capture.warehouse, dataset) == {"s-new"}


# --------------------------------------------------------------------------
# purge (SPEC §7)
# --------------------------------------------------------------------------


def _purge(cap, instance, **config):
    job = cap.defs().resolve_job_def("purge_job")
    result = job.execute_in_process(run_config={"ops": {"purge_scope": {"config": config}}}, instance=instance)
    assert result.success
    (md,) = step_output_metadata(result, "purge_scope")
    return md


def test_purge_job_removes_a_scope_and_a_session_everywhere(small, instance):
    """Purge by scope, then by session id: every row of the matched sessions and of
    their descendants (which inherit the class, SPEC §7) goes from all three
    datasets; the op reports what it removed; nothing else is touched."""
    assert small.materialize(FIRST, LAST, instance=instance).success
    sessions = store_sessions(small.store)

    def purged_by(md: dict, gone: set[str], before: dict) -> None:
        for dataset in DATASETS:
            after = read_all(small.warehouse, dataset)
            assert not gone & {raw_sid(r, dataset) for r in after}, dataset
            assert md["rows_removed"][dataset] == len(before[dataset]) - len(after), dataset
            assert md["rows_removed"][dataset] == sum(1 for r in before[dataset] if raw_sid(r, dataset) in gone)
            days = sorted({r["_day"] for r in before[dataset] if raw_sid(r, dataset) in gone})
            assert sorted(md["days"][dataset]) == days and md["days_rewritten"][dataset] == len(days), dataset

    telegram = with_descendants(sessions, {s for s, v in sessions.items() if v["source"] == "telegram"})
    before = {d: read_all(small.warehouse, d) for d in DATASETS}
    md = _purge(small, instance, scope=channel_scope("telegram"))
    purged_by(md, telegram, before)
    assert md["sessions_matched"] == len(telegram)

    victim = "20260607_124243_712ecb"  # a cli session in /home/dev/notes, with a chain of two children
    gone = with_descendants(sessions, {victim})
    assert len(gone) == 3
    before = {d: read_all(small.warehouse, d) for d in DATASETS}
    md = _purge(small, instance, session_id=victim)
    purged_by(md, gone, before)
    assert md["days"][GATEWAY] == ["2026-06-07"]
    # everything else is still there
    assert sids_in(small.warehouse, SESSIONS) == set(sessions) - telegram - gone

    # purging again finds nothing and changes no file
    files = small.files()
    md = _purge(small, instance, session_id=victim)
    assert md["rows_removed"] == {GATEWAY: 0, SESSIONS: 0, MESSAGES: 0}
    assert small.files() == files


def test_purge_job_without_scope_or_session_fails_clearly(small, instance):
    job = small.defs().resolve_job_def("purge_job")
    result = job.execute_in_process(
        run_config={"ops": {"purge_scope": {"config": {}}}}, raise_on_error=False, instance=instance
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert (
        "scope" in failure.event_specific_data.error.message
        and "session_id" in failure.event_specific_data.error.message
    )


def test_purge_of_a_scope_matches_what_policy_ignore_leaves(small, tmp_path, instance):
    """Purging a scope that became ``ignore`` leaves exactly the rows a fresh
    capture under that policy writes: subagents of its sessions are ignored too
    (SPEC §7: a session's class is the most restrictive of its ancestors')."""
    assert small.materialize(FIRST, LAST, instance=instance).success
    _purge(small, instance, scope=HINSIGHTS)
    purged = {d: {row_key(r, d) for r in read_all(small.warehouse, d)} for d in DATASETS}

    fresh = tmp_path / "fresh-warehouse"
    small.write_policy([(HINSIGHTS, policy.IGNORE)])
    assert small.materialize(FIRST, LAST, defs=small.defs(warehouse=HermesWarehouse(root=str(fresh)))).success
    for dataset in DATASETS:
        want = {row_key(r, dataset) for r in read_all(fresh, dataset)}
        left = {raw_sid(r, dataset) for r in read_all(small.warehouse, dataset) if row_key(r, dataset) not in want}
        assert purged[dataset] == want, f"{dataset}: purge left rows of sessions {sorted(left)}"
