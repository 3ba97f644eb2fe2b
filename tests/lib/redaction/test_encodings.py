"""Secrets as cells really hold them: JSON escaped once or twice (valid or cut short), URL-encoded,
a private key in base64, ``.env`` values in every form; a JSON cell redacted in place.

Values are built at run time (:func:`tests.lib.redaction.test_redactor.chars`); nothing token-shaped
is committed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.parse

import pytest

from hermes_assets.lib.redaction.redactor import Redactor
from tests.lib.redaction.test_redactor import ALNUM, MARKER, chars, fake

KEY = os.urandom(32)


def redactor(values: list[str] | None = None) -> Redactor:
    return Redactor(KEY, sorted(values or [], key=lambda v: (-len(v), v)))


def only_markers_changed(before: str, after: str) -> None:
    """``after`` is ``before`` byte for byte except where a marker stands."""
    pieces = MARKER.split(after)
    pattern = ".+?".join(re.escape(p) for p in pieces[::3])
    assert re.fullmatch(pattern, before, re.S), after


def test_a_json_cell_keeps_its_formatting_byte_for_byte():
    token, value = fake("github_token"), chars(20)
    args = json.dumps({"command": f"export GITHUB_TOKEN={value} && gh auth status", "env": {"GH_TOKEN": token}})
    cell = json.dumps(
        [{"id": "call_1", "type": "function", "function": {"name": "terminal", "arguments": args}}],
        indent=2,
        ensure_ascii=True,
    ).replace('"type"', '"type"  ')  # spacing no writer would choose
    out = redactor().text(cell)
    assert token not in out and value not in out
    only_markers_changed(cell, out)
    assert json.loads(out)[0]["function"]["name"] == "terminal"


@pytest.mark.parametrize("depth", [1, 2])
def test_json_escaped_once_and_twice_and_cut_short(depth: int):
    secret, password = fake("openai_api_key"), chars(18)
    inner = f'{{"api_key": "{secret}", "db": {{"password": "{password}"}}, "pem": "x"}}'
    for _ in range(depth):
        inner = json.dumps(inner)[1:-1]
    for cell in (f'{{"arguments": "{inner}"}}', f'{{"arguments": "{inner[: len(inner) - 12]}'):  # valid, cut short
        out = redactor().text(cell)
        assert secret not in out and password not in out, out
        only_markers_changed(cell, out)


def test_escaped_newlines_end_a_value_and_kubectl_output_after_a_warning_is_read():
    token, password = chars(24), chars(16)
    output = (
        f'Warning: v1 is deprecated\n{{\n  "data": {{"DB_PASSWORD": "{password}"}}\n}}\nAPI_TOKEN={token}\nPATH=/bin'
    )
    cell = json.dumps({"output": output})[:-5]  # a tool's result, cut short
    out = redactor().text(cell)
    assert token not in out and password not in out
    assert "\\nPATH=/" in out  # the next line is kept: the value ended at the escaped newline


@pytest.mark.parametrize(
    "form",
    ["POSTGRES_PASSWORD: {}", "POSTGRES_PASSWORD={}", 'db_password = "{}"', '{{"password": "{}"}}'],
)
def test_values_holding_ampersands_semicolons_and_hashes_are_redacted_whole(form: str):
    value = chars(6) + "#" + chars(4) + "&" + chars(3) + ";" + chars(3)
    out = redactor().text(form.format(value))
    assert not any(part in out for part in value.split("#")[1:]), out
    assert value.split("#")[0] not in out


def test_a_url_query_ends_a_value_at_the_next_parameter():
    token = chars(24)
    out = redactor().text(f"GET /v1/items?access_token={token}&page=2&sort=asc")
    assert token not in out and out.endswith("&page=2&sort=asc")


def test_url_encoded_secrets():
    password = chars(10) + "#&/+" + chars(6)
    key = fake("anthropic_api_key")
    cell = "body: " + urllib.parse.urlencode({"password": password, "user": "ann", "note": f"key {key}"})
    out = redactor().text(cell)
    assert urllib.parse.quote_plus(password) not in out and key not in out
    assert "user=ann" in out


def test_a_private_key_in_base64_is_redacted_at_every_alignment():
    body = "\n".join(chars(64, ALNUM + "+/") for _ in range(4))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\n"
    for prefix in ("", "a", "ab"):
        blob = base64.b64encode((prefix + pem).encode()).decode()
        for cell in (f"tls.key: {blob}", json.dumps({"data": {"tls.key": blob}})):
            out = redactor().text(cell)
            assert blob[8:40] not in out, (prefix, cell[:40])
            assert "[REDACTED:private_key:" in out


COMMANDS = [
    "curl -u deploy:{} https://api.example.com",
    "curl --user 'deploy:{}' https://api.example.com",
    "mysql -h db -uroot -p{} shop",
    "mysqldump --user=root --password={} shop",
    "sshpass -p {} ssh ops@host",
    "redis-cli -h cache -a {} ping",
    "docker login -u ci -p {} registry.example.com",
    "psql --host db --password {} shop",
    "llm keys --api-key {} list",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_command_line_credential_flags(command: str):
    secret = chars(14)
    out = redactor().text(command.format(secret))
    assert secret not in out, out


HEADERS = ["X-API-Key: {}", "api-key: {}", "X-Auth-Token: {}", "Private-Token: {}", "Ocp-Apim-Subscription-Key: {}"]


@pytest.mark.parametrize("header", HEADERS)
def test_api_key_headers_other_than_authorization(header: str):
    secret = chars(32)
    for cell in (
        header.format(secret),
        f"curl -H '{header.format(secret)}' https://x",
        json.dumps({"headers": {header.split(":")[0]: secret}}),
    ):
        out = redactor().text(cell)
        assert secret not in out, cell


@pytest.mark.parametrize(
    "config",
    [
        "machine api.example.com login ann password {}",
        "machine api.example.com\n  login ann\n  password {}\n",
        "requirepass {}\n",
        "[client]\npassword {}\n",
    ],
)
def test_config_files_that_part_name_and_value_by_a_space(config: str):
    secret = chars(12) + "7"
    out = redactor().text(config.format(secret))
    assert secret not in out, out


@pytest.mark.parametrize("name", ["PGPASSWORD", "MYSQL_PWD", "SSHPASS", "REDISCLI_AUTH", "DBPASS", "APITOKEN"])
def test_all_caps_compound_names(name: str):
    secret = chars(16)
    out = redactor().text(f"export {name}={secret}")
    assert secret not in out


@pytest.mark.parametrize(
    "prose",
    [
        "Password authentication failed for user postgres",
        "the token is refreshed hourly",
        "BYPASS=proxy.internal.example",
    ],
)
def test_prose_after_a_secret_word_is_kept(prose: str):
    assert redactor().text(prose) == prose


def test_env_values_in_every_encoding_have_the_marker_of_the_value():
    value = chars(22) + "/+"
    r = redactor([value])
    plain = MARKER.search(r.text(f"it is {value} here"))
    assert plain is not None
    once = json.dumps(value)[1:-1].replace("/", "\\/")
    twice = json.dumps(json.dumps(value))[1:-1]
    forms = [
        json.dumps({"out": value}),
        '{"out": "' + once + '"}',
        '{"args": "' + twice + '"}',
        "q=" + urllib.parse.quote(value, safe=""),
        "Basic " + base64.b64encode(f"ann:{value}".encode()).decode(),
        base64.b64encode(value.encode()).decode(),
    ]
    for cell in forms:
        out = r.text(cell)
        assert plain.group(0) in out, cell
        assert value not in out and once not in out and urllib.parse.quote(value, safe="") not in out


def test_a_key_whose_header_an_earlier_unclosed_header_runs_into_is_redacted_in_a_percent_encoded_url():
    """An unclosed private-key header (a service account's JSON cut short) runs the maintained rule's
    match over the lines after it to the next key's header; in a tool call's URL, percent-encoded,
    only the URL-decoded view finds that match, and an escape inside it (a Windows path) must not
    make it give way to what the JSON views (escaped twice: another call's arguments) found inside
    it (a token): the next key would be in no finding at all."""
    # the rule's body takes any character (no run of base64 our own PEM finder would read as a body)
    body = " ".join("-".join(chars(7) for _ in range(3)) for _ in range(4))
    key = "-----BEGIN " + "PRIVATE KEY-----" + body + "KEY-----"
    token = fake("github_token")
    text = "".join(
        f"- {line}\n"
        for line in (
            '{"private_key": "-----BEGIN ' + "RSA PRIVATE KEY-----" + chars(4) + "}",
            "path C:\\Users\\ann\\" + chars(8),
            f"x = {token}",
            f"x = {key}",
        )
    )
    url = "https://search.example/?q=" + urllib.parse.quote(text, safe="")
    calls = [("write_file", {"path": "notes.md", "content": "notes\n"}), ("web_fetch", {"url": url})]
    cell = json.dumps([{"function": {"name": name, "arguments": json.dumps(args)}} for name, args in calls])
    out = redactor().text(cell)
    args = json.loads(json.loads(out)[1]["function"]["arguments"])
    assert key not in urllib.parse.unquote(args["url"]) and token not in out
    only_markers_changed(cell, out)
