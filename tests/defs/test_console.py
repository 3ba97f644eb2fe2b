"""``defs/console.py``: a mistake is one line, in a typed command and in a server.

The processes themselves are exercised end to end by tests/e2e and tests/ui;
these tests hold the rules they rest on, in process.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
import warnings

import dagster as dg
import pytest

from hermes_assets.defs import console, settings
from hermes_assets.lib.basics.errors import ConfigurationError
from tests.conftest import SUITE_START_DATE, suite_days

LINE = "HERMES_ASSETS_START_DATE='2026/11/01' is not a date (YYYY-MM-DD)"


@pytest.mark.parametrize(
    "argv, typed",
    [
        (["/v/bin/dg", "launch", "--partition", "2026-06-01"], True),
        (["/v/bin/dg", "check", "defs"], True),
        (["/v/bin/dagster", "asset", "materialize"], True),
        (["dagster", "definitions", "validate"], True),
        (["/v/bin/dg", "dev"], False),  # a server: its code server reports the error, the UI shows it
        (["/v/bin/dagster", "api", "grpc"], False),
        (["/v/bin/dagster", "code-server", "start"], False),
        (["/v/bin/python", "-m", "dagster", "api", "execute_run"], False),  # a run worker
        (["/v/bin/pytest"], False),
        ([], False),
    ],
)
def test_a_typed_command_is_dg_or_dagster_but_not_their_servers(monkeypatch, argv, typed):
    monkeypatch.setattr(sys, "argv", argv)
    assert console.typed_command() is typed


def test_the_setting_error_is_found_behind_dagsters_wrapping():
    bad = ConfigurationError(LINE)
    try:
        try:
            raise bad
        except ConfigurationError as exc:
            raise dg.DagsterInvariantViolationError("Error occurred during the loading of Dagster definitions") from exc
    except dg.DagsterError as wrapped:
        assert console.setting_error(wrapped) is bad
    assert console.setting_error(ValueError("not a setting")) is None
    looped = ValueError("a cycle")
    looped.__context__ = RuntimeError("back")
    looped.__context__.__context__ = looped
    assert console.setting_error(looped) is None  # a cycle of causes ends


def test_a_typed_command_prints_the_line_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/v/bin/dg", "launch"])
    with pytest.raises(SystemExit) as info:
        console.stop(ConfigurationError(LINE))
    assert info.value.code == console.EXIT_BAD_SETTING == 2
    assert capsys.readouterr().err == LINE + "\n"


def test_a_server_gets_the_line_as_a_dagster_error_of_its_own(monkeypatch, capsys):
    """The UI shows a Dagster error as it is: its message must be the line, with nothing behind it."""
    monkeypatch.setattr(sys, "argv", ["/v/bin/dagster", "api", "grpc"])
    with pytest.raises(console.BadSetting) as info:
        console.stop(ConfigurationError(LINE))
    assert str(info.value) == LINE and isinstance(info.value, dg.DagsterError)
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert info.value.error_kind == ConfigurationError.error_kind
    assert capsys.readouterr().err == ""


@pytest.fixture
def suite_settings():
    """The partitions of the suite's definitions (tests/conftest.py)."""
    return suite_days()


@pytest.mark.parametrize(
    "message, line",
    [
        (
            "Could not find a partition with key `2020-01-01`.",
            f"partition 2020-01-01 is before the first partition, {SUITE_START_DATE} "
            f"(HERMES_ASSETS_START_DATE={SUITE_START_DATE}): set HERMES_ASSETS_START_DATE=2020-01-01 or earlier "
            "to capture it",
        ),
        ("Could not find a partition with key `2026/06/01`.", "partition '2026/06/01' is not a day: partitions"),
        ("Could not find a partition with key `2999-01-01`.", "partition 2999-01-01 is after the last partition"),
        ("Could not find a partition with key `2026-06-01`.", None),  # a partition: not ours to explain
        ("Some other Dagster error", None),
    ],
)
def test_an_unknown_partition_is_one_line_naming_the_setting(suite_settings, message, line):
    found = console.partition_line(dg.DagsterInvariantViolationError(message), suite_settings)
    if line is None:
        assert found is None
    else:
        assert found is not None and found.startswith(line) and "\n" not in found


