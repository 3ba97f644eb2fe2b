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
from collections.abc import Callable
from typing import Any, NoReturn

_SURROGATE = re.compile("[\ud800-\udfff]")


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"non-standard JSON constant {name}")


def _parse_float(text: str) -> int | float:
    """Integral floats become integers at parse time (SPEC §5.5); inf is not JSON."""
    value = float(text)
    if value.is_integer():
        return int(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("non-finite number")
    return value


def _decoding(decoder: json.JSONDecoder) -> Callable[[str], Any]:
    """``decoder.decode``, straight to its C scanner when the text is one JSON value with no
    whitespace around it (what a writer stores: a tool call, an envelope); any other text
    (whitespace around the value, data after it, not JSON) goes through ``decode`` itself, so
    every value and every error is decode's. Saves decode's Python steps (two regex matches,
    ``raw_decode``) on each of the many small cells the projection reads."""
    scan = decoder.scan_once  # type: ignore[attr-defined]  # set by JSONDecoder.__init__, untyped in typeshed
    decode = decoder.decode

    def decoded(text: str) -> Any:
        try:
            value, end = scan(text, 0)
        except StopIteration:
            return decode(text)
        return value if end == len(text) else decode(text)

    return decoded


_DECODE = _decoding(json.JSONDecoder(parse_float=_parse_float, parse_constant=_reject_constant))
_PYTHON_DECODE = _decoding(json.JSONDecoder())


def python_loads(text: str) -> Any:
    """:func:`json.loads` (its values and its errors: Python's JSON, ``NaN`` and big integers
    included), a text without decode's Python steps: the analytics read cells as Hermes's own
    report does, many small ones a day."""
    return _PYTHON_DECODE(text) if type(text) is str else json.loads(text)


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
#: the encoder's C core, made once: ``JSONEncoder.encode`` builds it again on every call, a
#: cost paid per row on the hot path. Same arguments as ``encode`` passes, so the same text;
#: no circular-reference check (``markers=None``): these values come from JSON or our own dicts.
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # untyped in typeshed
_C_ENCODE = (
    _C_MAKE_ENCODER(
        None,
        _ENCODER.default,
        json.encoder.encode_basestring,  # ensure_ascii=False
        _ENCODER.indent,
        _ENCODER.key_separator,
        _ENCODER.item_separator,
        _ENCODER.sort_keys,
        _ENCODER.skipkeys,
        _ENCODER.allow_nan,
    )
    if _C_MAKE_ENCODER is not None
    else None
)


def _encode(value: object) -> str:
    if _C_ENCODE is None:  # a Python without the C accelerator
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


#: JSON as a JSON column keeps it: no NaN/Infinity constants (an overflowing number is still JSON)
_VALIDATE = _decoding(json.JSONDecoder(parse_constant=_reject_constant))


def loads(text: str) -> Any:
    """Strict JSON: NaN/Infinity are not JSON; surrogate escapes become U+FFFD;
    integral floats come back as integers, so the result needs no normalizing."""
    value = _DECODE(text)
    if "\\u" in text:
        value = _scrub(value)
    return value


def dumps(value: Any, *, normalized: bool = False) -> str:
    """Compact, raw non-ASCII, integral floats as integers (``normalized``: the
    value came from :func:`loads` or :func:`normalize` and is already so)."""
    return _encode(value if normalized else normalize(value))


def normalize(value: Any) -> Any:
    """``value`` with every integral float an integer (SPEC §5.5), as :func:`dumps` writes it."""
    if type(value) is float:
        return int(value) if value.is_integer() else value
    if type(value) is dict:
        return {k: normalize(v) for k, v in value.items()}
    if type(value) is list:
        return [normalize(v) for v in value]
    return value


def quote(text: str) -> str:
    """A string as a JSON string (raw non-ASCII): the C function ``json.dumps(text,
    ensure_ascii=False)`` ends in, without building an encoder per call (once per session
    and per marked row on the projection's hot path)."""
    return _QUOTE(text)


_QUOTE = json.encoder.encode_basestring


def is_json(text: str) -> bool:
    """Whether ``text`` is one JSON value (strict: no ``NaN``/``Infinity`` constants)."""
    try:
        _VALIDATE(text)
    except (ValueError, RecursionError):
        return False
    return True


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if type(value) is dict:
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if type(value) is list:
        return [_scrub(v) for v in value]
    return value
