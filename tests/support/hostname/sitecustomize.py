"""A machine's hostname, as a test names it: with this folder on ``PYTHONPATH`` and
``HERMES_TEST_HOSTNAME`` set, every Python process of the project (the CLI, and whatever
it starts) reads that name from ``socket.gethostname()``: a container restarted under a
new name, two VMs cloned from one image. Nothing else changes."""

import os
import socket

_NAME = os.environ.get("HERMES_TEST_HOSTNAME")
if _NAME:
    socket.gethostname = lambda: _NAME
