"""lib/warehouse/purge.py: a session's or a scope's rows leave every partition and every staged day (SPEC §7)."""

from __future__ import annotations

import os

import pytest

from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, GATEWAY, MESSAGES, SESSIONS
from hermes_assets.lib.capture import steps
from hermes_assets.lib.warehouse import purge, staging
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.support.capture_run import capture_days, stage
from tests.support.hermes_writer import START_S, HermesWriter
from tests.support.hosts import HOST_DIR

DAY = "2026-06-01"


@pytest.fixture
def store(tmp_path):
    """``parent`` in /work/secret with a subagent ``child``; ``other`` in /work/open."""
    path = tmp_path / "hermes" / "state.db"
    with HermesWriter(path, start_s=START_S) as w:
        w.session("parent", "cli", cwd="/work/secret")
        w.msg("parent", "user", "secret plans")
        w.session("child", "subagent", parent_session_id="parent")
        w.msg("child", "assistant", "secret work")
        w.session("other", "cli", cwd="/work/open")
        w.msg("other", "user", "open question")
    return path


def sids(wh: Warehouse) -> dict[str, set[str]]:
    out = {}
    for dataset in CAPTURE_DATASETS:
        table = wh.read(dataset, DAY)
        column = "id" if dataset == SESSIONS else "session_id"
        out[dataset] = set(table.column(column).to_pylist()) if table is not None else set()
    return out


def test_a_session_and_its_subagents_leave_every_dataset(store, tmp_path):
    wh = Warehouse(str(tmp_path / "wh"))
    capture_days([store], wh)
    result = purge.purge(wh, session_id="parent")
    assert result.sessions == 2 and result.removed[SESSIONS] == 2 and result.days[GATEWAY] == [DAY]
    assert sids(wh) == {SESSIONS: {"other"}, MESSAGES: {"other"}, GATEWAY: {"hermes-other"}}
    assert purge.purge(wh, session_id="hermes-other").removed[SESSIONS] == 1  # a canonical id works too


def test_a_scope_leaves_and_every_file_is_private_again(store, tmp_path):
    wh = Warehouse(str(tmp_path / "wh"))
    capture_days([store], wh)
    part = tmp_path / "wh" / SESSIONS / f"day={DAY}" / HOST_DIR / "part-0.parquet"
    os.chmod(part, 0o644)
    purge.purge(wh, scope="/work/secret")
    assert sids(wh)[SESSIONS] == {"other"}
    assert os.stat(part).st_mode & 0o777 == 0o600


def test_a_run_staged_before_the_purge_writes_nothing_of_the_purged_session(store, tmp_path):
    wh = Warehouse(str(tmp_path / "wh"))
    capture_days([store], wh, days=[DAY])
    with HermesWriter(store, start_s=START_S + 600) as w:
        w.session("new", "cli", cwd="/work/new")  # not captured yet: only the staged day holds it
        w.msg("new", "user", "new secrets")
    run = stage([store], wh, run_id="pending")
    assert [p for _, p in staging.merge_files(wh.staging_root) if p.endswith(".prepared")]
    result = purge.purge(wh, session_id="new")
    assert result.staged > 0 and not staging.merge_files(wh.staging_root)
    assert result.removed[SESSIONS] == 0  # the day's files did not hold it: they were not rewritten
    steps.write_partitions(run, wh)  # the write merges again, from the scrubbed staged rows
    assert "new" not in sids(wh)[SESSIONS] and "hermes-new" not in sids(wh)[GATEWAY]
    assert sids(wh)[SESSIONS] == {"parent", "child", "other"}


def test_a_purge_needs_a_scope_or_a_session_and_an_absolute_scope(tmp_path):
    wh = Warehouse(str(tmp_path / "wh"))
    with pytest.raises(ValueError, match="needs a scope path or a session id"):
        purge.purge(wh)
    with pytest.raises(ValueError, match="not an absolute path"):
        purge.purge(wh, scope="relative/dir")
