"""Secrets redacted on capture, before any row is built (SPEC §7 "Secrets").

Hermes writes ``state.db`` verbatim: a key pasted in a turn, echoed by the
model, passed to a tool or printed by one is stored in the clear. Each
session's cells are redacted here, as read, so no dataset, path or store
ever holds one.

What is a secret: a credential in the format its issuer documents (the
:data:`PATTERNS` table, each entry naming its source), the value of an
assignment whose name says secret (shell, ``.env``, INI, YAML, JSON forms),
and every value Hermes itself holds in its ``.env`` files (the Hermes home's
and each profile's), wherever it appears. Never: UUIDs, hex digests, ids,
paths, URLs without credentials, names of variables, prose. There is no
entropy scoring (it would eat every hash).

What replaces a secret: ``[REDACTED:<kind>:<8 hex>]``, the hex an
HMAC-SHA256 of the secret under a key private to the warehouse
(:func:`load_key`), so one secret has one marker everywhere, and a guess
cannot be confirmed from a marker. The text around a secret is kept; JSON
stays JSON (keys kept, values redacted inside, nested JSON strings too).

Fast path: a cell is first screened with substring tests (:func:`Redactor.
screen`); the patterns only run on the few cells that contain a hint.
"""

from __future__ import annotations

import bisect
import glob
import hashlib
import hmac
import json
import os
import re
import secrets as _random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib import schemas

#: bumped whenever the patterns change what they find: files written under an older
#: version are redacted again by the next run
REDACTION_VERSION = 1
#: the Parquet key-value metadata key that records it
VERSION_KEY = b"hermes_assets.redaction_version"
MARKER_PREFIX = "[REDACTED:"
KEY_BYTES = 32
#: a value of a ``.env`` file under a name that says secret is held from this many characters
MIN_NAMED_VALUE = 8
#: a value of a ``.env`` file under any other name, from this many (and credential-shaped)
MIN_UNNAMED_VALUE = 20
#: an assigned value (``FOO_TOKEN=...``) is redacted from this many characters
MIN_ASSIGNED = 8

#: values that are never secrets, whatever their name says
_COMMON = frozenset(
    {"true", "false", "yes", "no", "on", "off", "none", "null", "nil", "undefined", "changeme", "redacted", "required"}
)

_B = r"(?<![A-Za-z0-9_-])"  # a token starts here (not inside a longer one)
_E = r"(?![A-Za-z0-9_-])"  # and ends here


def _has_digit(value: str) -> bool:
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
) -> Pattern:
    return Pattern(kind, re.compile(regex), source, tuple(hints), group, accept, re.compile(screen) if screen else None)


