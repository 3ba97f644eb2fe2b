"""Each marker the redactor writes is reported where it was: field, JSON path, session, message,
the provider's prefix and the last four characters; never the secret."""

from __future__ import annotations

import json
import os
import string
from types import SimpleNamespace

from hermes_assets.lib.redaction import session_cells
from hermes_assets.lib.redaction.redactor import Redactor
from hermes_assets.lib.redaction.sightings import Where
from hermes_assets.lib.warehouse.datasets import Warehouse
from tests.lib.redaction.test_redactor import MARKER, chars, fake
from tests.lib.redaction.test_stored_files import capture_off
from tests.support.capture_run import capture_days


def test_a_sighting_names_the_marker_the_cell_and_what_recognises_the_key():
    r = Redactor(os.urandom(32))
    token, value = fake("github_token"), chars(24)
    r.where = Where("messages.tool_calls", "s1", "7", "home")
    args = json.dumps({"env": {"GH_TOKEN": token}, "command": f"export DB_PASSWORD={value}"})
    out = r.text(json.dumps([{"function": {"name": "terminal", "arguments": args}}]))
    seen = r.take_sightings()
    assert sorted(MARKER.findall(out)) == sorted(tuple(s.marker[len("[REDACTED:") : -1].split(":")) for s in seen)
    for s in seen:
        assert (s.field, s.session_id, s.message_id, s.store) == ("messages.tool_calls", "s1", "7", "home")
        assert s.path.startswith("$[*].function.arguments")
    paths = {s.path for s in seen}
    assert paths == {"$[*].function.arguments.env.GH_TOKEN", "$[*].function.arguments.command"}
    assert not r.take_sightings(), "taken once"
    assert token not in repr(seen) and value not in repr(seen)


def test_the_prefix_is_the_providers_and_the_last_four_are_the_keys():
    r = Redactor(os.urandom(32))
    token = fake("github_token")
    r.text(f"my token {token} .")
    (seen,) = r.take_sightings()
    assert (seen.kind, seen.prefix, seen.last4, seen.path) == (r.rules.kind_of(token), token[:4], token[-4:], "")
    # a secret with no literal prefix, and a short one: no prefix, no last four
    short = chars(10, string.ascii_letters + string.digits)
    r.text(f"PASSWORD={short}")
    (seen,) = r.take_sightings()
    assert (seen.kind, seen.prefix, seen.last4) == ("secret_assignment", "", "")


def test_a_bundles_sightings_name_table_column_session_and_message():
    r = Redactor(os.urandom(32))
    secret = fake("openai_api_key")
    session = {"id": "s1", "system_prompt": f"use {secret}"}
    message = {"id": 7, "session_id": "s1", "content": f"k {secret}"}
    bundle = SimpleNamespace(session=session, messages=[message], usage=[], extras=None, message_extras={7: (secret,)})
    found = session_cells.redact_bundles(r, [bundle], store="home")
    where = sorted((s.field, s.session_id, s.message_id, s.store) for s in found.sightings)
    assert where == [
        ("messages.content", "s1", "7", "home"),
        ("messages.extra_columns", "s1", "7", "home"),
        ("sessions.system_prompt", "s1", None, "home"),
    ]
    assert {s.marker for s in found.sightings} == {MARKER.search(session["system_prompt"]).group(0)}


def test_a_run_carries_the_sightings_of_its_days(secret_store, tmp_path):
    db, keys = secret_store
    run, _ = capture_days([db], Warehouse(str(tmp_path / "wh")))
    seen = run.sightings()
    assert {s.field for s in seen} == {"messages.content", "messages.tool_calls"}
    assert {s.session_id for s in seen} == {"s1"} and all(s.message_id for s in seen)
    assert {(s.prefix, s.last4) for s in seen if s.kind.startswith("github")} == {
        (keys["github"][:4], keys["github"][-4:])
    }
    assert not any(k in repr(seen) for k in keys.values())


def test_the_pass_over_stored_files_reports_the_dataset_column_and_row(secret_store, tmp_path):
    db, keys = secret_store
    wh = Warehouse(str(tmp_path / "wh"))
    capture_off(db, wh)
    run, _ = capture_days([db], wh)
    assert run.files_redacted is not None
    seen = run.files_redacted.sightings
    fields = {s.field for s in seen}
    assert {
        "hermes_messages.content",
        "hermes_messages.content_text",
        "ai_gateway_messages_hermes.content_text",
    } <= fields
    assert all(s.session_id and s.session_id.endswith("s1") and s.message_id for s in seen)
    captured = run.sightings()
    assert seen == captured[: len(seen)]
    # the store's label, as the capture of the day's cells names it
    assert {s.store for s in seen if s.field.startswith("hermes_")} == {s.store for s in captured[len(seen) :]}
    assert not any(k in repr(seen) for k in keys.values())
