"""A session's title reaches ``hermes_top_sessions`` as every text cell reaches the datasets: redacted.

The title Hermes stores is the session's first words or a name the user gave it,
and either may hold a credential. The top sessions copy it from the captured
``hermes_sessions`` (already redacted), on both ways a day is computed: from the
files read back, and from the tables a first capture built on its workers.
"""

from __future__ import annotations

import datetime as dt
import functools

import pyarrow.parquet as pq

from hermes_assets.lib.analytics import captured_days, daily
from hermes_assets.lib.analytics.top_sessions import TOP_SESSIONS
from hermes_assets.lib.capture import steps
from hermes_assets.lib.projection.context import NoGit, ProjectionContext
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.loading import DatasetDays
from tests.support import fake_keys
from tests.support.capture_run import USER_HOME, plan_for
from tests.support.hermes_writer import START_S, HermesWriter
from tests.support.project import TEST_REDACTION

DAY = dt.datetime.fromtimestamp(START_S, dt.UTC).date().isoformat()


def _store(path, token: str) -> None:
    with HermesWriter(path, start_s=START_S) as w:
        sid = w.session("s-title", "cli", model="model-x")
        w.set_session_title(sid, f"deploy with {token} tonight")
        w.msg(sid, "user", "ship it")
        w.msg(sid, "assistant", "shipped", finish_reason="stop")
        w.update_token_counts(sid, input_tokens=40, output_tokens=8, model="model-x", api_call_count=1)


def test_a_title_holding_a_credential_is_redacted_in_the_top_sessions(tmp_path):
    token = fake_keys.github()  # built at run time: no token-shaped literal in the repository
    store = tmp_path / "hermes" / "state.db"
    store.parent.mkdir()
    _store(store, token)
    wh = Warehouse(str(tmp_path / "wh"))

    # a first capture computes the day's analytics from the tables it built
    plan = plan_for([store], [DAY])
    run = steps.project_rows(
        plan,
        ProjectionContext(user_home=USER_HOME, now_s=plan.read_at, git=NoGit()),
        wh,
        staging=f"{wh.staging_root}/run",
        redaction=TEST_REDACTION,
        workers=1,
        parallel_min_sessions=0,
        day_figures=captured_days.figures_of,
    )
    steps.write_partitions(run, wh)
    (staged,) = [s for s in run.days if s.day == DAY]
    from_capture = staged.figures[TOP_SESSIONS].table.column("title").to_pylist()

    # and from the files, read back
    inputs = {name: DatasetDays(wh, name, [DAY], columns) for name, columns in daily.INPUTS.items()}
    result, _ = daily.write_current_day(wh, TOP_SESSIONS, DAY, functools.partial(daily.read_inputs, inputs, DAY))
    from_files = pq.read_table(result.path).column("title").to_pylist()

    for titles in (from_capture, from_files):
        assert titles and all(t is not None for t in titles), titles
        for title in titles:
            assert token not in title and "[REDACTED:github" in title, title
            assert title.startswith("deploy with ") and title.endswith(" tonight"), title  # the rest kept
    assert token.encode() not in open(result.path, "rb").read()