#: credentials in their issued formats, most specific first (an ``sk-ant-`` key is Anthropic's)
PATTERNS: tuple[Pattern, ...] = (
    _p(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:(?:(?!-----END)[\s\S]){0,65536}?-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"|(?:(?:\\[nr]|\s)*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]{1,30}: [^\n\\]{0,200}))*)",
        "RFC 7468 textual encodings (PEM) of PKCS#1/#8, OpenSSH, PGP private keys; an unterminated block to its last base64 line",
        ("PRIVATE KEY",),
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
        accept=_has_digit,
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
    ),
    _p(
        "aws_access_key_id",
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])",
        "AWS IAM access key ids (AKIA long-term, ASIA temporary; 20 characters)",
        ("AKIA", "ASIA", "ABIA", "ACCA"),
    ),
    _p(
        "aws_secret_access_key",
        r"(?i)aws_?secret_?(?:access_?)?key\\?[\"']?\s*[:=]\s*\\?[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        "AWS secret access keys (40 base64 characters) in their assignment forms (credentials file, env, JSON)",
        ("ecret",),
        group=1,
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
        accept=_has_digit,
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
        "url_password",
        r"\b[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s:/?#@\"'<>\[\]\\]*:([^\s/?#@\"'<>\[\]\\]+)@",
        "RFC 3986 userinfo (scheme://user:password@host): the password only",
        ("://",),
        group=1,
        accept=lambda s: not s.startswith(MARKER_PREFIX),
    ),
    _p(
        "authorization",
        r"(?i)\b(?:proxy-)?authorization\\?[\"']?\s*[:=]\s*\\?[\"']?\s*(?:bearer|basic|token|digest)\s+([A-Za-z0-9._~+/-]{8,}=*)",
        "RFC 9110 Authorization header values (Bearer, Basic, Token credentials)",
        ("uthorization", "UTHORIZATION"),
        group=1,
        accept=lambda s: not s.startswith("$"),
    ),
    _p(
        "bearer_token",
        r"(?<![A-Za-z])[Bb]earer\s+([A-Za-z0-9._~+/-]{16,}=*)",
        "RFC 6750 bearer tokens outside an Authorization header (a token of 16+ characters with a digit)",
        ("earer",),
        group=1,
        accept=_has_digit,
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


def name_says_secret(name: str) -> bool:
    """Whether a variable / key name says its value is a credential (``OPENAI_API_KEY``,
    ``apiKey``, ``db.password``, ``FAL_KEY``); ``max_tokens``, ``token_url`` do not."""
    words = [w.lower() for w in _WORD.findall(name)]
    if not words or words[-1] in _NOT_VALUE_WORDS:
        return False
    if any(w in _SECRET_WORDS for w in words):
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
    if len(value) < minimum or value.lower() in _COMMON or value.startswith(MARKER_PREFIX):
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
_ASSIGN_EQ = re.compile(
    r"(?<![A-Za-z0-9_.])" + _NAME + r"\s{0,4}=\s{0,4}(\\?[\"']?)" + _VALUE + r"(?=\\?[\"'\s;&|,)\]}]|$)"
)
#: ``"name": "value"``, ``'name': 'value'``, ``name: "value"`` (JSON, Python, YAML inline; JSON escaped in a string)
_ASSIGN_COLON = re.compile(
    r"(?<![A-Za-z0-9_.-])(\\{0,3}[\"']?)" + _NAME + r"\1\s{0,4}:\s{0,4}(\\{0,3}[\"'])" + r"([^\"'\\\n]+)\3"
)
#: ``name: value`` at the start of a YAML line (unquoted: up to a comment or the line's end)
_ASSIGN_YAML = re.compile(r"(?m)^[ \t-]{0,40}" + _NAME + r"[ \t]{0,4}:[ \t]{1,4}([^\s#'\"][^\n#]*?)[ \t]*(?=\s#|$)")
#: JSON keys whose value is a header value (``{"Authorization": "Basic ..."}``)
_HEADER_NAMES = frozenset({"authorization", "proxy-authorization"})
_NAME_HINTS = ("key", "token", "secret", "pass", "pwd", "auth", "credential", "pat")

#: one RE2 alternation (Arrow's ``match_substring_regex``) that every cell holding a secret
#: matches: the screen of a whole column in one pass; only the cells it flags meet the patterns
RE2_SCREENS = (
    r"sk-[A-Za-z0-9_-]{16}",
    r"(?:sk|rk)_(?:live|test)_|whsec_",
    r"AIza[A-Za-z0-9_-]{30}|GOCSPX-|ya29\.|1//0[A-Za-z0-9_-]{20}",
    r"A(?:KIA|SIA|BIA|CCA)[A-Z0-9]{16}",
    r"gh[pousr]_[A-Za-z0-9]{20}|github_pat_",
    r"xox[abposre]-|xapp-|hooks\.slack\.com/",
    r"hf_[A-Za-z0-9]{20}",
    r"\d{8}:[A-Za-z0-9_-]{30}",
    r"eyJ[A-Za-z0-9_-]{8,}\.eyJ",
    r"PRIVATE KEY",
    r"://[^\s/@]*:[^\s/@]+@",
    r"(?i:bearer\s|authorization)",
    # an assignment: a name holding a secret word, ``=`` or ``:``, a value of 8+ characters
    r"(?i:(?:secret|token(?:\b|_)|pass(?:\b|_|w|phrase)|pwd|credential|key(?:\b|_)|auth(?:\b|_|oriz)|pat(?:\b|_))"
    r"[A-Za-z0-9_.-]*\\*[\"']?\s*[:=]"
    r"\s*\\*[\"']?[^\s\"'<>][^\"'<>\n]{7})",
)


def _re2_literal(value: str) -> str:
    """``value`` as an RE2 literal."""
    return "".join(c if c.isalnum() or c == "_" else f"\\x{{{ord(c):x}}}" for c in value)


# -- the marker ----------------------------------------------------------------


def marker(kind: str, digest: str) -> str:
    return f"{MARKER_PREFIX}{kind}:{digest}]"


def load_key(path: str) -> bytes:
    """The warehouse's redaction key: read from ``path``, or created there once (random,
    0600, its folder 0700). It must stay private: a marker confirms a guess to whoever has it."""
    path = os.path.abspath(path)
    try:
        with open(path, "rb") as f:
            key = f.read()
        if len(key) >= 16:
            return key
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    key = _random.token_bytes(KEY_BYTES)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # never replaces a key another process made meanwhile
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    with open(path, "rb") as f:
        return f.read()


# -- the values Hermes holds in its .env files ------------------------------------


def env_files(store_paths: Iterable[str]) -> tuple[str, ...]:
    """The ``.env`` files of the Hermes homes the stores belong to: each home's own and each
    of its profiles' (a store at ``H/state.db`` or ``H/profiles/<p>/state.db`` has home ``H``)."""
    homes: list[str] = []
    for store in store_paths:
        folder = os.path.dirname(os.path.abspath(store))
        parent = os.path.dirname(folder)
        home = os.path.dirname(parent) if os.path.basename(parent) == "profiles" else folder
        for h in (home, folder):
            if h not in homes:
                homes.append(h)
    files: list[str] = []
    for home in homes:
        for path in [
            os.path.join(home, ".env"),
            *sorted(glob.glob(os.path.join(glob.escape(home), "profiles", "*", ".env"))),
        ]:
            if path not in files:
                files.append(path)
    return tuple(files)


_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_.]*)\s*=\s*(.*?)\s*$")


