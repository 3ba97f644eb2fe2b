"""A staged day's freed memory handed back to the system once it has piled up, not after every day.

A process that stages days (a capture worker, and the run's process, which takes its share)
frees each day's rows and tables when the day is staged. The allocator keeps what was freed
for the next day's allocations; :meth:`pyarrow.MemoryPool.release_unused` hands it back (for
the system allocator the run uses, ``malloc_trim``: every free page inside the heap is given
back, ``defs/arrow_memory.py``). Released after every day, the next day touched those pages
again: on the 1M-message store, about 700,000 page faults a run and 1.3 s of system CPU, two
thirds of them in the run's process, whose faults per day grew through the step (2,300 to
3,400) as what it keeps of its own days spread over its heap; without the release, 57,000.

What the release bounds is what stays resident between days, and after a day the allocator
keeps little beyond what the next day reuses (a whole 1M run without any release: the worker
6 MB and the run's process 16 MB more at its end). So a process releases when its resident
memory has grown by :data:`RELEASE_GROWTH` since its last release (and after its first day):
memory still follows one day, give or take that much, whatever the days' sizes. Where the
resident size cannot be read, every day is released, as before. Whole runs of every asset on
the 1M store, five interleaved pairs: CPU of the tree 0.4-6.1 s lower in each, the tree's
peak PSS about 9 MB higher (docs/benchmarks.md, branch i45-stage).
"""

from __future__ import annotations

import os

import pyarrow as pa

#: the growth of a staging process's resident memory since its last release that has it release again
RELEASE_GROWTH = 32 * 1024 * 1024

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _Released:
    """This process's resident bytes right after its last release (None: none yet)."""

    resident: int | None = None


_released = _Released()


def resident_bytes() -> int | None:
    """This process's resident memory (Linux's ``/proc/self/statm``), None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def day_staged() -> None:
    """A day is staged (its files written): Arrow's unused memory back to the system when this
    process has grown by :data:`RELEASE_GROWTH` since its last release (or never released, or
    cannot tell). Each day calls it at the same point, so the sizes it compares are alike."""
    now = resident_bytes()
    if now is None or _released.resident is None or now - _released.resident > RELEASE_GROWTH:
        pa.default_memory_pool().release_unused()
        _released.resident = resident_bytes()
