"""Every setting of SPEC §10, read from the environment and validated in one place.

:func:`load` reads the environment into one typed :class:`Settings` object
(pydantic). A bad value fails with one line that names the variable, the
value and the accepted form::

    HERMES_ASSETS_START_DATE='2026/11/01' is not a date (YYYY-MM-DD)

The definitions check the settings when they load (:func:`check`: the form
of every value, and that the local folders the project writes can be
written), and ``make run`` checks them before it starts Dagster
(``python -m hermes_assets.dev --check``, exit status 2), so a mistake is
one line before anything runs; ``hermes_assets/defs/console.py`` decides how
that line reaches a person (the CLI, the UI). So does a path of
``HERMES_STATE_DB`` that does not exist; one that vanishes later fails the
sensor's tick, or the run reading it, with the same line. The core library
(``hermes_assets/lib``) never reads the environment: it receives these values
as arguments.

The settings are read once per load of the definitions, by the definitions
function (``hermes_assets/definitions.py``), which checks them and builds the
partitions, resources, sensors and checks from them: importing a module reads
nothing. Nothing re-reads the environment after that: not a sensor tick, not
a run (a run loads the definitions afresh, in its own process).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import tempfile
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlparse

import pydantic
from pydantic import AfterValidator, BeforeValidator, Field

from hermes_assets.lib.basics import logs
from hermes_assets.lib.basics.errors import ConfigurationError
from hermes_assets.lib.hosts import host_identity, host_labels
from hermes_assets.lib.plan import policy
from hermes_assets.lib.redaction.sources import key_too_short
from hermes_assets.lib.source import stores
from hermes_assets.lib.source.store_connection import DEFAULT_BUSY_TIMEOUT_MS

Executor = Literal["in_process", "multiprocess", "k8s", "celery"]
EXECUTORS: tuple[str, ...] = get_args(Executor)
LogFormat = logs.LogFormat
LOG_FORMATS = logs.FORMATS
LogLevel = logs.LogLevel
LOG_LEVELS = logs.LEVELS
#: the names of ``hermes_assets.lib.storage.local_files.FILE_MODES`` (tests/defs/test_settings.py holds them equal)
FileMode = Literal["private", "group"]
FILE_MODES: tuple[str, ...] = get_args(FileMode)
#: schemes ``pyarrow.fs.FileSystem.from_uri`` opens
URI_SCHEMES = ("file", "s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")
#: the sensor daemon evaluates sensors at most this often, whatever their interval
MIN_POLL_SECONDS = 5


def _iso_date(value: Any) -> Any:
    if isinstance(value, str) and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError("not YYYY-MM-DD")
    return value


def _absolute(value: str) -> str:
    return os.path.abspath(os.path.expanduser(value))


def _path_or_uri(value: str) -> str:
    parsed = urlparse(value)
    if len(parsed.scheme) > 1:  # "C:\\x" is a path
        if parsed.scheme.lower() not in URI_SCHEMES:
            raise ValueError(f"unknown scheme {parsed.scheme}")
        return value
    return _absolute(value)


def _on_off(value: Any) -> Any:
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("on", "true", "1", "yes"):
            return True
        if word in ("off", "false", "0", "no"):
            return False
        raise ValueError("not on or off")
    return value


def _host(value: str | None) -> str | None:
    return None if value is None else host_labels.check_label(value)


PositiveInt = Annotated[int, Field(ge=1, strict=False)]
#: a path as given, with ``~`` expanded and made absolute
AbsolutePath = Annotated[str, AfterValidator(_absolute)]
#: a local folder (made absolute) or a URI of one of :data:`URI_SCHEMES`
PathOrUri = Annotated[str, AfterValidator(_path_or_uri)]


class Settings(pydantic.BaseModel):
    """The project's settings (SPEC §10), typed. Field names are the variables' without prefix."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid", validate_default=True)

    hermes_home: AbsolutePath = Field(default_factory=stores.default_hermes_home)
    state_db: str | None = None
    warehouse: PathOrUri
    #: None: the day of the earliest session in the stores (``defs/partitions.py``)
    start_date: Annotated[dt.date | None, BeforeValidator(_iso_date)] = None
    policy_list: AbsolutePath = policy.DEFAULT_LIST
    poll_seconds: Annotated[int, Field(ge=MIN_POLL_SECONDS)] = 30
    executor: Executor = "in_process"
    log_format: LogFormat | None = None
    log_level: LogLevel = "info"
    busy_timeout_ms: PositiveInt = DEFAULT_BUSY_TIMEOUT_MS
    file_mode: FileMode = "private"
    spool: AbsolutePath | None = None
    workers: PositiveInt = Field(default_factory=lambda: os.cpu_count() or 1)
    sensor_max_runs: PositiveInt = 14
    #: this host's label (None: not set, the machine's hostname; see :attr:`host_label`)
    host: Annotated[str | None, AfterValidator(_host)] = None
    user_home: str = Field(default_factory=lambda: os.path.expanduser("~"))
    #: ``off``: cells are copied as Hermes stored them, credentials included (docs/redaction.md)
    redact_secrets: Annotated[bool, BeforeValidator(_on_off)] = True
    #: the key of the redaction markers (created once, 0600); set by :func:`load` when unset
    redaction_key: AbsolutePath | None = None
    #: this host's identity file (made on its first capture, 0600); set by :func:`load` when unset
    host_identity: AbsolutePath | None = None
    #: the label the identity file settled on the host's first capture (read by :func:`load`)
    settled_host: str | None = None
    #: the settled label was set (``HERMES_ASSETS_HOST``) when it was settled
    settled_named: bool = False

    @property
    def host_label(self) -> str:
        """The label this host's files and rows carry: the one settled on its first capture
        (its identity file), else ``HERMES_ASSETS_HOST``, else the machine's hostname made a
        safe path segment."""
        return self.settled_host or self.host or host_labels.default_label()

    @property
    def host_named(self) -> bool:
        """Whether the host's label was set (``HERMES_ASSETS_HOST``): its ids are then scoped."""
        return self.host is not None or (self.settled_host is not None and self.settled_named)

    @property
    def start_day(self) -> str | None:
        """``HERMES_ASSETS_START_DATE`` as ``YYYY-MM-DD``, or None when it is unset."""
        return self.start_date.isoformat() if self.start_date else None


