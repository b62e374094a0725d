"""The create body: what a recreation sends, from the recorded node, machines.json's overrides and
gcloud's defaults (pure; the end-to-end checks are in test_tpu_gcloud.py). See docs/reference/machines-json.md §3.3
on TPU machines."""

from __future__ import annotations

from typing import Any

import pytest

from jobtpu.schema.nodespec import create_body, for_zone, type_of_config

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


V4_32 = {"type": "V4", "topology": "2x2x4"}


@pytest.mark.parametrize(("config", "name"), [
    ({"type": "V4", "topology": "2x2x4"}, "v4-32"), ({"type": "V5P", "topology": "2x2x1"}, "v5p-8"),
    ({"type": "V5LITE_POD", "topology": "4x4"}, "v5litepod-16"), ({"type": "V6E", "topology": "2x4"}, "v6e-8"),
    ({"type": "V9", "topology": "2x2"}, None), ({"type": "V4", "topology": "2xtwo"}, None), ("V4", None)])
def test_an_accelerator_config_names_its_type(config: Any, name: str | None) -> None:
    assert type_of_config(config) == name


def test_a_recorded_topology_is_sent_again_while_it_is_the_same_accelerator() -> None:
    recorded = {"acceleratorType": "v4-32", "acceleratorConfig": V4_32, "runtimeVersion": "tpu-ubuntu2204-base"}
    body = create_body(recorded, {"acceleratorType": "v4-32"})
    assert body["acceleratorConfig"] == V4_32 and "acceleratorType" not in body


def test_a_recorded_config_the_api_names_by_type_only_is_kept_by_that_name() -> None:
    recorded = {"acceleratorType": "v9-8", "acceleratorConfig": {"type": "V9", "topology": "2x2"},
                "runtimeVersion": "v9-base"}
    assert create_body(recorded, {"acceleratorType": "v9-8"})["acceleratorConfig"]["type"] == "V9"


def test_machines_json_naming_another_accelerator_drops_the_recorded_topology() -> None:
    recorded = {"acceleratorType": "v4-32", "acceleratorConfig": V4_32, "runtimeVersion": "tpu-ubuntu2204-base"}
    body = create_body(recorded, {"acceleratorType": "v4-64"})
    assert body["acceleratorType"] == "v4-64" and "acceleratorConfig" not in body


def test_an_override_config_wins_over_the_type() -> None:
    body = create_body({"acceleratorType": "v4-32"}, {"acceleratorConfig": {"type": "V4", "topology": "4x4x2"}})
    assert body["acceleratorConfig"]["topology"] == "4x4x2" and "acceleratorType" not in body
    assert body["runtimeVersion"] == "tpu-ubuntu2204-base"  # gcloud's default for the config's generation


def test_nested_overrides_merge_key_by_key_and_gcloud_defaults_fill_the_rest() -> None:
    recorded = {"acceleratorType": "v3-8", "networkConfig": {"network": "research", "enableExternalIps": False},
                "schedulingConfig": {"preemptible": True}}
    body = create_body(recorded, {"networkConfig": {"enableExternalIps": True},
                                  "schedulingConfig": {"spot": True}})
    assert body["networkConfig"] == {"network": "research", "enableExternalIps": True}
    assert body["schedulingConfig"] == {"preemptible": False, "spot": True}  # the API takes one
    assert create_body({"acceleratorType": "v6e-8"}, {})["networkConfig"] == {"enableExternalIps": True}


def test_a_node_moved_to_another_region_leaves_disks_and_subnetwork_behind() -> None:
    spec = {"dataDisks": [{"sourceDisk": "d"}], "networkConfig": {"network": "n", "subnetwork": "s"}}
    assert for_zone(spec, "europe-west4-a", "europe-west4-b") == {"networkConfig": {"network": "n", "subnetwork": "s"}}
    assert for_zone(spec, "europe-west4-a", "us-central1-b") == {"networkConfig": {"network": "n"}}
    assert for_zone(spec, "europe-west4-a", "europe-west4-a") == spec
