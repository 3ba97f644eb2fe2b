"""Values whose name says secret: assignments, config lines, headers, command-line flags.

:func:`name_says_secret` and :func:`value_is_secret` judge a name and its value
(``FOO_TOKEN=...``, ``"api_key": "..."``, ``X-API-Key: ...``, ``PGPASSWORD=...``,
``--password ...``). :data:`FORMS` are the shapes they come in, each an RE2 program
over a cell's UTF-8 bytes (linear in its length) with a screen every match passes
(the redactor's column screen is built from them). A form finds candidates; the
value is a secret when its name says so and the value can be a credential.

An unquoted value runs to a space, a quote, a backslash (an escaped newline ends
it: ``NAME=value\\nNEXT=``) or a bracket; ``&``, ``;``, ``#`` and ``,`` are part of
it (``POSTGRES_PASSWORD: ab#cd``), except where they begin the next item: ``&&``,
``||``, ``; ``, ``&name=`` and ``,name=`` end it, and so do trailing punctuation
and a YAML comment (`` #``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import re2  # type: ignore[import-untyped]

from hermes_assets.lib.redaction.rule_matcher import re2_options, search_spans

#: an assigned value is redacted from this many characters
MIN_ASSIGNED = 8
#: a value in a credential's own place (``-u user:password``, ``mysql -p...``, ``.netrc``) from this many
MIN_EXPLICIT = 6
#: values that are never secrets, whatever their name says
COMMON = frozenset(
    {"true", "false", "yes", "no", "on", "off", "none", "null", "nil", "undefined", "changeme", "redacted", "required"}
    # a kind of credential named, not one (``auth_method="password"``, ``grant_type: client_credentials``)
    | {"password", "passwd", "passphrase", "secret", "token", "apikey", "api_key", "credential", "credentials"}
    | {"client_credentials", "access_token", "refresh_token", "bearer", "basic", "oauth", "oauth2"}
)

#: words of a variable name that say its value is secret
_SECRET_WORDS = frozenset(
    {"secret", "secrets", "token", "password", "passwd", "pwd", "pass", "passphrase", "credential", "credentials"}
    | {"apikey", "auth", "pat"}
)
#: a word never split into words says secret when it ends in one of these (``PGPASSWORD``, ``SSHPASS``,
#: ``MYSQLPWD``, ``APITOKEN``, ``newpassword``)
_SECRET_ENDINGS = ("password", "passwd", "passphrase", "pass", "pwd", "token", "secret", "apikey", "credentials")
#: words with such an ending that are other words
_NOT_SECRET_WORDS = frozenset({"bypass", "compass", "encompass", "surpass", "trespass", "overpass", "underpass"})
#: pairs of words that say so together (``api_key``, ``apiKey``, ``PRIVATE_KEY``, ``Ocp-Apim-Subscription-Key``)
_SECRET_PAIRS = frozenset(
    {("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key"), ("signing", "key")}
    | {("subscription", "key"), ("master", "key"), ("encryption", "key")}
)
#: a name ending in one of these names something about a secret, not the secret
_NOT_VALUE_WORDS = frozenset(
    {"path", "file", "url", "uri", "endpoint", "name", "names", "id", "type", "count", "counts", "limit", "env"}
    | {"dir", "header", "prefix", "length", "len", "ttl", "expiry", "expires", "usage", "source", "mode", "enabled"}
    | {"required", "tokens", "cmd", "command", "helper", "hint", "policy", "format", "field", "var", "variable"}
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def _word_says_secret(word: str, name: str) -> bool:
    if word in _SECRET_WORDS:
        # ``pat`` (a personal access token) only in an environment-style name (GITHUB_PAT): in a
        # lower-case one it is a pattern (``file_pat``, ``glob_pat``)
        return word != "pat" or name.isupper()
    return word.endswith(_SECRET_ENDINGS) and word not in _NOT_SECRET_WORDS


@lru_cache(maxsize=65536)
def name_says_secret(name: str) -> bool:
    """Whether a variable / key / header / flag name says its value is a credential
    (``OPENAI_API_KEY``, ``apiKey``, ``db.password``, ``FAL_KEY``, ``PGPASSWORD``, ``X-API-Key``);
    ``max_tokens``, ``token_url`` do not."""
    words = [w.lower() for w in _WORD.findall(name)]
    if not words or words[-1] in _NOT_VALUE_WORDS:
        return False
    if any(_word_says_secret(w, name) for w in words):
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
    if len(value) < minimum or value.lower() in COMMON or value.startswith("[REDACTED:"):
        return False
    if value[0] in "$%{<~/." or "://" in value or "(" in value:
        return False
    if "..." in value or "***" in value:  # masked already (Hermes's own mask keeps 6 + ... + 4)
        return False
    if value.isdigit() or len(set(value)) <= 2:
        return False
    return not (_IDENT_PATH.fullmatch(value) and not value.isalpha())


def credential_shaped(value: str) -> bool:
    """A value written after a name and a space (a config line, ``.netrc``): not a word of prose
    (a letter-only value is one: ``Password authentication failed``)."""
    return value_is_secret(value) and not value.isalpha()


# -- the forms -------------------------------------------------------------------------

#: a word that makes a name say secret, in RE2: a superset of :func:`name_says_secret` (a form reads
#: only the names that hold one, and the screens are built from it)
_SECRET_WORD = (
    r"(?:(?i:secret|pass|credential|pwd|token|auth|apikey)|PAT"
    r"|(?i:api|access|private|signing|subscription|master|encryption)[_.-]?(?i:key)|[A-Z0-9][_.-]?KEY)"
)
#: a name from the word that says secret on (where it begins is read by :func:`name_start`)
_NAME_ON = r"(" + _SECRET_WORD + r"[A-Za-z0-9_.-]{0,40})"
#: the same in a screen (what comes before the word is left out: a search finds the word without it);
#: the forms' screens that begin with it are one branch of the column screen (:mod:`.screen`)
SECRET_IN_NAME = _SECRET_WORD + r"[A-Za-z0-9_.-]*"
_QUOTE = r"""\\{0,3}["']"""
#: a line's start: the text's, a newline, an escaped one (and for a header, a quote)
_LINE = r"(?:^|[\n\r]|\\[nr])"
_LINE_OR_QUOTE = r"(?:^|[\n\r\"']|\\[nr])"
_UNQUOTED = r"[^\s'\"\x60\\<>(){}\[\]]"
_DQ = r'[^"\\\n]'
_SQ = r"[^'\\\n]"
_QV = r"""[^"'\\\n]"""
_TOKEN = r"""[^\s'"\\]"""
_IN_LINE = r"""[^\n\r\\"']"""
#: a value's first character that can begin a secret (:func:`value_is_secret` refuses a reference, a
#: percent-escape, a path: ``$%{<~/.``)
_FIRST = r"""[^\s'"\\$%{<~/.]"""
#: a quoted or unquoted value of :data:`MIN_ASSIGNED` characters (every secret value a form reads holds
#: one: a form's ``find`` ends with it, so RE2 passes over a name whose value is too short in C)
_VALUE8 = r"(?:" + _QUOTE + r"[^\\\n]{8}|" + _FIRST + _TOKEN + "{7})"
#: the same of :data:`MIN_EXPLICIT` characters, unquoted
_VALUE6 = _FIRST + _TOKEN + "{5}"
#: a command's text up to an option, on one line (bounded)
_ARGS = r"(?:[^\n\\;|&]|\\[^nr]){0,200}?"
#: a form's value is read from this many bytes after the match's start (then followed by code, so
#: no search ever runs over a long value twice: linear on hostile text)
WINDOW = 256
#: where an unquoted value ends although its characters go on (the next item of a list, a command)
_NEXT = re.compile(r"&&|\|\||;\s|;$|\|\s|[&,;][A-Za-z_][A-Za-z0-9_.-]*=")
_TRAILING = ".,;:)|&!?"


def _unquoted(value: str) -> str:
    """An unquoted value without what follows it (:data:`_NEXT`) and its trailing punctuation."""
    cut = _NEXT.search(value)
    if cut is not None:
        value = value[: cut.start()]
    return value.rstrip(_TRAILING)


def _line_value(value: str) -> str:
    """A YAML / header value: to a comment (`` #``), without trailing spaces."""
    comment = value.find(" #")
    return (value if comment < 0 else value[:comment]).rstrip(" \t")


def _explicit(value: str) -> bool:
    return value_is_secret(value, MIN_EXPLICIT)


def _flag_value(value: str) -> bool:
    return not value.startswith("-") and value_is_secret(value)


def _no_space(value: str) -> bool:
    return " " not in value and "\t" not in value and value_is_secret(value)


@dataclass(frozen=True)
class Value:
    """Where a form's value is: its group in the form's ``extract``, the characters it runs over,
    how it is cleaned and judged."""

    group: int
    chars: str
    judge: Callable[[str], bool] = field(default=value_is_secret, compare=False)
    clean: Callable[[str], str] | None = field(default=None, compare=False)

    @cached_property
    def rest(self) -> re.Pattern[bytes]:
        """The rest of a value longer than :data:`WINDOW` (a linear run: no backtracking)."""
        return re.compile(f"{self.chars}*".encode())


#: the characters of a name (the name of a match runs left over them from the word that says secret)
_NAME_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
#: the longest name read
_NAME_MAX = 120
#: the candidates' texts a form remembers per text searched
_SEEN_MAX = 4096


def name_start(data: bytes, at: int) -> int:
    """Where the name that holds ``data[at]`` begins (a run of name characters, at most :data:`_NAME_MAX`)."""
    stop = max(0, at - _NAME_MAX)
    while at > stop and data[at - 1] in _NAME_CHARS:
        at -= 1
    return at


def _after_space(data: bytes, at: int) -> bool:
    """Whether ``at`` begins the text or follows a space (a command's argument)."""
    return at == 0 or data[at - 1] in b" \t\r\n"


def _after_separator(data: bytes, at: int) -> bool:
    """Whether ``at`` begins a command: the text's start, a space, ``;&|(`` or a quote."""
    return at == 0 or data[at - 1] in b" \t\r\n;&|(\"'"


@dataclass(frozen=True)
class Form:
    """One shape of a name and its value, read in two steps: ``find`` (no group: RE2's fast search,
    its matches short) gives where a candidate begins; ``extract``, anchored there over at most
    :data:`WINDOW` bytes, gives its groups. ``name``: the group of the name in ``extract`` (0: none,
    the form is a credential's own place: the value alone is judged), run left over the name's
    characters; ``values``: where the value may be; ``before``: a test of what precedes the match;
    ``screen``: what every match holds, for the column screen."""

    id: str
    find: str
    extract: str
    screen: str
    name: int
    values: tuple[Value, ...]
    before: Callable[[bytes, int], bool] | None = field(default=None, compare=False)

    @cached_property
    def _programs(self) -> tuple:
        return re2.compile(self.find, re2_options()), re2.compile(self.extract, re2_options())

    def spans(self, data: bytes) -> list[tuple[int, int]]:
        """The byte spans of the secret values of ``data``."""
        find, extract = self._programs
        out: list[tuple[int, int]] = []
        at, size = 0, len(data)
        # what a candidate's text (from the longest name before it to its window's end) gave: a cell
        # repeating one near-match judges it once
        seen: dict[tuple[int, bytes], tuple[int, int] | None] = {}
        while at <= size:
            found = search_spans(find, data, at)
            if found is None:
                break
            start = found[0][0]
            low = start - _NAME_MAX - 1 if start > _NAME_MAX else 0
            key = (start - low, data[low : start + WINDOW + 1])
            if key in seen:
                known = seen[key]
                span, read = (None if known is None else (start + known[0], start + known[1])), 0
            else:
                groups = search_spans(extract, data, start, anchored=True, endpos=min(size, start + WINDOW))
                span, read = self._secret(data, groups) if groups is not None else (None, 0)
                if not read and len(seen) < _SEEN_MAX:
                    seen[key] = None if span is None else (span[0] - start, span[1] - start)
            if span is not None:
                out.append(span)
            # a value read past the window is read once: the candidates inside it are part of it (the
            # search goes on from the next character: ``find`` reads a value, another name may begin in it)
            at = start + 1
            if span is not None or read:
                at = max(at, span[1] if span is not None else 0, read)
        return out

    def _secret(self, data: bytes, groups: list[tuple[int, int]]) -> tuple[tuple[int, int] | None, int]:
        """The secret's span (None: no secret), and where a value that ran past the window ends (0: it
        did not)."""
        if self.before is not None and not self.before(data, groups[0][0]):
            return None, 0
        if self.name:
            start, end = groups[self.name]
            if not name_says_secret(data[name_start(data, start) : end].decode("utf-8", "replace")):
                return None, 0
        for v in self.values:
            start, end = groups[v.group]
            if start < 0:
                continue
            raw = data[start:end].decode("utf-8", "surrogatepass")
            value = v.clean(raw) if v.clean is not None else raw
            read = 0
            if len(value) == len(raw) and end - groups[0][0] >= WINDOW - 1:  # it goes on past the window
                end = v.rest.match(data, end).end()  # type: ignore[union-attr]
                raw = data[start:end].decode("utf-8", "surrogatepass")
                value = v.clean(raw) if v.clean is not None else raw
                read = start + len(value.encode("utf-8", "surrogatepass"))
            if value and v.judge(value):
                return (start, start + len(value.encode("utf-8", "surrogatepass"))), read
            return None, read
        return None, 0


#: the shapes a secret's name and value come in
FORMS: tuple[Form, ...] = (
    Form(
        "assignment",  # shell, .env, INI, kwargs, a URL's query: NAME=value, NAME = "value"
        _SECRET_WORD + r"[A-Za-z0-9_.-]*\s{0,4}(?:=|%3[dD])\s{0,4}" + _VALUE8,
        _NAME_ON + r"\s{0,4}(?:=|%3[dD])\s{0,4}"
        r"(?:\\{0,3}\"(" + _DQ + r"+)|\\{0,3}'(" + _SQ + r"+)|(" + _UNQUOTED + "+))",
        SECRET_IN_NAME + r"\s{0,4}(?:=|%3[dD])\s{0,4}(?:" + _QUOTE + r"[^\\\n]{8}|" + _TOKEN + "{8})",
        1,
        (Value(2, _DQ), Value(3, _SQ), Value(4, _UNQUOTED, clean=_unquoted)),
    ),
    Form(
        "quoted",  # JSON, Python, YAML inline, escaped JSON: "name": "value", name: 'value'
        _SECRET_WORD + r"[A-Za-z0-9_.-]*(?:" + _QUOTE + r")?\s{0,4}:\s{0,4}" + _QUOTE,
        _NAME_ON + r"(?:" + _QUOTE + r")?\s{0,4}:\s{0,4}" + _QUOTE + "(" + _QV + "+)",
        SECRET_IN_NAME + r"(?:" + _QUOTE + r")?\s{0,4}:\s{0,4}" + _QUOTE + _QV + "{8}",
        1,
        (Value(2, _QV),),
    ),
    Form(
        "line",  # YAML, an HTTP header, a header in a command: name: value (to the line's end)
        _LINE_OR_QUOTE + r"[ \t-]{0,40}[A-Za-z0-9_.-]{0,40}" + _SECRET_WORD + r"[A-Za-z0-9_.-]{0,40}[ \t]{0,4}:",
        _LINE_OR_QUOTE + r"[ \t-]{0,40}([A-Za-z0-9_.-]{0,40}" + _SECRET_WORD + r"[A-Za-z0-9_.-]{0,40})"
        r"[ \t]{0,4}:[ \t]{0,4}([^\s'\"#\\]" + _IN_LINE + "*)",
        SECRET_IN_NAME + r"[ \t]*:[ \t]*" + _TOKEN + "{8}",
        1,
        (Value(2, _IN_LINE, judge=_no_space, clean=_line_value),),
    ),
    Form(
        "config_line",  # a config file's line: name value (requirepass, .netrc over lines, pgpass-like)
        _LINE + r"[ \t-]{0,40}[A-Za-z0-9_.-]{0,40}" + _SECRET_WORD + r"[A-Za-z0-9_.-]{0,40}[ \t]+" + _TOKEN,
        _LINE
        + r"[ \t-]{0,40}([A-Za-z0-9_.-]{0,40}"
        + _SECRET_WORD
        + r"[A-Za-z0-9_.-]{0,40})[ \t]+("
        + _TOKEN
        + r"+)[ \t]*(?:$|\n|\r|\\n|\\r)",
        SECRET_IN_NAME + r"[ \t]+" + _TOKEN + "{8}",
        1,
        (Value(2, _TOKEN, judge=credential_shaped),),
    ),
    Form(
        "netrc",  # machine host login user password value
        r"login[ \t]+[^\s]{1,256}[ \t]+(?:password|passwd)[ \t]+" + _VALUE6,
        r"login[ \t]+[^\s]+[ \t]+(?:password|passwd)[ \t]+(" + _TOKEN + "+)",
        r"login[ \t]+[^\s]+[ \t]+pass",
        0,
        (Value(1, _TOKEN, judge=_explicit),),
        before=_after_space,
    ),
    Form(
        "flag",  # a command's option whose name says secret: --password value, --api-key "value"
        r"--[A-Za-z0-9_-]{0,40}" + _SECRET_WORD + r"[A-Za-z0-9_-]{0,40}[ \t]+" + _VALUE8,
        r"--([A-Za-z0-9_-]{0,40}" + _SECRET_WORD + r"[A-Za-z0-9_-]{0,40})[ \t]+(?:" + _QUOTE + r")?(" + _TOKEN + "+)",
        r"--" + SECRET_IN_NAME + r"[ \t]+(?:" + _QUOTE + r")?[^\s'\"\\-]",
        1,
        (Value(2, _TOKEN, judge=_flag_value, clean=_unquoted),),
        before=_after_space,
    ),
    Form(
        "user_password",  # curl -u user:password, --user, --proxy-user, wget/httpie --auth
        r"(?:-u|-U|--user|--proxy-user|--auth|--basic-auth)(?:[ \t]+|=)(?:"
        + _QUOTE
        + r")?[^\s:'\"\\]{1,256}:"
        + _VALUE6,
        r"(?:-u|-U|--user|--proxy-user|--auth|--basic-auth)(?:[ \t]+|=)(?:"
        + _QUOTE
        + r")?[^\s:'\"\\]+:("
        + _TOKEN
        + "+)",
        r"(?:-u|-U|--user|--proxy-user|--auth|--basic-auth)(?:[ \t]+|=)(?:" + _QUOTE + r")?[^\s:'\"\\]+:" + _TOKEN,
        0,
        (Value(1, _TOKEN, judge=_explicit, clean=_unquoted),),
        before=_after_space,
    ),
    Form(
        "client_password",  # a client's own password option: mysql -pSECRET, sshpass -p, redis-cli -a, docker login -p
        r"(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)"
        + _ARGS
        + r"[ \t]-p(?:"
        + _QUOTE
        + r")?"
        + _VALUE6
        + r"|sshpass[ \t]+-p[ \t]*(?:"
        + _QUOTE
        + r")?"
        + _VALUE6
        + r"|redis-cli"
        + _ARGS
        + r"[ \t]-a[ \t]+(?:"
        + _QUOTE
        + r")?"
        + _VALUE6
        + r"|docker[ \t]+login"
        + _ARGS
        + r"[ \t](?:-p|--password)[ \t]+(?:"
        + _QUOTE
        + r")?"
        + _VALUE6,
        r"(?:(?:mysql|mysqldump|mysqladmin|mariadb|mariadb-dump)" + _ARGS + r"[ \t]-p"
        r"|sshpass[ \t]+-p[ \t]*|redis-cli" + _ARGS + r"[ \t]-a[ \t]+"
        r"|docker[ \t]+login" + _ARGS + r"[ \t](?:-p|--password)[ \t]+)(?:" + _QUOTE + r")?(" + _TOKEN + "+)",
        r"mysql|mariadb|sshpass[ \t]+-p|redis-cli|docker[ \t]+login",
        0,
        (Value(1, _TOKEN, judge=_explicit, clean=_unquoted),),
        before=_after_separator,
    ),
)
