"""A positive of every rule, as Hermes's real writer (0.19) stores it, never reaches the warehouse.

A corpus made at run time (``tests/support/secret_corpus.py``: a positive drawn from every
maintained rule a draw reaches, of each of our formats, of each form of a name and its value,
the ``.env`` values in every form) is written through ``SessionDB`` in every text field of a
session: a turn, a reply, its reasoning, tool-call arguments (JSON in JSON), a URL
percent-encoded, tool results, the title, the system prompt, ``model_config`` and
``display_metadata``. Look-alikes go into a session of their own. After a capture, and after
a capture with redaction off followed by one with it on (the pass over stored files), no
string of any Parquet file holds a secret, read decoded (JSON escapes once and twice,
percent-escapes), nor does any byte under ``DAGSTER_HOME`` or the console; the look-alikes
are Hermes's, unchanged.
"""

from __future__ import annotations

import os
import random

import dagster as dg
import pyarrow.parquet as pq
import pytest

from hermes_assets.lib.redaction import stored_files
from hermes_assets.lib.redaction.redactor import RedactionConfig
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.defs.harness import Capture
from tests.defs.test_redaction import folder_bytes, warehouse_strings
from tests.support import secret_corpus
from tests.support.corpus_session import corpus_turns
from tests.support.hermes_writer import START_S, HermesWriter, openai_call

DAY = "2026-06-01"


def write_corpus_store(capture: Capture, seed: int) -> tuple[list[secret_corpus.Entry], list[str]]:
    entries, env, look_alikes = secret_corpus.corpus(seed)
    (capture.home / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
    os.chmod(capture.home / ".env", 0o600)
    text = secret_corpus.document(entries)
    with HermesWriter(capture.store, home=capture.home, start_s=START_S) as w:
        sid = w.session("s-corpus", "cli", model="gpt-4.1", model_config={"note": text}, system_prompt=text)
        w.set_session_title(sid, "notes " + entries[0].text[:60])
        w.msg(sid, "user", text)
        for role, content, kw in corpus_turns(text, openai_call):
            w.msg(sid, role, content, **kw)
        w.end(sid)
        plain = w.session("s-plain", "cli", model="gpt-4.1")
        w.msg(plain, "assistant", "\n".join(look_alikes))
        w.end(plain)
    return entries, look_alikes


def draw_seed() -> int:
    """The corpus's seed: ``HERMES_ASSETS_TEST_SEED``, else a fresh one (a failure names it)."""
    return int(os.environ.get("HERMES_ASSETS_TEST_SEED") or random.randrange(1 << 30))


def assert_none_in_the_warehouse(capture: Capture, entries: list[secret_corpus.Entry], seed: int) -> str:
    strings = "\n".join(warehouse_strings(capture.warehouse))
    readable = "\n".join(secret_corpus.decoded(strings))
    leaked = sorted({e.name for e in entries if e.secret in readable})
    assert not leaked, f"in the warehouse: positives of {leaked} (seed {seed}: HERMES_ASSETS_TEST_SEED draws it again)"
    return strings


def plain_content(capture: Capture) -> list[str]:
    rows = pq.read_table(next((capture.warehouse / "hermes_messages").rglob("*.parquet"))).to_pylist()
    return [r["content"] for r in rows if r["session_id"] == "s-plain"]


@pytest.mark.slow
def test_every_rule_written_by_hermes_0_19_is_captured_without_one(capture: Capture, capfd):
    seed = draw_seed()
    entries, look_alikes = write_corpus_store(capture, seed)
    assert len({e.name for e in entries}) > 400  # every maintained rule a draw reaches, and ours
    capfd.readouterr()
    instance = dg.DagsterInstance.local_temp(str(capture.dagster_home))
    try:
        assert capture.materialize(DAY, instance=instance).success
    finally:
        instance.dispose()
    out, err = capfd.readouterr()
    strings = assert_none_in_the_warehouse(capture, entries, seed)
    assert "[REDACTED:" in strings
    raw = folder_bytes(capture.dagster_home)
    for e in entries:
        assert e.secret.encode() not in raw and e.secret not in out and e.secret not in err, (e.name, seed)
    assert plain_content(capture) == ["\n".join(look_alikes)]


@pytest.mark.slow
def test_every_rule_is_redacted_in_files_written_before(capture: Capture, monkeypatch):
    """Files written with redaction off, brought to the current redaction by the pass over stored
    files alone (no capture re-reads the store)."""
    seed = draw_seed()
    entries, look_alikes = write_corpus_store(capture, seed)
    monkeypatch.setenv("HERMES_ASSETS_REDACT_SECRETS", "off")
    assert capture.materialize(DAY).success
    assert any(e.secret in "\n".join(warehouse_strings(capture.warehouse)) for e in entries)
    env = tuple(str(p) for p in [capture.home / ".env"])
    redactor = RedactionConfig(str(capture.dagster_home / "redaction.key"), env).redactor()
    done = stored_files.redact_files(Warehouse(str(capture.warehouse)), redactor)
    assert sum(done.files_rewritten.values()) == 3
    assert_none_in_the_warehouse(capture, entries, seed)
    assert plain_content(capture) == ["\n".join(look_alikes)]
