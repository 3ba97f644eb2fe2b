"""What the projection takes from outside the store: the user's home, the clock, git (SPEC §5.8)."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field

_CREDENTIALS = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)[^@/]*@")


def strip_credentials(remote: str | None) -> str | None:
    if not remote:
        return None
    return _CREDENTIALS.sub(r"\1", remote.strip()) or None


class GitResolver:
    """``git`` look-ups of SPEC §5.8, cached per (cwd, run). Tests inject a fake."""

    def __init__(self, timeout_s: float = 2.0):
        self.timeout_s = timeout_s
        self._cache: dict[tuple[str, str], str | None] = {}

    def toplevel(self, cwd: str) -> str | None:
        return self._git(cwd, "rev-parse", "--show-toplevel")

    def remote(self, cwd: str) -> str | None:
        return strip_credentials(self._git(cwd, "config", "--get", "remote.origin.url"))

    def _git(self, cwd: str, *args: str) -> str | None:
        key = (cwd, args[-1])
        if key not in self._cache:
            self._cache[key] = self._run(cwd, args)
        return self._cache[key]

    def _run(self, cwd: str, args: tuple[str, ...]) -> str | None:
        if not os.path.isdir(cwd):
            return None
        try:
            done = subprocess.run(
                ["git", "-C", cwd, *args],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                stdin=subprocess.DEVNULL,  # local look-ups only: nothing to prompt for
            )
        except (OSError, subprocess.SubprocessError):
            return None
        out = done.stdout.strip()
        return out if done.returncode == 0 and out else None


class NoGit(GitResolver):
    """A resolver that knows no repositories (deterministic tests, HypAware parity)."""

    def _run(self, cwd: str, args: tuple[str, ...]) -> str | None:
        return None


@dataclass
class ProjectionContext:
    """Everything the projection takes from outside the store."""

    user_home: str
    now_s: float
    git: GitResolver = field(default_factory=GitResolver)
    gateway_source: str = "backfill"