def env_values(paths: Iterable[str]) -> list[str]:
    """The secret values of ``.env`` files (read only; a file that cannot be read holds none).

    Held: a value under a name that says secret from :data:`MIN_NAMED_VALUE` characters; under
    any other name, a credential-shaped value from :data:`MIN_UNNAMED_VALUE` (no space, not a
    path or URL, upper and lower case letters and digits). Never a common word or a number."""
    values: set[str] = set()
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read(1 << 20).splitlines()
        except OSError:
            continue
        for line in lines:
            m = _ENV_LINE.match(line)
            if not m:
                continue
            name, value = m.group(1), m.group(2)
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            elif " #" in value:
                value = value.split(" #", 1)[0].rstrip()
            if _env_value_held(name, value):
                values.add(value)
    return sorted(values, key=lambda v: (-len(v), v))  # longest first: a value never shadows a longer one


def _env_value_held(name: str, value: str) -> bool:
    if not value or value.lower() in _COMMON or value.isdigit() or len(set(value)) <= 2:
        return False
    if name_says_secret(name):
        return len(value) >= MIN_NAMED_VALUE and value[0] not in "$" and "://" not in value
    return (
        len(value) >= MIN_UNNAMED_VALUE
        and not any(c.isspace() for c in value)
        and "/" not in value
        and "://" not in value
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and _has_digit(value)
    )


# -- the redactor ------------------------------------------------------------------


