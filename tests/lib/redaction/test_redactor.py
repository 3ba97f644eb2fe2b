"""Secrets redacted on capture: every kind found, every look-alike kept, the text around kept.

Credentials are built at run time from their issuers' formats (random characters after
the documented prefix): no token-shaped literal is committed.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import stat
import string

import pytest

from hermes_assets.lib.redaction import session_cells, sources
from hermes_assets.lib.redaction.redactor import RedactionConfig, Redactor

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
URLSAFE = ALNUM + "_-"
MARKER = re.compile(r"\[REDACTED:([a-z0-9_]+):([0-9a-f]{8})\]")


def chars(n: int, alphabet: str = ALNUM, rng: random.Random | None = None) -> str:
    rng = rng or random.Random()
    while True:
        out = "".join(rng.choice(alphabet) for _ in range(n))
        # a random body has a digit and an upper-case letter wherever its alphabet has them, as
        # issued keys do (an identifier-like value with neither is not taken for a secret)
        digit = any(c.isdigit() for c in out) or not any(c.isdigit() for c in alphabet)
        upper = any(c.isupper() for c in out) or not any(c.isupper() for c in alphabet)
        if digit and upper:
            return out


def fake(kind: str) -> str:
    """A fresh fake credential of ``kind``, in its issuer's format."""
    return {
        "openai_api_key": lambda: "sk-" + "proj-" + chars(48, URLSAFE) + "1",
        "openai_legacy": lambda: "sk-" + chars(48),
        "anthropic_api_key": lambda: "sk-" + "ant-" + "api03-" + chars(93, URLSAFE) + "AA",
        "openrouter_api_key": lambda: "sk-" + "or-" + "v1-" + chars(64, HEX),
        "google_api_key": lambda: "AI" + "za" + "Sy" + chars(33, URLSAFE),
        "google_oauth_client_secret": lambda: "GOC" + "SPX-" + chars(28, URLSAFE),
        "google_oauth_token": lambda: "ya" + "29." + "a0" + chars(100, URLSAFE),
        "aws_access_key_id": lambda: "AK" + "IA" + chars(16, UPPER_DIGITS),
        "github_token": lambda: "gh" + random.choice("pousr") + "_" + chars(36),
        "github_fine_grained_token": lambda: "github" + "_pat_" + "11" + chars(20, UPPER_DIGITS) + "_" + chars(59),
        "slack_token": lambda: "xo" + "xb-" + "".join(random.choices(string.digits, k=12)) + "-" + chars(24),
        "stripe_key": lambda: random.choice(("sk", "rk")) + "_" + "live_" + chars(24),
        "huggingface_token": lambda: "h" + "f_" + chars(34, string.ascii_letters),
        "telegram_bot_token": lambda: "".join(random.choices(string.digits, k=10)) + ":" + "AA" + chars(33, URLSAFE),
        "jwt": lambda: (
            "ey" + "JhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + ".ey" + "JzdWIiOiIxMjM0NTY3ODkwIn0" + "." + chars(43, URLSAFE)
        ),
    }[kind]()


#: kinds found by their format alone
FORMAT_KINDS = [
    ("openai_api_key", "openai_api_key"),
    ("openai_legacy", "openai_api_key"),
    ("anthropic_api_key", "anthropic_api_key"),
    ("openrouter_api_key", "openrouter_api_key"),
    ("google_api_key", "google_api_key"),
    ("google_oauth_client_secret", "google_oauth_client_secret"),
    ("google_oauth_token", "google_oauth_token"),
    ("aws_access_key_id", "aws_access_key_id"),
    ("github_token", "github_token"),
    ("github_fine_grained_token", "github_fine_grained_token"),
    ("slack_token", "slack_token"),
    ("stripe_key", "stripe_key"),
    ("huggingface_token", "huggingface_token"),
    ("telegram_bot_token", "telegram_bot_token"),
    ("jwt", "jwt"),
]


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(os.urandom(32))


def kind_of(redactor: Redactor, secret: str, ours: str) -> str:
    """The kind a secret's marker names: the maintained rule that finds it whole, else ours."""
    return redactor.rules.kind_of(secret) or ours


def markers(text: str) -> list[tuple[str, str]]:
    return MARKER.findall(text)


