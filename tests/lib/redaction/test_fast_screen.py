"""The column screen's first pass in Hyperscan finds exactly the cells RE2's screen finds.

:class:`~hermes_assets.lib.redaction.fast_screen.ColumnScreen` is compared with
:func:`~hermes_assets.lib.redaction.screen.flagged` (RE2 alone) on columns drawn at run time:
positives of the maintained rules and of our formats, ``.env`` values in their forms, and the
texts where bytes and characters part (a Kelvin sign or a long s for a ``k`` or an ``s``,
characters of two to four bytes inside a bounded gap, matches across two cells), with look-alikes
around them. Its compiled alternatives are kept private, hold no ``.env`` value, and a missing,
unreadable or corrupt copy is compiled again; without Hyperscan, RE2 screens alone.
"""

from __future__ import annotations

import contextlib
import os
import random
import stat
import time
import types

import pyarrow as pa
import pytest
import re2
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hermes_assets.lib.redaction import fast_screen, screen
from hermes_assets.lib.redaction.redactor import Redactor, rule_matcher
from hermes_assets.lib.redaction.rule_matcher import re2_options
from tests.support.rule_positives import positive

#: Hyperscan installs with the project on x86-64 and macOS (pyproject.toml); CI runs there
needs_hyperscan = pytest.mark.skipif(
    fast_screen.hyperscan is None and not os.environ.get("CI"), reason="no Hyperscan wheel for this machine"
)

MATCHER = rule_matcher()
#: a value of Hermes's .env, drawn at run time
ENV_VALUE = "v" + "".join(random.Random(7).choice("abcdefghjkmnpqrstuvwxyz23456789") for _ in range(23))
REDACTOR = Redactor(os.urandom(32), [ENV_VALUE])
#: what sits around a secret: ASCII, and characters of two, three and four bytes
FILLER = ("see ", " here", "é", "日本", "🙂", "\n", '{"k": "', '"}', "\\n", "token ", "KEY", "x" * 40)


def _positives(rng: random.Random) -> str:
    rule = rng.choice(MATCHER.rules)
    return positive(rule.regex, rng)


def _kelvin(text: str) -> str:
    """``text`` with its k and s as the characters RE2's case folding also matches for them."""
    return text.replace("k", "\u212a").replace("K", "\u212a").replace("s", "\u017f").replace("S", "\u017f")


@st.composite
def cells(draw) -> list[str | None]:
    rng = random.Random(draw(st.integers(0, 2**32)))
    out: list[str | None] = []
    for _ in range(draw(st.integers(1, 12))):
        kind = rng.randrange(8)
        if kind == 0:
            out.append(None)
            continue
        if kind in (1, 2):  # a positive of a rule
            body = _positives(rng)
        elif kind == 3:  # a .env value after a name that says secret, or a look-alike of it
            body = rng.choice(("api_key=", "password ", "token: ", "sk-", ENV_VALUE[:-3])) + ENV_VALUE
        elif kind == 4:  # a context rule's name, characters of several bytes, then its value
            body = "scaleway " + rng.choice(("é" * 10, "日" * 18, "🙂" * 5)) + " secret = " + "a1B2c3D4e5" * 2
        elif kind == 5:  # a positive with the characters RE2 folds to k and s
            body = _kelvin(_positives(rng))
        else:  # filler alone, or nothing
            body = "".join(rng.choice(FILLER) for _ in range(rng.randrange(6)))
        out.append(rng.choice(FILLER) + body + rng.choice(FILLER))
    return out


@needs_hyperscan
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(column=cells())
def test_hyperscan_finds_the_cells_re2_finds(column):
    array = pa.array(column, pa.large_string())
    fast = REDACTOR._column_screen
    assert fast.engine == "hyperscan"
    assert fast.flagged(array) == screen.flagged(REDACTOR._screen, array)
    # a slice: its offsets do not start at 0
    if len(array) > 2:
        part = array.slice(1, len(array) - 2)
        assert fast.flagged(part) == screen.flagged(REDACTOR._screen, part)


