"""The encodings a cell's text really holds a secret in, decoded, and a secret's forms in each.

A tool call's arguments are JSON inside JSON (escaped once or twice), a tool's output
is often JSON with its newlines escaped (and may be cut short, or follow a warning
line: not valid JSON), a query string is URL-encoded. :func:`views` decodes a cell's
text every way it may hold a secret written in another (JSON escapes once and twice,
whether or not the text parses; percent-encoding), as UTF-8 bytes; what the rules
find in a view is redacted in the cell as written, where :meth:`View.written_at` says it is. :func:`literal_forms` gives the forms a
known value (a ``.env`` value) takes: as is, JSON-escaped once and twice,
URL-encoded, and in base64 at each of its three alignments.

Decoding is C-speed replacement (a ``\\uXXXX`` escape or a ``%XX`` one is one
substitution each): linear in the text's length.
"""

from __future__ import annotations

import base64
import bisect
import json
import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import accumulate

#: a JSON ``\\uXXXX`` escape (a surrogate pair as one)
_JSON_U = re.compile(rb"\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})|\\u([0-9a-fA-F]{4})")
_JSON_SIMPLE = ((b'\\"', b'"'), (b"\\/", b"/"), (b"\\n", b"\n"), (b"\\r", b"\r"), (b"\\t", b"\t"))
_JSON_RARE = ((b"\\b", b"\b"), (b"\\f", b"\f"))
_PERCENT = re.compile(rb"%[0-9A-Fa-f]{2}")
#: the shortest base64 core of a value held (shorter cores are words of other base64)
MIN_BASE64_CORE = 12


#: the escapes :func:`json_unescape` decodes, as a scan from the left reads them
_JSON_ESCAPE = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}|\\u[0-9a-fA-F]{4}|\\[\"/nrtbf]"
)


@dataclass
class View:
    """A cell's text decoded one way: its bytes, and where each of its positions is written in the
    text it was decoded from (``source``; ``parent``: that text's own view, for a text decoded twice)."""

    name: str
    data: bytes
    source: bytes
    escape: re.Pattern[bytes]
    decode: Callable[[bytes], bytes]
    parent: View | None = None
    #: how many decodings part it from the text as written
    depth: int = 1
    _map: tuple[list[int], list[int]] | None = field(default=None, repr=False)

    @property
    def lineage(self) -> tuple[str, ...]:
        """The views it was decoded through, from the text as written (``("json", "json2")``): a view
        decodes further only the views its lineage begins with (a JSON view never decodes a
        percent-escape)."""
        return (*(self.parent.lineage if self.parent is not None else ()), self.name)

    def written_at(self, pos: int) -> int:
        """Where the character at ``pos`` of this view (or its end) is in the cell as written."""
        if self._map is None:
            self._map = _boundaries(self.source, self.escape, self.decode)
        decoded, source = self._map
        k = bisect.bisect_right(decoded, pos) - 1
        at = source[k] + (pos - decoded[k])
        return self.parent.written_at(at) if self.parent is not None else at


def _boundaries(
    source: bytes, escape: re.Pattern[bytes], decode: Callable[[bytes], bytes]
) -> tuple[list[int], list[int]]:
    """Each escape of ``source``: where it begins and ends, in the decoded text and in ``source``
    (C-speed: the text between escapes and the escapes are split apart once, their lengths summed)."""
    between = escape.split(source)  # (no group in an escape's pattern: the texts around the escapes)
    escapes = escape.findall(source)
    if not escapes:
        return [0], [0]
    widths = {e: len(decode(e)) for e in set(escapes)}  # an escape's decoded length (a cell repeats a few)
    written = [0] * (2 * len(escapes))
    decoded = written.copy()
    written[0::2] = decoded[0::2] = list(map(len, between[:-1]))
    written[1::2] = list(map(len, escapes))
    decoded[1::2] = list(map(widths.__getitem__, escapes))
    return [0, *accumulate(decoded)], [0, *accumulate(written)]


def _u(m: re.Match[bytes]) -> bytes:
    if m.group(3) is not None:
        return chr(int(m.group(3), 16)).encode("utf-8", "surrogatepass")
    high, low = int(m.group(1), 16), int(m.group(2), 16)
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)).encode("utf-8")


