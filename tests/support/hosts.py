"""This machine's host label and folder, as a warehouse opened without a label uses them."""

from __future__ import annotations

from hermes_assets.lib.hosts.host_labels import default_label, folder

#: the label of a warehouse (and of the stores) of a run that names no host
HOST = default_label()
#: this host's folder in a day's folder: ``<dataset>/day=<day>/host=<label>/part-0.parquet``
HOST_DIR = folder(HOST)
#: every captured day file of every host, under a dataset's folder
HOST_FILES = "day=*/host=*/part-0.parquet"
