"""Usage policy (SPEC §7): ``.hypignore`` files plus the machine-local list.

Classes, most restrictive first: ``ignore`` (never written), ``local-only``
(written, marked), ``full`` (default). A :class:`PolicyResolver` lives for
one run: it loads the machine-local list eagerly and caches what it reads
on the instance only, so a policy change is seen by the next run. Where the
list lives is a setting (``HERMES_ASSETS_POLICY_LIST``, default
:data:`DEFAULT_LIST`), resolved by the Dagster shell and passed in.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from typing import TypeGuard

import pyarrow as pa
import pyarrow.compute as pc

from hermes_assets.lib.basics.errors import BAD_CLASS_TOKEN, HYPIGNORE_UNREADABLE, PolicyListUnreadable
from hermes_assets.lib.basics.logs import get_logger

IGNORE, LOCAL_ONLY, FULL = "ignore", "local-only", "full"
_RANK = {IGNORE: 0, LOCAL_ONLY: 1, FULL: 2}

#: SPEC §5.7; ``oneshot`` is Hermes v0.22's ``hermes -z`` / ``hermes chat -q``, run in a directory like ``cli``
INTERACTIVE_SOURCES = frozenset({"cli", "tui", "cron", "acp", "subagent", "tool", "import", "oneshot", "unknown"})

HYPIGNORE = ".hypignore"
#: the setting that moves the machine-local list (named in error messages)
LIST_ENV = "HERMES_ASSETS_POLICY_LIST"
DEFAULT_LIST = "~/.hyp/hypaware/usage-policy/local-only.json"
#: only the first line of a ``.hypignore`` matters; never read more than this.
MAX_HYPIGNORE_BYTES = 64 * 1024
_MAX_TOKEN_CHARS = 64


def most_restrictive(*classes: str) -> str:
    """The most restrictive of ``classes`` (``ignore`` > ``local-only`` > ``full``)."""
    return min(classes, key=_RANK.__getitem__, default=FULL)


def is_channel(source: str | None) -> TypeGuard[str]:
    """True for every non-empty source that is not interactive (SPEC §5.7)."""
    return bool(source) and source not in INTERACTIVE_SOURCES


def channel_scope_path(source: str, user_home: str) -> str:
    """The scope path of a channel: ``<user home>/.hermes/channels/<source>``."""
    return f"{user_home.rstrip('/')}/.hermes/channels/{source}"


def scope_path(source: str | None, cwd: str | None, user_home: str) -> str | None:
    """A session's effective scope: the channel scope path, else its cwd (``''`` -> None)."""
    if is_channel(source):
        return channel_scope_path(source, user_home)
    return cwd or None


def _normalize(path: str) -> str:
    """Absolute, lexically normalized, no trailing slash (relative paths anchor at ``/``)."""
    return "/" + os.path.normpath(os.path.join("/", path)).lstrip("/")


def _spellings(path: str) -> set[str]:
    """The path as given and after realpath (symlinks resolved up to the deepest existing ancestor)."""
    try:
        return {path, os.path.realpath(path)}
    except ValueError:  # a NUL in a (corrupt) scope: no file can have that name
        return {path}


def is_under(path: str, root: str) -> bool:
    """Segment-aware containment: ``/a/b/c`` is under ``/a/b``; ``/a/bc`` is not."""
    root = root.rstrip("/") or "/"
    return path == root or root == "/" or path.startswith(root + "/")


def under(paths: pa.ChunkedArray | pa.Array, root: str) -> pa.ChunkedArray | pa.Array:
    """:func:`is_under` over a column of paths (nulls are not under anything)."""
    if pa.types.is_dictionary(paths.type):
        paths = pc.cast(paths, pa.string())
    root = root.rstrip("/") or "/"
    if root == "/":
        return pc.is_valid(paths)
    return pc.fill_null(pc.or_(pc.equal(paths, root), pc.starts_with(paths, root + "/")), False)