@needs_hyperscan
def test_a_match_across_two_cells_is_not_a_cells():
    """The end of ``sk-...`` lands in the second cell, its beginning in the first: neither holds it."""
    array = pa.array(["text ending in sk-proj-", "T3BlbkFJ" + "a" * 40, "nothing"], pa.large_string())
    assert REDACTOR._column_screen.flagged(array) == screen.flagged(REDACTOR._screen, array)


@needs_hyperscan
def test_the_kelvin_sign_and_the_long_s_are_read_as_re2_reads_them():
    """RE2 matches a case-insensitive ``k`` and ``s`` with the Kelvin sign and the long s: a keyword
    written with them is a match for both engines."""
    keyword = next(k for r in MATCHER.rules if r.context is None for k in r.keywords if "k" in k or "s" in k)
    column = ["x " + _kelvin(keyword) + " y", "plain text"]
    expected = screen.flagged(REDACTOR._screen, pa.array(column, pa.large_string()))
    assert expected == [0], "RE2 folds the Kelvin sign and the long s"
    assert REDACTOR._column_screen.flagged(pa.array(column, pa.large_string())) == [0]


@needs_hyperscan
def test_a_vertical_tab_in_a_secret_is_read_as_re2_reads_it():
    """RE2's ``\\s`` does not hold the vertical tab (Hyperscan's does): a URL's password with one in
    it is a match of ``[^\\s/@]+`` for RE2, so the Hyperscan pass flags its cell too."""
    password = "".join(random.Random(11).choice("abcdefghjkmnpqrstuvwxyz") for _ in range(6))
    url = "postgres:" + "//" + "svc" + ":" + password[:3] + "\x0b" + password[3:] + "@" + "db.internal:5432/x"
    column = pa.array(["connect to " + url, "plain text"], pa.large_string())
    assert screen.flagged(REDACTOR._screen, column) == [0], "RE2 reads the password as one"
    assert REDACTOR._column_screen.engine == "hyperscan"
    assert REDACTOR._column_screen.flagged(column) == [0]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("a.b", "a.{1,4}b"),
        ("a[^x]{8}", "a[^x]{8,32}"),
        ("a.{0,20}?b", "a.{0,80}?b"),
        ("a[^x]?b", "a[^x]{0,4}b"),
        ("a\\S{3,}b", "a[^\\t\\n\\f\\r ]{3,}b"),
        ("a\\s+b", "a[\\t\\n\\f\\r ]+b"),
        ("x[^\\s]y", "x[^\\t\\n\\f\\r ]{1,4}y"),
        ("x[a\\S]{3}y", "x[a\\S\\v]{3,12}y"),
        ("x[\\\\s]y", "x[\\\\s]y"),
        ("x[^y]+z", "x[^y]+z"),
        ("[A-Z]{8}b", "[A-Z]{8}b"),
        ("\\x{24}ab[\\x{80}-\\x{ff}]", "\\x{24}ab[\\x{80}-\\x{ff}]{1,4}"),
        ("^a", None),
        ("(?i)a", None),
    ],
)
def test_an_alternative_reads_as_many_bytes_as_re2_reads_characters(pattern, expected):
    assert fast_screen.for_bytes(pattern) == expected


@needs_hyperscan
@pytest.mark.parametrize(
    "pattern", ["a.b", "a[^x]{3}b", "k.{0,4}?z", "q\\S{2}r", "q[^\\s]{2}r", "q[\\Sz]{2}r", "q\\s\\sr"]
)
@settings(max_examples=40, deadline=None)
@given(middle=st.text(min_size=0, max_size=6))
@example(middle="0\x0b")  # RE2's \S holds the vertical tab, Hyperscan's does not
@example(middle="\x0b\x0b")
def test_a_relaxed_alternative_matches_wherever_re2_does(pattern, middle):
    """Whatever characters sit in a gap, Hyperscan's reading of the alternative still matches the
    text RE2 matches."""
    text = pattern[0] + middle + pattern[-1]
    options = re2_options()
    if re2.compile(pattern.encode(), options).search(text.encode("utf-8", "surrogatepass")) is None:
        return
    db = fast_screen.hyperscan.Database()
    db.compile(expressions=[fast_screen.for_bytes(pattern).encode()], flags=0)
    data = text.encode("utf-8", "surrogatepass")
    one_cell = memoryview(pa.array([0, len(data)], pa.int64()).buffers()[1]).cast("q")
    ends = fast_screen._Ends(one_cell, 0)
    with contextlib.suppress(fast_screen.hyperscan.ScanTerminated):
        db.scan(data, match_event_handler=ends.match)
    assert ends.cells, (pattern, text)


