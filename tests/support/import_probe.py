"""Import every module of a package in this (fresh) interpreter and report what importing changed.

``python -m tests.support.import_probe PACKAGE [PATH]`` prints one JSON object:

- ``modules``: the modules imported;
- ``changed``: what the imports changed in the process (structlog's configuration, the
  logging configuration, ``sys.excepthook``, the warnings filters, the environment, the
  working directory, the signal handlers);
- ``reads``: the environment variables the package's own code read, and the files and
  databases it opened, each with the line that did it.

A read counts when the package's own code is the nearest caller outside the standard library:
``import dagster`` inside a module of the package, and whatever Dagster reads while it is
imported, is Dagster's business, not the package's. The libraries the package imports are
imported first, before the state is recorded, so their own set-up is not counted either.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import pkgutil
import signal
import sys
import sysconfig
import warnings
from pathlib import Path
from types import FrameType

STDLIB = tuple(str(Path(p).resolve()) for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]})
THIS = str(Path(__file__).resolve())
#: the libraries a package of this project imports, imported before the state is recorded
LIBRARIES = ("dagster", "pandas", "pyarrow", "pyarrow.parquet", "structlog", "pydantic", "sqlite3")


def _owner(frame: FrameType | None, root: str) -> str | None:
    """``file:line`` of the nearest caller outside the standard library, when it is under ``root``."""
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib"):  # the import system reading a module's own file
            return None
        if name.startswith("<frozen") or name == THIS:
            frame = frame.f_back
            continue
        path = str(Path(name).resolve())
        if path.startswith(STDLIB) and "site-packages" not in path:
            frame = frame.f_back
            continue
        return f"{os.path.relpath(path, root)}:{frame.f_lineno}" if path.startswith(root) else None
    return None


def _loggers() -> dict[str, tuple]:
    loggers = {"": logging.getLogger()} | {
        name: lg for name, lg in logging.Logger.manager.loggerDict.items() if isinstance(lg, logging.Logger)
    }
    return {name: (lg.level, [repr(h) for h in lg.handlers], lg.propagate, lg.disabled) for name, lg in loggers.items()}


def _state() -> dict:
    import structlog

    return {
        "structlog_configured": structlog.is_configured(),
        "structlog_config": repr(sorted(structlog.get_config().items())),
        "loggers": _loggers(),
        "excepthook": repr(sys.excepthook),
        "warnings_filters": repr(warnings.filters),
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "signals": {s.name: repr(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)},
    }


def _changes(before: dict, after: dict) -> dict:
    changed: dict = {}
    for key in before:
        if key == "loggers":  # a logger the imports created is new, not changed: only existing ones count
            moved = {n: after["loggers"][n] for n, v in before["loggers"].items() if after["loggers"].get(n) != v}
            if moved:
                changed[key] = moved
        elif key == "environ":
            old, new = before[key], after[key]
            diff = {k: new.get(k) for k in set(old) | set(new) if old.get(k) != new.get(k)}
            if diff:
                changed[key] = diff
        elif before[key] != after[key]:
            changed[key] = {"before": before[key], "after": after[key]}
    return changed


def probe(package: str, root: str) -> dict:
    reads: list[dict] = []
    for name in LIBRARIES:
        importlib.import_module(name)
    before = _state()

    environ_class = type(os.environ)

    class WatchedEnviron(environ_class):  # type: ignore[misc, valid-type]
        def __getitem__(self, key):
            where = _owner(sys._getframe(1), root)
            if where:
                reads.append({"read": "environ", "name": key, "at": where})
            return super().__getitem__(key)

        def __contains__(self, key):
            where = _owner(sys._getframe(1), root)
            if where:
                reads.append({"read": "environ", "name": key, "at": where})
            return super().__contains__(key)

    def audit(event: str, args: tuple) -> None:
        if event in ("open", "sqlite3.connect", "os.listdir", "os.scandir"):
            where = _owner(sys._getframe(1), root)
            if where:
                reads.append({"read": event, "name": str(args[0]) if args else "", "at": where})

    os.environ.__class__ = WatchedEnviron
    sys.addaudithook(audit)
    top = importlib.import_module(package)
    modules = [package]
    for info in pkgutil.walk_packages(top.__path__, prefix=f"{package}."):
        importlib.import_module(info.name)
        modules.append(info.name)
    os.environ.__class__ = environ_class
    done = len(reads)  # the state is read below by this probe, not by the package
    return {"modules": modules, "changed": _changes(before, _state()), "reads": reads[:done]}


def main() -> None:
    package = sys.argv[1]
    root = str(Path(sys.argv[2] if len(sys.argv) > 2 else Path.cwd()).resolve() / package.split(".")[0])
    print(json.dumps(probe(package, root), default=repr))


if __name__ == "__main__":
    main()