class PolicyResolver:
    """Resolves the usage class of scope paths and sessions for one run.

    ``warnings`` collects fail-safe decisions (bad class tokens, unreadable
    ``.hypignore`` files) as small dicts of paths and tokens, for op metadata.
    ``list_path`` is the machine-local list (absent file = no entries).
    """

    def __init__(self, list_path: str):
        self.list_path = os.path.expanduser(list_path)
        self.warnings: list[dict] = []
        self._log = get_logger()
        self._scopes: dict[str, str] = {}
        self._nearest: dict[str, str | None] = {}
        self._entries = self._load_list(self.list_path)

    # -- the machine-local list ----------------------------------------------

    def _load_list(self, path: str) -> list[tuple[str, str]]:
        """Read the list into ``(dir, class)`` pairs, each dir in both spellings."""
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as e:
            raise self._unreadable(path, f"cannot be read ({e.__class__.__name__}: {e})") from e
        except json.JSONDecodeError as e:
            raise self._unreadable(path, f"is not valid JSON ({e.msg}, line {e.lineno})") from e
        pairs = self._parse_list(path, doc)
        entries = [(d, cls) for raw, cls in pairs for d in _spellings(_normalize(raw))]
        self._log.info("hermes.policy.list_loaded", path=path, entries=len(pairs))
        return entries

    def _parse_list(self, path: str, doc: object) -> list[tuple[str, str]]:
        fields: dict = doc if isinstance(doc, dict) else {}  # a list, a number ...: no version
        version = fields.get("version")
        if version == 1 and type(version) is int:
            dirs = fields.get("dirs")
            if isinstance(dirs, list) and all(_is_abs(d) for d in dirs):
                return [(d, LOCAL_ONLY) for d in dirs]
            raise self._unreadable(path, 'is version 1 but "dirs" is not a list of absolute paths')
        if version == 2 and type(version) is int:
            entries = fields.get("entries")
            if isinstance(entries, list) and all(_is_entry(e) for e in entries):
                return [(e["dir"], e["class"]) for e in entries]
            raise self._unreadable(
                path, 'is version 2 but "entries" is not a list of {"dir": "/abs", "class": "ignore|local-only|full"}'
            )
        raise self._unreadable(path, f"has unsupported version {version!r} (expected 1 or 2)")

    def _unreadable(self, path: str, what: str) -> PolicyListUnreadable:
        self._log.error("hermes.policy.list_unreadable", path=path, error_kind=PolicyListUnreadable.error_kind)
        return PolicyListUnreadable(
            f"usage-policy list {path} {what}. Fix or remove the file, or point {LIST_ENV} "
            "at another file; it is never treated as empty.",
            path=path,
        )

    def _list_class(self, scope: str) -> str:
        """Class of the deepest matching entry (ties: most restrictive); ``full`` if none."""
        best_depth, best = -1, FULL
        for root, cls in self._entries:
            if is_under(scope, root):
                depth = 0 if root == "/" else root.count("/")
                if depth > best_depth:
                    best_depth, best = depth, cls
                elif depth == best_depth:
                    best = most_restrictive(best, cls)
        return best

    # -- .hypignore files ----------------------------------------------------

    def _nearest_hypignore(self, directory: str) -> str | None:
        """Class of the nearest ``.hypignore`` at or above ``directory``; None when there is none.

        A loop, not recursion: a (hostile) scope may have thousands of components.
        """
        walked: list[str] = []
        current, found = directory, None
        while True:
            if current in self._nearest:
                found = self._nearest[current]
                break
            walked.append(current)
            found = self._read_hypignore(os.path.join(current, HYPIGNORE))
            parent = os.path.dirname(current)
            if found is not None or parent == current:
                break
            current = parent
        for seen in walked:
            self._nearest[seen] = found
        return found

    def _read_hypignore(self, path: str) -> str | None:
        """The class one file states; None when no file exists. Unreadable -> ``ignore``."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except (FileNotFoundError, NotADirectoryError):
            if os.path.lexists(path):  # a dangling symlink is a file we cannot read
                return self._warn_unreadable(path, "dangling_symlink")
            return None
        except OSError as e:
            return self._warn_unreadable(path, e.__class__.__name__)
        except ValueError:  # a NUL in a (corrupt) scope: whether a file governs it cannot be checked
            return self._warn_unreadable(path, "invalid_path")
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return self._warn_unreadable(path, "not_a_regular_file")
            data = os.read(fd, MAX_HYPIGNORE_BYTES)
        except OSError as e:
            return self._warn_unreadable(path, e.__class__.__name__)
        finally:
            os.close(fd)
        return self._class_of(path, data.decode("utf-8", errors="replace"))

    def _class_of(self, path: str, text: str) -> str:
        for line in text.split("\n"):
            tokens = line.split("#", 1)[0].replace("\ufeff", " ").split()
            if not tokens:
                continue
            if tokens[0] in (IGNORE, LOCAL_ONLY):
                return tokens[0]
            token = tokens[0][:_MAX_TOKEN_CHARS]
            self.warnings.append({"event": BAD_CLASS_TOKEN, "path": path, "token": token})
            self._log.warning("hermes.policy.bad_class_token", path=path, token=token, applied=IGNORE)
            return IGNORE
        return IGNORE  # empty or comment-only

    def _warn_unreadable(self, path: str, reason: str) -> str:
        self.warnings.append({"event": HYPIGNORE_UNREADABLE, "path": path, "reason": reason})
        self._log.warning("hermes.policy.unreadable_hypignore", path=path, reason=reason, applied=IGNORE)
        return IGNORE

    # -- public API ----------------------------------------------------------

    def classify_scope(self, scope: str | None) -> str:
        """Class of one scope path (None or ``''`` -> ``full``), cached on this resolver."""
        if not scope:
            return FULL
        key = _normalize(scope)
        if key not in self._scopes:
            classes = [
                cls
                for path in _spellings(key)
                for cls in (self._nearest_hypignore(path) or FULL, self._list_class(path))
            ]
            self._scopes[key] = most_restrictive(*classes)
        return self._scopes[key]

    def classify_sessions(self, sessions: Mapping[str, tuple[str | None, str | None]]) -> dict[str, str]:
        """``sid -> (scope, parent sid)`` to ``sid -> effective class``.

        A session's class is the most restrictive of its own and every ancestor
        reachable through ``parent_session_id`` within ``sessions``; a parent
        missing from the mapping contributes nothing, and cycles are cut.
        """
        result: dict[str, str] = {}
        for sid in sessions:
            chain: list[str] = []
            seen: dict[str, int] = {}
            cur: str | None = sid
            while cur is not None and cur in sessions and cur not in result and cur not in seen:
                seen[cur] = len(chain)
                chain.append(cur)
                cur = sessions[cur][1] or None
            tail = result.get(cur, FULL) if cur is not None else FULL
            start = seen.get(cur, len(chain)) if cur is not None else len(chain)
            if start < len(chain):  # the chain loops back: the whole loop shares one class
                tail = most_restrictive(*(self.classify_scope(sessions[s][0]) for s in chain[start:]))
                result.update({s: tail for s in chain[start:]})
            for s in reversed(chain[:start]):
                tail = result[s] = most_restrictive(self.classify_scope(sessions[s][0]), tail)
        return result


def _is_abs(value: object) -> bool:
    return isinstance(value, str) and value.startswith("/")


def _is_entry(value: object) -> bool:
    return isinstance(value, dict) and _is_abs(value.get("dir")) and value.get("class") in _RANK