#: field -> (environment variable, the accepted form as an error message says it)
VARIABLES: dict[str, tuple[str, str]] = {
    "hermes_home": ("HERMES_HOME", "a folder path"),
    "state_db": ("HERMES_STATE_DB", "a state.db path, several separated by ':', or a folder"),
    "warehouse": ("HERMES_ASSETS_WAREHOUSE", f"a folder path or a URI ({', '.join(s + '://' for s in URI_SCHEMES)})"),
    "start_date": ("HERMES_ASSETS_START_DATE", "a date (YYYY-MM-DD)"),
    "policy_list": ("HERMES_ASSETS_POLICY_LIST", "a file path"),
    "poll_seconds": ("HERMES_ASSETS_POLL_SECONDS", f"an integer >= {MIN_POLL_SECONDS} (seconds)"),
    "executor": (
        "HERMES_ASSETS_EXECUTOR",
        f"one of {', '.join(EXECUTORS)} (k8s and celery: with the project's extra of that name installed)",
    ),
    "log_format": ("HERMES_ASSETS_LOG_FORMAT", f"one of {', '.join(LOG_FORMATS)}"),
    "log_level": ("HERMES_ASSETS_LOG_LEVEL", f"one of {', '.join(LOG_LEVELS)}"),
    "busy_timeout_ms": ("HERMES_ASSETS_BUSY_TIMEOUT_MS", "a positive integer (milliseconds)"),
    "file_mode": ("HERMES_ASSETS_FILE_MODE", f"one of {', '.join(FILE_MODES)}"),
    "spool": ("HERMES_ASSETS_SPOOL", "a folder path"),
    "workers": ("HERMES_ASSETS_WORKERS", "a positive integer"),
    "sensor_max_runs": ("HERMES_ASSETS_SENSOR_MAX_RUNS", "a positive integer"),
    "redact_secrets": ("HERMES_ASSETS_REDACT_SECRETS", "on or off"),
    "redaction_key": ("HERMES_ASSETS_REDACTION_KEY", "a file path"),
    "host_identity": ("HERMES_ASSETS_HOST_IDENTITY", "a file path"),
    "host": (
        "HERMES_ASSETS_HOST",
        "a host label (1-63 letters, digits, '.', '_' or '-', starting with a letter; not a word "
        "readers take for a date or a null: epoch, inf, infinity, nan, null, none, true, false)",
    ),
}