def _fresh(monkeypatch, cache_dir, values=()) -> fast_screen.ColumnScreen:
    monkeypatch.setattr(fast_screen, "_compiled", {})
    parts = screen.hyperscan_parts(MATCHER)
    program = re2.compile(screen.screen_pattern(MATCHER, list(values)).encode(), re2_options())
    return fast_screen.ColumnScreen(program, parts, screen.env_literals(list(values)), str(cache_dir))


@needs_hyperscan
def test_the_compiled_screen_is_kept_private_and_holds_no_env_value(tmp_path, monkeypatch):
    screen_ = _fresh(monkeypatch, tmp_path, [ENV_VALUE])
    assert screen_.engine == "hyperscan"
    (kept,) = (tmp_path / "redaction-rules").glob("screen-*.hs")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "redaction-rules").stat().st_mode) == 0o700
    data = kept.read_bytes()
    assert ENV_VALUE.encode() not in data and ENV_VALUE[:12].encode() not in data
    assert screen_.flagged(pa.array(["x " + ENV_VALUE + " y", "z"], pa.large_string())) == [0]


@needs_hyperscan
def test_a_kept_screen_is_read_not_compiled(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path)
    compiled = []

    def database(**kw):  # a database made here is one compiled
        compiled.append(kw)
        return real.Database(**kw)

    real = fast_screen.hyperscan
    monkeypatch.setattr(fast_screen, "hyperscan", types.SimpleNamespace(**{**vars(real), "Database": database}))
    again = _fresh(monkeypatch, tmp_path)
    assert compiled == [] and again.engine == "hyperscan"
    column = pa.array(["my api_key = " + "Ab3" * 8, "hello"], pa.large_string())
    assert again.flagged(column) == screen.flagged(again.program, column) == [0]


@needs_hyperscan
def test_a_corrupt_kept_screen_is_compiled_again(tmp_path, monkeypatch):
    _fresh(monkeypatch, tmp_path)
    (kept,) = (tmp_path / "redaction-rules").glob("screen-*.hs")
    kept.write_bytes(b"not a database")
    again = _fresh(monkeypatch, tmp_path)
    assert again.engine == "hyperscan"
    assert kept.read_bytes() != b"not a database"
    column = pa.array(["password: " + "Zz9" * 5, "hello"], pa.large_string())
    assert again.flagged(column) == screen.flagged(again.program, column) == [0]


def test_without_hyperscan_re2_screens_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(fast_screen, "hyperscan", None)
    alone = _fresh(monkeypatch, tmp_path)
    assert alone.engine == "re2"
    column = pa.array(["token = " + "Qq7" * 6, "hello", None], pa.large_string())
    assert alone.flagged(column) == screen.flagged(alone.program, column) == [0]
    assert not (tmp_path / "redaction-rules").exists()


@needs_hyperscan
@pytest.mark.parametrize("unit", ["sk-", "token ", "curl ", "api_key=", "-----BEGIN PRIVATE KEY-----", "é scaleway "])
def test_a_hostile_cell_of_near_matches_is_screened_in_under_a_second(unit):
    """5 MB of one keyword or name again and again: the search stops in the cell and resumes after it."""
    cell = unit * (5_000_000 // len(unit.encode()))
    column = pa.array(["before", cell, "after " + unit], pa.large_string())
    started = time.process_time()
    found = REDACTOR._column_screen.flagged(column)
    assert time.process_time() - started < 1.0
    assert found == screen.flagged(REDACTOR._screen, column)
