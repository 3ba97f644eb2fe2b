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

A host's label is a safe path segment and a hive partition value every reader
reads back as text (:func:`check_label`): the ``HERMES_ASSETS_HOST`` setting,
or the machine's hostname made so (:func:`default_label`). Readers infer a
partition value's type from the value: pyarrow reads ``host=123`` as an
integer, DuckDB ``host=123`` and ``host=0x10`` as BIGINT and ``host=epoch``,
``host=inf`` as DATE when a glob holds that one host's files, and a union of
those with other hosts' (text) files then breaks. So a label starts with a
letter and is none of those words: text to every reader, whichever hosts a
glob finds.

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
#: hive partition value DuckDB, pyarrow and Spark read back as the same text (a letter first:
#: never a number or a date)
_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,62}")
#: words that start with a letter and still read as another type (DuckDB: dates), or as none
RESERVED = frozenset({"epoch", "inf", "infinity", "nan", "null", "none", "true", "false"})
#: what a hostname that is no label gets in front (``123`` -> ``host-123``)
DEFAULT_PREFIX = "host-"
#: the folder of a host's files inside a day's folder
PREFIX = "host="


def is_label(label: object) -> bool:
    """Whether ``label`` is a host label (:func:`check_label`)."""
    return isinstance(label, str) and bool(_LABEL.fullmatch(label)) and label.lower() not in RESERVED


def check_label(label: str) -> str:
    """``label`` when it is a host label: 1 to 63 characters of letters, digits, ``.``, ``_``
    and ``-``, starting with a letter, and none of :data:`RESERVED` (any case): a path segment
    anywhere, and a hive partition value every reader types as text. Raises ValueError otherwise."""
    if not is_label(label):
        raise ValueError(
            f"{label!r} is not a host label: 1-63 letters, digits, '.', '_' or '-', starting with a "
            f"letter, and not {', '.join(sorted(RESERVED))} (readers of hive partitions would take "
            "it for a number, a date or a null)"
        )
    return label


def default_label(hostname: str | None = None) -> str:
    """The machine's hostname as a host label: its first DNS label (``box.example.org`` ->
    ``box``), any other character replaced by ``-``; ``host-`` in front of one that is still
    no label (``123`` -> ``host-123``: a number would not stay text); ``host`` when nothing is left."""
    name = (socket.gethostname() if hostname is None else hostname).split(".")[0]
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", name).lstrip("._-")[:63]
    if not safe:
        return "host"
    return safe if is_label(safe) else (DEFAULT_PREFIX + safe)[:63]


def folder(label: str) -> str:
    """The name of a host's folder in a day's folder."""
    return PREFIX + label


def label_of(folder_name: str) -> str | None:
    """The host a day's subfolder belongs to (None: not a host's folder)."""
    if not folder_name.startswith(PREFIX):
        return None
    label = folder_name[len(PREFIX) :]
    return label if is_label(label) else None
