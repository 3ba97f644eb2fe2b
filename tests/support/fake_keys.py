"""Fake credentials for the exposure tests, built at run time from their issuers' formats.

Never a literal token-shaped string in the repository (secret scanners flag it): each
prefix is written in two parts, and the rest is random. A key has a digit and an
upper-case letter, as issued keys do, and at least 16 characters, so a sighting keeps
its last four.
"""

from __future__ import annotations

import secrets
import string

ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "_-"


def chars(n: int, alphabet: str = ALNUM) -> str:
    while True:
        out = "".join(secrets.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in out) and any(c.isupper() for c in out):
            return out


def github() -> str:
    """A GitHub classic personal access token (``ghp_`` and 36 characters)."""
    return "gh" + "p_" + chars(36)


def stripe() -> str:
    """A Stripe live secret key (``sk_live_`` and 24 characters)."""
    return "sk" + "_live_" + chars(24)


def openai() -> str:
    """An OpenAI project key (``sk-proj-`` and 48 characters)."""
    return "sk-" + "proj-" + chars(47, URLSAFE) + "1"


def password() -> str:
    """A value no format gives away: 26 characters (found only by the name beside it, or a ``.env`` file)."""
    return chars(26)
