"""Private keys: PEM blocks, whole or cut short, and the same blocks in base64.

:func:`pem_blocks` finds the spans of a text's private-key blocks (RFC 7468: PKCS#1,
PKCS#8, OpenSSH, PGP), in one pass over its ``-----END`` lines and one RE2 match
per header. A key in base64 (a Kubernetes secret's ``tls.key``, ``base64 id_rsa``)
is a run of base64 holding the encoding of ``-----BEGIN`` at one of its three
alignments, whose decoding holds ``PRIVATE KEY``. Both work on UTF-8 bytes and are
linear in the text's length.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import re
from typing import Any

import re2  # type: ignore[import-untyped]

from hermes_assets.lib.redaction.rule_matcher import all_spans, re2_options, search_spans

_HEADER = r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_END = r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
#: the body of a block cut short: its base64 lines and headers, to the last of them
_BODY = r"(?:(?:\\[nr]|\s)*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]{1,30}: [^\n\\]{0,200}))*"
_SPACE = r"(?:\\[nr]|\s)*"
#: a header, after the blocks that run into it (each a header, its body and its footer, nothing but
#: spaces between them): one match for a run of blocks (no group: RE2's DFA alone finds it)
_BEGIN = r"(?:" + _HEADER + _BODY + r"(?:" + _SPACE + _END + r")?" + _SPACE + r")*" + _HEADER
#: between two blocks of one run (consecutive blocks are one secret: a bounded number of markers)
GAP = re.compile(rb"(?:\\[nr]|\s)*")
#: the longest block taken whole (a 16384-bit RSA key is under 13 KB of PEM)
PEM_MAX = 65536

#: ``-----BEGIN`` in base64, at each of the three alignments (the characters its bytes alone decide)
B64_BEGIN = tuple(
    base64.b64encode(b"\0" * a + b"-----BEGIN").decode()[-(-8 * a // 6) : (8 * a + 80) // 6] for a in range(3)
)
#: what every private key found here holds (the column screen)
PEM_SCREEN = "PRIVATE KEY|" + "|".join(B64_BEGIN)
#: a base64 run holding one of them: its line, and the lines that continue it (wrapped at 64 or 76)
_B64_RUN = (
    r"[A-Za-z0-9+/]*(?:"
    + "|".join(B64_BEGIN)
    + r")[A-Za-z0-9+/]*={0,2}(?:(?:\\r|\\n|\r|\n)[A-Za-z0-9+/]{16,}={0,2})*(?:(?:\\r|\\n|\r|\n)[A-Za-z0-9+/]{1,15}={1,2})?"
)
_B64_WRAP = re.compile(rb"\\[rn]|[\r\n]")

_programs: dict[str, object] = {}


def _re2(pattern: str) -> Any:
    program = _programs.get(pattern)
    if program is None:
        program = _programs[pattern] = re2.compile(pattern.encode(), re2_options())
    return program


def pem_blocks(data: bytes) -> list[tuple[int, int]]:
    """The spans of the private keys of ``data``: PEM blocks (from ``-----BEGIN ... PRIVATE KEY-----``
    to the first ``-----END`` after it, within :data:`PEM_MAX` bytes, when it ends a private key;
    else to the last base64 line that follows: a block cut short), consecutive blocks as one span,
    and private keys in base64. A header with no body holds no key: it is kept."""
    spans: list[tuple[int, int]] = []
    if b"PRIVATE KEY" in data:
        spans = _pem(data)
    if any(core.encode() in data for core in B64_BEGIN):
        spans = sorted(spans + [s for s in _base64_keys(data) if not _overlaps(spans, s)])
    return spans


def _pem(data: bytes) -> list[tuple[int, int]]:
    ends: list[int] = []
    at = data.find(b"-----END")
    while at >= 0:
        ends.append(at)
        at = data.find(b"-----END", at + 8)
    begin, end, body = _re2(_BEGIN), _re2(_END), _re2(_BODY)
    spans: list[tuple[int, int]] = []
    done = 0
    for (start, header_end), *_ in all_spans(begin, data):
        if start < done:
            continue
        last = data.rfind(b"-----BEGIN", start, header_end)
        k = bisect.bisect_left(ends, header_end)
        closed = (
            search_spans(end, data, ends[k], anchored=True)
            if k < len(ends) and ends[k] - header_end <= PEM_MAX
            else None
        )
        if closed is not None:
            stop = closed[0][1]
        else:
            stop = search_spans(body, data, header_end, anchored=True)[0][1]  # type: ignore[index]
            if stop == header_end:  # a header alone holds no key: the run ends with the block before it
                stop = _before_space(data, start, last)
                if stop == start:
                    continue
        done = stop
        gap = GAP.match(data, spans[-1][1]).end() if spans else -1  # type: ignore[union-attr]
        if spans and gap >= start:
            spans[-1] = (spans[-1][0], stop)
        else:
            spans.append((start, stop))
    return spans


def _before_space(data: bytes, start: int, at: int) -> int:
    """Where the text before ``at`` ends, spaces and escaped newlines left out (not before ``start``)."""
    while at > start:
        if data[at - 1] in b" \t\r\n":
            at -= 1
        elif at - 2 >= start and data[at - 2 : at] in (b"\\n", b"\\r"):
            at -= 2
        else:
            break
    return at


def _base64_keys(data: bytes) -> list[tuple[int, int]]:
    spans = []
    for (start, end), *_ in all_spans(_re2(_B64_RUN), data):
        if _decodes_to_a_key(_B64_WRAP.sub(b"", data[start:end])):
            spans.append((start, end))
    return spans


def _decodes_to_a_key(run: bytes) -> bool:
    """Whether the base64 ``run`` (at one of its alignments) decodes to a text holding ``PRIVATE KEY``."""
    run = run.rstrip(b"=")
    for skip in range(4):
        body = run[skip:]
        body = body[: len(body) - len(body) % 4]
        try:
            if b"PRIVATE KEY" in base64.b64decode(body):
                return True
        except (binascii.Error, ValueError):
            continue
    return False


def _overlaps(spans: list[tuple[int, int]], span: tuple[int, int]) -> bool:
    return any(s < span[1] and span[0] < e for s, e in spans)
