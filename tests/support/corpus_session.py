"""The turns of the session that holds a secret corpus: its text in every field Hermes keeps text in
after the user's turn.

Shared by the 0.19 corpus test's writer (``tests/defs/test_redaction_corpus.py``) and
``tools/gen_secret_store_v022.py``, which runs in Hermes's own venv: nothing here imports
``hermes_assets`` (only the standard library).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import quote

#: the tool calls' ids: the file written, the URL fetched
WRITE_ID, FETCH_ID = "c_write", "c_fetch"


def corpus_turns(text: str, call: Callable[[str, str, dict], dict]) -> list[tuple[str, str, dict]]:
    """``(role, content, keyword arguments of append_message)`` of each message after the user's turn:
    a reply with its reasoning and two tool calls (``call(id, name, arguments)``: a file written, the
    text JSON in JSON; a URL fetched, the text percent-encoded in it), then their results."""
    calls = [
        call(WRITE_ID, "write_file", {"path": "notes.md", "content": text}),
        call(FETCH_ID, "web_fetch", {"url": "https://search.example/?q=" + quote(text, safe="")}),
    ]
    reasoning = {
        "reasoning": text,
        "reasoning_content": text,
        "reasoning_details": [{"type": "reasoning.text", "text": text}],
    }
    return [
        ("assistant", text, {**reasoning, "tool_calls": calls}),
        ("tool", json.dumps({"output": text, "exit_code": 0}), {"tool_call_id": WRITE_ID, "tool_name": "write_file"}),
        ("tool", text, {"tool_call_id": FETCH_ID, "tool_name": "web_fetch"}),
    ]
