"""Settings in one place (SPEC §10): typed, validated when the definitions load.

A bad value fails with one line naming the variable, the value and the accepted
form; the core library reads no environment variable.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from hermes_assets.defs import console, settings
from hermes_assets.lib.basics.errors import ConfigurationError
from hermes_assets.lib.plan.policy import LOCAL_ONLY, PolicyResolver
from hermes_assets.lib.storage.local_files import FILE_MODES

REPO = Path(__file__).resolve().parents[2]

BAD = [
    ("HERMES_ASSETS_START_DATE", "2026/11/01", "a date (YYYY-MM-DD)"),
    ("HERMES_ASSETS_START_DATE", "2026-02-30", "a date (YYYY-MM-DD)"),
    ("HERMES_ASSETS_WORKERS", "zero", "a positive integer"),
    ("HERMES_ASSETS_WORKERS", "0", "a positive integer"),
    ("HERMES_ASSETS_WORKERS", "1.5", "a positive integer"),
    ("HERMES_ASSETS_POLL_SECONDS", "-3", "an integer >= 5 (seconds)"),
    ("HERMES_ASSETS_POLL_SECONDS", "2", "an integer >= 5 (seconds)"),
    ("HERMES_ASSETS_LOG_FORMAT", "xml", "one of json, console"),
    ("HERMES_ASSETS_LOG_LEVEL", "verbose", "one of debug, info, warning, error"),
    (
        "HERMES_ASSETS_EXECUTOR",
        "bogus",
        "one of in_process, multiprocess, k8s, celery (k8s and celery: with the project's extra of that name installed)",
    ),
    ("HERMES_ASSETS_BUSY_TIMEOUT_MS", "-1", "a positive integer (milliseconds)"),
    ("HERMES_ASSETS_FILE_MODE", "world", "one of private, group"),
    ("HERMES_ASSETS_SENSOR_MAX_RUNS", "many", "a positive integer"),
    ("HERMES_ASSETS_WAREHOUSE", "s4://bucket/x", "a folder path or a URI"),
]


@pytest.mark.parametrize("name, value, form", BAD, ids=[f"{n}={v}" for n, v, _ in BAD])
def test_a_bad_value_is_one_line_naming_the_variable_the_value_and_the_form(name, value, form):
    with pytest.raises(ConfigurationError) as info:
        settings.load({name: value})
    message = str(info.value)
    assert message.startswith(f"{name}={value!r} is not {form}"), message
    assert "\n" not in message
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no pydantic dump behind it


def test_a_start_date_in_the_future_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    """Partitions run from the start date to today (UTC): a later start would leave none."""
    today = dt.datetime.now(dt.UTC).date()
    tomorrow = (today + dt.timedelta(days=1)).isoformat()
    with pytest.raises(ConfigurationError) as info:
        settings.load({"HERMES_ASSETS_START_DATE": tomorrow})
    message = str(info.value)
    assert message.startswith(f"HERMES_ASSETS_START_DATE='{tomorrow}' is in the future (today is {today}, UTC)")
    assert "\n" not in message
    assert settings.load({"HERMES_ASSETS_START_DATE": today.isoformat()}).start_day == today.isoformat()
    # what `make run` runs before it starts Dagster: the line (on stdout, where make reads it), exit status 2
    from hermes_assets import dev

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("HERMES_ASSETS_START_DATE", "2999-01-01")
    assert dev.main(["--check"]) == 2
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("HERMES_ASSETS_START_DATE='2999-01-01' is in the future")


def test_defaults_and_types(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    s = settings.load({"DAGSTER_HOME": str(tmp_path / "dh")})
    assert s.start_date is None and s.start_day is None  # unset: where the history starts (defs/partitions.py)
    assert s.log_level == "info"
    assert s.warehouse == str(tmp_path / "dh" / "warehouse")
    assert s.hermes_home == str(tmp_path / ".hermes") and s.state_db is None
    assert s.policy_list == str(tmp_path / ".hyp" / "hypaware" / "usage-policy" / "local-only.json")
    assert (s.poll_seconds, s.executor, s.busy_timeout_ms, s.file_mode, s.sensor_max_runs) == (
        30,
        "in_process",
        2000,
        "private",
        14,
    )
    assert s.workers == (os.cpu_count() or 1) and s.log_format is None and s.spool is None
    s = settings.load(
        {
            "HERMES_ASSETS_WORKERS": " 3 ",
            "HERMES_ASSETS_WAREHOUSE": "s3://b/p?endpoint_override=x",
            "HERMES_ASSETS_START_DATE": "2026-06-01",
            "HERMES_ASSETS_SPOOL": "~/spool",
        }
    )
    assert (s.workers, s.warehouse, s.start_day, s.spool) == (
        3,
        "s3://b/p?endpoint_override=x",
        "2026-06-01",
        str(tmp_path / "spool"),
    )


def test_the_policy_list_comes_from_the_setting_then_the_users_home(tmp_path, monkeypatch):
    a = tmp_path / "a"
    a.mkdir()
    doc = json.dumps({"version": 1, "dirs": [str(a)]})
    explicit = tmp_path / "explicit.json"
    explicit.write_text(doc)
    assert (
        PolicyResolver(settings.load({"HERMES_ASSETS_POLICY_LIST": str(explicit)}).policy_list).classify_scope(str(a))
        == LOCAL_ONLY
    )
    default = tmp_path / "home" / ".hyp" / "hypaware" / "usage-policy" / "local-only.json"
    default.parent.mkdir(parents=True)
    default.write_text(doc)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    r = PolicyResolver(settings.load({}).policy_list)
    assert r.list_path == str(default) and r.classify_scope(str(a)) == LOCAL_ONLY


def test_definitions_do_not_load_with_a_bad_setting(capture, monkeypatch):
    """Outside a typed command (here: pytest) the load fails with the line itself, as a Dagster
    error Dagster does not wrap: what a code server reports and the UI shows."""
    monkeypatch.setenv("HERMES_ASSETS_LOG_FORMAT", "xml")
    with pytest.raises(console.BadSetting) as info:
        capture.defs()
    assert str(info.value) == "HERMES_ASSETS_LOG_FORMAT='xml' is not one of json, console"
    assert isinstance(info.value, ConfigurationError) and info.value.__cause__ is None


def test_a_setting_a_definitions_module_cannot_honour_is_one_line_too(capture, monkeypatch):
    monkeypatch.setenv("HERMES_ASSETS_EXECUTOR", "k8s")  # dagster-k8s is not installed (the k8s extra is not)
    with pytest.raises(console.BadSetting) as info:
        capture.defs()
    assert str(info.value) == (
        "HERMES_ASSETS_EXECUTOR=k8s needs dagster-k8s, which the project's k8s extra installs: "
        "`.venv/bin/uv sync --frozen --inexact --extra k8s` (or pip install 'hermes_assets[k8s]')"
    )
    # the extras are declared, at the range of Dagster's other integration (dagster-postgres)
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    (postgres,) = extras["postgres"]
    for name in ("k8s", "celery"):
        assert extras[name] == [postgres.replace("dagster-postgres", f"dagster-{name}")], extras[name]


def test_a_state_db_naming_a_path_that_does_not_exist_is_a_bad_setting(tmp_path):
    """A file or a folder, alone or one of several: the first missing path is named, in one line.
    Paths that exist pass (a folder with no state.db in it yet is the sensor's to report)."""
    db, folder = tmp_path / "hermes" / "state.db", tmp_path / "stores"
    db.parent.mkdir()
    db.write_bytes(b"")
    folder.mkdir()
    base = {"HERMES_ASSETS_WAREHOUSE": str(tmp_path / "warehouse")}
    for named in (str(db), str(folder), f"{db}:{folder}"):
        assert settings.check({**base, "HERMES_STATE_DB": named}).state_db == named
    for typo in (tmp_path / "hermes" / "stat.db", tmp_path / "storse"):
        for named in (str(typo), f"{db}:{typo}"):
            with pytest.raises(ConfigurationError) as info:
                settings.check({**base, "HERMES_STATE_DB": named})
            assert str(info.value) == (
                f"HERMES_STATE_DB names {typo}, which does not exist: check the path "
                "(unset HERMES_STATE_DB to use the Hermes home's own store)."
            )
    link = tmp_path / "dangling.db"
    link.symlink_to(tmp_path / "gone.db")
    with pytest.raises(ConfigurationError, match=r"dangling\.db, which does not exist"):
        settings.check({**base, "HERMES_STATE_DB": str(link)})
    # unset: the Hermes home's own store, absent here: the quiet idle case, never a bad setting
    assert settings.check({**base, "HERMES_HOME": str(tmp_path / "no-hermes")}).state_db is None


@pytest.mark.slow
def test_a_warehouse_that_cannot_be_written_is_named_by_its_setting(tmp_path, unwritable_folder):
    for warehouse, why in (
        (unwritable_folder, "cannot be written"),
        (unwritable_folder / "new" / "warehouse", "cannot be written"),
        (tmp_path / "a-file" / "warehouse", "is not a folder"),
    ):
        (tmp_path / "a-file").write_text("")
        with pytest.raises(ConfigurationError) as info:
            settings.check({"HERMES_ASSETS_WAREHOUSE": str(warehouse)})
        message = str(info.value)
        assert message.startswith(f"HERMES_ASSETS_WAREHOUSE={str(warehouse)!r} is not a folder this user can write: ")
        assert why in message and "\n" not in message
    (tmp_path / "fresh").mkdir()
    ok = tmp_path / "fresh" / "new" / "warehouse"
    assert settings.check({"HERMES_ASSETS_WAREHOUSE": str(ok)}).warehouse == str(ok)
    assert list((tmp_path / "fresh").iterdir()) == [], "the probe leaves nothing behind"
    # a URI warehouse is the store's business; a spool that is set is probed like a warehouse
    assert settings.check({"HERMES_ASSETS_WAREHOUSE": "s3://bucket/prefix"}).warehouse == "s3://bucket/prefix"
    with pytest.raises(ConfigurationError, match=r"^HERMES_ASSETS_SPOOL="):
        settings.check({"HERMES_ASSETS_WAREHOUSE": "s3://b/p", "HERMES_ASSETS_SPOOL": str(unwritable_folder)})


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize(
    "start, line",
    [
        ("2026/11/01", "HERMES_ASSETS_START_DATE='2026/11/01' is not a date (YYYY-MM-DD)"),
        ("2999-01-01", "HERMES_ASSETS_START_DATE='2999-01-01' is in the future (today is "),
    ],
    ids=["not-a-date", "in-the-future"],
)
def test_the_cli_user_sees_the_line_not_pages_of_traceback(tmp_path, start, line):
    """A bad start date used to print 327 lines without naming the variable."""
    env = {**os.environ, "HERMES_ASSETS_START_DATE": start, "DAGSTER_HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("dagster")), "definitions", "validate", "-m", "hermes_assets.definitions"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == console.EXIT_BAD_SETTING, out
    assert line in out
    assert len(out.splitlines()) < 40, out
    assert "ValidationError" not in out and "pydantic" not in out


def test_the_core_library_reads_no_environment_variable():
    """SPEC §10: ``lib/`` receives settings as arguments (only the shell reads the environment)."""
    pattern = re.compile(r"os\.environ|os\.getenv|getenv\(")
    offenders = [
        f"{p.name}:{i}"
        for p in sorted((REPO / "hermes_assets" / "lib").glob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_paths_are_made_absolute_and_uris_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    s = settings.load(
        {
            "HERMES_HOME": "~/hermes",
            "HERMES_ASSETS_WAREHOUSE": "relative/warehouse",
            "HERMES_ASSETS_SPOOL": "~/spool",
            "HERMES_ASSETS_LOG_LEVEL": "DEBUG",
        }
    )
    assert (s.hermes_home, s.warehouse, s.spool) == (
        str(tmp_path / "hermes"),
        str(tmp_path / "relative" / "warehouse"),
        str(tmp_path / "spool"),
    )
    assert s.log_level == "debug"  # the variable's case does not matter
    assert settings.load({"HERMES_ASSETS_WAREHOUSE": "gs://bucket/x"}).warehouse == "gs://bucket/x"
    assert settings.load({"HERMES_ASSETS_WAREHOUSE": "  "}).warehouse == os.path.abspath("warehouse")  # blank: unset


def test_the_file_modes_are_the_warehouses():
    """The settings name the modes ``lib/warehouse/datasets.py`` defines, no more, no fewer."""
    assert tuple(FILE_MODES) == settings.FILE_MODES


def test_each_load_of_the_definitions_reads_the_settings_again(capture, monkeypatch):
    """The definitions function reads the settings each time it runs (a code server's start,
    *Reload definitions*, a run): a variable changed since counts from the next load."""
    monkeypatch.setenv("HERMES_ASSETS_SENSOR_MAX_RUNS", "3")
    monkeypatch.setenv("HERMES_ASSETS_POLL_SECONDS", "17")
    first = capture.defs().resolve_sensor_def("hermes_state_sensor")
    monkeypatch.setenv("HERMES_ASSETS_POLL_SECONDS", "23")
    again = capture.defs().resolve_sensor_def("hermes_state_sensor")
    assert (first.minimum_interval_seconds, again.minimum_interval_seconds) == (17, 23)


def test_only_the_entry_points_read_the_environment():
    """``definitions.py`` (each load), ``dev.py`` (``make run``, before Dagster starts) and
    ``secrets.py`` (``python -m hermes_assets.secrets check``, a command of its own) read the
    settings; every definitions module is handed them by the definitions function. The
    event log (named by ``dagster.yaml``, not a definitions module) sets Dagster's own batch
    switch, ``DAGSTER_EVENT_BATCH_SIZE``, and reads no setting of ours; ``defs/arrow_memory.py``
    (called by the definitions function) sets pyarrow's own ``ARROW_DEFAULT_MEMORY_POOL``, for
    the processes a run starts, and reads no setting of ours either."""
    reads = re.compile(r"settings\.(load|check)\(|\bcheck\(\)|os\.environ|os\.getenv")
    readers = {
        p.relative_to(REPO / "hermes_assets").as_posix()
        for p in (REPO / "hermes_assets").rglob("*.py")
        if "lib" not in p.parts and reads.search(p.read_text())
    }
    assert readers == {
        "defs/settings.py",
        "defs/console.py",
        "defs/arrow_memory.py",
        "dev.py",
        "event_log/grouped.py",
        "secrets.py",
    }, readers
    for module in ("event_log/grouped.py", "defs/arrow_memory.py"):
        assert "HERMES_ASSETS" not in (REPO / "hermes_assets" / module).read_text()
