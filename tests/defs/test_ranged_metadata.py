"""Each day's metadata of a ranged run, handed to Dagster in one go per asset
(hermes_assets/defs/ranged_metadata.py): the same materializations with the same metadata as one
``add_asset_metadata`` per day, without copying Dagster's accumulator once per day."""

import dagster as dg
import pytest

from hermes_assets.defs import ranged_metadata
from tests.support import accumulator

#: slow: each test runs small Dagster runs (in process)
pytestmark = pytest.mark.slow

DAYS = dg.DailyPartitionsDefinition(start_date="2026-06-01", end_date="2026-06-08")
RANGE = ("2026-06-02", "2026-06-06")
IN_RANGE = ["2026-06-02", "2026-06-03", "2026-06-04", "2026-06-05", "2026-06-06"]


def _values(asset: str, day: str) -> dict:
    return {"rows": len(asset) + int(day[-2:]), "path": dg.MetadataValue.path(f"/wh/{asset}/day={day}"), "day": day}


def _run(add, days=None) -> dg.ExecuteInProcessResult:
    """A ranged run of a two-asset step that adds each day's metadata with ``add``."""

    @dg.multi_asset(
        specs=[dg.AssetSpec("a", partitions_def=DAYS), dg.AssetSpec("b", partitions_def=DAYS)],
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def step(context: dg.AssetExecutionContext):
        for asset in ("a", "b"):
            add(context, asset, [(day, _values(asset, day)) for day in (days or context.partition_keys)])
            yield dg.MaterializeResult(asset_key=asset)

    job = dg.Definitions(assets=[step], jobs=[dg.define_asset_job("j", selection=["a", "b"])]).resolve_job_def("j")
    return job.execute_in_process(
        tags={"dagster/asset_partition_range_start": RANGE[0], "dagster/asset_partition_range_end": RANGE[1]},
        raise_on_error=False,
    )


def _per_day(context, asset, days):
    for day, values in days:
        context.add_asset_metadata(values, asset_key=asset, partition_key=day)


def _metadata(result) -> dict:
    out = {}
    for event in result.get_asset_materialization_events():
        mat = event.event_specific_data.materialization
        key = (mat.asset_key.to_user_string(), mat.partition)
        assert key not in out
        out[key] = {k: v.value for k, v in mat.metadata.items()}
    return out


def test_the_days_metadata_reach_their_materializations_as_added_day_by_day(monkeypatch):
    want = _metadata(_run(_per_day))
    assert set(want) == {(asset, day) for asset in "ab" for day in IN_RANGE}
    assert want[("b", "2026-06-04")] == {"rows": 5, "path": "/wh/b/day=2026-06-04", "day": "2026-06-04"}
    copies = accumulator.count_copies(monkeypatch)
    result = _run(ranged_metadata.add_days_metadata)
    assert result.success and _metadata(result) == want
    assert not copies  # Dagster's accumulator is not copied once per day


def test_where_dagsters_accumulator_moved_each_day_is_added_on_its_own(monkeypatch):
    want = _metadata(_run(_per_day))
    monkeypatch.setattr(ranged_metadata, "accumulator_api", lambda step: None)
    result = _run(ranged_metadata.add_days_metadata)
    assert result.success and _metadata(result) == want
    assert ranged_metadata.accumulator_api is not None


@pytest.mark.parametrize("add", [_per_day, ranged_metadata.add_days_metadata])
def test_a_day_outside_the_run_is_refused_as_dagster_refuses_it(add):
    result = _run(add, days=["2026-06-03", "2026-06-07"])
    assert not result.success
    failure = result.get_step_failure_events()[0].step_failure_data.error
    assert "that is not being targeted" in failure.message
