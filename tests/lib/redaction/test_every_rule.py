"""Every rule's positive is screened in and redacted: on capture and on the pass over stored files.

The column screen is built from the rules (their keywords, or the beginning of their
own regex), so a cell a rule would redact always reaches it. A property test per rule
of the maintained set and per format of ours: positives drawn at run time from the
rule's own regex (:mod:`tests.support.rule_positives`, never committed), each checked
to be a finding of the rule's RE2 program first; then the one-cell screen, the column
screen, the redaction of a text and the redaction of a stored file's column all hold it.
"""

from __future__ import annotations

import os
import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_assets.lib.redaction import assignments, rules
from hermes_assets.lib.redaction.redactor import Redactor, rule_matcher
from hermes_assets.lib.redaction.stored_files import redact_table
from tests.support.rule_positives import positive

MATCHER = rule_matcher()
REDACTOR = Redactor(os.urandom(32))
#: how each drawn positive sits in a cell: in prose, in a config line, in escaped JSON
AROUND = ("see {} here", "x = {}\n", '{{"k": "{}"}}')
PROPERTY = settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def drawn_finding(i: int, rng: random.Random) -> tuple[str, str] | None:
    """A cell holding a positive of rule ``i`` and the secret the rule finds in it (None: no draw found one)."""
    rule = MATCHER.rules[i]
    for _ in range(30):
        text = rng.choice(AROUND).format(positive(rule.regex, rng))
        for f in MATCHER.findings(text):
            if f.rule is rule:
                return text, f.secret
    return None


def assert_redacted_everywhere(text: str, secret: str) -> None:
    assert REDACTOR.screen(text), "the one-cell screen let it pass"
    assert REDACTOR.screen_column([None, "nothing", text]) == [2], "the column screen let it pass"
    assert secret not in REDACTOR.text(text)
    table = pa.table({"session_id": ["s"], "content_text": [text]})
    redacted, cells = redact_table(REDACTOR, table, "hermes_messages")
    assert cells == 1 and secret not in redacted.column("content_text")[0].as_py()


#: the rules a drawn positive is found for in a few tries (others are counted below)
DRAWABLE = [i for i in range(len(MATCHER.rules)) if drawn_finding(i, random.Random(i)) is not None]


@pytest.mark.parametrize("i", DRAWABLE, ids=[MATCHER.rules[i].id for i in DRAWABLE])
@PROPERTY
@given(seed=st.integers(0, 2**32))
def test_every_maintained_rules_positive_is_screened_and_redacted(i: int, seed: int):
    found = drawn_finding(i, random.Random(seed))
    if found is None:  # this draw found none; the rule's own seed did (DRAWABLE)
        found = drawn_finding(i, random.Random(i))
    assert found is not None
    assert_redacted_everywhere(*found)


def test_almost_every_maintained_rule_has_drawn_positives():
    """The draws reach the rules (a rule they cannot reach is named, and rare)."""
    missing = sorted(MATCHER.rules[i].id for i in set(range(len(MATCHER.rules))) - set(DRAWABLE))
    assert len(DRAWABLE) >= 0.95 * len(MATCHER.rules), missing


@pytest.mark.parametrize("pattern", rules.PATTERNS, ids=[p.kind for p in rules.PATTERNS])
@PROPERTY
@given(seed=st.integers(0, 2**32))
def test_every_format_of_ours_is_screened_and_redacted(pattern: rules.Pattern, seed: int):
    rng = random.Random(seed)
    for _ in range(50):
        text = f"see {positive(pattern.regex.pattern, rng)} here"
        m = pattern.regex.search(text)
        if m is None:
            continue
        secret = m.group(pattern.group)
        if pattern.accept is not None and not pattern.accept(secret):
            continue
        if MATCHER.findings(text) or len(secret) < 8:
            continue  # the maintained rules take it: their own test holds it
        assert_redacted_everywhere(text, secret)
        return


def _name(parts: list[str], style: str) -> str:
    if style == "upper":
        return "_".join(parts).upper()
    if style == "camel":
        return parts[0].lower() + "".join(p.capitalize() for p in parts[1:])
    return {"snake": "_", "kebab": "-", "dotted": "."}[style].join(parts)


WORDS = st.sampled_from(["api", "db", "github", "my", "service", "value", "x2", "aws", "prod", "new"])
SECRET = st.sampled_from(["token", "secret", "password", "passwd", "pwd", "credential", "auth", "apikey", "pat", "key"])
NAMES = st.builds(
    lambda before, word, after, style, digit: _name([*before, word, *after], style) + digit,
    st.lists(WORDS, max_size=2),
    SECRET,
    st.lists(WORDS, max_size=1),
    st.sampled_from(["upper", "camel", "snake", "kebab", "dotted"]),
    st.sampled_from(["", "2", "_1"]),
).filter(assignments.name_says_secret)
VALUES = st.text(alphabet="abcdefghjkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=12, max_size=30).map(
    lambda v: v + "7Q"
)


@settings(max_examples=300, deadline=None)
@given(
    name=NAMES, value=VALUES, form=st.sampled_from(["{}={}", '{}="{}"', '"{}": "{}"', "{}: {}", '\\"{}\\": \\"{}\\"'])
)
def test_every_name_that_says_secret_is_screened_in(name: str, value: str, form: str):
    """``API_KEY2=``, ``GITHUB_TOKEN2=``, ``tokenValue=``, ``ApiKeyValue=``: the assignment screen is
    built from the words :func:`name_says_secret` reads, so no such name passes it."""
    text = form.format(name, value)
    assert REDACTOR.screen(text), text
    assert REDACTOR.screen_column([text]) == [0], text
