"""File modes of what the project writes (SPEC §2, D16): set a umask, read every mode back."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

PRIVATE = (0o700, 0o600)
GROUP = (0o750, 0o640)


@contextlib.contextmanager
def umask(mask: int):
    """The process umask set to ``mask`` (spawned workers inherit it), then restored."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def tree(root: Path) -> list[Path]:
    """``root`` and everything below it."""
    return [root, *sorted(root.rglob("*"))]


def wrong_modes(root: Path, modes: tuple[int, int] = PRIVATE, *, setgid_ok: bool = False) -> dict[str, str]:
    """Every folder under ``root`` (itself included) not of ``modes[0]`` and every file not
    of ``modes[1]``: ``{path: octal mode}``. ``setgid_ok``: a folder's setgid bit is allowed."""
    folder_mode, file_mode = modes
    bad = {}
    for path in tree(root):
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            if (mode & ~stat.S_ISGID if setgid_ok else mode) != folder_mode:
                bad[str(path)] = oct(mode)
        elif mode != file_mode:
            bad[str(path)] = oct(mode)
    return bad


def names(root: Path) -> set[str]:
    """The names of everything under ``root`` (to check the walk saw each kind of file)."""
    return {p.name for p in tree(root)}


def open_up(root: Path) -> None:
    """What an older version left under umask 022: folders 0755, files 0644."""
    for path in tree(root):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