def test_the_partition_hook_is_installed_once_and_passes_other_errors_on(monkeypatch, suite_settings, capsys):
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "argv", ["/v/bin/dg", "launch"])
    monkeypatch.setattr(sys, "excepthook", lambda kind, exc, tb: seen.append(exc))
    ended: list[int] = []
    monkeypatch.setattr(console.PartitionErrorHook, "end", staticmethod(ended.append))
    console.explain_partition_errors(suite_settings)
    console.explain_partition_errors(suite_settings)
    hook = sys.excepthook
    assert isinstance(hook, console.PartitionErrorHook) and not isinstance(hook.previous, console.PartitionErrorHook)
    unknown = dg.DagsterInvariantViolationError("Could not find a partition with key `2020-01-01`.")
    hook(type(unknown), unknown, None)
    assert capsys.readouterr().err.startswith("partition 2020-01-01 is before the first partition")
    assert ended == [2]  # the status of a one-line mistake
    other = ValueError("boom")
    hook(ValueError, other, None)
    assert seen == [other] and ended == [2]


def test_no_hook_outside_a_typed_command(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/v/bin/dagster", "api", "grpc"])
    before = sys.excepthook
    console.explain_partition_errors(suite_settings)
    assert sys.excepthook is before


def test_dagsters_warnings_about_our_set_up_are_silenced(monkeypatch, caplog):
    tree = logging.getLogger(console.COMPONENT_TREE_LOGGER)
    monkeypatch.setattr(tree, "level", logging.NOTSET)
    with warnings.catch_warnings():
        console.quiet_dagster_warnings()
        with caplog.at_level(logging.WARNING):
            tree.warning("The code location name 'hermes_assets' configured on this project does not match")
            tree.error("an error of the component tree is still shown")
        assert [r.getMessage() for r in caplog.records] == ["an error of the component tree is still shown"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.warn(
                "Parameter `include_sources` of function `AssetSelection.all` is currently in beta",
                dg.BetaWarning,
                stacklevel=1,
            )
        assert caught == []


def test_the_first_partition_says_why_it_is_that_day(tmp_path, fixture_copy):
    """The start date when set; the earliest session; else today, for want of any session: then
    the store looked for is named, and the start date is not to blame."""
    from hermes_assets.defs import partitions

    today = dt.datetime.now(dt.UTC).date().isoformat()
    base = {"HERMES_ASSETS_WAREHOUSE": str(tmp_path / "warehouse")}
    start = partitions.start(settings.load({**base, "HERMES_ASSETS_START_DATE": "2026-05-01"}))
    assert start == partitions.Start("2026-05-01", "HERMES_ASSETS_START_DATE=2026-05-01", False)
    small = fixture_copy("small")
    start = partitions.start(settings.load({**base, "HERMES_STATE_DB": str(small)}))
    assert (start.day, start.no_history) == ("2026-06-01", False) and "earliest Hermes session" in start.why
    home = tmp_path / "no-hermes"
    start = partitions.start(settings.load({**base, "HERMES_HOME": str(home)}))
    assert start == partitions.Start(today, f"no Hermes store at {home / 'state.db'}, so they start today", True)
    empty = tmp_path / "stores"
    empty.mkdir()
    start = partitions.start(settings.load({**base, "HERMES_STATE_DB": str(empty)}))
    assert start.no_history and start.why == f"no Hermes store at {empty} (no state.db in it), so they start today"


def test_a_partition_before_a_start_for_want_of_a_store_blames_the_store(monkeypatch, suite_settings):
    from hermes_assets.defs import partitions

    why = "no Hermes store at /home/me/.hermes/state.db, so they start today"
    days = suite_settings._replace(start=partitions.Start(SUITE_START_DATE, why, True))
    found = console.partition_line(
        dg.DagsterInvariantViolationError("Could not find a partition with key `2020-01-01`."), days
    )
    assert found == (
        f"partition 2020-01-01 is before the first partition, {SUITE_START_DATE}: {why}; nothing to capture "
        "before it (HERMES_HOME or HERMES_STATE_DB names where Hermes keeps its state.db)"
    )
    assert "START_DATE" not in found
