"""The markers already in this host's stored files, as sightings: once, for a warehouse from before them.

A warehouse redacted before the sightings existed holds markers no sightings
file names, and neither a capture (which reads only the days that changed) nor
the pass over stored files (which leaves a marker as it is) would ever report
them. So the first run that redacts on a host whose stamp says nothing of
sightings (:data:`STAMP_FILE`, in the host's staging folder) reads the text
columns of each of the host's ``hermes_sessions`` and ``hermes_messages`` files
once, finds every marker in them (the marker's format alone:
``[REDACTED:<kind>:<hex>]``), and hands them to the write as the sightings of
stored files; the stamp is written after the run's write. What the files do not
hold is not invented: the prefix, the last four characters and the JSON path
are unknown (until a capture of the day reads the session again and replaces
them with its own sightings).
"""

from __future__ import annotations

import os
import re

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics import schemas
from hermes_assets.lib.basics.schemas import MESSAGES, SESSIONS
from hermes_assets.lib.redaction.rules import MARKER_PREFIX
from hermes_assets.lib.redaction.sightings import Sighting
from hermes_assets.lib.storage import local_files
from hermes_assets.lib.warehouse.datasets import Warehouse
from hermes_assets.lib.warehouse.host_layout import SIGHTINGS_STAMP

#: in a host's staging folder: the markers of the host's stored files are in its sightings
STAMP_FILE = SIGHTINGS_STAMP
VERSION = "1"
MARKER = re.compile(re.escape(MARKER_PREFIX) + r"([^:\]\s]+):([0-9a-f]{8,})\]")
#: per dataset, the columns of a row's session and message (None: a row per session)
_IDS = {SESSIONS: ("id", None), MESSAGES: ("session_id", "id")}


def stamp_path(warehouse: Warehouse) -> str:
    return os.path.join(warehouse.staging_root, STAMP_FILE)


def stamped(warehouse: Warehouse) -> bool:
    """Whether this host's stored files' markers are in its sightings already."""
    return local_files.stamp_holds(stamp_path(warehouse), VERSION, warehouse.modes.file)


def stamp(warehouse: Warehouse) -> None:
    """Say so (a file of this process renamed into place: two runs of the host may stamp at once)."""
    path = stamp_path(warehouse)
    warehouse.make_spool_dirs(os.path.dirname(path))
    tmp = f"{path}.{os.getpid()}.tmp"
    with local_files.open_private(tmp, warehouse.modes.file) as f:
        f.write(f"{VERSION}\n".encode("ascii"))
    os.replace(tmp, path)


def scan(warehouse: Warehouse) -> dict[str, list[Sighting]]:
    """Day -> the markers in this host's ``hermes_sessions`` / ``hermes_messages`` files of the day,
    one sighting per marker, cell and column."""
    found: dict[str, list[Sighting]] = {}
    for dataset, (session_key, message_key) in _IDS.items():
        for day in warehouse.own_days(dataset):
            table = warehouse.read_own(dataset, day)
            if table is not None:
                seen = _markers(table, dataset, session_key, message_key)
                if seen:
                    found.setdefault(day, []).extend(seen)
    return found


def _markers(table: pa.Table, dataset: str, session_key: str, message_key: str | None) -> list[Sighting]:
    out: list[Sighting] = []
    ids: tuple[list, list | None, list] | None = None
    for f in table.schema:
        storage = f.type.storage_type if isinstance(f.type, pa.ExtensionType) else f.type
        if not pa.types.is_string(storage):
            continue
        column = table.column(f.name)
        if storage != f.type:
            column = schemas.storage_of(column)
        hits = pc.indices_nonzero(pc.fill_null(pc.match_substring(column, MARKER_PREFIX), False)).to_pylist()
        if not hits:
            continue
        if ids is None:
            ids = (
                table.column(session_key).to_pylist(),
                table.column(message_key).to_pylist() if message_key else None,
                table.column("store_label").to_pylist(),
            )
        sessions, messages, labels = ids
        for row in hits:
            for m in MARKER.finditer(column[row].as_py()):
                message = None if messages is None or messages[row] is None else str(messages[row])
                out.append(
                    Sighting(
                        m.group(0), m.group(1), f"{dataset}.{f.name}", "", sessions[row], message, labels[row], "", ""
                    )
                )
    return out