@pytest.mark.parametrize(("maker", "kind"), FORMAT_KINDS)
@pytest.mark.parametrize(
    "around",
    ["{}", "key: {} (rotate it)", "export X={}", 'say "{}".', "{}\nnext line", "(`{}`)", "url?k={}&x=1"],
)
def test_every_format_is_redacted_and_the_text_around_kept(redactor: Redactor, maker: str, kind: str, around: str):
    secret = fake(maker)
    text = "before " + around.format(secret) + " after"
    out = redactor.text(text)
    assert secret not in out
    found = markers(out)
    assert found and found[0][0] == kind_of(redactor, secret, kind)
    # the text around is kept: putting the secret back gives the cell
    assert MARKER.sub(secret, out, count=1) == text


def test_the_kind_names_the_format(redactor: Redactor):
    for maker, kind in FORMAT_KINDS:
        secret = fake(maker)
        out = redactor.text(f"here: {secret} .")
        assert markers(out)[0][0] == kind_of(redactor, secret, kind), maker


def test_slack_webhook_keeps_the_host(redactor: Redactor):
    path = "T" + chars(10, UPPER_DIGITS) + "/B" + chars(10, UPPER_DIGITS) + "/" + chars(24)
    out = redactor.text(f"curl -X POST https://hooks.slack.com/services/{path} -d @msg.json")
    assert path not in out and out.startswith("curl -X POST ") and "[REDACTED:slack_webhook" in out
    assert out.endswith(" -d @msg.json")


@pytest.mark.parametrize("label", ["RSA ", "EC ", "OPENSSH ", "", "ENCRYPTED "])
def test_pem_private_key_blocks(redactor: Redactor, label: str):
    body = "\n".join(chars(64, ALNUM + "+/") for _ in range(6))
    block = f"-----BEGIN {label}PRIVATE KEY-----\n{body}\n-----END {label}PRIVATE KEY-----"
    out = redactor.text(f"id_rsa:\n{block}\nthat was the key")
    assert body[:40] not in out and "PRIVATE KEY" not in out
    assert out.startswith("id_rsa:\n[REDACTED:private_key:") and out.endswith("]\nthat was the key")
    # a block cut short (a truncated tool result) loses its body too
    cut = redactor.text(f"-----BEGIN {label}PRIVATE KEY-----\n{body[:130]}")
    assert body[:40] not in cut


def test_public_keys_and_certificates_are_kept(redactor: Redactor):
    body = chars(64, ALNUM + "+/")
    for block in (
        f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----",
        f"-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----",
    ):
        assert redactor.text(block) == block


@pytest.mark.parametrize(
    "url",
    [
        "postgres://app:{}@db.internal:5432/prod",
        "mysql+pymysql://root:{}@127.0.0.1/x",
        "redis://:{}@cache:6379/0",
        "https://user:{}@example.com/private.git",
    ],
)
def test_connection_url_passwords_only(redactor: Redactor, url: str):
    password = chars(14, ALNUM + "!*")
    text = "DATABASE at " + url.format(password) + " now"
    out = redactor.text(text)
    assert password not in out
    kinds = markers(out)
    assert kinds[0][0] == "url_password"
    assert MARKER.sub(password, out) == text  # scheme, user, host kept


@pytest.mark.parametrize("scheme", ["Bearer", "Basic", "bearer", "Token"])
def test_authorization_values(redactor: Redactor, scheme: str):
    value = chars(40, URLSAFE + ".")
    for text in (
        f"curl -H 'Authorization: {scheme} {value}' https://api.example.com",
        f'{{"headers": {{"Authorization": "{scheme} {value}"}}}}',
        f"authorization={scheme} {value}",
    ):
        out = redactor.text(text)
        assert value not in out, text
        assert scheme in out


def test_bare_bearer_token(redactor: Redactor):
    token = chars(32)
    out = redactor.text(f"use Bearer {token} for the call")
    assert token not in out and out.startswith("use Bearer [REDACTED:bearer_token:")


