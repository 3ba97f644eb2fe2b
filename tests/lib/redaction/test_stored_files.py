"""Partition files record the redaction they went through; older files are redacted again.

The library alone (no Dagster): a capture without redaction writes files with no version
and the secrets as stored; the next capture that redacts rewrites them in place (JSON
cells included, ids kept) and stamps the warehouse; a purge keeps each file's version;
a run that finds nothing new changes no byte.
"""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from hermes_assets.lib.basics.schemas import CAPTURE_DATASETS, MESSAGES
from hermes_assets.lib.capture import steps
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.redaction import stored_files
from hermes_assets.lib.redaction.redactor import RedactionConfig, redactor_for
from hermes_assets.lib.warehouse import partition_file, purge
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.host_layout import LAYOUT_MARK
from tests.support.capture_run import USER_HOME, capture_days, files, plan_for
from tests.support.project import TEST_REDACTION


def current_version() -> str:
    """What the test captures' files record."""
    return redactor_for(TEST_REDACTION).version


def capture_off(db, wh: Warehouse) -> None:
    """One capture with redaction off (as ``HERMES_ASSETS_REDACT_SECRETS=off`` runs)."""
    plan = plan_for([db], None)
    ctx = ProjectionContext(user_home=USER_HOME, now_s=plan.read_at, git=NoGit())
    run = steps.project_rows(plan, ctx, wh, staging=os.path.join(wh.staging_root, "off"), parallel_min_sessions=0)
    steps.write_partitions(run, wh)


def all_text(root) -> str:
    out = []
    for path in sorted(root.glob("*/day=*/host=*/part-0.parquet")):
        out.append(json.dumps(pq.read_table(path).to_pylist(), default=str))
    return "\n".join(out)


def versions(root) -> set:
    """The redaction versions the capture datasets' partition files record."""
    return {
        partition_file.redaction_version(pa.py_buffer(p.read_bytes()))
        for dataset in CAPTURE_DATASETS
        for p in root.glob(f"{dataset}/day=*/host=*/part-0.parquet")
    }


def test_files_written_without_redaction_are_redacted_in_place(secret_store, tmp_path):
    db, keys = secret_store
    wh = Warehouse(str(tmp_path / "wh"))
    capture_off(db, wh)
    text = all_text(tmp_path / "wh")
    assert keys["github"] in text and keys["openai"] in text
    assert versions(tmp_path / "wh") == {None}
    assert not os.path.exists(stored_files.stamp_path(wh))

    run, _ = capture_days([db], wh)
    assert run.files_redacted is not None
    assert sum(run.files_redacted.files_rewritten.values()) == len(CAPTURE_DATASETS)
    assert run.files_redacted.cells_changed[MESSAGES] >= 2  # content and the tool call's JSON
    text = all_text(tmp_path / "wh")
    assert keys["github"] not in text and keys["openai"] not in text
    assert versions(tmp_path / "wh") == {current_version()}
    assert os.path.exists(stored_files.stamp_path(wh))
    messages = pq.read_table(next((tmp_path / "wh" / MESSAGES).rglob("*.parquet"))).to_pylist()
    call = json.loads(next(m["tool_calls"] for m in messages if m["tool_calls"]))
    assert call[0]["id"] == "c1" and json.loads(call[0]["function"]["arguments"])["command"].startswith(
        "export OPENAI_API_KEY=[REDACTED:openai_api_key:"
    )

    before = files(tmp_path / "wh")
    run, _ = capture_days([db], wh)
    assert not sum(run.files_redacted.files_rewritten.values())
    assert files(tmp_path / "wh") == before  # nothing new: no byte changed


def test_a_purge_keeps_each_files_redaction_version(secret_store, tmp_path):
    db, _ = secret_store
    wh = Warehouse(str(tmp_path / "wh"))
    capture_days([db], wh)
    assert versions(tmp_path / "wh") == {current_version()}
    assert purge.purge(wh, scope="/work/b").sessions == 1
    assert versions(tmp_path / "wh") == {current_version()}


def test_a_run_without_redaction_forgets_the_stamp(secret_store, tmp_path):
    db, _ = secret_store
    wh = Warehouse(str(tmp_path / "wh"))
    capture_days([db], wh)
    assert os.path.exists(stored_files.stamp_path(wh))
    capture_off(db, wh)
    assert not os.path.exists(stored_files.stamp_path(wh))
    assert versions(tmp_path / "wh") == {None}


