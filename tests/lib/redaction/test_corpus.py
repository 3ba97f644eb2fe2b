"""Every rule's positive, together in one cell as a transcript holds them, in every encoding.

The corpus (``tests/support/secret_corpus.py``, drawn at run time) holds a positive of every
maintained rule a draw reaches, of each of our formats and forms, and the ``.env`` values in
every form, one per line; its neighbours are other rules' positives. In plain text, in JSON
escaped once and twice, percent-encoded in a URL, and in a stored file's column, no secret
is left, read decoded; the look-alikes come through unchanged.
"""

from __future__ import annotations

import json
import os
import random
import urllib.parse

import pyarrow as pa
import pytest

from hermes_assets.lib.redaction.redactor import Redactor
from hermes_assets.lib.redaction.stored_files import redact_table
from tests.support import secret_corpus

SEED = random.randrange(1 << 30)


@pytest.fixture(scope="module")
def made():
    entries, env, look_alikes = secret_corpus.corpus(SEED)
    redactor = Redactor(os.urandom(32), sorted(env.values(), key=lambda v: (-len(v), v)))
    return entries, look_alikes, redactor


def leaked(entries, text: str) -> list[str]:
    readable = secret_corpus.decoded(text)
    return sorted({e.name for e in entries if any(e.secret in t for t in readable)})


CELLS = {
    "plain": lambda doc: doc,
    "json": lambda doc: json.dumps({"content": doc}),
    "json twice": lambda doc: json.dumps([{"function": {"arguments": json.dumps({"content": doc})}}]),
    "json cut short": lambda doc: json.dumps({"output": doc})[:-3],
    "url": lambda doc: json.dumps({"url": "https://search.example/?q=" + urllib.parse.quote(doc, safe="")}),
}


@pytest.mark.parametrize("encoding", CELLS)
def test_no_positive_is_left_in_any_encoding(made, encoding: str):
    entries, _, redactor = made
    cell = CELLS[encoding](secret_corpus.document(entries))
    assert leaked(entries, redactor.text(cell)) == [], f"seed {SEED}"


def test_no_positive_is_left_in_a_stored_file(made):
    entries, _, redactor = made
    doc = secret_corpus.document(entries)
    table = pa.table({"session_id": ["s", "s"], "content_text": [doc, json.dumps({"content": doc})]})
    redacted, cells = redact_table(redactor, table, "hermes_messages")
    assert cells == 2
    for value in redacted.column("content_text").to_pylist():
        assert leaked(entries, value) == [], f"seed {SEED}"


def test_the_corpus_reaches_almost_every_rule(made):
    entries, _, redactor = made
    names = {e.name for e in entries}
    assert len([r for r in redactor.rules.rules if r.id in names]) >= 0.95 * len(redactor.rules.rules)


def test_look_alikes_are_unchanged(made):
    _, look_alikes, redactor = made
    for line in look_alikes:
        for cell in (line, json.dumps({"content": line})):
            assert redactor.text(cell) == cell