ASSIGNMENTS = [
    "export OPENAI_API_KEY={}",
    "OPENAI_API_KEY={}",
    'OPENAI_API_KEY="{}"',
    "MY_SERVICE_TOKEN='{}'",
    "DB_PASSWORD = {}",
    "FAL_KEY={}",
    "client_secret={}",
    "aws_secret_access_key = {}",
    "    api_key: {}",
    "password: {}  # prod",
    '{{"OPENAI_API_KEY": "{}"}}',
    "{{'apiKey': '{}'}}",
    'token: "{}"',
    "--api-key={}",
    "SECRET_KEY={}; echo ok",
    'client = OpenAI(api_key="{}")',
]


@pytest.mark.parametrize("form", ASSIGNMENTS)
def test_values_of_assignments_whose_name_says_secret(redactor: Redactor, form: str):
    value = chars(24, ALNUM + "_-")
    text = "run:\n" + form.format(value) + "\nthen"
    out = redactor.text(text)
    assert value not in out, out
    assert MARKER.sub(value, out) == text


def test_aws_secret_key_in_a_credentials_file(redactor: Redactor):
    key_id, secret = fake("aws_access_key_id"), chars(40, ALNUM + "/+")
    text = f"[default]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\nregion = eu-west-1"
    out = redactor.text(text)
    assert key_id not in out and secret not in out
    assert {k for k, _ in markers(out)} == {kind_of(redactor, key_id, "aws_access_key_id"), "aws_secret_access_key"}
    assert out.endswith("\nregion = eu-west-1")


NEGATIVES = [
    "123e4567-e89b-12d3-a456-426614174000",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "session 20260601_090000_ab12cd and message 4242",
    "/home/user/projects/token-service/src/secret_store.py",
    "https://example.com/docs?page=2&sort=asc",
    "git@github.com:org/repo.git",
    'key = os.environ["OPENAI_API_KEY"]',
    'os.environ["OPENAI_API_KEY"]',
    "api_key = os.getenv('OPENAI_API_KEY')",
    "OPENAI_API_KEY=$OPENAI_API_KEY",
    "token = settings.github_token",
    "max_tokens=4096 token_count=12345678",
    "sorted(rows, key=lambda r: r.id)",
    "sort_key=created_at_desc",
    "TOKEN_URL=https://oauth2.googleapis.com/token",
    "password: ********",
    "PASSWORD=changeme",
    "The API key is stored in your keychain; pass the token by reference.",
    "Bearer tokens are described in RFC 6750.",
    "basic authentication is disabled",
    "sk-learn-contrib-compatible-estimators are listed",
    "ghp_short",
    "hf_hub_download(repo_id='x')",
    "AKIA is the prefix of AWS key ids",
    "xoxb- tokens belong to bots",
    "time 12:34:56 and ratio 3:4",
    "eyJhbGciOi is how a JWT starts",
    "-----BEGIN PUBLIC KEY-----",
    "[REDACTED:openai_api_key:0123abcd]",
    '{"model": "gpt-4.1", "temperature": 0.2, "max_tokens": 1024}',
    "postgres://db.internal:5432/prod",
    "user@example.com wrote at 10:00",
    'auth_method="password"',
    'file_pat="src_backup_2024"',
    "OPENAI_API_KEY=YOUR_API_KEY",
    "Authorization: Bearer <token>",
    "api_key: <your-api-key>",
    '{"max_tokens": 4096, "max_completion_tokens": 2048}',
    "grant_type=client_credentials",
]


def generated_look_alikes() -> list[str]:
    """Look-alikes made at run time: ids, digests, blobs a transcript is full of."""
    import base64
    import hashlib
    import uuid

    blob = base64.b64encode(os.urandom(900)).decode()
    return [
        str(uuid.uuid4()),
        f"id {uuid.uuid4()} and {uuid.uuid4().hex}",
        hashlib.sha256(os.urandom(8)).hexdigest(),
        "commit " + hashlib.sha1(os.urandom(8)).hexdigest(),
        "md5 " + hashlib.md5(os.urandom(8)).hexdigest(),
        "data:image/png;base64," + blob,
        blob,
        json.dumps({"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": blob}}),
        "request id req_" + chars(24),
        "msg_01" + chars(22),
        "chatcmpl-" + chars(29),
        "call_" + chars(24),
        "toolu_01" + chars(22),
    ]


@pytest.mark.parametrize("text", NEGATIVES)
def test_look_alikes_are_never_altered(redactor: Redactor, text: str):
    assert redactor.text(text) == text
    assert not redactor.counts


