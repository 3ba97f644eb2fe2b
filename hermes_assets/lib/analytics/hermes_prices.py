"""What Hermes's own report says a usage row cost, when Hermes recorded no cost status for it.

``hermes insights`` takes a per-model usage row's stored estimate when the row
says how it was costed (a ``cost_status`` or a ``cost_source``); a row that says
neither (Hermes writes such rows for auxiliary tasks: titles, compression,
vision) it prices itself, from the route the row names (provider, base URL,
model) and the table of rates Hermes ships (:mod:`.hermes_price_table`, written
from Hermes v0.22.2 by ``tools/gen_hermes_prices.py``). These are the rules by
which it finds the row of that table (hermes-agent v0.22.2,
``agent/usage_pricing.py``: ``resolve_billing_route``, ``get_pricing_entry``,
``estimate_usage_cost``), as the project reads them:

1. a provider given with the model as ``anthropic/``, ``openai/`` or ``google/``
   (and no provider of its own) is that provider, the model the rest;
2. ``openai-codex``: a subscription, 0;
3. OpenRouter and Nous (by provider or host): priced from a list Hermes fetches
   over the network; without it (offline, as this project always is) nothing: 0;
4. the providers of the table (``anthropic``, ``openai``/``openai-api``,
   ``minimax``; the Google names and hosts as ``google``; Fireworks by name or host)
   under their table name, any other provider under its own; the model is its last
   path segment (``custom``/``local`` providers and local hosts keep it whole);
5. the row of (provider, model in lower case), else, for Anthropic and Bedrock, of
   the model with dotted versions written with dashes (``4.6`` -> ``4-6``), region
   prefixes and date suffixes dropped;
6. no row (an endpoint's own model list, models.dev: fetched over the network): 0;
7. the cost: each kind of token at its rate per million (above the row's tier, when
   the prompt is larger, the tier's rates for the whole row), plus one request's
   price; a kind of token the row has no rate for makes the cost unknown: 0.

Hermes adds costs as floats; so does :func:`row_cost` (from exact decimals).
"""

from __future__ import annotations

import functools
import re
from decimal import Decimal
from urllib.parse import urlsplit

from hermes_assets.lib.analytics.hermes_price_table import FIELDS, GOOGLE, PRICES, PROVIDERS

_MILLION = Decimal(1_000_000)
#: providers a model name may carry in front of it when the row names no provider
_NAMED_IN_MODEL = frozenset({"anthropic", "openai", "google"})
#: routes Hermes prices from lists it fetches over the network (provider -> host)
_FETCHED = {"openrouter": "openrouter.ai", "nous": "inference-api.nousresearch.com"}
_GOOGLE_HOSTS = ("aiplatform.googleapis.com", "generativelanguage.googleapis.com")
_BEDROCK_REGIONS = ("global.", "us.", "eu.", "apac.", "ap.", "au.", "jp.", "ca.", "sa.", "me.", "af.")
_BEDROCK_SUFFIXES = (r":\d+$", r"-v\d+$", r"-\d{8}$")
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def _host(base_url: str) -> str:
    text = base_url.strip().lower()
    try:
        host = urlsplit(text if "://" in text else f"//{text}").hostname
    except ValueError:
        return ""
    return (host or "").rstrip(".")


def _on(host: str, domain: str) -> bool:
    return host == domain or host.endswith("." + domain)


def route(model: str | None, provider: str | None, base_url: str | None) -> tuple[str, str] | None:
    """The (provider, model) of the table a row is priced by; None when Hermes prices it at 0
    without a table (a subscription, or a route priced from a list fetched over the network)."""
    name = (provider or "").strip().lower()
    model = (model or "").strip()
    host = _host(base_url or "")
    if not name and "/" in model and model.split("/", 1)[0] in _NAMED_IN_MODEL:
        name, model = model.split("/", 1)
    if name == "openai-codex" or any(name == p or _on(host, h) for p, h in _FETCHED.items()):
        return None
    bare = model.split("/")[-1]
    table = PROVIDERS.get(name)
    if table is None and (name in GOOGLE or any(_on(host, h) for h in _GOOGLE_HOSTS)):
        table = "google"
    elif table is None and (name == "fireworks" or _on(host, "api.fireworks.ai")):
        table = "fireworks"
    if table is not None:
        return table, bare
    if name in ("custom", "local") or host in ("localhost", "127.0.0.1"):
        return name or "custom", model
    return name or "unknown", bare


def _dashed(model: str) -> str:
    return re.sub(r"(\d+)\.(\d+)", r"\1-\2", model)


def _normalized(provider: str, model: str) -> str:
    if provider == "anthropic":
        return _dashed(model.removeprefix("anthropic/"))
    if provider == "bedrock":
        name = next((model[len(p) :] for p in _BEDROCK_REGIONS if model.startswith(p)), model)
        name = _dashed(name)
        for suffix in _BEDROCK_SUFFIXES:
            name = re.sub(suffix, "", name)
        return name
    return model


def rates(provider: str, model: str) -> dict[str, Decimal | None] | None:
    """The table's row for a route (:func:`route`), by name (:data:`FIELDS`); None: no row."""
    model = model.lower()
    row = PRICES.get((provider, model))
    if row is None and (other := _normalized(provider, model.strip())) != model:
        row = PRICES.get((provider, other))
    if row is None:
        return None
    values = [None if v is None else Decimal(v) for v in row]
    return dict(zip(FIELDS, values + [None] * (len(FIELDS) - len(values))))


@functools.lru_cache(maxsize=4096)
def _route_rates(model: str | None, provider: str | None, base_url: str | None) -> dict[str, Decimal | None] | None:
    """The table's row a usage row is priced by (:func:`route`, :func:`rates`), found once per route:
    a day's rows name a few routes, each many times (read only: the same dict for every row)."""
    found = route(model, provider, base_url)
    return None if found is None else rates(*found)


def row_cost(model: str | None, provider: str | None, base_url: str | None, tokens: dict[str, int]) -> float:
    """What Hermes's report counts for a usage row it prices itself (the module's rules); 0.0 when
    it knows no price. ``tokens``: the row's input, output, cache read and cache write tokens."""
    row = _route_rates(model or None, provider or None, base_url or None)  # (an empty name is none)
    if row is None:
        return 0.0
    prompt = tokens["input_tokens"] + tokens["cache_read_tokens"] + tokens["cache_write_tokens"]
    threshold = row["tier_threshold_tokens"]
    above = threshold is not None and prompt > threshold
    amount = Decimal(0)
    for kind, rate_name in zip(_TOKENS, FIELDS[:4]):
        rate = row[rate_name]
        if above and row[f"{rate_name}_above"] is not None:
            rate = row[f"{rate_name}_above"]
        if rate is None:
            if tokens[kind]:
                return 0.0  # a kind of token without a rate: Hermes calls the cost unknown
            continue
        amount += Decimal(tokens[kind]) * rate / _MILLION
    if row["request_cost"] is not None:
        amount += row["request_cost"]  # one request: Hermes prices a row as one call
    return float(amount)
