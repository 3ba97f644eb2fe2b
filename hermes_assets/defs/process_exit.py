"""A Dagster process's exit without Python's last collection over what it imported.

When a process ends, Python clears its modules and runs one last full garbage
collection, which walks every object still tracked: in a process that loaded
these definitions, about 240,000, nearly all of them imported code (Dagster,
SQLAlchemy, pyarrow, the project's own modules). That walk is most of the
0.6-1.2 s of CPU, and up to 2 s of wall, that a `dagster asset materialize`
of one day spent after its run had ended (docs/benchmarks.md, "the empty
run's fixed cost").

:func:`skip_final_collection` has the process freeze its objects
(:func:`gc.freeze`) as its last ``atexit`` step: Python's last collection then
leaves them, and the operating system takes the memory back as it does for
any ending process. Nothing is written by that collection: every file the
project writes is closed (and synced) when its step ends, Dagster's records
are committed by each write, and Python flushes its standard streams after
it. A process that runs on (a code server, the daemon, the webserver) is not
changed while it runs: the freeze happens only at its exit.
"""

import atexit
import functools
import gc


@functools.cache
def skip_final_collection() -> None:
    """Freeze the process's objects at its exit (once per process, however many times the
    definitions load: a code server reloads them)."""
    atexit.register(gc.freeze)
