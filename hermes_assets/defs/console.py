"""What a person sees when the definitions load: one line for a mistake, no flood.

A setting that cannot be honoured (``defs/settings.py``: a bad value, a
warehouse this user cannot write, an executor whose package is missing) is
one line that names the variable, the value and the accepted form:

- in a command a person typed (``dg launch``, ``dg check defs``,
  ``dg list defs``, ``dagster asset materialize``, ``dagster definitions
  validate`` ...), that line is printed on stderr and the command exits with
  status 2: no traceback, no Dagster frame around it;
- in a server (the code server of ``dg dev``, whose load error the UI shows
  as the code location's error; a run worker), loading fails with
  :class:`BadSetting`, a Dagster error whose message is the line. Dagster
  passes its own errors through as they are, so the UI shows the line, not
  "Error occurred during the loading of Dagster definitions" with ours
  three causes below.

A partition key outside the partitions (``dg launch --partition 2020-01-01``)
gets the same treatment in a typed command: one line saying where the
partitions start and which setting moves them, and exit status 2.

Dagster's own warnings about this project's set-up are silenced here too
(see :func:`quiet_dagster_warnings`).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable
from types import TracebackType
from typing import NoReturn

import dagster as dg

from hermes_assets.defs import settings
from hermes_assets.defs.partitions import Days
from hermes_assets.lib.basics.errors import ConfigurationError, HostConflict
from hermes_assets.lib.hosts.host_claims import RELABEL_JOB
from hermes_assets.lib.storage.object_store import UNREACHABLE

#: the console scripts a person types; their server subcommands are not one-shot commands
COMMANDS = ("dagster", "dg")
SERVER_SUBCOMMANDS = ("api", "code-server", "dev")
EXIT_BAD_SETTING = 2


class BadSetting(ConfigurationError, dg.DagsterError):
    """A setting that cannot be honoured, raised where Dagster shows it as it is (its message is the line).

    Dagster asks users not to subclass its base error; this one does on purpose: Dagster
    re-raises its own errors unwrapped when definitions fail to load, and that is what
    makes the line, not a wrapper of it, the code location's error in the UI.
    """

    error_kind = ConfigurationError.error_kind


def typed_command() -> bool:
    """Whether this process is a command a person typed (``dg launch``, ``dagster asset
    materialize`` ...), as opposed to a server or a run worker that Dagster started
    (those run as ``python -m dagster ...``, or as ``dagster api``/``code-server``)."""
    argv = sys.argv
    return (
        bool(argv) and os.path.basename(argv[0]) in COMMANDS and not (len(argv) > 1 and argv[1] in SERVER_SUBCOMMANDS)
    )


def setting_error(exc: BaseException) -> ConfigurationError | None:
    """The configuration error behind ``exc`` (Dagster wraps what a definitions module raises)."""
    seen = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, ConfigurationError):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def stop(error: ConfigurationError) -> NoReturn:
    """Stop loading with ``error``'s one line: printed and exit 2 in a typed command, else
    :class:`BadSetting` (what servers and the UI show)."""
    line = str(error)
    if typed_command():
        print(line, file=sys.stderr, flush=True)
        raise SystemExit(EXIT_BAD_SETTING)
    raise BadSetting(line) from None


def checked_settings() -> settings.Settings:
    """The settings, checked (``settings.check``); a bad one stops the load in one line."""
    try:
        return settings.check()
    except ConfigurationError as exc:
        stop(exc)


#: the typed commands that run the assets here and now (the others only list, check or serve)
RUN_COMMANDS = (("asset", "materialize"), ("job", "execute"), ("launch",))


def runs_assets() -> bool:
    """Whether this process is a typed command that runs the assets (``dagster asset
    materialize``, ``dagster job execute``, ``dg launch``)."""
    args = sys.argv[1:]
    relabels = RELABEL_JOB in args  # the way out of a refusal is never refused
    return typed_command() and not relabels and any(tuple(args[: len(cmd)]) == cmd for cmd in RUN_COMMANDS)


#: the settings whose host this process has checked (:func:`refuse_host_conflicts`)
_HOSTS_CHECKED: set[tuple[object, ...]] = set()


def refuse_host_conflicts(loaded: settings.Settings) -> None:
    """In a typed command that runs the assets, a host the warehouse refuses (its label is
    another host's, or a store of its is captured under another label) stops in one line,
    exit status 2, before anything runs (:func:`settings.check_host`). A warehouse that cannot
    be reached now is left to the run, which names it."""
    if not runs_assets():
        return
    # Dagster loads the definitions several times in one command (6 in ``asset materialize``):
    # the stores and the warehouse are read once per process and setting
    key = (loaded.state_db, loaded.hermes_home, loaded.warehouse, loaded.host_label, loaded.host_identity)
    if key in _HOSTS_CHECKED:
        return
    try:
        settings.check_host(loaded)
    except HostConflict as exc:
        stop(exc)
    except UNREACHABLE:
        return
    _HOSTS_CHECKED.add(key)


ExceptHook = Callable[[type[BaseException], BaseException, TracebackType | None], object]


class PartitionErrorHook:
    """``sys.excepthook`` of a typed command: Dagster's error for a partition key outside the
    partitions ``days`` becomes one line (:func:`partition_line`) and exit status 2, as every
    one-line mistake; any other error goes on to the hook it replaced (Python's own report)."""

    def __init__(self, previous: ExceptHook, days: Days) -> None:
        self.previous = previous
        self.days = days

    def __call__(self, kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        line = partition_line(exc, self.days) if isinstance(exc, dg.DagsterError) else None
        if line is None:
            self.previous(kind, exc, tb)
            return
        print(line, file=sys.stderr, flush=True)
        self.end(EXIT_BAD_SETTING)

    @staticmethod
    def end(status: int) -> None:
        """End the process with ``status``: Python ends one whose error reached this hook with
        status 1, after its exit handlers, so those run here (Dagster's own among them) first."""
        atexit._run_exitfuncs()
        sys.stdout.flush()
        os._exit(status)


def explain_partition_errors(days: Days) -> None:
    """In a typed command, install :class:`PartitionErrorHook` over the partitions ``days`` (once
    per process; a later load of the definitions gives it its partitions)."""
    if not typed_command():
        return
    if isinstance(sys.excepthook, PartitionErrorHook):
        sys.excepthook.days = days
    else:
        sys.excepthook = PartitionErrorHook(sys.excepthook, days)


_KEY = re.compile(r"partition (?:with )?key `([^`]*)`")


def partition_line(exc: BaseException, days: Days) -> str | None:
    """One line for Dagster's "no such partition key" errors, or None for any other error."""
    match = _KEY.search(str(exc))
    if match is None:
        return None
    key, first, last = (
        match.group(1),
        days.partitions.get_first_partition_key(),
        days.partitions.get_last_partition_key(),
    )
    start = days.start
    if first is None or last is None:  # a partitions definition with no day at all: nothing to say
        return None
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", key):
        return f"partition {key!r} is not a day: partitions are UTC days, YYYY-MM-DD ({first} to {last})"
    if key < first and start.no_history:  # a store problem: the start date is not to blame
        return (
            f"partition {key} is before the first partition, {first}: {start.why}; nothing to capture "
            "before it (HERMES_HOME or HERMES_STATE_DB names where Hermes keeps its state.db)"
        )
    if key < first:
        return (
            f"partition {key} is before the first partition, {first} ({start.why}): "
            f"set HERMES_ASSETS_START_DATE={key} or earlier to capture it"
        )
    if key > last:
        return f"partition {key} is after the last partition, {last} (today, UTC, is the last)"
    return None


#: the logger of Dagster's component tree; its only warnings concern app-managed components
COMPONENT_TREE_LOGGER = "dagster.components.core.component_tree"


def quiet_dagster_warnings() -> None:
    """Silence the Dagster warnings this project's own set-up triggers (idempotent).

    - The component tree warns, some 25 times per command, that ``code_location_name`` of
      ``[tool.dg.project]`` is not the name a CLI gives the location (``dagster ... -m
      hermes_assets.definitions`` names it after the module; without the setting it compares
      the folder's name instead). Its warnings only concern app-managed components, of which
      this project has none: its logger is set to errors only.
    - Dagster's own asset selection parser raises a beta warning for every ``--select`` /
      ``--assets`` string a command is given.
    - ``dagster.yaml`` hands every run's logs a handler of this project (``python_logs:
      dagster_handler_config``: the run's console line), and Dagster warns, in every run, that
      such a handler is in beta.
    """
    logging.getLogger(COMPONENT_TREE_LOGGER).setLevel(logging.ERROR)
    warnings.filterwarnings(
        "ignore", message=r"Parameter `include_sources` of function `AssetSelection.all`", category=dg.BetaWarning
    )
    warnings.filterwarnings("ignore", message=r"Handling yaml-defined logging configuration", category=dg.BetaWarning)
