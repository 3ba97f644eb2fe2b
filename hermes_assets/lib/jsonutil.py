"""JSON as the datasets write and read it (SPEC §5.5 "JSON numbers").

Written compact, non-ASCII raw (no ``\\u`` escapes), an integral float as an
integer (``0.0`` -> ``0``). Read strictly: ``NaN`` and ``Infinity`` are not
JSON, an escaped lone surrogate becomes U+FFFD, and an integral float comes
back as an integer, so what :func:`loads` returns is written by :func:`dumps`
without another pass. The projection and the warehouse's retention both use
these, so a row's attributes read back exactly as they were written.
"""

from __future__ import annotations

import json
import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def _reject_constant(name):
    raise ValueError(f"non-standard JSON constant {name}")


def _parse_float(text: str):
    """Integral floats become integers at parse time (SPEC §5.5); inf is not JSON."""
    value = float(text)
    if value.is_integer():
        return int(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("non-finite number")
    return value


_DECODE = json.JSONDecoder(parse_float=_parse_float, parse_constant=_reject_constant).decode
_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
#: JSON as a JSON column keeps it: no NaN/Infinity constants (an overflowing number is still JSON)
_VALIDATE = json.JSONDecoder(parse_constant=_reject_constant).decode


def loads(text: str):
    """Strict JSON: NaN/Infinity are not JSON; surrogate escapes become U+FFFD;
    integral floats come back as integers, so the result needs no normalizing."""
    value = _DECODE(text)
    if "\\u" in text:
        value = _scrub(value)
    return value


def dumps(value, *, normalized: bool = False) -> str:
    """Compact, raw non-ASCII, integral floats as integers (``normalized``: the
    value came from :func:`loads` or :func:`normalize` and is already so)."""
    return _DUMPS(value if normalized else normalize(value))


def normalize(value):
    """``value`` with every integral float an integer (SPEC §5.5), as :func:`dumps` writes it."""
    if type(value) is float:
        return int(value) if value.is_integer() else value
    if type(value) is dict:
        return {k: normalize(v) for k, v in value.items()}
    if type(value) is list:
        return [normalize(v) for v in value]
    return value


def quote(text: str) -> str:
    """A string as a JSON string (raw non-ASCII)."""
    if text.isascii() and text.isalnum():  # ids, uids, kinds: nothing to escape
        return f'"{text}"'
    return json.dumps(text, ensure_ascii=False)


def is_json(text: str) -> bool:
    """Whether ``text`` is one JSON value (strict: no ``NaN``/``Infinity`` constants)."""
    try:
        _VALIDATE(text)
    except (ValueError, RecursionError):
        return False
    return True


def _scrub(value):
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if type(value) is dict:
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if type(value) is list:
        return [_scrub(v) for v in value]
    return value