def test_generated_look_alikes_are_never_altered(redactor: Redactor):
    for text in generated_look_alikes():
        assert redactor.text(text) == text, text[:80]
    assert not redactor.counts


def test_same_secret_same_marker_and_a_key_makes_it_unguessable():
    secret = fake("openai_api_key")
    a, b = Redactor(b"k" * 32), Redactor(b"k" * 32)
    m1 = a.text(f"first {secret}")
    m2 = b.text(f"{{'x': 'then {secret} again'}}")
    assert markers(m1)[0] == markers(m2)[0]
    other = Redactor(b"o" * 32).text(f"first {secret}")
    assert markers(other)[0][1] != markers(m1)[0][1]
    # the hex is not a plain hash of the secret
    import hashlib

    assert markers(m1)[0][1] not in hashlib.sha256(secret.encode()).hexdigest()


def test_json_cells_stay_valid_with_their_keys(redactor: Redactor):
    token = fake("github_token")
    value = chars(20)
    args = json.dumps({"command": f"export GITHUB_TOKEN={value} && gh auth status", "env": {"GH_TOKEN": token}})
    cell = json.dumps([{"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": args}}])
    out = redactor.text(cell)
    assert token not in out and value not in out
    doc = json.loads(out)
    assert doc[0]["id"] == "call_1" and doc[0]["function"]["name"] == "terminal"
    inner = json.loads(doc[0]["function"]["arguments"])
    assert set(inner) == {"command", "env"} and set(inner["env"]) == {"GH_TOKEN"}
    assert inner["command"].startswith("export GITHUB_TOKEN=[REDACTED:")
    assert inner["command"].endswith(" && gh auth status")


def test_a_clean_cell_is_returned_as_is(redactor: Redactor):
    text = '{"a": [1, 2, {"b": "token_count"}], "key": "x"}'
    assert redactor.text(text) is text
    prose = "nothing to see: just prose = plain words"
    assert redactor.text(prose) is prose


def test_content_envelopes(redactor: Redactor):
    secret = fake("anthropic_api_key")
    cell = "\x00json:" + json.dumps([{"type": "text", "text": f"my key {secret}"}])
    out = redactor.text(cell)
    assert out.startswith("\x00json:") and secret not in out
    assert json.loads(out[len("\x00json:") :])[0]["text"].startswith("my key [REDACTED:anthropic_api_key:")


# -- the values of Hermes's .env files ----------------------------------------------------


def test_env_values_wherever_they_appear(tmp_path):
    home = tmp_path / ".hermes"
    (home / "profiles" / "work").mkdir(parents=True)
    named, shaped, profile = chars(16, string.ascii_lowercase), chars(28), chars(12, string.ascii_lowercase)
    (home / ".env").write_text(
        f"FIRECRAWL_API_KEY={named}\nSOME_UPSTREAM_ID={shaped}\nTERMINAL_ENV=local\nDEBUG=true\n"
        "TELEGRAM_ALLOWED_USERS=123456789\nLLM_MODEL=gpt-4.1-mini-2025-04-14\nMESSAGING_CWD=/home/u/work\n"
        "SHORT_TOKEN=abc\n# comment\n"
    )
    (home / "profiles" / "work" / ".env").write_text(f'export SUDO_PASSWORD="{profile}"\n')
    files = sources.env_files([str(home / "profiles" / "work" / "state.db")])
    assert str(home / ".env") in files and str(home / "profiles" / "work" / ".env") in files
    values = sources.env_values(files)
    assert set(values) == {named, shaped, profile}
    r = Redactor(os.urandom(32), values)
    for value in values:
        out = r.text(f"it printed {value} here")
        assert value not in out and markers(out)[0][0] == "hermes_env"
    for kept in ("local", "true", "123456789", "gpt-4.1-mini-2025-04-14", "/home/u/work", "abc"):
        assert r.text(f"value {kept} stays") == f"value {kept} stays"
    # a value inside a longer word is another word
    assert r.text(f"x{named}y") == f"x{named}y"


def test_an_unreadable_env_file_holds_no_value(tmp_path):
    assert sources.env_values([str(tmp_path / "missing" / ".env")]) == []


# -- the key -------------------------------------------------------------------------------


