"""lib/warehouse/retention.py: the fate of captured rows that are not among a day's new rows (SPEC §6, D13, D15).

Rows are real: a store written by the real Hermes writer, projected by the capture's own
projection. The "old file" is those rows encoded; the "new rows" are the same rows with
some left out, and the store's facts say why they are missing.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.plan.capture_plan import StoreFacts
from hermes_assets.lib.source import jsonutil
from hermes_assets.lib.source.stores import Store
from hermes_assets.lib.warehouse import partition_file, retention
from hermes_assets.lib.warehouse.partition_file import DayFile
from tests.support.hermes_writer import START_S, HermesWriter
from tests.support.project import project_store


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """Two ended sessions of one day, two messages each; their rows in the three datasets."""
    path = tmp_path_factory.mktemp("retention") / "state.db"
    with HermesWriter(path, start_s=START_S) as w:
        for sid in ("keep", "other"):
            w.session(sid, "cli")
            w.msg(sid, "user", f"hello from {sid}")
            w.msg(sid, "assistant", f"hi {sid}")
            w.end(sid)
        mids = {sid: w.mids(sid) for sid in ("keep", "other")}
    p = project_store(path)
    return {"path": str(path), "mids": mids, SESSIONS: p.sessions, MESSAGES: p.messages, GATEWAY: p.gateway}


def facts(rows, *, sessions=("keep", "other"), messages=None, ignored=(), session_gens=None) -> StoreFacts:
    messages_now = {(sid, mid): 1 for sid in sessions for mid in rows["mids"][sid]} if messages is None else messages
    return StoreFacts(
        rows["path"],
        Store(rows["path"]).path_hash,
        {sid: "2026-06-01" for sid in sessions},
        sessions_now=session_gens or {sid: 1 for sid in sessions},
        messages_now=messages_now,
        ignored=set(ignored),
    )


def sid_of(dataset: str, table: pa.Table) -> pa.Array:
    if dataset == SESSIONS:
        return table.column("id")
    if dataset == MESSAGES:
        return table.column("session_id")
    return pc.replace_substring_regex(table.column("session_id"), pattern="^hermes-", replacement="")


def without(dataset: str, table: pa.Table, sid: str) -> pa.Table:
    return table.filter(pc.not_equal(sid_of(dataset, table), sid))


def together(dataset: str, *tables: pa.Table) -> pa.Table:
    return pa.concat_tables([t.cast(schemas.DATASETS[dataset].schema) for t in tables])


def old_file(dataset: str, table: pa.Table) -> DayFile:
    return DayFile(dataset, partition_file.encode(dataset, table))


def flagged(dataset: str, table: pa.Table) -> list[bool]:
    return retention.source_deleted_mask(dataset, table).to_pylist()


@pytest.mark.parametrize("dataset", (SESSIONS, MESSAGES, GATEWAY))
def test_a_session_gone_from_the_store_keeps_its_rows_flagged_source_deleted(rows, dataset):
    table = rows[dataset]
    new = without(dataset, table, "other")
    carried = retention.carry_over(dataset, old_file(dataset, table), new, [facts(rows, sessions=("keep",))])
    assert carried.kept is not None and carried.dropped == 0 and carried.replaced == 0
    assert carried.kept.num_rows == table.num_rows - new.num_rows > 0
    assert set(sid_of(dataset, carried.kept).to_pylist()) == {"other"}
    assert all(flagged(dataset, carried.kept))
    assert not any(flagged(dataset, new))
    assert retention.count_source_deleted(dataset, together(dataset, new, carried.kept)) == carried.kept.num_rows


@pytest.mark.parametrize("dataset", (SESSIONS, MESSAGES, GATEWAY))
def test_rows_of_an_ignored_session_or_of_one_that_simply_yields_fewer_rows_are_dropped(rows, dataset):
    table = rows[dataset]
    new = without(dataset, table, "other")
    ignored = retention.carry_over(dataset, old_file(dataset, table), new, [facts(rows, ignored=("other",))])
    assert ignored.kept is None or ignored.kept.num_rows == 0
    assert ignored.dropped == table.num_rows - new.num_rows
    if dataset == SESSIONS:  # the session still exists (on another day now, or not ended): not ours to keep
        moved = retention.carry_over(dataset, old_file(dataset, table), new, [facts(rows)])
        assert moved.kept is None or moved.kept.num_rows == 0
        assert moved.dropped == 1


@pytest.mark.parametrize("dataset", (SESSIONS, MESSAGES, GATEWAY))
def test_rows_of_a_store_this_run_did_not_read_are_kept_as_they_are(rows, dataset):
    table = rows[dataset]
    new = without(dataset, table, "other")
    stranger = StoreFacts("/another/state.db", Store("/another/state.db").path_hash, {})
    carried = retention.carry_over(dataset, old_file(dataset, table), new, [stranger])
    assert carried.kept.num_rows == table.num_rows - new.num_rows
    assert not any(flagged(dataset, carried.kept))


@pytest.mark.parametrize("dataset", (MESSAGES, GATEWAY))
def test_a_message_gone_is_flagged_and_a_reused_message_id_is_flagged_replaced_once(rows, dataset):
    table = rows[dataset]
    first, second = rows["mids"]["other"]
    new = without(dataset, table, "other")
    gone = {**facts(rows).messages_now}
    del gone[("other", second)]
    gone[("other", first)] = 2  # another message now holds this id (a restored store, D15)
    carried = retention.carry_over(dataset, old_file(dataset, table), new, [facts(rows, messages=gone)])
    kept = carried.kept
    assert all(flagged(dataset, kept))
    if dataset == MESSAGES:
        by_mid = dict(zip(kept.column("id").to_pylist(), kept.column("replaced").to_pylist()))
        assert by_mid == {first: True, second: False}
        assert carried.replaced == 1
    else:
        replaced = [bool(jsonutil.loads(a)["hermes"].get("replaced")) for a in kept.column("attributes").to_pylist()]
        assert any(replaced) and not all(replaced)
        assert carried.replaced == sum(replaced)
    # written once, judged again: the rows stay, and are not counted as newly replaced
    again = retention.carry_over(
        dataset, old_file(dataset, together(dataset, new, kept)), new, [facts(rows, messages=gone)]
    )
    assert again.kept.num_rows == kept.num_rows and again.replaced == 0


def test_a_reused_session_id_keeps_the_captured_session_flagged_replaced(rows):
    table = rows[SESSIONS]
    new = without(SESSIONS, table, "other")
    carried = retention.carry_over(
        SESSIONS, old_file(SESSIONS, table), new, [facts(rows, session_gens={"keep": 1, "other": 2})]
    )
    assert carried.kept.column("id").to_pylist() == ["other"]
    assert carried.kept.column("replaced").to_pylist() == [True] and carried.replaced == 1


def test_nothing_missing_decodes_only_the_keys(rows, monkeypatch):
    table = rows[GATEWAY]
    old = old_file(GATEWAY, table)
    decoded: list = []
    real = partition_file.decode

    def spy(dataset, data, columns=None):
        decoded.append(columns)
        return real(dataset, data, columns)

    monkeypatch.setattr(partition_file, "decode", spy)
    carried = retention.carry_over(GATEWAY, old, table, [facts(rows)])
    assert carried.kept is None and carried.dropped == 0
    assert decoded == [["part_id"]]


def test_the_flag_is_read_from_the_attributes_not_from_any_text_that_looks_like_it(rows):
    table = rows[GATEWAY].slice(0, 2)
    attrs = [jsonutil.loads(a) for a in table.column("attributes").to_pylist()]
    attrs[0]["note"] = '"source_deleted":true'  # the text, but not the flag
    attrs[1].setdefault("hermes", {})["source_deleted"] = True
    typ = table.schema.field("attributes").type
    column = pa.ExtensionArray.from_storage(typ, pa.array([jsonutil.dumps(a) for a in attrs], pa.string()))
    table = table.set_column(table.schema.get_field_index("attributes"), "attributes", column)
    assert flagged(GATEWAY, table) == [False, True]
    assert retention.source_deleted_mask("hermes_daily_usage", pa.table({"day": ["x"]})).to_pylist() == [False]