def json_unescape(data: bytes) -> bytes:
    """``data`` with its JSON string escapes decoded once, wherever they are (a text that is not
    JSON, or cut short, too); an escape JSON does not know is kept as written."""
    if b"\\" not in data:
        return data
    hold = next(h for h in (b"\x00", b"\x01", b"\x02", b"\x03", b"\x1e\x1f\x1e") if h not in data)
    out = data.replace(b"\\\\", hold)  # an escaped backslash is not the start of an escape
    if b"\\u" in out:
        out = _JSON_U.sub(_u, out)
    for escaped, char in _JSON_SIMPLE:
        if escaped in out:
            out = out.replace(escaped, char)
    if b"\\b" in out or b"\\f" in out:
        for escaped, char in _JSON_RARE:
            out = out.replace(escaped, char)
    return out.replace(hold, b"\\")


#: every percent-escape (either case of hex) -> its byte
_PERCENT_BYTES = {
    f"%{a}{b}".encode(): bytes([int(a + b, 16)]) for a in "0123456789abcdefABCDEF" for b in "0123456789abcdefABCDEF"
}


def url_unquote(data: bytes) -> bytes:
    """``data`` with its percent-escapes decoded (``+`` kept: a token holds it), at C speed: the texts
    between the escapes and the escapes' bytes joined."""
    escapes = _PERCENT.findall(data)
    if not escapes:
        return data
    pieces: list[bytes] = _PERCENT.split(data)
    out = [b""] * (2 * len(escapes) + 1)
    out[0::2] = pieces
    out[1::2] = list(map(_PERCENT_BYTES.__getitem__, escapes))
    return b"".join(out)


def json_forms(secret: str) -> set[str]:
    """The ways a JSON writer escapes ``secret`` in a string (``/`` as is or ``\\/``, non-ASCII as is or
    ``\\uXXXX``)."""
    forms = {json.dumps(secret, ensure_ascii=False)[1:-1], json.dumps(secret)[1:-1]}
    return forms | {f.replace("/", "\\/") for f in forms if "/" in f}


def url_forms(secret: str) -> set[str]:
    """The ways ``secret`` is percent-encoded (every reserved character, or a path's, or a form's;
    upper- or lower-case hex)."""
    forms = {
        secret,
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote(secret, safe="/:@"),
        urllib.parse.quote_plus(secret, safe=""),
    }
    return forms | {_PERCENT.sub(lambda m: m.group(0).lower(), f.encode()).decode() for f in forms if "%" in f}


def _twice(secret: str) -> set[str]:
    return {twice for once in json_forms(secret) for twice in json_forms(once)}


#: an escape that may hide a secret's characters (an escaped backslash, slash, a ``\\uXXXX``): the
#: others (a newline, a tab, a quote) only ever end a secret, and every rule ends one there as written
DEEP_ESCAPE = re.compile(rb"\\[\\/ubf]")


def views(data: bytes, *, json: bool = True) -> list[View]:
    """The decoded views of a cell's text (its bytes as written excluded): JSON escapes decoded once
    and twice (``json``), percent-escapes decoded; a view only when it differs from what it was
    decoded from."""
    out: list[View] = []
    if json and b"\\" in data:
        once = json_unescape(data)
        if once != data:
            first = View("json", once, data, _JSON_ESCAPE, json_unescape)
            out.append(first)
            twice = json_unescape(once) if b"\\" in once else once
            if twice != once:
                out.append(View("json2", twice, once, _JSON_ESCAPE, json_unescape, first, 2))
    if b"%" in data and _PERCENT.search(data):
        out.append(View("url", url_unquote(data), data, _PERCENT, url_unquote))
    return out


def base64_cores(value: str) -> set[str]:
    """The base64 characters ``value``'s bytes alone decide, at each of the three alignments it may
    sit at inside a longer base64 text (standard and URL-safe alphabets), of
    :data:`MIN_BASE64_CORE` characters or more."""
    raw = value.encode("utf-8", "surrogatepass")
    cores: set[str] = set()
    for a in range(3):
        encoded = base64.b64encode(b"\0" * a + raw).decode()
        core = encoded[-(-8 * a // 6) : (8 * a + 8 * len(raw)) // 6]
        if len(core) >= MIN_BASE64_CORE:
            cores |= {core, core.replace("+", "-").replace("/", "_")}
    return cores


def literal_forms(value: str) -> dict[str, str]:
    """Every form ``value`` may be written in (-> ``value``): as is, JSON-escaped once and twice,
    URL-encoded, and its base64 cores."""
    forms = {value} | json_forms(value) | _twice(value) | url_forms(value) | base64_cores(value)
    return {f: value for f in forms if f}
