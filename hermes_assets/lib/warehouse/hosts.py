"""Several hosts, one warehouse: whose files are whose (SPEC §2).

Each host that captures its own Hermes stores writes only its own files: a
captured day of a dataset is one file per host,

    ``<root>/<dataset>/day=YYYY-MM-DD/host=<label>/part-0.parquet``

with that host's read marks, lock and temporary files in the same folder.
Nothing under a day's folder is written by two hosts, so hosts need no
coordination: on a shared folder or an object store, two hosts capturing the
same day at the same time never replace each other's rows. Readers find every
row with one glob (``<dataset>/day=*/host=*/part-0.parquet``) or a
hive-partitioned read (``day`` and ``host`` from the path; ``host`` is also a
column of every row, with the same value).

A host's label is a safe path segment (:func:`check_label`): the
``HERMES_ASSETS_HOST`` setting, or the machine's hostname made safe
(:func:`default_label`).

A warehouse written before this layout holds one file per day
(``day=YYYY-MM-DD/part-0.parquet``): :func:`~hermes_assets.lib.warehouse.datasets.Warehouse.adopt_legacy`
moves each to the first host that runs, its rows unchanged but for the new
``host`` column. The glob above never matches such a file, so a reader never
counts a row twice while a warehouse moves.
"""

from __future__ import annotations

import re
import socket

#: what a host label may hold: a path segment on every filesystem and object store, and a
#: hive partition value DuckDB, pyarrow and Spark read back as the same text
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
#: the folder of a host's files inside a day's folder
PREFIX = "host="


def check_label(label: str) -> str:
    """``label`` when it is a safe host label: 1 to 63 characters of letters, digits,
    ``.``, ``_`` and ``-``, starting with a letter or digit. Raises ValueError otherwise."""
    if not isinstance(label, str) or not _LABEL.fullmatch(label):
        raise ValueError(
            f"{label!r} is not a host label: 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return label


def default_label(hostname: str | None = None) -> str:
    """The machine's hostname as a host label: its first DNS label (``box.example.org`` ->
    ``box``), any other character replaced by ``-``; ``host`` when nothing is left."""
    name = (socket.gethostname() if hostname is None else hostname).split(".")[0]
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip("._-")[:63]
    return safe or "host"


def folder(label: str) -> str:
    """The name of a host's folder in a day's folder."""
    return PREFIX + label


def label_of(folder_name: str) -> str | None:
    """The host a day's subfolder belongs to (None: not a host's folder)."""
    if not folder_name.startswith(PREFIX):
        return None
    label = folder_name[len(PREFIX) :]
    return label if _LABEL.fullmatch(label) else None
