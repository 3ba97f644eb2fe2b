"""Our own credential formats: what the maintained rule set misses or finds only in a narrower form.

:data:`PATTERNS` is the table, each entry naming where the format is documented.
Every pattern is an RE2 program (linear in the text's length) searched over the
cell's UTF-8 bytes: RE2 has no look-behind, so a token's left boundary is a
character matched before the secret's group (or the text's start), and
:meth:`Pattern.spans` resumes after each secret, never after that boundary.
:attr:`Pattern.screen` is what the redactor's one RE2 pass over a column is built
from (with the maintained rules' keywords): every match of the pattern holds a
match of its screen. Assignments whose name says secret are
:mod:`~hermes_assets.lib.redaction.assignments`; private keys :mod:`.private_keys`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

import re2  # type: ignore[import-untyped]

from hermes_assets.lib.redaction.private_keys import PEM_SCREEN, pem_blocks
from hermes_assets.lib.redaction.rule_matcher import re2_options, search_spans

#: how a redacted secret begins (a marker is never a secret itself)
MARKER_PREFIX = "[REDACTED:"

#: a token starts here: the text's start or a character that cannot continue it
_B = r"(?:^|[^A-Za-z0-9_-])"
#: and ends here
_E = r"(?:[^A-Za-z0-9_-]|$)"
#: ``/`` as a cell may write it (a screen finds it in each): as is, JSON-escaped, percent-encoded
_SLASH = r"(?:/|\\/|%2[fF])"


_DIGIT = re.compile(r"\d")


def has_digit(value: str) -> bool:
    return _DIGIT.search(value) is not None


@dataclass(frozen=True)
class Pattern:
    """One credential format. ``regex``: an RE2 program whose group ``group`` is the secret (the
    rest is kept); ``screen``: an RE2 search every match passes (the column screen); ``hints``:
    the literal prefixes a secret may start with (a sighting names it); ``accept``: a last test of
    the secret (None: every match); ``finder``: where the secrets of a text are, found by code
    (instead of ``regex``)."""

    kind: str
    source_regex: str
    source: str
    screen: str
    hints: tuple[str, ...] = ()
    group: int = 1
    accept: Callable[[str], bool] | None = field(default=None, compare=False)
    finder: Callable[[bytes], list[tuple[int, int]]] | None = field(default=None, compare=False)
    #: a JSON escape can break a match (the format reads ``/``, written ``\\/``): its text is also
    #: searched decoded
    decoded: bool = False

    @cached_property
    def regex(self):
        """The compiled program (searches ``str`` or UTF-8 ``bytes``)."""
        return re2.compile(self.source_regex, re2_options())

    def spans(self, data: bytes) -> list[tuple[int, int]]:
        """The byte spans of the secrets of ``data`` (accepted, in order)."""
        if self.finder is not None:
            return self.finder(data)
        out: list[tuple[int, int]] = []
        regex, at = self.regex, 0
        while at <= len(data):
            spans = search_spans(regex, data, at)
            if spans is None:
                break
            start, end = spans[self.group]
            if start < 0 or end <= start:
                at = max(spans[0][1], at + 1)
                continue
            if self.accept is None or self.accept(data[start:end].decode("utf-8", "surrogatepass")):
                out.append((start, end))
            at = end  # the next token may start at the character that ended this one
        return out

    def prefix_of(self, secret: str) -> str:
        """The literal prefix ``secret`` starts with (``""``: none)."""
        return next((h for h in self.hints if secret.startswith(h)), "")


def _p(
    kind: str,
    regex: str,
    source: str,
    screen: str,
    hints: Iterable[str] = (),
    group: int = 1,
    accept: Callable[[str], bool] | None = None,
    finder: Callable[[bytes], list[tuple[int, int]]] | None = None,
) -> Pattern:
    return Pattern(kind, regex, source, screen, tuple(hints), group, accept, finder, "/" in regex)


def _not_marker(secret: str) -> bool:
    return not secret.startswith(MARKER_PREFIX)


#: credentials in their issued formats, as Hermes users meet them: the maintained rule set
#: (:mod:`.rule_set`) runs first; these find what it does not (Tavily, Firecrawl, Google OAuth
#: secrets, a bare Telegram token, webhook secrets) or finds only in a narrower form (an
#: ``sk-ant-`` key of another length, AWS key ids outside base32), each naming its source
PATTERNS: tuple[Pattern, ...] = (
    _p(
        "private_key",
        # what a block is (the finder reads it in one pass; a positive is drawn from this)
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:\n[A-Za-z0-9+/]{64})+\n"
        r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----",
        "RFC 7468 textual encodings (PEM) of PKCS#1/#8, OpenSSH, PGP private keys; an unterminated block "
        "to its last base64 line; the same in base64 (a Kubernetes secret's tls.key)",
        PEM_SCREEN,
        group=0,
        finder=pem_blocks,
    ),
    _p(
        "anthropic_api_key",
        _B + r"(sk-ant-(?:api|admin|oat|ort)\d{2}-[A-Za-z0-9_-]{20,})" + _E,
        "Anthropic Console API keys (sk-ant-api03-...), admin keys (sk-ant-admin01-...), OAuth tokens",
        r"sk-[A-Za-z0-9_-]{20}",
        ("sk-ant-",),
    ),
    _p(
        "openrouter_api_key",
        _B + r"(sk-or-(?:v1-)?[A-Za-z0-9]{20,})" + _E,
        "OpenRouter API keys (sk-or-v1- and 64 hex)",
        r"sk-[A-Za-z0-9_-]{20}",
        ("sk-or-",),
    ),
    _p(
        "openai_api_key",
        _B + r"(sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_-]{20,})" + _E,
        "OpenAI API keys: legacy sk- and 48 characters, project (sk-proj-), service account (sk-svcacct-), admin",
        r"sk-[A-Za-z0-9_-]{20}",
        ("sk-",),
        accept=lambda s: has_digit(s) and not s.startswith(("sk-ant-", "sk-or-")),
    ),
    _p(
        "google_api_key",
        _B + r"(AIza[A-Za-z0-9_-]{35})" + _E,
        "Google Cloud API keys: AIza and 35 characters (cloud.google.com/docs/authentication/api-keys)",
        r"AIza[A-Za-z0-9_-]{35}",
        ("AIza",),
    ),
    _p(
        "google_oauth_client_secret",
        _B + r"(GOCSPX-[A-Za-z0-9_-]{20,})" + _E,
        "Google OAuth 2.0 client secrets (GOCSPX- prefix)",
        r"GOCSPX-[A-Za-z0-9_-]{20}",
        ("GOCSPX-",),
    ),
    _p(
        "google_oauth_token",
        _B + r"(ya29\.[A-Za-z0-9_-]{20,}|1//0[A-Za-z0-9_-]{30,})" + _E,
        "Google OAuth 2.0 access tokens (ya29.) and refresh tokens (1//0)",
        r"ya29\.[A-Za-z0-9_-]{20}|1" + _SLASH + "{2}0[A-Za-z0-9_-]{30}",
        ("ya29.", "1//0"),
    ),
    _p(
        "aws_access_key_id",
        r"(?:^|[^A-Za-z0-9])((?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16})(?:[^A-Za-z0-9]|$)",
        "AWS IAM access key ids (AKIA long-term, ASIA temporary; 20 characters)",
        r"A(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}",
        ("AKIA", "ASIA", "ABIA", "ACCA"),
    ),
    _p(
        "aws_secret_access_key",
        r"(?i:aws_?secret_?(?:access_?)?key)\\{0,3}[\"']?\s*[:=]\s*\\{0,3}[\"']?([A-Za-z0-9/+=]{40})(?:[^A-Za-z0-9/+=]|$)",
        "AWS secret access keys (40 base64 characters) in their assignment forms (credentials file, env, JSON)",
        r"(?i:aws_?secret_?(?:access_?)?key)",
    ),
    _p(
        "github_token",
        _B + r"(gh[pousr]_[A-Za-z0-9]{30,})" + _E,
        "GitHub classic tokens: ghp_ (personal), gho_ (OAuth), ghu_/ghs_ (app), ghr_ (refresh) and 36 characters",
        r"gh[pousr]_[A-Za-z0-9]{30}",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ),
    _p(
        "github_fine_grained_token",
        _B + r"(github_pat_[A-Za-z0-9_]{22,})" + _E,
        "GitHub fine-grained personal access tokens (github_pat_)",
        r"github_pat_[A-Za-z0-9_]{22}",
        ("github_pat_",),
    ),
    _p(
        "slack_token",
        _B + r"(xox[abposre]-[A-Za-z0-9-]{10,}|xapp-\d+-[A-Za-z0-9-]{10,})" + _E,
        "Slack tokens: bot xoxb-, user xoxp-, app-level xapp-, legacy xoxa-/xoxo-/xoxs-/xoxr-/xoxe-",
        r"xox[abposre]-[A-Za-z0-9-]{10}|xapp-[0-9]+-[A-Za-z0-9-]{10}",
        ("xoxa-", "xoxb-", "xoxp-", "xoxo-", "xoxs-", "xoxr-", "xoxe-", "xapp-"),
        accept=has_digit,
    ),
    _p(
        "slack_webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/-]{20,})",
        "Slack incoming webhook URLs (hooks.slack.com/services/T.../B.../...): the path after the kind",
        r"hooks\.slack\.com" + _SLASH,
    ),
    _p(
        "stripe_key",
        _B + r"((?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20,}|whsec_[A-Za-z0-9]{20,})" + _E,
        "Stripe secret (sk_live_/sk_test_) and restricted (rk_live_/rk_test_) keys, webhook secrets (whsec_)",
        r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{20}|whsec_[A-Za-z0-9]{20}",
        ("sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_"),
    ),
    _p(
        "huggingface_token",
        _B + r"(hf_[A-Za-z0-9]{30,})" + _E,
        "Hugging Face user access tokens (hf_ and 34 letters)",
        r"hf_[A-Za-z0-9]{30}",
        ("hf_",),
    ),
    _p(
        "telegram_bot_token",
        r"(?:^|bot|[^A-Za-z0-9_:-])(\d{8,10}:[A-Za-z0-9_-]{35})" + _E,
        "Telegram Bot API tokens (core.telegram.org/bots/api: <bot id>:<35 characters>)",
        r"[0-9]{8}:[A-Za-z0-9_-]{35}",
    ),
    _p(
        "jwt",
        _B + r"(eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{10,})" + _E,
        'RFC 7519 JSON Web Tokens in compact form (base64url of {" header and payload)',
        r"eyJ[A-Za-z0-9_-]{8}[A-Za-z0-9_-]*\.eyJ",
        ("eyJ",),
    ),
    _p(
        "tavily_api_key",
        _B + r"(tvly-(?:dev-|prod-)?[A-Za-z0-9]{20,})" + _E,
        "Tavily search API keys (tvly-, as Hermes's own redactor knows them)",
        r"tvly-[A-Za-z0-9-]{20}",
        ("tvly-",),
    ),
    _p(
        "firecrawl_api_key",
        _B + r"(fc-[0-9a-f]{32})" + _E,
        "Firecrawl API keys (fc- and 32 hex, as Hermes's own redactor knows them)",
        r"fc-[0-9a-f]{32}",
        ("fc-",),
    ),
    _p(
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s:/?#@\"'<>\[\]\\]*:([^\s/?#@\"'<>\[\]\\]+)@",
        "RFC 3986 userinfo (scheme://user:password@host): the password only",
        r"(?::|%3[aA])" + _SLASH + r"{2}[^\s/@]*(?::|%3[aA])[^\s/@]+(?:@|%40)",
        accept=_not_marker,
    ),
    _p(
        "authorization",
        r"(?i)\b(?:proxy-)?authorization\\{0,3}[\"']?\s*[:=]\s*\\{0,3}[\"']?\s*(?:bearer|basic|token|digest)\s+"
        r"([A-Za-z0-9._~+/-]{8,}=*)",
        "RFC 9110 Authorization header values (Bearer, Basic, Token credentials)",
        r"(?i:authorization)",
        accept=lambda s: not s.startswith("$"),
    ),
    _p(
        "bearer_token",
        r"(?:^|[^A-Za-z])[Bb]earer\s+([A-Za-z0-9._~+/-]{16,}=*)",
        "RFC 6750 bearer tokens outside an Authorization header (a token of 16+ characters with a digit)",
        r"[Bb]earer\s+[A-Za-z0-9._~+/-]{16}",
        accept=has_digit,
    ),
)


def re2_literal(value: str) -> str:
    """``value`` as an RE2 literal."""
    return "".join(c if c.isalnum() or c == "_" else f"\\x{{{ord(c):x}}}" for c in value)
