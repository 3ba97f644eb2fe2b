"""Staging folders of capture runs: which are left over, and their removal (issue 23).

A capture run stages its days under ``<staging root>/<run id>/`` between
``project_rows`` and ``write_partitions``; the write removes the folder when
every day is in place. A failed write keeps it, so that a re-execution from
failure (by hand, or one of Dagster's run retries) writes the staged days
without reading the store again. Runs killed mid-way (kill -9) leave theirs.

:func:`sweep` removes the folders no run needs any more. Whether a run needs
its folder is the caller's to say (``needs(run_id)``: the Dagster instance
knows): True while it runs or a retry of it is coming, False once it ended
otherwise, None when the run is not known (deleted, or of another Dagster
instance writing to the same warehouse: such a folder is only removed once
it is :data:`STALE_STAGING_S` old). The capture runs a sweep when a run
starts to stage, and after a run wrote its days.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

from hermes_assets.lib.logs import get_logger

log = get_logger()

#: a staging folder of a run nobody knows is removed once this old (a run of another instance)
STALE_STAGING_S = 6 * 3600


def sweep(
    root: str, needs: Callable[[str], bool | None], *, keep: str | None = None, now_s: float | None = None
) -> list[str]:
    """Remove the staging folders under ``root`` that no run needs; the run ids removed.

    ``keep``: the caller's own run id (its folder is never removed here).
    """
    now = time.time() if now_s is None else now_s
    removed = []
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if entry.name == keep or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            needed = needs(entry.name)
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except FileNotFoundError:  # removed meanwhile (its run's write finished)
            continue
        if needed or (needed is None and age < STALE_STAGING_S):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    if removed:
        log.info(
            "hermes.capture.staging_removed",
            runs=len(removed),
            run_ids=removed[:10],
            reason="runs no longer in progress, with no retry coming",
        )
    return removed