@dataclass(frozen=True)
class RedactionConfig:
    """What a run's redaction needs, as a plain value that travels to worker processes:
    where the key is and which ``.env`` files to read (read in each process, never sent)."""

    key_path: str
    env_files: tuple[str, ...] = ()

    def redactor(self) -> Redactor:
        return Redactor(load_key(self.key_path), env_values(self.env_files))


@dataclass
class Redactor:
    """Redacts text, JSON and session cells with one key. ``counts``: secrets by kind
    since the last :meth:`take_counts`."""

    key: bytes = field(repr=False)
    values: list[str] = field(default_factory=list, repr=False)
    counts: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._digests: dict[str, str] = {}
        self._values = [
            (
                v,
                re.compile(
                    ("(?<![A-Za-z0-9])" if v[0].isalnum() else "")
                    + re.escape(v)
                    + ("(?![A-Za-z0-9])" if v[-1].isalnum() else "")
                ),
            )
            for v in self.values
        ]
        self._hints = tuple(sorted({h for p in PATTERNS for h in p.hints}))
        self._screens = tuple(p.screen for p in PATTERNS if p.screen is not None)
        self._re2 = "|".join([*RE2_SCREENS, *(_re2_literal(v) for v in self.values)])

    def __reduce__(self):  # never pickled with its key and values
        raise TypeError("a Redactor is not pickled: send its RedactionConfig")

    def screen_column(self, values: list) -> list[int]:
        """The indexes of the cells of ``values`` that may hold a secret: one pass of RE2 (in
        Arrow's C++ kernels) over the whole column; a number is never one, a BLOB is read as
        the text it would become."""
        try:
            array = pa.array(values, pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # a cell of another type (hostile data)
            return [
                i
                for i, v in enumerate(values)
                if isinstance(v, (str, bytes))
                and self.screen(v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
            ]
        if array.null_count == len(array):
            return []
        hits = pc.match_substring_regex(array, self._re2)
        return pc.indices_nonzero(pc.fill_null(hits, False)).to_pylist()

    def redact_column(self, values: list) -> list[tuple[int, str]]:
        """``(index, redacted cell)`` of the cells of ``values`` that held a secret."""
        out = []
        for i in self.screen_column(values):
            cell = values[i]
            if not isinstance(cell, str):
                continue
            new = self.text(cell)
            if new is not cell:
                out.append((i, new))
        return out

    def take_counts(self) -> Counter:
        counts, self.counts = self.counts, Counter()
        return counts

    # -- the marker ------------------------------------------------------------

    def marker(self, kind: str, secret: str) -> str:
        digest = self._digests.get(secret)
        if digest is None:
            digest = hmac.new(self.key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:8]
            self._digests[secret] = digest
        self.counts[kind] += 1
        return marker(kind, digest)

    # -- the screen ---------------------------------------------------------------

    def screen(self, text: str) -> bool:
        """Whether ``text`` may hold a secret (False: it certainly holds none)."""
        for hint in self._hints:
            if hint in text:
                return True
        if ":" in text:
            for screen in self._screens:
                if screen.search(text):
                    return True
        if "=" in text or ":" in text:
            low = text.lower()
            for hint in _NAME_HINTS:
                if hint in low:
                    return True
        return any(value in text for value in self.values)

    # -- text -------------------------------------------------------------------

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by its marker (the same object when none)."""
        if not text or not self.screen(text):
            return text
        stripped = text.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                doc = json.loads(text)
            except (ValueError, RecursionError):
                pass
            else:
                if isinstance(doc, (dict, list)):
                    new, changed = self._walk(doc)
                    if not changed:
                        return text
                    compact = '": ' not in text and '", ' not in text
                    return json.dumps(new, ensure_ascii=False, separators=(",", ":") if compact else None)
        if text.startswith("\x00json:"):
            rest = text[len("\x00json:") :]
            done = self.text(rest)
            return text if done is rest else "\x00json:" + done
        return self._patterns(text)

    def _patterns(self, text: str) -> str:
        out = text
        for p in PATTERNS:
            if not p.may_match(out):
                continue
            out = p.regex.sub(self._replacer(p), out)
        for value, regex in self._values:
            if value in out:
                out = regex.sub(lambda m: self.marker("hermes_env", m.group(0)), out)
        if "=" in out or ":" in out:
            low = out.lower()
            if any(h in low for h in _NAME_HINTS):
                out = self._assignments(out)
        return text if out == text else out

    def _replacer(self, p: Pattern) -> Callable[[re.Match[str]], str]:
        def replace(m: re.Match[str]) -> str:
            secret = m.group(p.group)
            if secret.startswith(MARKER_PREFIX) or (p.accept is not None and not p.accept(secret)):
                return m.group(0)
            if p.group == 0:
                return self.marker(p.kind, secret)
            start, end = m.span(p.group)
            base = m.start(0)
            whole = m.group(0)
            return whole[: start - base] + self.marker(p.kind, secret) + whole[end - base :]

        return replace

    def _assignments(self, text: str) -> str:
        def eq(m: re.Match[str]) -> str:
            name, value = m.group(1), m.group(3)
            if not name_says_secret(name) or not value_is_secret(value):
                return m.group(0)
            return m.group(0)[: m.start(3) - m.start(0)] + self.marker("secret_assignment", value)

        def colon(m: re.Match[str]) -> str:
            name, value = m.group(2), m.group(4)
            if not name_says_secret(name) or not value_is_secret(value):
                return m.group(0)
            s, e = m.start(4) - m.start(0), m.end(4) - m.start(0)
            whole = m.group(0)
            return whole[:s] + self.marker("secret_assignment", value) + whole[e:]

        def yaml(m: re.Match[str]) -> str:
            name, value = m.group(1), m.group(2)
            if not name_says_secret(name) or not value_is_secret(value) or " " in value:
                return m.group(0)
            s = m.start(2) - m.start(0)
            whole = m.group(0)
            return whole[:s] + self.marker("secret_assignment", value) + whole[s + len(value) :]

        if "=" in text:
            text = _ASSIGN_EQ.sub(eq, text)
        if ":" in text:
            text = _ASSIGN_COLON.sub(colon, text)
            text = _ASSIGN_YAML.sub(yaml, text)
        return text

    # -- JSON ----------------------------------------------------------------------

    def _walk(self, value: Any) -> tuple[Any, bool]:
        """A JSON value with its strings redacted (keys kept); whether anything changed.
        A string under a key that says secret is a secret whole."""
        if isinstance(value, str):
            new = self.text(value)
            return new, new is not value
        if isinstance(value, list):
            changed = False
            out_list = []
            for item in value:
                new_item, c = self._walk(item)
                out_list.append(new_item)
                changed |= c
            return (out_list, True) if changed else (value, False)
        if isinstance(value, dict):
            changed = False
            out: dict = {}
            for k, v in value.items():
                if isinstance(v, str) and isinstance(k, str) and k.lower() in _HEADER_NAMES:
                    header = f"{k}: "
                    new_header = self.text(header + v)
                    if new_header is not header + v and new_header.startswith(header):
                        out[k] = new_header[len(header) :]
                        changed = True
                        continue
                if isinstance(v, str) and isinstance(k, str) and name_says_secret(k) and value_is_secret(v):
                    if not any(h in v for h in ("{", "[")):
                        out[k] = self.marker("secret_assignment", v)
                        changed = True
                        continue
                new_v, c = self._walk(v)
                out[k] = new_v
                changed |= c
            return (out, True) if changed else (value, False)
        return value, False


# -- a session's cells ---------------------------------------------------------------

#: columns never redacted: ids, hashes, enumerations, the scope path (they hold no secret, and
#: their values are the identity of the rows)
KEEP_COLUMNS = frozenset(
    {
        "id",
        "session_id",
        "parent_session_id",
        "system_prompt_hash",
        "source",
        "created_source",
        "user_id",
        "session_key",
        "chat_id",
        "chat_type",
        "thread_id",
        "cwd",
        "role",
        "tool_call_id",
        "tool_name",
        "effect_disposition",
        "finish_reason",
        "platform_message_id",
        "display_kind",
        "message_uid",
        "absorbed_message_uids",
        "tool_call_uids",
        "tool_call_uid",
    }
)


@dataclass
class BundleCounts:
    """Secrets redacted in sessions' cells, by the table they were in."""

    sessions: Counter = field(default_factory=Counter)
    messages: Counter = field(default_factory=Counter)


def _text_columns(columns: tuple[tuple[str, str, object], ...]) -> tuple[str, ...]:
    return tuple(name for name, sql_type, _ in columns if sql_type == "TEXT" and name not in KEEP_COLUMNS)


#: the TEXT columns redacted, per table (a number is never a secret: Hermes declares these TEXT)
SESSION_TEXT = _text_columns(schemas.SESSION_COLUMNS)
MESSAGE_TEXT = _text_columns(schemas.MESSAGE_COLUMNS)
USAGE_TEXT = _text_columns(schemas.USAGE_COLUMNS)


def redact_bundles(redactor: Redactor, bundles: list[Any]) -> BundleCounts:
    """Redact, in place, every text cell of the sessions as read
    (:class:`~hermes_assets.lib.state_db.SessionBundle`): the sessions' cells (the resolved
    system prompt, the title, ``model_config`` ...), their messages', their per-model usage
    and the cells of columns this contract does not name. Ids, hashes, numbers are kept.

    Every text cell of the sessions is screened in one pass (:meth:`Redactor.screen_column`);
    only the cells it flags are redacted, one by one."""
    counts = BundleCounts()
    redactor.take_counts()
    tables = (
        ([b.session for b in bundles], SESSION_TEXT, counts.sessions),
        ([u for b in bundles for u in b.usage], USAGE_TEXT, counts.sessions),
        ([m for b in bundles for m in b.messages], MESSAGE_TEXT, counts.messages),
    )
    values: list = []
    #: (first index in ``values``, rows, column, counts) of each column gathered
    spans: list[tuple[int, list[dict], str, Counter]] = []
    for rows, columns, counter in tables:
        if not rows:
            continue
        first = rows[0]
        for name in columns:
            if name in first:
                spans.append((len(values), rows, name, counter))
                values += map(itemgetter(name), rows)
    starts = [span[0] for span in spans]
    for i in redactor.screen_column(values):
        start, rows, name, counter = spans[bisect.bisect_right(starts, i) - 1]
        cell = values[i]
        if isinstance(cell, bytes):  # a BLOB in a TEXT column: the text the dataset would hold
            cell = cell.decode("utf-8", "replace")
        elif not isinstance(cell, str):
            continue
        new = redactor.text(cell)
        if new is not cell:
            rows[i - start][name] = new
            counter.update(redactor.take_counts())
    for b in bundles:
        if b.extras:
            b.extras = _redact_tuple(b.extras, redactor.text)
            counts.sessions.update(redactor.take_counts())
        if b.message_extras:
            for mid, cells in b.message_extras.items():
                b.message_extras[mid] = _redact_tuple(cells, redactor.text)
            counts.messages.update(redactor.take_counts())
    return counts


def redact_bundle(redactor: Redactor, bundle: Any) -> BundleCounts:
    """:func:`redact_bundles` of one session."""
    return redact_bundles(redactor, [bundle])


def _redact_tuple(cells: tuple, text: Callable[[str], str]) -> tuple:
    if not any(isinstance(c, str) for c in cells):
        return cells
    return tuple(text(c) if isinstance(c, str) else c for c in cells)


_cached: dict[RedactionConfig, Redactor] = {}


def redactor_for(config: RedactionConfig) -> Redactor:
    """The redactor of ``config`` in this process (its key and ``.env`` values read once)."""
    found = _cached.get(config)
    if found is None:
        _cached.clear()
        found = _cached[config] = config.redactor()
    return found
