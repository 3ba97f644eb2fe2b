"""An object store's own conditional writes, which pyarrow's filesystems do not expose.

Files several hosts write (the analytics of a day, the claims of labels and stores)
are replaced only when they are still the version that was read: S3's ``If-Match``
(and ``If-None-Match: *`` for a file that must not exist yet), GCS's generation
preconditions, Azure's ETags. ``obstore`` (the Python binding of Apache Arrow's Rust
``object_store`` crate) gives all three the same call; the datasets' own files keep
going through ``pyarrow.fs`` (:mod:`.arrow_storage`), which reads Parquet ranges.

Both clients are opened from the one ``HERMES_ASSETS_WAREHOUSE`` URI: the options
pyarrow reads from its query (``endpoint_override``, ``scheme``, ``region``, keys)
are given to ``obstore`` under its own names (:func:`store_config`), and both take
credentials from the same environment (``AWS_*``, Google's application default
credentials, ``AZURE_STORAGE_*``). A version is the store's ETag, with the object's
version or generation when the store gives one (:data:`Version`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlparse

import obstore
import obstore.exceptions
from obstore.exceptions import AlreadyExistsError, PreconditionError

#: the schemes whose uploads are conditional here (pyarrow's names)
CONDITIONAL = frozenset({"s3", "gs", "gcs", "abfs", "abfss"})
#: what separates an ETag from a version in a version token
_SEP = "\x1f"
#: what reaching a warehouse can raise when it cannot be reached or opened (either client's)
UNREACHABLE: tuple[type[Exception], ...] = (OSError, ValueError, obstore.exceptions.BaseError)


class Listed(NamedTuple):
    """An object found by :func:`list_under`: its key below the prefix, size and version."""

    path: str
    size: int
    mtime_ns: int
    version: str


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def store_config(uri: str, region: str | None = None) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(url, config, client options)`` for ``obstore.store.from_url``, from a warehouse URI
    as pyarrow reads it (``s3://bucket/prefix?endpoint_override=…&scheme=http``): the url of
    its bucket (or container), and pyarrow's query options under obstore's names. ``region``:
    the region pyarrow resolved, when the URI names none."""
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    if scheme == "s3":
        if "endpoint_override" in query:
            endpoint = query["endpoint_override"]
            if "://" not in endpoint:
                endpoint = f"{query.get('scheme', 'https')}://{endpoint}"
            config["endpoint"] = endpoint
            client["allow_http"] = endpoint.startswith("http://")
        for ours, theirs in (
            ("region", "region"),
            ("access_key", "access_key_id"),
            ("secret_key", "secret_access_key"),
        ):
            if ours in query:
                config[theirs] = query[ours]
        if "session_token" in query:
            config["session_token"] = query["session_token"]
        if "region" not in config and region:
            config["region"] = region
        if _truthy(query.get("anonymous", "")):
            config["skip_signature"] = True
        if _truthy(query.get("force_virtual_addressing", "")):
            config["virtual_hosted_style_request"] = True
        return f"s3://{parsed.netloc}", config, client
    if scheme in ("gs", "gcs"):
        if "endpoint_override" in query:
            endpoint = query["endpoint_override"]
            config["base_url"] = endpoint if "://" in endpoint else f"{query.get('scheme', 'https')}://{endpoint}"
            client["allow_http"] = config["base_url"].startswith("http://")
        if _truthy(query.get("anonymous", "")):
            config["skip_signature"] = True
        return f"gs://{parsed.netloc}", config, client
    if scheme in ("abfs", "abfss"):
        container, _, host = parsed.netloc.rpartition("@")
        account = host.split(".")[0]
        if not container:  # abfs://<account>.dfs.core.windows.net/<container>/<path>
            container = parsed.path.strip("/").split("/")[0]
        config["account_name"] = account
        if "account_key" in query:
            config["account_key"] = query["account_key"]
        return f"az://{container}", config, client
    raise ValueError(f"{scheme}:// has no conditional writes here ({', '.join(sorted(CONDITIONAL))} do)")


class ObjectStore:
    """One warehouse's bucket (or container) through ``obstore``, opened on first use.
    Paths are pyarrow's (``bucket/key``): the bucket is taken off."""

    def __init__(self, uri: str, bucket: str, region: str | None = None):
        self.uri = uri
        self.bucket = bucket
        self.region = region
        self._store: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_store": None}  # a process opens its own client

    @property
    def store(self) -> Any:
        if self._store is None:
            url, config, client = store_config(self.uri, self.region)
            opener: Any = obstore.store.from_url  # its overloads type each store's config apart
            self._store = opener(url, config=config, client_options=client)
        return self._store

    def key(self, path: str) -> str:
        head, _, rest = path.strip("/").partition("/")
        if head != self.bucket:
            raise ValueError(f"{path} is not in the bucket {self.bucket}")
        return rest

    def read(self, path: str) -> tuple[bytes, str] | None:
        """The object's bytes and version, in one request; None when there is none."""
        try:
            got = obstore.get(self.store, self.key(path))
        except FileNotFoundError:
            return None
        return bytes(got.bytes()), version_of(got.meta)

    def put_if(self, path: str, data: bytes, expected: str | None) -> bool:
        """Write ``data`` when the object is still at version ``expected`` (None: when there
        is no object); False, nothing written, when it is not."""
        mode: Any = "create"
        if expected is not None:
            e_tag, _, version = expected.partition(_SEP)
            mode = {k: v for k, v in (("e_tag", e_tag), ("version", version)) if v}
        try:
            obstore.put(self.store, self.key(path), data, mode=mode, use_multipart=False)
        except (PreconditionError, AlreadyExistsError):
            return False
        except FileNotFoundError:  # an update of an object deleted meanwhile (GCS, Azure)
            return False
        return True

    def list_under(self, base: str) -> Iterator[Listed]:
        """Every object under ``base`` (a folder), with its version (one listing)."""
        prefix = self.key(base)
        skip = len(prefix) + 1 if prefix else 0
        for chunk in obstore.list(self.store, prefix or None, chunk_size=1000):
            for meta in chunk:
                rel = str(meta["path"])[skip:]
                stamp = meta["last_modified"].timestamp()
                yield Listed(rel, int(meta["size"]), int(stamp * 1e9), version_of(meta))


def version_of(meta: Any) -> str:
    """A version token of an object's metadata: its ETag, and its version or generation."""
    return f"{meta.get('e_tag') or ''}{_SEP}{meta.get('version') or ''}"