def test_the_key_is_created_once_private(tmp_path):
    path = tmp_path / "dagster-home" / "redaction.key"
    key = sources.load_key(str(path))
    assert len(key) == sources.KEY_BYTES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert sources.load_key(str(path)) == key
    assert not [p for p in path.parent.iterdir() if p.name != "redaction.key"]


def test_a_short_key_is_refused_naming_its_file(tmp_path):
    from hermes_assets.lib.basics.errors import ConfigurationError

    path = tmp_path / "redaction.key"
    for size in (0, 8, sources.KEY_BYTES - 1):
        path.write_bytes(os.urandom(size))
        with pytest.raises(ConfigurationError, match=f"{path} holds {size} bytes"):
            sources.load_key(str(path))
    path.write_bytes(os.urandom(sources.KEY_BYTES))
    assert len(sources.load_key(str(path))) == sources.KEY_BYTES


def test_the_version_changes_with_the_env_values_and_not_otherwise(tmp_path):
    key = os.urandom(32)
    base = Redactor(key, ["a" + chars(20)])
    assert Redactor(key, list(base.values)).version == base.version  # the same: a re-run changes nothing
    assert Redactor(key, [*base.values, chars(24)]).version != base.version  # a new .env value
    assert Redactor(os.urandom(32), list(base.values)).version != base.version  # the fingerprint is keyed
    # no .env value: two installations with their own keys write a store without secrets alike
    assert Redactor(key, []).version == Redactor(os.urandom(32), []).version
    assert Redactor(key, []).version.endswith("+env-none") and not base.version.endswith("+env-none")
    rule_set = base.rules.rule_set
    assert base.version.startswith(f"{rule_set.name}-{rule_set.version}-{rule_set.digest[:8]}+ours-")
    from hermes_assets.lib.redaction.redactor import what_changed

    other = base.version.replace("+ours-", "+ours-0")
    assert what_changed(other, base.version) == ["our own rules changed"]
    assert what_changed(None, base.version) == ["written without redaction (or before it existed)"]
    assert what_changed("1", base.version) == ["written by an older redaction"]


def test_a_redactor_never_travels_with_its_key_or_values(tmp_path):
    config = RedactionConfig(str(tmp_path / "k"), (str(tmp_path / ".env"),))
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(TypeError):
        pickle.dumps(config.redactor())


# -- a session's cells ---------------------------------------------------------------------


def test_a_bundle_keeps_its_ids_and_numbers(redactor: Redactor):
    from types import SimpleNamespace

    secret = fake("openai_api_key")
    session = {"id": "s1", "system_prompt": f"use {secret}", "title": f"key {secret}", "input_tokens": 5}
    msg = {"id": 7, "session_id": "s1", "content": f"k={secret}", "tool_call_id": "call_1", "token_count": 3}
    bundle = SimpleNamespace(
        session=session, messages=[msg], usage=[], extras=(f"x {secret}", 4), message_extras={7: (secret,)}
    )
    counts = session_cells.redact_bundle(redactor, bundle)
    kind = kind_of(redactor, secret, "openai_api_key")
    assert counts.sessions == {kind: 3} and counts.messages == {kind: 2}
    assert session["id"] == "s1" and session["input_tokens"] == 5
    assert msg["id"] == 7 and msg["session_id"] == "s1" and msg["tool_call_id"] == "call_1" and msg["token_count"] == 3
    assert secret not in repr((session, msg, bundle.extras, bundle.message_extras))
    assert bundle.extras[1] == 4


def test_a_blob_in_a_text_column_is_redacted_as_its_text(redactor: Redactor):
    from types import SimpleNamespace

    secret = fake("github_token")
    messages = [
        {"id": 1, "session_id": "s", "content": f"token {secret}".encode()},
        {"id": 2, "session_id": "s", "content": b"\xff\xfe " + secret.encode()},
        {"id": 3, "session_id": "s", "content": 42},
    ]
    bundle = SimpleNamespace(session={"id": "s"}, messages=messages, usage=[], extras=None, message_extras=None)
    counts = session_cells.redact_bundles(redactor, [bundle])
    kind = kind_of(redactor, secret, "github_token")
    assert counts.messages == {kind: 2}
    assert messages[0]["content"].startswith(f"token [REDACTED:{kind}:")
    assert secret not in messages[1]["content"] and messages[2]["content"] == 42
