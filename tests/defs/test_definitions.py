"""The Dagster definitions as a user loads them (SPEC §2, §10).

Definitions are loaded the way ``dagster dev`` loads them: from
``hermes_assets.definitions`` with the environment in place.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.errors import ConfigurationError
from tests.defs.harness import ANALYTICS, DATASETS, EXPOSURES

REPO = Path(__file__).resolve().parents[2]
SNAPSHOT = Path(__file__).with_name("snapshots") / "asset_specs.json"
UPDATE_ENV = "HERMES_ASSETS_UPDATE_SNAPSHOTS"
DEFAULT_START = "2025-01-01"


def _configured_start() -> str:
    """The start date this process imported the partitions with."""
    return os.environ.get("HERMES_ASSETS_START_DATE", "").strip() or DEFAULT_START


#: the Hermes stores, an external asset upstream of the capture (its checks are about the stores and runs)
STATE = "hermes_state"


def _specs(defs: dg.Definitions) -> dict[str, dg.AssetSpec]:
    return {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}


def _cause(exc: BaseException, kind: type) -> BaseException | None:
    while exc is not None:
        if isinstance(exc, kind):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


# --------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------


def test_definitions_load_and_validate(capture):
    defs = capture.defs()
    dg.Definitions.validate_loadable(defs)
    assert sorted(_specs(defs)) == sorted((*DATASETS, *ANALYTICS, EXPOSURES, STATE))
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"purge_job", "__ASSET_JOB"}


def test_resources_follow_the_environment(capture):
    resources = capture.defs().resources
    assert resources["hermes"].hermes_home == str(capture.home)
    assert resources["hermes"].state_db is None
    assert resources["warehouse"].root == str(capture.warehouse)
    assert resources["usage_policy"].list_path == str(capture.policy_list)
    assert resources["usage_policy"].user_home == os.path.expanduser("~")


def test_warehouse_defaults_to_dagster_home(capture, monkeypatch):
    monkeypatch.delenv("HERMES_ASSETS_WAREHOUSE")
    assert capture.defs().resources["warehouse"].root == os.path.join(str(capture.dagster_home), "warehouse")


# --------------------------------------------------------------------------
# partitions (SPEC §2)
# --------------------------------------------------------------------------


def test_all_assets_share_one_daily_utc_partitions_def_with_today_included(capture):
    defs = capture.defs()
    graph = defs.resolve_asset_graph()
    parts = {name: graph.get(dg.AssetKey(name)).partitions_def for name in DATASETS + ANALYTICS}
    first = parts[DATASETS[0]]
    assert isinstance(first, dg.DailyPartitionsDefinition)
    assert all(p == first for p in parts.values()), parts
    assert first.timezone == "UTC"
    assert first.end_offset == 1
    assert first.fmt == "%Y-%m-%d"
    assert first.get_first_partition_key() == _configured_start()
    today = dt.datetime.now(dt.UTC).date().isoformat()
    assert first.get_last_partition_key() in {today, (dt.date.fromisoformat(today) + dt.timedelta(days=1)).isoformat()}
    assert today in first.get_partition_keys()


@pytest.mark.slow
@pytest.mark.e2e
def test_start_date_comes_from_the_environment(tmp_path):
    """``HERMES_ASSETS_START_DATE`` is read when the definitions load (a fresh process)."""
    code = (
        "import json, dagster as dg\n"
        "from hermes_assets.definitions import defs\n"
        "g = defs().resolve_asset_graph()\n"
        "out = {}\n"
        "for name in ('hermes_sessions', 'hermes_messages', 'ai_gateway_messages_hermes'):\n"
        "    p = g.get(dg.AssetKey(name)).partitions_def\n"
        "    out[name] = [p.get_first_partition_key(), p.timezone, p.end_offset]\n"
        "print('RESULT=' + json.dumps(out))\n"
    )
    env = {
        **os.environ,
        "HERMES_ASSETS_START_DATE": "2026-06-01",
        "HERMES_HOME": str(tmp_path),
        "DAGSTER_HOME": str(tmp_path),
        "HERMES_ASSETS_LOG_FORMAT": "json",
    }
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT="))
    got = json.loads(line[len("RESULT=") :])
    assert got == {name: ["2026-06-01", "UTC", 1] for name in DATASETS}


def test_every_asset_backfills_in_one_run(capture):
    graph = capture.defs().resolve_asset_graph()
    for name in (*DATASETS, *ANALYTICS, EXPOSURES):
        policy = graph.get(dg.AssetKey(name)).backfill_policy
        assert policy == dg.BackfillPolicy.single_run(), name


# --------------------------------------------------------------------------
# catalogue: kinds, owners, descriptions, column schemas
# --------------------------------------------------------------------------


def test_assets_carry_kinds_owners_group_and_descriptions(capture):
    kinds = {STATE: {"sqlite"}, **{name: {"sqlite", "parquet", "python"} for name in DATASETS}}
    for name, spec in _specs(capture.defs()).items():
        captured = name in DATASETS or name == STATE
        assert spec.kinds == kinds.get(name, {"parquet", "python"}), name
        assert spec.owners == ["team:hermes-assets"], name
        assert spec.group_name == ("hermes" if captured else "hermes_analytics"), name
        assert spec.description and len(spec.description) > 40, name


def test_the_capture_reads_hermes_state_whose_checks_are_not_partitioned(capture):
    """The stores are an external asset upstream of the three datasets; its checks, about the
    stores and the runs, have no partitions; each dataset has one check, partitioned by day."""
    graph = capture.defs().resolve_asset_graph()
    state = graph.get(dg.AssetKey(STATE))
    assert not state.is_materializable and state.partitions_def is None
    assert {k.name for k in state.check_keys} == {"stores_readable", "sessions_within_partition_range", "days_captured"}
    assert all(graph.get(k).partitions_def is None for k in state.check_keys)
    for name in DATASETS:
        node = graph.get(dg.AssetKey(name))
        assert node.parent_keys == {dg.AssetKey(STATE)}
        (check,) = node.check_keys
        assert check.name == "day_valid" and graph.get(check).partitions_def == node.partitions_def


@pytest.mark.parametrize("dataset", DATASETS)
def test_column_schema_is_the_dataset_schema(capture, dataset):
    spec = _specs(capture.defs())[dataset]
    table_schema = spec.metadata["dagster/column_schema"]
    if isinstance(table_schema, dg.MetadataValue):
        table_schema = table_schema.value
    arrow = schemas.DATASETS[dataset].schema
    got = [(c.name, c.type, c.constraints.nullable) for c in table_schema.columns]
    assert got == [(f.name, str(f.type), f.nullable) for f in arrow]


def test_gateway_schema_has_the_56_canonical_columns_in_order_and_the_host(capture):
    spec = _specs(capture.defs())["ai_gateway_messages_hermes"]
    table_schema = spec.metadata["dagster/column_schema"]
    table_schema = getattr(table_schema, "value", table_schema)
    names = [c.name for c in table_schema.columns]
    assert len(names) == 57  # HypAware's 56, then the host that captured the row
    assert names[:3] == ["gateway_id", "schema_version", "session_id"]
    assert names[-2:] == ["date", "host"] and names[53] == "attributes"
    required = {c.name for c in table_schema.columns if not c.constraints.nullable}
    assert required == {
        "gateway_id",
        "schema_version",
        "session_id",
        "provider",
        "conversation_started_at",
        "message_id",
        "message_index",
        "message_created_at",
        "role",
        "part_id",
        "part_index",
        "part_type",
        "date",
        "host",
    }


def test_raw_schemas_carry_provenance_columns(capture):
    specs = _specs(capture.defs())
    for dataset, extra in (
        (
            "hermes_sessions",
            {
                "store",
                "store_label",
                "profile",
                "host",
                "scope_path",
                "policy_class",
                "usage_by_model",
                "source_deleted",
                "day",
            },
        ),
        (
            "hermes_messages",
            {"store", "store_label", "profile", "host", "source_deleted", "day", "content_text", "content_json"},
        ),
    ):
        ts = specs[dataset].metadata["dagster/column_schema"]
        names = {c.name for c in getattr(ts, "value", ts).columns}
        assert extra <= names, extra - names


# --------------------------------------------------------------------------
# executor switch (SPEC §10)
# --------------------------------------------------------------------------


def test_executor_is_in_process_by_default(capture):
    defs = capture.defs()
    assert defs.executor is dg.in_process_executor
    assert defs.resolve_implicit_global_asset_job_def().executor_def.name == "in_process"


def test_executor_multiprocess_by_environment(capture, monkeypatch):
    monkeypatch.setenv("HERMES_ASSETS_EXECUTOR", "multiprocess")
    defs = capture.defs()
    assert defs.executor is dg.multiprocess_executor
    assert defs.resolve_implicit_global_asset_job_def().executor_def.name == "multiprocess"
    assert defs.resolve_job_def("purge_job").executor_def.name == "multiprocess"


def test_unknown_executor_is_a_clear_configuration_error(capture, monkeypatch):
    monkeypatch.setenv("HERMES_ASSETS_EXECUTOR", "bogus")
    with pytest.raises(Exception) as info:
        capture.defs()
    err = _cause(info.value, ConfigurationError)
    assert err is not None, f"expected a ConfigurationError, got {info.value!r}"
    assert err.error_kind == "configuration_error"
    message = str(err)
    assert "HERMES_ASSETS_EXECUTOR" in message and "bogus" in message
    for name in ("in_process", "multiprocess", "k8s", "celery"):
        assert name in message


@pytest.mark.slow
@pytest.mark.e2e
def test_unknown_executor_error_reaches_the_cli_user(capture, monkeypatch):
    env = {**os.environ, "HERMES_ASSETS_EXECUTOR": "bogus"}
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("dagster")), "definitions", "validate", "-m", "hermes_assets.definitions"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert (
        "HERMES_ASSETS_EXECUTOR='bogus' is not one of in_process, multiprocess, k8s, celery (k8s and celery: with the project's extra of that name installed)"
        in (proc.stdout + proc.stderr)
    )


# --------------------------------------------------------------------------
# snapshot of every asset spec
# --------------------------------------------------------------------------


def _snapshot(defs: dg.Definitions) -> dict:
    graph = defs.resolve_asset_graph()
    out = {}
    for name, spec in sorted(_specs(defs).items()):
        node = graph.get(spec.key)
        parts = node.partitions_def
        ts = spec.metadata.get("dagster/column_schema")
        out[name] = {
            "description": spec.description,
            "group": spec.group_name,
            "kinds": sorted(spec.kinds),
            "owners": list(spec.owners),
            "tags": dict(sorted(spec.tags.items())),
            "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
            "upstream": sorted(k.to_user_string() for k in node.parent_keys),
            "partitions": None
            if parts is None
            else {
                "type": type(parts).__name__,
                "start": "<HERMES_ASSETS_START_DATE>"
                if parts.get_first_partition_key() == _configured_start()
                else parts.get_first_partition_key(),
                "timezone": parts.timezone,
                "end_offset": parts.end_offset,
                "fmt": parts.fmt,
            },
            "backfill_policy": str(node.backfill_policy),
            "code_version": spec.code_version,
            "automation_condition": None if spec.automation_condition is None else str(spec.automation_condition),
            "checks": sorted(k.name for k in node.check_keys),
            "columns": [] if ts is None else [c.name for c in getattr(ts, "value", ts).columns],
            "metadata_keys": sorted(spec.metadata),
        }
    out["__jobs__"] = sorted(j.name for j in defs.resolve_all_job_defs() if not j.name.startswith("__anonymous"))
    out["__sensors__"] = {
        s.name: {
            "default_status": s.default_status.value,
            "targets": sorted(
                k.to_user_string() for k in defs.resolve_job_def(s.job_name).asset_layer.selected_asset_keys
            )
            if s.has_jobs
            else [],
        }
        for s in sorted(defs.sensors or [], key=lambda s: s.name)
    }
    out["__executor__"] = defs.executor.name
    return out


def test_asset_specs_snapshot(capture):
    """Any change to keys, deps, partitions, checks or schemas shows up here.

    Refresh after an intended change: ``HERMES_ASSETS_UPDATE_SNAPSHOTS=1 pytest tests/defs``.
    """
    got = json.loads(json.dumps(_snapshot(capture.defs())))
    if os.environ.get(UPDATE_ENV) == "1" or not SNAPSHOT.exists():
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        if os.environ.get(UPDATE_ENV) != "1":
            pytest.fail(f"snapshot {SNAPSHOT} was missing and has been written: review and commit it")
    want = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    assert got == want
