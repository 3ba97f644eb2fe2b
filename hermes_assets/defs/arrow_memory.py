"""Arrow's memory from the C library's allocator (glibc's ``malloc``), in the run's process and its workers.

pyarrow allocates from mimalloc by default, which keeps what a thread freed for that thread to
reuse: what a day's tables took stays resident after the day, in each capture worker and in the
run's process (which stages days too). The system allocator hands it back: after a staged day once a
process has grown by a few tens of MB (:mod:`~hermes_assets.lib.capture.day_memory` releases the
pool's unused memory, ``malloc_trim`` for this allocator) and as large buffers are freed. A whole
``dg launch`` of every asset, peak PSS of the process tree, three interleaved pairs: 538-545 MB with
mimalloc, 503-507 MB with the system allocator on the 1M-message store; 425-428 MB and 376-381 MB on
the medium one; the capture worker's own peak 161 MB and 120 MB on the 1M store
(docs/benchmarks.md).

pyarrow picks its allocator once per process, as it is imported, from ``ARROW_DEFAULT_MEMORY_POOL``;
the definitions load after pyarrow is imported (and importing a module of this package changes
nothing in the process: ``tests/docs/test_import_purity.py``). So :func:`use_system_allocator`,
called as the definitions load, sets the variable for the processes the run starts (a capture's
forkserver and its workers, which import pyarrow after it is set: all their Arrow memory) and
pyarrow's pool in this process (every allocation that pyarrow's calls make; Arrow's own defaults
inside C++, as the Parquet reader's page buffers and Acero's plans, stay with mimalloc here: the
write step's checks keep off Acero, :func:`hermes_assets.defs.checks.keys_distinct`). A variable
the user set is left as it is, and followed.
"""

import functools
import os

import pyarrow as pa

#: the variable pyarrow reads its allocator from, as it is imported
POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


@functools.cache
def use_system_allocator() -> None:
    """Arrow's memory from the system allocator in this process and those it starts, unless the
    user chose an allocator (:data:`POOL_VARIABLE`); once per process."""
    if POOL_VARIABLE in os.environ:
        return
    os.environ[POOL_VARIABLE] = "system"
    pa.set_memory_pool(pa.system_memory_pool())