#: the key's file in the Dagster instance's folder (or beside a local warehouse without one)
REDACTION_KEY_FILE = "redaction.key"


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings from ``environ`` (default: the process environment), validated.

    Raises :class:`ConfigurationError` with one line naming the first bad variable.
    """
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field, (name, _) in VARIABLES.items():
        raw = environ.get(name, "").strip()
        if raw:
            values[field] = raw
    home = environ.get("DAGSTER_HOME", "").strip()
    if "warehouse" not in values:
        values["warehouse"] = os.path.join(home, "warehouse") if home else "warehouse"
    if "redaction_key" not in values:
        values["redaction_key"] = _default_key(home, values["warehouse"])
    if "host_identity" not in values:
        values["host_identity"] = os.path.join(
            os.path.dirname(_default_key(home, values["warehouse"])), host_identity.IDENTITY_FILE
        )
    if "log_level" in values:
        values["log_level"] = values["log_level"].lower()
    try:
        loaded = Settings(**values)
    except pydantic.ValidationError as exc:
        field = str(exc.errors()[0]["loc"][0])
        name, form = VARIABLES[field]
        raise ConfigurationError(f"{name}={values.get(field)!r} is not {form}") from None
    _refuse_a_future_start(loaded)
    return _with_settled_host(loaded)


def _with_settled_host(loaded: Settings) -> Settings:
    """The settings with the label this host settled on its first capture (its identity file,
    ``HERMES_ASSETS_HOST_IDENTITY``); a ``HERMES_ASSETS_HOST`` that names another is refused."""
    assert loaded.host_identity is not None  # load gives it its default
    identity = host_identity.read(loaded.host_identity)
    if identity is None or identity.label is None:
        return loaded
    if loaded.host is not None and loaded.host != identity.label:
        name, _ = VARIABLES["host"]
        raise ConfigurationError(
            f"{name}={loaded.host!r} is not this host's label, {identity.label!r}, settled on its first capture "
            f"({loaded.host_identity}): set {name}={identity.label!r} or unset it; to rename the host, run the "
            "relabel_host job (deploy/README.md)"
        )
    return loaded.model_copy(update={"settled_host": identity.label, "settled_named": identity.named})


def _refuse_a_future_start(loaded: Settings) -> None:
    """A first partition after today (UTC) would leave no partition at all: nothing to capture,
    no day to launch, and a sensor that keeps every day pending. One line instead."""
    today = dt.datetime.now(dt.UTC).date()
    if loaded.start_date is not None and loaded.start_date > today:
        name, _ = VARIABLES["start_date"]
        raise ConfigurationError(
            f"{name}={loaded.start_day!r} is in the future (today is {today.isoformat()}, UTC): the daily "
            "partitions run from it to today, so there would be none; set a day on or before today, or unset "
            "it to start at the earliest Hermes session"
        )


def _default_key(dagster_home: str, warehouse: str) -> str:
    """The key's default place: the Dagster instance's folder, never the warehouse (whose
    files are shared); without ``DAGSTER_HOME``, beside a local warehouse (its parent folder),
    else the user's ``~/.hermes_assets``."""
    if dagster_home:
        return os.path.join(dagster_home, REDACTION_KEY_FILE)
    parsed = urlparse(warehouse)
    if len(parsed.scheme) > 1 and parsed.scheme.lower() != "file":
        return os.path.join("~", ".hermes_assets", REDACTION_KEY_FILE)
    local = parsed.path if parsed.scheme else warehouse
    return os.path.join(os.path.dirname(os.path.abspath(os.path.expanduser(local))), REDACTION_KEY_FILE)


#: the settings that name a local folder the project writes into (checked by :func:`check`)
WRITTEN_FOLDERS = ("warehouse", "spool")


