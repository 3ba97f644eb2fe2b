"""The version of the redaction a file's cells went through: derived, never raised by hand.

A file records the maintained rule set it was redacted with (name, version, the digest
of its file), a digest of our own rules' source and a keyed fingerprint of the ``.env``
values: any change of one of them makes every file written before older, and the next
run redacts it again (:mod:`~hermes_assets.lib.redaction.stored_files`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Collection
from functools import lru_cache

#: the modules that decide what is redacted: a change to any of them is a change of our rules
OWN_RULES = (
    "rules",
    "private_keys",
    "assignments",
    "encodings",
    "findings",
    "screen",
    "fast_screen",
    "json_paths",
    "go_regex",
    "redactor",
    "rule_matcher",
    "rule_set",
    "session_cells",
)


@lru_cache(maxsize=1)
def own_rules_digest() -> str:
    """The first 8 hex of a SHA-256 of :data:`OWN_RULES`' source: a new pattern, a new look-alike,
    a new way of reading a cell is a new version of the redaction, with no number to raise."""
    digest = hashlib.sha256()
    folder = os.path.dirname(os.path.abspath(__file__))
    for name in OWN_RULES:
        with open(os.path.join(folder, f"{name}.py"), "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:8]


def redaction_version(rule_set_label: str, env_fingerprint: str) -> str:
    """What a file records of the redaction its cells went through: the maintained rule set
    (name, version, the digest of its file), our rules' digest and the keyed fingerprint of the
    ``.env`` values, e.g. ``betterleaks-2.0.0-rc.4-97c2aa0a+ours-1a2b3c4d+env-5e6f7a8b``. Any change
    of one of them makes every file written before older: the next run redacts it again."""
    return f"{rule_set_label}+ours-{own_rules_digest()}+env-{env_fingerprint}"


#: the ``env`` part of a version when Hermes's ``.env`` files hold no value: the same under every key
NO_ENV_VALUES = "none"


def env_fingerprint(key: bytes, values: Collection[str]) -> str:
    """The ``.env`` values' part of a version: keyed (a guess at a value cannot be confirmed from
    it), and the same under any key when there is none (a store without ``.env`` values is
    written byte for byte alike by two installations with their own keys)."""
    if not values:
        return NO_ENV_VALUES
    return hmac.new(key, "\x00".join(sorted(values)).encode("utf-8", "surrogatepass"), "sha256").hexdigest()[:8]


#: the parts of a version, in order, and what a change of each means
VERSION_PARTS = (
    ("rules", "the maintained rule set changed"),
    ("ours", "our own rules changed"),
    ("env", "the values of Hermes's .env files changed"),
)


def what_changed(old: str | None, new: str) -> list[str]:
    """Why a file that records ``old`` is redacted again under ``new`` (one line per reason)."""
    if old is None:
        return ["written without redaction (or before it existed)"]
    olds, news = old.split("+"), new.split("+")
    if len(olds) != len(news):
        return ["written by an older redaction"]
    return [why for (_, why), a, b in zip(VERSION_PARTS, olds, news, strict=True) if a != b]
