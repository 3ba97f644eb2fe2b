"""``defs/resources.py``: the resources take their values from the one settings object,
with the settings' own types (declared once, SPEC §10)."""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Union, get_args, get_origin

import pydantic
import pytest
from pydantic.fields import FieldInfo

from hermes_assets.defs import resources, settings
from hermes_assets.defs.resources import CaptureRuntime, HermesStores, HermesWarehouse, UsagePolicy
from hermes_assets.lib.storage.local_files import FILE_MODES

#: resource class -> {its field: the setting it comes from}
FROM_SETTINGS = {
    HermesStores: {"state_db": "state_db", "hermes_home": "hermes_home", "busy_timeout_ms": "busy_timeout_ms"},
    HermesWarehouse: {"root": "warehouse", "spool": "spool", "file_mode": "file_mode"},
    UsagePolicy: {"list_path": "policy_list", "user_home": "user_home"},
    CaptureRuntime: {"workers": "workers"},
}
ENVIRON = {
    "HERMES_STATE_DB": "/data/a/state.db:/data/b/state.db",
    "HERMES_HOME": "/home/h/.hermes",
    "HERMES_ASSETS_BUSY_TIMEOUT_MS": "1234",
    "HERMES_ASSETS_WAREHOUSE": "s3://bucket/prefix",
    "HERMES_ASSETS_SPOOL": "/var/spool/hermes",
    "HERMES_ASSETS_FILE_MODE": "group",
    "HERMES_ASSETS_POLICY_LIST": "/etc/hermes/policy.json",
    "HERMES_ASSETS_WORKERS": "3",
}


def test_each_resource_takes_its_values_from_the_settings():
    s = settings.load(ENVIRON)
    built = resources.resources_for(s)
    assert {k: type(v) for k, v in built.items()} == {
        "hermes": HermesStores,
        "warehouse": HermesWarehouse,
        "usage_policy": UsagePolicy,
        "capture_runtime": CaptureRuntime,
    }
    for resource in built.values():
        fields = FROM_SETTINGS[type(resource)]
        assert {f: getattr(resource, f) for f in fields} == {f: getattr(s, name) for f, name in fields.items()}
    assert built["capture_runtime"].workers == 3 and built["warehouse"].file_mode == "group"


def _shape(info: FieldInfo) -> tuple[object, list]:
    """A field's type and constraints, whether or not it may be None (a resource may leave a
    setting unset where the settings always give one)."""
    members = [a for a in get_args(info.annotation) if a is not type(None)]
    inner = members[0] if get_origin(info.annotation) in (Union, UnionType) and len(members) == 1 else info.annotation
    metadata = list(info.metadata)
    if get_origin(inner) is Annotated:
        inner, *extra = get_args(inner)
        metadata += extra
    return inner, metadata


@pytest.mark.parametrize("kind", list(FROM_SETTINGS), ids=lambda k: k.__name__)
def test_a_resource_field_has_its_settings_type(kind):
    """The same type and the same constraints: a value the settings refuse, the resource refuses."""
    for field, name in FROM_SETTINGS[kind].items():
        ours, theirs = _shape(kind.model_fields[field]), _shape(settings.Settings.model_fields[name])
        assert ours == theirs, (kind.__name__, field)


@pytest.mark.parametrize(
    "build",
    [
        lambda: HermesWarehouse(root="/w", file_mode="world"),
        lambda: HermesStores(busy_timeout_ms=0),
        lambda: CaptureRuntime(workers=0),
        lambda: HermesWarehouse(root="s4://bucket/x"),
    ],
    ids=["file_mode", "busy_timeout_ms", "workers", "warehouse scheme"],
)
def test_a_resource_refuses_what_the_settings_refuse(build):
    with pytest.raises(pydantic.ValidationError):
        build()


def test_the_warehouse_opens_with_the_named_file_modes(tmp_path):
    for name, modes in FILE_MODES.items():
        assert HermesWarehouse(root=str(tmp_path / name), file_mode=name).open().modes == modes