def check(environ: Mapping[str, str] | None = None) -> Settings:
    """:func:`load`, then whether each local folder the project writes (the warehouse,
    a spool that is set) can be written by this user: a folder that does not exist yet
    must be creatable. One probe each, in the folder or its nearest existing parent: a
    temporary folder made and removed at once (the only way to ask that also answers
    for root on a read-only mount). A URI warehouse is not probed (its store keeps
    its own access control). First of all, whether every file or folder
    ``HERMES_STATE_DB`` names exists: a path that does not is a mistake in the setting
    (a typo must not look like an idle Hermes, nor move the partitions' start), where a
    Hermes home with no store yet is the quiet idle case (SPEC §1).

    Raises :class:`ConfigurationError` with one line naming the setting.
    """
    settings = load(environ)
    missing = stores.missing_named(settings.state_db)
    if missing:
        raise ConfigurationError(stores.missing_line(missing[0]))
    for field in WRITTEN_FOLDERS:
        value = getattr(settings, field)
        parsed = urlparse(value or "")
        if value is None or parsed.scheme.lower() not in ("", "file") or len(parsed.scheme) == 1:
            continue
        problem = _unwritable(parsed.path if parsed.scheme else value)
        if problem:
            name, _ = VARIABLES[field]
            raise ConfigurationError(f"{name}={value!r} is not a folder this user can write: {problem}")
    private = {"host_identity": settings.host_identity}
    if settings.redact_secrets:
        private["redaction_key"] = settings.redaction_key
    for field, path in private.items():  # the key and the identity: private files, made on the first run
        problem = _key_problem(path) if path else None
        if problem:
            name, _ = VARIABLES[field]
            raise ConfigurationError(f"{name}={path!r} {problem}")
    if not settings.redact_secrets:
        logs.get_logger().warning(
            "hermes.settings.redaction_off",
            setting=VARIABLES["redact_secrets"][0],
            meaning="cells are copied as Hermes stored them: credentials pasted in sessions reach the "
            "datasets in the clear; only for a warehouse exactly as private as the Hermes home",
        )
    return settings


def check_host(s: Settings) -> None:
    """Refuse (:class:`~hermes_assets.lib.basics.errors.HostConflict`, one line) a host whose label is
    another host's in the warehouse, or one of whose stores is captured there under another
    label. It reads the warehouse and the stores, so only what is about to capture calls it
    (``make run``, a command that runs the assets); servers leave it to the sensor's ticks
    and the runs, which refuse the same way."""
    from hermes_assets.lib.hosts import host_claims
    from hermes_assets.lib.source.state_db import ReaderFactory
    from hermes_assets.lib.source.store_identity import identities
    from hermes_assets.lib.storage.local_files import FileModes
    from hermes_assets.lib.warehouse.datasets import Warehouse

    found = stores.discover_stores(s.state_db, s.hermes_home)
    wh = Warehouse(s.warehouse, spool=s.spool, modes=FileModes.named(s.file_mode), host=s.host_label)
    held = identities(found, ReaderFactory(busy_timeout_ms=s.busy_timeout_ms))
    host_claims.check_host(wh.storage, wh.root, s.host_identity or "", wh.host, held)


def _key_problem(path: str) -> str | None:
    """Why the redaction key cannot be used: not a file, readable by others, or (when it
    does not exist yet) a folder where it cannot be created."""
    if os.path.lexists(path):
        if not os.path.isfile(path):
            return "is not a file"
        if os.stat(path).st_mode & 0o077:
            return "can be read by other users: it must be private (chmod 600)"
        return key_too_short(os.path.getsize(path))
    problem = _unwritable(os.path.dirname(path))
    return f"cannot be created: {problem}" if problem else None


def _unwritable(folder: str) -> str | None:
    """Why ``folder`` cannot be written (or created), or None when it can."""
    probe = folder
    while not os.path.lexists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        return f"{probe} is not a folder"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".hermes_assets-probe-", dir=probe))
    except OSError as exc:
        what = "it" if probe == folder else f"its parent {probe}"
        return f"{what} cannot be written ({exc.strerror or exc})"
    return None
