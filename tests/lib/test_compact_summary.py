"""SPEC D2: ``is_compact_summary`` is what Hermes's own detector calls a summary.

Every content is built from hermes-agent's own constants and helpers (never a
copy of their text), stored the way ``SessionDB`` stores it, and the flag we
compute on the stored cell is held against
``ContextCompressor._is_context_summary_content`` on what ``SessionDB`` reads
back, as Hermes's loop sees it.
"""

from __future__ import annotations

import pytest
from agent.context_compressor import (
    _HISTORICAL_SUMMARY_PREFIXES,
    _MERGED_PRIOR_CONTEXT_HEADER,
    _MERGED_SUMMARY_DELIMITER,
    _SUMMARY_END_MARKER,
    LEGACY_SUMMARY_PREFIX,
    SUMMARY_PREFIX,
    ContextCompressor,
    _append_text_to_content,
)
from hermes_state import SessionDB

from hermes_assets.lib.projection.content import MERGED_SUMMARY_DELIMITER, is_compact_summary
from tests.support.project import project_store

BODY = "## Active Task\nrename the config loader\n## Done\nread settings.py"


def standalone(prefix: str = SUMMARY_PREFIX, body: str = BODY) -> str:
    """A standalone summary message, as ``compress()`` inserts it."""
    return f"{prefix}\n{body}\n\n{_SUMMARY_END_MARKER}"


def merged(old_content, summary: str):
    """The first tail message with the summary merged into it, exactly as ``compress()`` builds it."""
    suffix = "\n\n" + _MERGED_SUMMARY_DELIMITER + "\n\n" + summary + "\n\n" + _SUMMARY_END_MARKER
    return _append_text_to_content(
        _append_text_to_content(old_content, suffix, prepend=False),
        _MERGED_PRIOR_CONTEXT_HEADER + "\n",
        prepend=True,
    )


MULTIMODAL = [
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    {"type": "text", "text": "what is on this screenshot?"},
]

CASES = {
    # summaries
    "plain": standalone(),
    "plain, bare prefix": SUMMARY_PREFIX,
    "legacy": f"{LEGACY_SUMMARY_PREFIX} {BODY}",
    **{f"historical prefix {i}": standalone(p) for i, p in enumerate(_HISTORICAL_SUMMARY_PREFIXES)},
    "leading whitespace": "\n \t " + standalone(),
    "merged": merged("please run the tests again", SUMMARY_PREFIX + "\n" + BODY),
    "merged, legacy summary": merged("run the tests", f"{LEGACY_SUMMARY_PREFIX} {BODY}"),
    "merged, old text quoting a summary": merged(standalone(), SUMMARY_PREFIX + "\n" + BODY),
    "merged, whitespace before everything": "  \n" + merged("again", SUMMARY_PREFIX),
    "merged, two delimiters": merged("a", SUMMARY_PREFIX + "\n" + _MERGED_SUMMARY_DELIMITER + "\nquoted"),
    "envelope, merged into multimodal content": merged(MULTIMODAL, SUMMARY_PREFIX + "\n" + BODY),
    "envelope, text part first": [{"type": "text", "text": standalone()}, MULTIMODAL[0]],
    "envelope, image part first": [MULTIMODAL[0], {"type": "text", "text": "  " + standalone()}],
    "envelope, empty text part first": [{"type": "text", "text": ""}, {"type": "text", "text": standalone()}],
    # not summaries
    "plain text": "please summarise the context of this repo",
    "prefix quoted mid-text": "the log said: " + standalone(),
    "prefix lower case": standalone().lower(),
    "legacy prefix without its colon": LEGACY_SUMMARY_PREFIX.rstrip(":") + " " + BODY,
    "delimiter, plain text after it": merged("run the tests", "no summary here"),
    "delimiter, summary only before it": standalone() + "\n" + _MERGED_SUMMARY_DELIMITER + "\nplain",
    "prior-context header, no delimiter": _MERGED_PRIOR_CONTEXT_HEADER + "\n" + standalone(),
    "delimiter alone": _MERGED_SUMMARY_DELIMITER,
    "end marker alone": _SUMMARY_END_MARKER,
    "envelope, multimodal, no summary": MULTIMODAL,
    "envelope, summary quoted in a second part": [
        {"type": "text", "text": "see:"},
        {"type": "text", "text": standalone()},
    ],
    "envelope, delimiter then plain text": merged(MULTIMODAL, "plain"),
    "malformed envelope": SessionDB._CONTENT_JSON_PREFIX + "[" + standalone(),
    "empty": "",
    "none": None,
}


@pytest.mark.parametrize("name", CASES)
def test_flag_agrees_with_hermes_detector(name):
    stored = SessionDB._encode_content(CASES[name])  # the cell as Hermes writes it
    hermes = ContextCompressor._is_context_summary_content(SessionDB._decode_content(stored))
    assert is_compact_summary(stored) is hermes, (name, hermes)


def test_cases_cover_both_answers_and_every_shape():
    stored = {n: SessionDB._encode_content(c) for n, c in CASES.items()}
    answers = {
        n: ContextCompressor._is_context_summary_content(SessionDB._decode_content(s)) for n, s in stored.items()
    }
    assert sum(answers.values()) >= 10 and sum(not a for a in answers.values()) >= 10
    envelopes = [n for n, s in stored.items() if isinstance(s, str) and s.startswith(SessionDB._CONTENT_JSON_PREFIX)]
    assert any(answers[n] for n in envelopes) and any(not answers[n] for n in envelopes)
    assert any(_MERGED_SUMMARY_DELIMITER in (s or "") and answers[n] for n, s in stored.items())


def test_our_delimiter_is_hermes_delimiter():
    assert MERGED_SUMMARY_DELIMITER == _MERGED_SUMMARY_DELIMITER


@pytest.mark.parametrize(
    "content", ["[CONTEXT COMPACTION] earlier turns were summarised", "[CONTEXT COMPACTION — an older wording"]
)
def test_spec_prefix_is_wider_than_hermes_0_19_own_list(content):
    """D2 flags any ``[CONTEXT COMPACTION`` start, so summaries of wordings Hermes no
    longer lists (it only knows the current and three historical ones) stay flagged."""
    assert not ContextCompressor._is_context_summary_content(content)
    assert is_compact_summary(content)
    assert is_compact_summary(merged("again", content))


def test_merged_summary_of_an_in_place_compaction_is_flagged(hermes_db):
    """The projection uses the rule: head ends on an assistant turn, the tail starts on a user
    turn, so Hermes merges the summary into that user message (``archive_and_compact``)."""
    w = hermes_db
    w.session("s", "cli")
    w.msg("s", "user", "first question")
    w.msg("s", "assistant", "first answer")
    w.msg("s", "user", "second question")
    w.msg("s", "assistant", "second answer")
    w.tick()
    summary_row = merged("third question", SUMMARY_PREFIX + "\n" + BODY)
    w.db.archive_and_compact(
        "s",
        [
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": summary_row},
        ],
    )
    w.msg("s", "assistant", "third answer")
    got = project_store(w.path).session_rows("s")
    assert [
        (r["content_text"], r["is_compact_summary"]) for r in got if r["attributes"]["hermes"].get("active") is None
    ] == [
        ("first question", None),
        ("first answer", None),
        (summary_row, True),
        ("third answer", None),
    ]
    assert not any(r["is_compact_summary"] for r in got if r["attributes"]["hermes"].get("compacted"))
