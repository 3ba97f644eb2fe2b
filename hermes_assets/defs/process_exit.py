"""Python's full collections in a Dagster process, kept off the objects it imported.

A full collection (generation 2) walks every object Python tracks; in a process
that loaded these definitions, about 270,000, nearly all of them imported code
(Dagster, SQLAlchemy, pyarrow, the project's own modules), which lives as long
as the process.

While the process runs, a full collection comes each time the objects that
outlived the young collections have grown by a quarter: loading Dagster and the
definitions does that five times, the last ones over 220,000-270,000 objects
(an empty one-day ``dg launch``: 0.3 s of its 2.4 s of CPU). :func:`freeze_imported`
freezes the objects that exist when the definitions first load (:func:`gc.freeze`):
the full collections after it walk only what the process made since. A frozen object is still
freed as soon as nothing refers to it; only a reference cycle among them would
stay, at most what existed at that first load, once per process.

When a process ends, Python clears its modules and runs one last full garbage
collection, which walks every object still tracked. That walk was most of the
0.6-1.2 s of CPU, and up to 2 s of wall, that a `dagster asset materialize`
of one day spent after its run had ended (docs/benchmarks.md, "the empty
run's fixed cost").

:func:`skip_final_collection` has the process freeze its objects
(:func:`gc.freeze`) as its last ``atexit`` step: Python's last collection then
leaves them, and the operating system takes the memory back as it does for
any ending process. Nothing is written by that collection: every file the
project writes is closed (and synced) when its step ends, Dagster's records
are committed by each write, and Python flushes its standard streams after
it.
"""

import atexit
import functools
import gc


@functools.cache
def freeze_imported() -> None:
    """Freeze the objects the process holds now, at its first load of the definitions (once per
    process: a code server that reloads them does not freeze what each load made)."""
    gc.freeze()


@functools.cache
def skip_final_collection() -> None:
    """Freeze the process's objects at its exit (once per process, however many times the
    definitions load: a code server reloads them)."""
    atexit.register(gc.freeze)
