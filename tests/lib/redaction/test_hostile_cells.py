"""A hostile cell cannot stall a day: 5 MB of near-matches of each rule, in bounded CPU.

Every rule runs on RE2 (linear), each search resumed past what it read; our PEM blocks
are found a run of blocks at a time, with one pass over the ``-----END`` lines; a form of
a name and its value reads its value over a bounded window; a decoded view is built by
C-speed replacement; overlaps are joined in n log n. A quadratic path takes minutes on
these cells.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from hermes_assets.lib.redaction.redactor import Redactor

SIZE = 5_000_000


def _deeply_escaped(depth: int = 6) -> str:
    """JSON in JSON ``depth`` times, a name that says secret at every depth."""
    text = "x"
    for _ in range(depth):
        text = json.dumps({"a_token": text, "k": "password=abc\ndef"})
    return text


#: CPU seconds one 5 MB cell may take: the slowest unit takes about 0.5 s on an idle core, and
#: up to twice that in the full suite on two busy cores (a VM's stolen time counts as the
#: process's); a quadratic path takes minutes, so a bound of 3 s still tells them apart
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
    "a private key in base64": "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t",
    "escaped JSON names": '\\"api_key\\": \\"',
    "escaped newlines": "\\nPASSWORD=",
    "percent-encoded": "password%3D%25",
    "config lines": "\npassword ",
    "command-line flags": " --password -u a: mysql -p",
    "a URL's query": "?access_token=a&",
    "escapes": "\\u0041\\\\",
    "pem blocks": "-----BEGIN PRIVATE KEY-----\nQUJDREVGR0hJSktMTU5PUA==\n-----END PRIVATE KEY-----\n",
    "pem footers": "-----END PRIVATE KEY-----\n",
    "a run of key characters": "A",
    "a run of base64": "QUJDREVGR0hJSktMTU5PUA",
    "a 5000-character sk- key": "sk-" + "A" * 5000 + " ",
    "backslashes": "\\",
    "percent signs": "%25",
    "deeply escaped JSON": _deeply_escaped(),
    # near-matches of a form of a name and its value, one candidate every few bytes (each judged once)
    "percent-encoded values after &": "&password=%25aaaa",
    "values too plain to be secrets": "&password=aaaaaaaa",
    "curl -u with no password": "-u a:",
    "flags with short values": "--password a ",
    "mysql -p with short values": "mysql -pa ",
    "netrc lines with short passwords": "login a password b ",
    "percent-encoded assignments twice": "%26password%3D%2525aaaa",
}


@pytest.mark.parametrize("unit", UNITS.values(), ids=UNITS.keys())
def test_a_5_mb_cell_of_near_matches_is_redacted_in_bounded_cpu(unit: str):
    cell = (unit * (SIZE // len(unit) + 1))[:SIZE]
    redactor = Redactor(os.urandom(32))
    start = time.process_time()
    redactor.text(cell)
    assert time.process_time() - start < BOUND_S
