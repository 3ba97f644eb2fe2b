"""A corpus of credentials as transcripts hold them, built at run time (never committed).

A positive of every maintained rule a draw reaches (:func:`maintained`: drawn from the rule's
own regex, :mod:`tests.support.rule_positives`, kept when the rule's RE2 program finds it),
of each of our formats (:func:`ours`), of each form of a name and its value (:func:`forms`:
assignments with ``&;#`` values, escaped newlines, command-line flags, headers, config lines,
all-caps names), a private key in base64; and look-alikes that must come through unchanged
(:func:`look_alikes`). :func:`document` puts them one per line; :func:`decoded` gives what a
search must read of a stored string (its JSON escapes and percent-escapes decoded) so that a
secret stored in another encoding is found.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import urllib.parse
from dataclasses import asdict, dataclass

from hermes_assets.lib.redaction import rules
from hermes_assets.lib.redaction.redactor import rule_matcher
from tests.support.rule_positives import positive

ALNUM = string.ascii_letters + string.digits
#: how a drawn positive sits in a line: in prose, a config line, escaped JSON
AROUND = ("see {} here", "x = {}", '{{"k": "{}"}}')


@dataclass(frozen=True)
class Entry:
    """One credential: its name (the rule or form), the line that holds it, and the part no reader
    may ever see."""

    name: str
    text: str
    secret: str

    def as_dict(self) -> dict:
        return asdict(self)


def chars(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    while True:
        out = "".join(rng.choice(alphabet) for _ in range(n))
        if any(c.isdigit() for c in out) and any(c.isupper() for c in out):
            return out


def drawn_finding(i: int, rng: random.Random, tries: int = 30) -> tuple[str, str] | None:
    """A line holding a positive of maintained rule ``i`` and the secret the rule finds in it (None:
    no draw found one)."""
    matcher = rule_matcher()
    rule = matcher.rules[i]
    for _ in range(tries):
        text = rng.choice(AROUND).format(positive(rule.regex, rng))
        for f in matcher.findings(text):
            if f.rule is rule:
                return text, f.secret
    return None


def maintained(rng: random.Random) -> list[Entry]:
    """A positive of each maintained rule a few draws reach (secrets of 8 characters or more)."""
    out = []
    for i, rule in enumerate(rule_matcher().rules):
        for _ in range(3):
            found = drawn_finding(i, random.Random(rng.random()))
            if found is not None and len(found[1].strip()) >= 8:
                out.append(Entry(rule.id, *found))
                break
    return out


def ours(rng: random.Random) -> list[Entry]:
    """A positive of each of our formats (drawn from its regex) that the maintained rules do not take."""
    out = []
    for p in rules.PATTERNS:
        if p.finder is not None:
            continue
        for _ in range(50):
            text = f"see {positive(p.regex.pattern, rng)} here"
            spans = p.spans(text.encode())
            if not spans:
                continue
            secret = text.encode()[spans[0][0] : spans[0][1]].decode()
            if len(secret) >= 8 and not rule_matcher().findings(text):
                out.append(Entry(p.kind, text, secret))
                break
    return out


def forms(rng: random.Random) -> list[Entry]:
    """The forms of a name and its value a transcript holds them in."""
    c = lambda n=16: chars(rng, n)  # noqa: E731
    amp = c(6) + "#" + c(4) + "&" + c(3) + ";x"
    pem = "\n".join(chars(rng, 64, ALNUM + "+/") for _ in range(4))
    key = f"-----BEGIN PRIVATE KEY-----\n{pem}\n-----END PRIVATE KEY-----\n"
    b64 = base64.b64encode(key.encode()).decode()
    lines = [
        ("assignment &;#", "POSTGRES_PASSWORD: {}", amp),
        ("assignment escaped newline", "API_TOKEN={}\\nPATH=/usr/bin", c()),
        ("compound name", "export PGPASSWORD={}", c()),
        ("compound name", "MYSQL_PWD={} mysql shop", c()),
        ("curl -u", "curl -u deploy:{} https://api.example.com", c()),
        ("mysql -p", "mysql -uroot -p{} shop", c()),
        ("flag", "psql --password {} shop", c()),
        ("sshpass", "sshpass -p {} ssh ops@host", c()),
        ("redis-cli -a", "redis-cli -h cache -a {} ping", c()),
        ("header", "X-API-Key: {}", c(32)),
        ("header in a command", "curl -H 'Ocp-Apim-Subscription-Key: {}' https://x", c(32)),
        ("netrc", "machine api.example.com login ann password {}", c()),
        ("config line", "requirepass {}", c()),
        ("url query", "GET /v1/items?access_token={}&page=2", c(24)),
        ("private key in base64", "tls.key: {}", b64),
    ]
    return [Entry(name, form.format(value), value) for name, form, value in lines]


def env_values(rng: random.Random) -> dict[str, str]:
    """Values only a ``.env`` file names (no prefix, no name beside them): name -> value."""
    return {
        "CRAWLER_KEY": "".join(rng.choice(string.ascii_lowercase) for _ in range(18)),
        "UPSTREAM_HANDLE": chars(rng, 24),
    }


def env_entries(values: dict[str, str]) -> list[Entry]:
    """The ``.env`` values as a transcript holds them: plain, JSON-escaped, URL-encoded, in base64."""
    out = []
    for value in values.values():
        out += [
            Entry("hermes_env", f"the crawler key is {value} today", value),
            Entry("hermes_env url", "q=" + urllib.parse.quote(f"k={value}/x", safe=""), value),
            Entry("hermes_env base64", "Basic " + base64.b64encode(f"ann:{value}".encode()).decode(), value),
        ]
    return out


def look_alikes(rng: random.Random) -> list[str]:
    """What is never a secret, each as a line (it must come through unchanged)."""
    import hashlib
    import uuid

    blob = base64.b64encode(rng.randbytes(600)).decode()
    return [
        str(uuid.UUID(int=rng.getrandbits(128))),
        hashlib.sha256(rng.randbytes(8)).hexdigest(),
        "data:image/png;base64," + blob,
        "request id req_" + chars(rng, 24),
        "msg_01" + chars(rng, 22),
        "OPENAI_API_KEY=YOUR_API_KEY",
        "Authorization: Bearer <token>",
        "password: ********",
        "max_tokens=4096",
        'auth_method="password"',
    ]


def corpus(seed: int) -> tuple[list[Entry], dict[str, str], list[str]]:
    """(every credential entry, the ``.env`` values by name, the look-alikes) of one seed."""
    rng = random.Random(seed)
    env = env_values(rng)
    return maintained(rng) + ours(rng) + forms(rng) + env_entries(env), env, look_alikes(rng)


def document(entries: list[Entry]) -> str:
    """The entries one per line."""
    return "".join(f"- {e.text}\n" for e in entries)


_ESCAPES = re.compile(r'\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt])')


def decoded(text: str) -> list[str]:
    """``text`` and what a search must also read of it: its JSON escapes decoded once and twice,
    its percent-escapes decoded."""
    out = [text]
    once = _ESCAPES.sub(lambda m: json.loads(f'"{m.group(0)}"'), text)
    out.append(once)
    out.append(_ESCAPES.sub(lambda m: json.loads(f'"{m.group(0)}"'), once))
    out += [urllib.parse.unquote(t) for t in list(out)]
    return out
