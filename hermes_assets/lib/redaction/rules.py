"""What counts as a secret: credentials in their issued formats, and assignments whose name says secret.

:data:`PATTERNS` is the table of formats, each entry naming where the format is
documented; :func:`name_says_secret` and :func:`value_is_secret` judge an
assignment (``FOO_TOKEN=...``, ``"api_key": "..."``, ``password: ...``).
:attr:`Pattern.re2_screen` and :data:`ASSIGNMENT_SCREEN` are what the redactor's one
RE2 pass over a column is built from (with the maintained rules' keywords). No entropy
scoring: it would eat every hash. The redactor is :mod:`~hermes_assets.lib.redaction.redactor`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

#: how a redacted secret begins (a marker is never a secret itself)
MARKER_PREFIX = "[REDACTED:"

#: an assigned value (``FOO_TOKEN=...``) is redacted from this many characters
MIN_ASSIGNED = 8
#: values that are never secrets, whatever their name says
COMMON = frozenset(
    {"true", "false", "yes", "no", "on", "off", "none", "null", "nil", "undefined", "changeme", "redacted", "required"}
    # a kind of credential named, not one (``auth_method="password"``, ``grant_type: client_credentials``)
    | {"password", "passwd", "passphrase", "secret", "token", "apikey", "api_key", "credential", "credentials"}
    | {"client_credentials", "access_token", "refresh_token", "bearer", "basic", "oauth", "oauth2"}
)

_B = r"(?<![A-Za-z0-9_-])"  # a token starts here (not inside a longer one)
_E = r"(?![A-Za-z0-9_-])"  # and ends here


def has_digit(value: str) -> bool:
    return any(c.isdigit() for c in value)


@dataclass(frozen=True)
class Pattern:
    """One credential format. ``group``: the part of the match that is the secret (the rest
    is kept); ``hints``: substrings one of which every match contains (the screen);
    ``accept``: a last test of the secret (None: every match)."""

    kind: str
    regex: re.Pattern[str]
    source: str
    hints: tuple[str, ...]
    group: int = 0
    accept: Callable[[str], bool] | None = None
    #: for a format with no literal part: a cheap search every match passes (instead of ``hints``)
    screen: re.Pattern[str] | None = None
    #: an RE2 search every match passes (the column screen); None: one of ``hints``
    re2: str | None = None
    #: where the secrets of a text are, found in linear time (instead of ``regex``, whose
    #: backtracking could take quadratic time on hostile text)
    finder: Callable[[str], list[tuple[int, int]]] | None = None

    @property
    def re2_screen(self) -> str:
        return self.re2 or "|".join(re2_literal(h) for h in self.hints)

    def may_match(self, text: str) -> bool:
        if self.screen is not None:
            return self.screen.search(text) is not None
        return any(h in text for h in self.hints)


def _p(
    kind: str,
    regex: str,
    source: str,
    hints: Iterable[str],
    group: int = 0,
    accept: Callable[[str], bool] | None = None,
    screen: str | None = None,
    re2: str | None = None,
    finder: Callable[[str], list[tuple[int, int]]] | None = None,
) -> Pattern:
    compiled_screen = re.compile(screen) if screen else None
    return Pattern(kind, re.compile(regex), source, tuple(hints), group, accept, compiled_screen, re2 or screen, finder)


_PEM_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
#: the body of a block cut short: its base64 lines and headers, to the last of them
_PEM_BODY = re.compile(r"(?:(?:\\[nr]|\s)*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]{1,30}: [^\n\\]{0,200}))*")
#: the longest block taken whole (a 16384-bit RSA key is under 13 KB of PEM)
PEM_MAX = 65536


def pem_blocks(text: str) -> list[tuple[int, int]]:
    """The spans of PEM private-key blocks: from ``-----BEGIN ... PRIVATE KEY-----`` to the
    first ``-----END`` after it (within :data:`PEM_MAX` characters) when it ends a private
    key, else to the last base64 line that follows (a block cut short). Linear in the text:
    every ``-----END`` is found once, each header finds its own by bisection."""
    ends: list[int] = []
    at = text.find("-----END")
    while at >= 0:
        ends.append(at)
        at = text.find("-----END", at + 8)
    spans: list[tuple[int, int]] = []
    done = 0
    for m in _PEM_BEGIN.finditer(text):
        if m.start() < done:
            continue
        k = bisect.bisect_left(ends, m.end())
        end = _PEM_END.match(text, ends[k]) if k < len(ends) and ends[k] - m.end() <= PEM_MAX else None
        stop = end.end() if end is not None else _PEM_BODY.match(text, m.end()).end()  # type: ignore[union-attr]
        spans.append((m.start(), stop))
        done = stop
    return spans


#: credentials in their issued formats, as Hermes users meet them: the maintained rule set
#: (:mod:`.rule_set`) runs first; these find what it does not (Tavily, Firecrawl, Google OAuth
#: secrets, a bare Telegram token, webhook secrets) or finds only in a narrower form (an
#: ``sk-ant-`` key of another length, AWS key ids outside base32), each naming its source
PATTERNS: tuple[Pattern, ...] = (
    _p(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?:(?!-----END)[\s\S]){0,65536}?-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:(?:\\[nr]|\s)*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]{1,30}: [^\n\\]{0,200}))*)",
        "RFC 7468 textual encodings (PEM) of PKCS#1/#8, OpenSSH, PGP private keys; an unterminated block to its last base64 line",
        ("PRIVATE KEY",),
        finder=pem_blocks,
    ),
    _p(
        "anthropic_api_key",
        _B + r"sk-ant-(?:api|admin|oat|ort)\d{2}-[A-Za-z0-9_-]{20,}" + _E,
        "Anthropic Console API keys (sk-ant-api03-...), admin keys (sk-ant-admin01-...), OAuth tokens",
        ("sk-ant-",),
    ),
    _p(
        "openrouter_api_key",
        _B + r"sk-or-(?:v1-)?[A-Za-z0-9]{20,}" + _E,
        "OpenRouter API keys (sk-or-v1- and 64 hex)",
        ("sk-or-",),
    ),
    _p(
        "openai_api_key",
        _B + r"sk-(?!ant-|or-)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,}" + _E,
        "OpenAI API keys: legacy sk- and 48 characters, project (sk-proj-), service account (sk-svcacct-), admin",
        ("sk-",),
        accept=has_digit,
        re2=r"sk-[A-Za-z0-9_-]{20}",
    ),
    _p(
        "google_api_key",
        _B + r"AIza[A-Za-z0-9_-]{35}" + _E,
        "Google Cloud API keys: AIza and 35 characters (cloud.google.com/docs/authentication/api-keys)",
        ("AIza",),
    ),
    _p(
        "google_oauth_client_secret",
        _B + r"GOCSPX-[A-Za-z0-9_-]{20,}" + _E,
        "Google OAuth 2.0 client secrets (GOCSPX- prefix)",
        ("GOCSPX-",),
    ),
    _p(
        "google_oauth_token",
        _B + r"(?:ya29\.[A-Za-z0-9_-]{20,}|1//0[A-Za-z0-9_-]{30,})" + _E,
        "Google OAuth 2.0 access tokens (ya29.) and refresh tokens (1//0)",
        ("ya29.", "1//0"),
        re2=r"ya29\.|1//0[A-Za-z0-9_-]{30}",
    ),
    _p(
        "aws_access_key_id",
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])",
        "AWS IAM access key ids (AKIA long-term, ASIA temporary; 20 characters)",
        ("AKIA", "ASIA", "ABIA", "ACCA"),
        re2=r"A(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}",
    ),
    _p(
        "aws_secret_access_key",
        r"(?i)aws_?secret_?(?:access_?)?key\\?[\"']?\s*[:=]\s*\\?[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        "AWS secret access keys (40 base64 characters) in their assignment forms (credentials file, env, JSON)",
        ("ecret",),
        group=1,
        re2=r"(?i:secret_?(?:access_?)?key)",
    ),
    _p(
        "github_token",
        _B + r"gh[pousr]_[A-Za-z0-9]{30,}" + _E,
        "GitHub classic tokens: ghp_ (personal), gho_ (OAuth), ghu_/ghs_ (app), ghr_ (refresh) and 36 characters",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    _p(
        "github_fine_grained_token",
        _B + r"github_pat_[A-Za-z0-9_]{22,}" + _E,
        "GitHub fine-grained personal access tokens (github_pat_)",
        ("github_pat_",),
    ),
    _p(
        "slack_token",
        _B + r"(?:xox[abposre]-[A-Za-z0-9-]{10,}|xapp-\d+-[A-Za-z0-9-]{10,})" + _E,
        "Slack tokens: bot xoxb-, user xoxp-, app-level xapp-, legacy xoxa-/xoxo-/xoxs-/xoxr-/xoxe-",
        ("xox", "xapp-"),
        accept=has_digit,
    ),
    _p(
        "slack_webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/-]{20,})",
        "Slack incoming webhook URLs (hooks.slack.com/services/T.../B.../...): the path after the kind",
        ("hooks.slack.com",),
        group=1,
    ),
    _p(
        "stripe_key",
        _B + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}" + _E + r"|" + _B + r"whsec_[A-Za-z0-9]{20,}" + _E,
        "Stripe secret (sk_live_/sk_test_) and restricted (rk_live_/rk_test_) keys, webhook secrets (whsec_)",
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
    ),
    _p(
        "huggingface_token",
        _B + r"hf_[A-Za-z0-9]{30,}" + _E,
        "Hugging Face user access tokens (hf_ and 34 letters)",
        ("hf_",),
    ),
    _p(
        "telegram_bot_token",
        r"(?:(?<=bot)|(?<![A-Za-z0-9_:-]))\d{8,10}:[A-Za-z0-9_-]{35}" + _E,
        "Telegram Bot API tokens (core.telegram.org/bots/api: <bot id>:<35 characters>)",
        (),
        screen=r":[A-Za-z0-9_-]{35}",
    ),
    _p(
        "jwt",
        _B + r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{10,}" + _E,
        'RFC 7519 JSON Web Tokens in compact form (base64url of {" header and payload)',
        ("eyJ",),
    ),
    _p(
        "tavily_api_key",
        _B + r"tvly-(?:dev-|prod-)?[A-Za-z0-9]{20,}" + _E,
        "Tavily search API keys (tvly-, as Hermes's own redactor knows them)",
        ("tvly-",),
    ),
    _p(
        "firecrawl_api_key",
        _B + r"fc-[0-9a-f]{32}" + _E,
        "Firecrawl API keys (fc- and 32 hex, as Hermes's own redactor knows them)",
        ("fc-",),
    ),
    _p(
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s:/?#@\"'<>\[\]\\]*:([^\s/?#@\"'<>\[\]\\]+)@",
        "RFC 3986 userinfo (scheme://user:password@host): the password only",
        ("://",),
        group=1,
        re2=r"://[^\s/@]*:[^\s/@]+@",
        accept=lambda s: not s.startswith(MARKER_PREFIX),
    ),
    _p(
        "authorization",
        r"(?i)\b(?:proxy-)?authorization\\?[\"']?\s*[:=]\s*\\?[\"']?\s*(?:bearer|basic|token|digest)\s+([A-Za-z0-9._~+/-]{8,}=*)",
        "RFC 9110 Authorization header values (Bearer, Basic, Token credentials)",
        ("uthorization", "UTHORIZATION"),
        re2=r"(?i:authorization)",
        group=1,
        accept=lambda s: not s.startswith("$"),
    ),
    _p(
        "bearer_token",
        r"(?<![A-Za-z])[Bb]earer\s+([A-Za-z0-9._~+/-]{16,}=*)",
        "RFC 6750 bearer tokens outside an Authorization header (a token of 16+ characters with a digit)",
        ("earer",),
        group=1,
        re2=r"earer\s",
        accept=has_digit,
    ),
)

# -- assignments whose name says secret -------------------------------------

#: words of a variable name that say its value is secret
_SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "token",
        "password",
        "passwd",
        "pwd",
        "pass",
        "passphrase",
        "credential",
        "credentials",
        "apikey",
        "auth",
        "pat",
    }
)
#: pairs of words that say so together (``api_key``, ``apiKey``, ``PRIVATE_KEY``)
_SECRET_PAIRS = frozenset(
    {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("signing", "key")}
)
#: a name ending in one of these names something about a secret, not the secret
_NOT_VALUE_WORDS = frozenset(
    {
        "path",
        "file",
        "url",
        "uri",
        "endpoint",
        "name",
        "names",
        "id",
        "type",
        "count",
        "counts",
        "limit",
        "env",
        "dir",
        "header",
        "prefix",
        "length",
        "len",
        "ttl",
        "expiry",
        "expires",
        "usage",
        "source",
        "mode",
        "enabled",
        "required",
        "tokens",
        "cmd",
        "command",
        "helper",
        "hint",
        "policy",
        "format",
        "field",
        "var",
        "variable",
    }
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


@lru_cache(maxsize=65536)
def name_says_secret(name: str) -> bool:
    """Whether a variable / key name says its value is a credential (``OPENAI_API_KEY``,
    ``apiKey``, ``db.password``, ``FAL_KEY``); ``max_tokens``, ``token_url`` do not."""
    words = [w.lower() for w in _WORD.findall(name)]
    if not words or words[-1] in _NOT_VALUE_WORDS:
        return False
    # ``pat`` (a personal access token) only in an environment-style name (GITHUB_PAT): in a
    # lower-case one it is a pattern (``file_pat``, ``glob_pat``)
    if any(w in _SECRET_WORDS and (w != "pat" or name.isupper()) for w in words):
        return True
    if any(pair in _SECRET_PAIRS for pair in zip(words, words[1:])):
        return True
    # an environment-style name ending in _KEY (FAL_KEY, SECRET_KEY): never in lower case (sort_key)
    return len(words) > 1 and words[-1] == "key" and name.isupper()


_IDENT_PATH = re.compile(r"[A-Za-z_][A-Za-z_]*(?:[.:][A-Za-z_][A-Za-z0-9_]*)*")


def value_is_secret(value: str, minimum: int = MIN_ASSIGNED) -> bool:
    """Whether an assigned value can be a credential: long enough, not a common word, a
    number, a reference (``$VAR``, an environment look-up, ``{{ var }}``), a path, a URL, an
    identifier (``settings.api_key``), a placeholder (``********``) or a marker."""
    if len(value) < minimum or value.lower() in COMMON or value.startswith(MARKER_PREFIX):
        return False
    if value[0] in "$%{<~/." or "://" in value or "(" in value:
        return False
    if "..." in value or "***" in value:  # masked already (Hermes's own mask keeps 6 + ... + 4)
        return False
    if value.isdigit() or len(set(value)) <= 2:
        return False
    return not (_IDENT_PATH.fullmatch(value) and not value.isalpha())


_NAME = r"([A-Za-z_][A-Za-z0-9_.-]{0,80})"
_VALUE = r"([^\s'\"`;&|<>()\[\]{},\\]+)"
#: ``NAME=value``, ``NAME = "value"``, ``export NAME='value'``, ``--name=value`` (shell, .env, INI, kwargs)
ASSIGN_EQ = re.compile(
    r"(?<![A-Za-z0-9_.])" + _NAME + r"\s{0,4}=\s{0,4}(\\?[\"']?)" + _VALUE + r"(?=\\?[\"'\s;&|,)\]}]|$)"
)
#: ``"name": "value"``, ``'name': 'value'``, ``name: "value"`` (JSON, Python, YAML inline; JSON escaped in a string)
ASSIGN_COLON = re.compile(
    r"(?<![A-Za-z0-9_.-])(\\{0,3}[\"']?)" + _NAME + r"\1\s{0,4}:\s{0,4}(\\{0,3}[\"'])" + r"([^\"'\\\n]+)\3"
)
#: ``name: value`` at the start of a YAML line (unquoted: up to a comment or the line's end)
ASSIGN_YAML = re.compile(r"(?m)^[ \t-]{0,40}" + _NAME + r"[ \t]{0,4}:[ \t]{1,4}([^\s#'\"][^\n#]*?)[ \t]*(?=\s#|$)")
#: JSON keys whose value is a header value (``{"Authorization": "Basic ..."}``)
HEADER_NAMES = frozenset({"authorization", "proxy-authorization"})

#: what every name that says secret holds (:func:`name_says_secret`), lower-cased: its secret
#: word (``passwd``, ``passphrase`` hold ``pass``; ``apikey`` and every pair hold ``key``)
NAME_SCREEN_WORDS = ("secret", "token", "pass", "pwd", "credential", "auth", "pat", "key")
#: of those, the words a name holds only as a whole word: never followed by a lower-case letter
#: (``path``, ``pattern``, ``keys``, ``tokens``, ``author`` are other words)
WHOLE_WORDS = ("token", "pat", "key", "auth", "pwd")
#: the words whose presence lets a text reach the assignment patterns
NAME_HINTS = NAME_SCREEN_WORDS
#: an assignment the assignment patterns can match: such a word, the rest of the name (80 characters
#: at most), quotes or escapes, spaces, ``=`` or ``:``, then a value of :data:`MIN_ASSIGNED` characters
#: at least: quoted (escapes counted as written) or as YAML writes it (the column screen of the assignments)
ASSIGNMENT_SCREEN = (
    "(?:(?i:"
    + "|".join(w for w in NAME_SCREEN_WORDS if w not in WHOLE_WORDS)
    + r")[A-Za-z0-9_.-]{0,80}|(?i:"
    + "|".join(WHOLE_WORDS)
    + r""")(?:[A-Z0-9_.-][A-Za-z0-9_.-]{0,79})?)(?:\\{0,3}["'])?\s{0,4}[:=]\s{0,4}"""
    + r"""(?:\\{0,3}["'](?:\\.|[^"'\\\n]){"""
    + str(MIN_ASSIGNED)
    + r"""}|[^\s'"\\][^\n]{"""
    + str(MIN_ASSIGNED - 1)
    + "})"
)


def re2_literal(value: str) -> str:
    """``value`` as an RE2 literal."""
    return "".join(c if c.isalnum() or c == "_" else f"\\x{{{ord(c):x}}}" for c in value)
