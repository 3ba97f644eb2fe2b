"""Point the environment at a test installation, clearing what would leak a developer's setup."""

from __future__ import annotations

#: variables that would leak a developer's real setup into a test
LEAKY = (
    "HERMES_STATE_DB",
    "HERMES_ASSETS_EXECUTOR",
    "HERMES_ASSETS_BUSY_TIMEOUT_MS",
    "HERMES_ASSETS_WORKERS",
    "HERMES_ASSETS_START_DATE",
    "HERMES_ASSETS_FILE_MODE",
    "HERMES_ASSETS_SPOOL",
    "HERMES_ASSETS_REDACT_SECRETS",
    "HERMES_ASSETS_REDACTION_KEY",
)


def use_environment(monkeypatch, environ: dict) -> None:
    for name in LEAKY:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