def test_each_host_on_a_shared_folder_redacts_its_own_files_whatever_the_other_stamped(secret_store, tmp_path):
    """Hosts sharing one folder may redact differently: one host's stamp never stops another
    from redacting its own files, and a host without redaction never forgets the other's."""
    db, keys = secret_store
    root = tmp_path / "wh"
    alpha, beta = Warehouse(str(root), host="alpha"), Warehouse(str(root), host="beta")
    capture_off(db, alpha)  # alpha runs with redaction off
    capture_days([db], beta)  # beta redacts, and stamps
    assert os.path.exists(stored_files.stamp_path(beta)) and stored_files.stamp_path(alpha) != stored_files.stamp_path(
        beta
    )
    assert keys["github"] in all_text(root)  # alpha's files, as stored
    capture_off(db, alpha)
    assert os.path.exists(stored_files.stamp_path(beta)), "a host without redaction forgot another host's stamp"
    run, _ = capture_days([db], alpha)  # alpha turns redaction on: its own files are redacted
    assert sum(run.files_redacted.files_rewritten.values()) == len(CAPTURE_DATASETS)
    assert keys["github"] not in all_text(root) and keys["openai"] not in all_text(root)
    assert versions(root) == {current_version()}


def test_the_stamp_of_a_warehouse_from_before_becomes_the_moving_hosts(secret_store, tmp_path):
    db, _ = secret_store
    root = tmp_path / "wh"
    wh = Warehouse(str(root), host="alpha")
    capture_days([db], wh)
    # that version kept its stamp in the spool (the root of a local warehouse) and no mark of a move
    legacy = root / stored_files.STAMP_FILE
    os.replace(stored_files.stamp_path(wh), legacy)
    (root / ".staging" / "host=alpha" / LAYOUT_MARK).unlink(missing_ok=True)
    Warehouse(str(root), host="alpha").adopt_legacy()
    assert not legacy.exists() and os.path.exists(stored_files.stamp_path(wh))
    assert os.stat(stored_files.stamp_path(wh)).st_mode & 0o777 == 0o600
    run, _ = capture_days([db], wh)
    assert run.files_redacted is not None and not sum(
        run.files_redacted.files_checked.values()
    )  # stamped: no footer read
    # a host that joins later has no stamp of its own: it checks its own files
    assert not os.path.exists(stored_files.stamp_path(Warehouse(str(root), host="beta")))


def test_a_new_env_value_redacts_the_files_again_by_itself(secret_store, tmp_path):
    """No number to raise: a value added to Hermes's .env changes the version the files record,
    so the next run redacts every file again, says why, and the run after it changes no byte."""
    db, keys = secret_store
    wh = Warehouse(str(tmp_path / "wh"))
    capture_days([db], wh)
    env = tmp_path / "home" / ".env"
    env.write_text("MY_SERVICE_TOKEN=" + keys["github"][4:] + "\n")  # a value the rules alone never saw whole
    with_env = RedactionConfig(TEST_REDACTION.key_path, (str(env),))
    run, _ = capture_days([db], wh, redaction=with_env)
    assert run.files_redacted is not None
    assert sum(run.files_redacted.files_checked.values()) == len(CAPTURE_DATASETS)
    assert run.files_redacted.metadata()["redacted_again_because"] == {
        "the values of Hermes's .env files changed": len(CAPTURE_DATASETS)
    }
    assert versions(tmp_path / "wh") == {redactor_for(with_env).version} != {current_version()}
    before = files(tmp_path / "wh")
    again, _ = capture_days([db], wh, redaction=with_env)
    assert again.files_redacted is not None and not sum(again.files_redacted.files_checked.values())
    assert files(tmp_path / "wh") == before


def test_json_columns_of_a_stored_file_are_redacted_too():
    """A JSON column (Arrow's canonical JSON extension type) is text like any other."""
    from hermes_assets.lib.basics.schemas import JSON
    from hermes_assets.lib.redaction.redactor import Redactor
    from hermes_assets.lib.redaction.stored_files import redact_table
    from tests.lib.redaction.test_redactor import fake

    token = fake("github_token")
    args = pa.ExtensionArray.from_storage(JSON, pa.array([json.dumps({"env": {"GH_TOKEN": token}}), None]))
    table = pa.table({"session_id": ["s", "s"], "tool_args": args})
    redacted, cells = redact_table(Redactor(os.urandom(32)), table, "ai_gateway_messages_hermes")
    assert cells == 1 and redacted.schema == table.schema
    value = redacted.column("tool_args").to_pylist()[0]
    assert token not in value and json.loads(value)["env"]["GH_TOKEN"].startswith("[REDACTED:")
