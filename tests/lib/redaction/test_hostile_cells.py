"""A hostile cell cannot stall a day: 5 MB of near-matches of each rule, in bounded CPU.

Every maintained rule runs on RE2 (linear); our PEM blocks are found with one pass
over the ``-----END`` lines and a bisection per header; overlaps are resolved and
markers written in n log n. The bound here is loose (a shared 2-core machine): a
quadratic path takes minutes on these cells (it took 90 s before).
"""

from __future__ import annotations

import os
import time

import pytest

from hermes_assets.lib.redaction.redactor import Redactor

SIZE = 5_000_000
#: CPU seconds one 5 MB cell may take
BOUND_S = 3.0
UNITS = {
    "pem headers": "-----BEGIN PRIVATE KEY-----\n",
    "pem headers and base64": "-----BEGIN RSA PRIVATE KEY-----\nQUJDREVGR0hJSktMTU5PUA==\n",
    "sk- prefixes": "sk-",
    "ghp_ prefixes": "ghp_",
    "jwt starts": "eyJhbGciOi.",
    "assignments": "password=",
    "authorization headers": "Authorization: ",
    "bearer": "Bearer ",
    "provider assignments": "twilio_key = ",
    "a long token": "token=" + "A" * 100,
}


@pytest.mark.parametrize("unit", UNITS.values(), ids=UNITS.keys())
def test_a_5_mb_cell_of_near_matches_is_redacted_in_bounded_cpu(unit: str):
    cell = (unit * (SIZE // len(unit) + 1))[:SIZE]
    redactor = Redactor(os.urandom(32))
    start = time.process_time()
    redactor.text(cell)
    assert time.process_time() - start < BOUND_S
