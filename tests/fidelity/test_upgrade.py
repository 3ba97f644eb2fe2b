"""A store written by hermes-agent 0.19, captured, upgraded in place by Hermes v0.22.2, captured again.

``tests/fixtures/upgrade/v019/state.db`` was written by hermes-agent 0.19.0
(schema 22); ``v022/state.db`` is that file after Hermes v0.22.2 opened it (its
migration moved the inline prompts to ``system_prompts`` and added the schema-31
columns) and wrote more: new sessions, an in-place compaction, a rotation,
messages in a session 0.19 left open, a pin (see ``make_upgrade.py`` and
``manifest.json``). Each store's ``oracle/`` is Hermes's own reading of it.

Both are captured into the SAME warehouse by real Dagster runs, the upgraded file
copied over the first at the same path, as an upgrade leaves it (SPEC §1 "Schema
versions"): no row is lost, no id changes, the old sessions keep their prompt text
(D19), and the upgraded store's rows are all there, as many as Hermes counts.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.basics import hermes_tables
from tests.faults.helpers import GATEWAY, MESSAGES, SESSIONS, assert_sound, new_install, remove_sqlite_sidecars
from tests.support.environ import use_environment
from tests.support.hermes_counts import logical_counts
from tests.support.skips import unavailable

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "upgrade"
DAYS = ("2026-06-01", "2026-06-03")
#: what each dataset's rows are compared on besides their key: the captured content
GATEWAY_CONTENT = (
    "session_id",
    "message_id",
    "message_index",
    "message_created_at",
    "role",
    "part_type",
    "content_text",
    "tool_name",
    "tool_call_id",
    "tool_args",
    "tool_result_for",
    "system_text",
    "model",
    "cwd",
    "provider",
    "date",
)
#: D20 and D21 attributes a schema-31 store adds to a row captured before (nothing else may change)
ADDED_ATTRIBUTES = {"message_uid", "copy_of", "superseded", "display_kind", "model_only"}


def oracle(version: str, name: str):
    path = FIXTURE / version / "oracle" / name
    if name.endswith(".gz"):
        return json.loads(gzip.decompress(path.read_bytes()))
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """The warehouse after the 0.19 store's capture (``before``) and after the upgraded one's (``after``)."""
    for version in ("v019", "v022"):
        if not (FIXTURE / version / "state.db").is_file():
            unavailable(f"{FIXTURE / version / 'state.db'} is missing (tests/fixtures/upgrade/make_upgrade.py)")
    install = new_install(tmp_path_factory.mktemp("upgrade") / "install")
    with pytest.MonkeyPatch.context() as mp:
        use_environment(mp, install.environ())
        shutil.copyfile(FIXTURE / "v019" / "state.db", install.store)
        install.run(*DAYS).ok()
        before = install.state()
        remove_sqlite_sidecars(install.store)
        shutil.copyfile(FIXTURE / "v022" / "state.db", install.store)  # over the old file: the same inode
        run = install.run(*DAYS).ok()
        after = install.state()
        assert_sound(install.warehouse)
    return before, after, run, install.warehouse


def test_no_row_is_lost_and_no_id_changes(captured):
    before, after, *_ = captured
    for dataset in (SESSIONS, MESSAGES, GATEWAY):
        assert before.keys(dataset) <= after.keys(dataset), dataset
        flagged = [
            k
            for k, r in after.rows[dataset].items()
            if (r.get("source_deleted") or '"source_deleted":true' in (r.get("attributes") or ""))
        ]
        assert flagged == [], f"{dataset}: the upgrade deleted nothing, yet rows are flagged {flagged[:5]}"
    for key, old in before.rows[GATEWAY].items():
        new = after.rows[GATEWAY][key]
        if old["message_id"].endswith("-session_end"):
            continue  # the end row carries the session's current totals (D4), which v0.22 changed
        assert {c: new[c] for c in GATEWAY_CONTENT} == {c: old[c] for c in GATEWAY_CONTENT}, key
        old_attrs, new_attrs = json.loads(old["attributes"]), json.loads(new["attributes"])
        added = set(new_attrs["hermes"]) - set(old_attrs["hermes"])
        assert added <= ADDED_ATTRIBUTES, (key, added)
        for name in added:
            new_attrs["hermes"].pop(name)
        assert new_attrs == old_attrs, key


def test_the_old_rows_read_the_same_but_for_the_new_columns(captured):
    before, after, *_ = captured
    for key, old in before.rows[MESSAGES].items():
        new = after.rows[MESSAGES][key]
        assert old["message_uid"] is None and new["message_uid"], key  # v0.22 minted one for every old row
        changed = {c for c in old if c != "_day" and old[c] != new[c]}
        assert changed <= hermes_tables.V23_MESSAGE_COLUMNS | {"copy_of", "superseded"}, (key, changed)
        assert old["copy_of"] is None and old["superseded"] is None and new["superseded"] is not None, key


def test_old_sessions_keep_their_prompt_text(captured):
    before, after, *_ = captured
    old_prompts = {k: r["system_prompt"] for k, r in before.rows[SESSIONS].items()}
    assert len(old_prompts) == 6 and all(old_prompts.values())
    for key, prompt in old_prompts.items():
        new = after.rows[SESSIONS][key]
        assert new["system_prompt"] == prompt, key  # resolved through system_prompts (D19)
        assert new["system_prompt_hash"], key  # migration 25 moved it there
    # Hermes reads the same prompt for every session, old and new
    hermes = oracle("v022", "get_session.json.gz")
    assert {r["id"]: r["system_prompt"] for r in after.rows[SESSIONS].values()} == {
        sid: s["system_prompt"] for sid, s in hermes.items()
    }
    texts = {r["session_id"]: r["system_text"] for r in after.rows[GATEWAY].values()}
    assert texts == {f"hermes-{sid}": s["system_prompt"] for sid, s in hermes.items()}


def test_the_upgraded_stores_rows_are_all_there_as_hermes_counts_them(captured):
    _, after, run, _ = captured
    counts = oracle("v022", "counts.json")
    exports = oracle("v022", "export_session.json.gz")
    assert len(after.rows[SESSIONS]) == counts["total"]["sessions"] == 10
    # every row Hermes exports (include_inactive: every stored row), each once
    assert sorted((r["session_id"], r["id"]) for r in after.rows[MESSAGES].values()) == sorted(
        (sid, m["id"]) for sid, e in exports.items() for m in e["messages"]
    )
    assert len(after.rows[MESSAGES]) == counts["total"]["export_rows"] == 57
    for day, figures in counts["by_day"].items():
        assert sum(r["_day"] == day for r in after.rows[SESSIONS].values()) == figures["sessions"], day
        assert sum(r["_day"] == day for r in after.rows[MESSAGES].values()) == figures["export_rows"], day
    assert run.metadata("hermes_capture.plan")["unknown_columns"] == []


def test_the_daily_analytics_count_each_logical_message_once(captured):
    """SPEC §11, D20: the 0.19 in-place compaction's re-inserted tail, v0.22's carried tail and
    the rotation's hand-off copies count once; a rewound turn counts (it happened)."""
    *_, warehouse = captured
    want = logical_counts(
        oracle("v022", "counts.json"), oracle("v022", "export_session.json.gz"), oracle("v022", "display.json.gz")
    )
    got = {}
    for path in sorted((warehouse / "hermes_daily_usage").glob("day=*/part-0.parquet")):
        table = pq.read_table(path)
        got[path.parent.name[4:]] = {k: sum(table.column(k).to_pylist()) for k in ("messages", "tool_calls")}
    assert got == want
    assert want == {"2026-06-01": {"messages": 31, "tool_calls": 2}, "2026-06-03": {"messages": 18, "tool_calls": 0}}
