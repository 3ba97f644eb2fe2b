"""Where a secret sits inside a JSON cell: the path of the string that holds it.

A sighting names the JSON path of the string a secret was in (``$[*].function.arguments.env.GH_TOKEN``:
array indexes as ``[*]``; a string holding JSON continues the path into it). The cell is
redacted as written, never parsed; :func:`paths` reads its tokens only when a secret
was found in it, and reads a text cut short as far as it goes.
"""

from __future__ import annotations

import json
import re

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[{}\[\],:]|[^\s{}\[\],:"]+')
#: a JSON string's text decoded (an escape JSON does not know kept as written)
_ESCAPE = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')


def _decoded(token: str) -> str:
    body = token[1:-1] if len(token) > 1 and token.endswith('"') else token[1:]
    try:
        return json.loads(f'"{body}"')
    except ValueError:
        return _ESCAPE.sub(lambda m: json.loads(f'"{m.group(0)}"'), body)


def looks_like_json(text: str) -> bool:
    return text.lstrip()[:1] in ("{", "[")


def paths(text: str, secrets: list[tuple[int, str]]) -> list[str]:
    """The path of the string holding each ``(offset, secret)`` of ``text`` (a JSON text, in order of
    offset); ``"$"`` for one outside any string. A text that parses is walked (each secret is met in
    the strings in their order); one that does not (cut short) is read token by token."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return _by_tokens(text, secrets)
    holders: dict[str, list[str]] = {}
    wanted = {secret for _, secret in secrets}
    try:
        _walk(doc, "$", wanted, holders)
    except RecursionError:
        return _by_tokens(text, secrets)
    taken: dict[str, int] = {}
    out = []
    for _, secret in secrets:
        seen = holders.get(secret, [])
        k = taken.get(secret, 0)
        taken[secret] = k + 1
        out.append(seen[k] if k < len(seen) else seen[-1] if seen else "$")
    if any(secret not in holders for secret in wanted):  # in a key, or written in a way no string reads
        by_tokens = _by_tokens(text, secrets)
        out = [b if secret not in holders else o for o, b, (_, secret) in zip(out, by_tokens, secrets, strict=True)]
    return out


def _walk(value: object, path: str, wanted: set[str], holders: dict[str, list[str]]) -> None:
    """The paths of the strings of a parsed JSON value that hold each ``wanted`` secret, in order
    (a string holding JSON continues the path into it)."""
    if isinstance(value, str):
        found = [w for w in wanted if w in value]
        if not found:
            return
        if looks_like_json(value):
            try:
                inner = json.loads(value)
            except (ValueError, RecursionError):
                inner = None
            if isinstance(inner, (dict, list)):
                nested: dict[str, list[str]] = {}
                _walk(inner, "$", set(found), nested)
                for w in found:
                    here = [path + p[1:] for p in nested.get(w, [])] or [path]
                    holders.setdefault(w, []).extend(here)
                return
        for w in found:
            holders.setdefault(w, []).extend([path] * value.count(w))
    elif isinstance(value, dict):
        for k, v in value.items():
            _walk(v, f"{path}.{k}", wanted, holders)
    elif isinstance(value, list):
        for v in value:
            _walk(v, f"{path}[*]", wanted, holders)


def _by_tokens(text: str, secrets: list[tuple[int, str]]) -> list[str]:
    """:func:`paths` of a text that does not parse, read token by token as far as it goes."""
    found = ["$"] * len(secrets)
    order = sorted(range(len(secrets)), key=lambda i: secrets[i][0])
    frames: list[list] = []  # [is_object, key, expecting_a_key]
    k = 0
    for m in _TOKEN.finditer(text):
        while k < len(order) and secrets[order[k]][0] < m.start():
            k += 1
        if k == len(order):
            break  # every secret placed: the rest of the text is not read
        token = m.group(0)
        if token in ("{", "["):
            frames.append([token == "{", None, token == "{"])
            continue
        if token in ("}", "]"):
            if frames:
                frames.pop()
            continue
        if token == ",":
            if frames and frames[-1][0]:
                frames[-1][2] = True
            continue
        if token == ":":
            if frames and frames[-1][0]:
                frames[-1][2] = False
            continue
        is_key = bool(frames) and frames[-1][0] and frames[-1][2]
        if is_key and token.startswith('"'):
            frames[-1][1] = token  # decoded when a path names it
        inside = []
        while k < len(order) and secrets[order[k]][0] < m.end():
            inside.append(order[k])
            k += 1
        if not inside:
            continue
        here = "$" + "".join(f".{_decoded(f[1])}" if f[0] else "[*]" for f in frames if not f[0] or f[1] is not None)
        value = _decoded(token) if token.startswith('"') else ""
        nested = looks_like_json(value)
        for i in inside:
            if not nested:
                found[i] = here
                continue
            at = value.find(secrets[i][1])
            found[i] = here + (_by_tokens(value, [(at, secrets[i][1])])[0][1:] if at >= 0 else "")
    return found
