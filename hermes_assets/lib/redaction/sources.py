"""What a run's redaction reads: the warehouse's key, and the values Hermes holds in its ``.env`` files.

The key (:func:`load_key`) makes the markers: one secret, one marker, and no guess
confirmed without the key. The ``.env`` values (:func:`env_values`) are redacted
wherever they appear, even without a recognizable format; they are read, never
written or logged, and kept in memory only.
"""

from __future__ import annotations

import glob
import os
import re
import secrets as _random
from collections.abc import Iterable

from hermes_assets.lib.basics.errors import ConfigurationError
from hermes_assets.lib.redaction.assignments import COMMON, name_says_secret
from hermes_assets.lib.redaction.rules import has_digit

#: the bytes of a key made here, and the fewest a key may hold (fewer: a marker could be
#: confirmed by trying keys)
KEY_BYTES = 32
#: a value of a ``.env`` file under a name that says secret is held from this many characters
MIN_NAMED_VALUE = 8
#: a value of a ``.env`` file under any other name, from this many (and credential-shaped)
MIN_UNNAMED_VALUE = 20


def load_key(path: str) -> bytes:
    """The warehouse's redaction key: read from ``path``, or created there once (random,
    0600, its folder 0700). It must stay private: a marker confirms a guess to whoever has it.
    A key shorter than :data:`KEY_BYTES` is refused (:func:`key_too_short`)."""
    path = os.path.abspath(path)
    try:
        return _read_key(path)
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
    return _read_key(path)


def _read_key(path: str) -> bytes:
    with open(path, "rb") as f:
        key = f.read()
    problem = key_too_short(len(key))
    if problem:
        raise ConfigurationError(f"{path} {problem}")
    return key


def key_too_short(size: int) -> str | None:
    """Why a key of ``size`` bytes cannot be used (None: it can)."""
    if size >= KEY_BYTES:
        return None
    return (
        f"holds {size} bytes: a redaction key needs at least {KEY_BYTES} (random; remove the file and "
        "the next run makes one, or point every host at one shared key)"
    )


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
    if not value or value.lower() in COMMON or value.isdigit() or len(set(value)) <= 2:
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
        and has_digit(value)
    )
