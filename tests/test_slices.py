"""A machines.json TPU entry of N slices (docs/reference/machines-json.md §3.3 `slices`): the N machines
the loader makes of it (home/slices.py), and their one queued resource planned together, table by table
(decide/tpu_group.py). No I/O but the loader's own file: records, nodes and queued resources are built by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from jobtpu.decide.tpu_group import decide_group
from jobtpu.decide.tpu_plan import Sighting
from jobtpu.errors import ConfigError, NotFoundError
from jobtpu.home.layout import Home
from jobtpu.home.machines import load_fleet
from jobtpu.schema.fleet import Machine
from jobtpu.schema.records import MachineRecord, Operation, Setup
from jobtpu.schema.tpu_answers import NodeInfo, OpInfo, QueuedInfo

pytestmark = pytest.mark.fast

NOW = 1_700_000_000.0
SLICES = [Machine(name=f"g-{i}", kind="tpu", node=f"n-{i}", zone="z-a", zones=("z-a",), accelerator="v5p-8",
                  queued_resource={"tier": "spot"}, slices=2, slice_group="g", slice_index=i) for i in range(2)]


def node(i: int, state: str = "READY", created: str = "c1") -> NodeInfo:
    return NodeInfo(f"n-{i}", state, internal=(f"10.0.{i}.1",), create_time=created)


def up(created: str = "c1") -> MachineRecord:
    return MachineRecord(incarnation=created, setup=Setup("done", incarnation=created))


def group(records: list[MachineRecord], nodes: list[NodeInfo | None], queued: QueuedInfo | None,
          ops: list[OpInfo | None] | None = None) -> list[tuple[list[str], str, str]]:
    sightings = [Sighting(m, None, n, (ops or [None, None])[i], queued) for i, (m, n) in enumerate(zip(SLICES, nodes, strict=True))]
    works = decide_group(sightings, records, NOW, first_backoff=30.0)
    return [([s.kind for s in w.plan.steps], w.plan.state, w.plan.detail) for w in works]


ACTIVE, SUSPENDED = QueuedInfo("n", "ACTIVE"), QueuedInfo("n", "SUSPENDED")


# ---- slice 0 drives the queued resource, the others follow ----------------------------------------

@pytest.mark.parametrize(("records", "nodes", "queued", "steps", "states"), [
    # nothing yet: slice 0 asks for the queued resource of every slice; slice 1 waits with it
    (lambda: [MachineRecord(), MachineRecord()], [None, None], None, [["create-queued"], []], ["queued", "queued"]),
    (lambda: [MachineRecord(), MachineRecord()], [None, None], QueuedInfo("n", "WAITING_FOR_RESOURCES"),
     [[], []], ["queued", "queued"]),
    # ACTIVE with one node still CREATING: not whole yet, nothing is set up
    (lambda: [MachineRecord(), MachineRecord()], [node(0), node(1, "CREATING")], ACTIVE, [[], []], ["queued", "queued"]),
    # whole: each slice is a machine of its own, set up on its new incarnation
    (lambda: [MachineRecord(want_recreate=True), MachineRecord(want_recreate=True)], [node(0), node(1)], ACTIVE,
     [["setup"], ["setup"]], ["setting up", "setting up"]),
    (lambda: [up(), up()], [node(0), node(1)], ACTIVE, [[], []], ["up", "up"]),
    # one slice preempted (its queued resource SUSPENDED, or still ACTIVE), or its node gone: the
    # whole queued resource goes, by slice 0's step; the slice still up is being recreated too
    (lambda: [up(), up()], [node(0), node(1, "PREEMPTED")], SUSPENDED, [["delete-queued"], []],
     ["recreating", "recreating"]),
    (lambda: [up(), up()], [node(0, "PREEMPTED"), node(1)], ACTIVE, [["delete-queued"], []],
     ["recreating", "recreating"]),
    (lambda: [up(), up()], [node(0), None], ACTIVE, [["delete-queued"], []], ["recreating", "recreating"]),
    (lambda: [up(), up()], [None, None], QueuedInfo("n", "DELETING"), [[], []], ["recreating", "recreating"]),
    # nodes of these names without a queued resource hold the names: each is deleted first
    (lambda: [MachineRecord(), MachineRecord()], [node(0), None], None, [["delete"], []], ["recreating", "recreating"]),
    (lambda: [MachineRecord(), MachineRecord()], [node(0), node(1, "DELETING")], None, [["delete"], []],
     ["recreating", "recreating"]),
    # slice 0's back-off holds every slice back
    (lambda: [MachineRecord(want_recreate=True, failures=1, next_try=NOW + 60, last_error="no capacity"),
              MachineRecord(want_recreate=True)], [None, None], None, [[], []], ["backoff", "backoff"]),
    # a stray node's delete in flight is waited on
    (lambda: [MachineRecord(want_recreate=True, operation=Operation("delete", "op-1", NOW)),
              MachineRecord(want_recreate=True)], [node(0, "DELETING"), None], None, [[], []],
     ["recreating", "recreating"]),
    # put down by `jobtpu tpu delete`: left down until asked for again
    (lambda: [MachineRecord(kept_down=True), MachineRecord(kept_down=True)], [None, None], None, [[], []],
     ["preempted", "preempted"]),
    # ... which a job's rule does, through any slice
    (lambda: [MachineRecord(kept_down=True), MachineRecord(kept_down=True, want_recreate=True)], [None, None], None,
     [["create-queued"], []], ["queued", "queued"]),
])
def test_slice_0_drives_the_queued_resource_of_every_slice(records: Any, nodes: list[NodeInfo | None],
                                                           queued: QueuedInfo | None, steps: list[list[str]],
                                                           states: list[str]) -> None:
    made = records()
    whole = queued is not None and queued.state == "ACTIVE" and all(n and n.state == "READY" for n in nodes)
    ops: list[OpInfo | None] = [OpInfo("op-1", False), None] if made[0].operation else [None, None]
    said = group(made, nodes, queued, ops)
    assert [s[0] for s in said] == steps and [s[1] for s in said] == states, said
    if nodes[1] is None or whole:  # the slices that follow show what slice 0 shows
        assert said[1][2] == said[0][2] or steps[1], said
    assert {r.want_recreate for r in made} == {not whole and not made[0].kept_down}  # one want for all


def test_a_lost_slice_says_which_and_a_failed_queued_resource_says_why() -> None:
    said = group([up(), up()], [node(0), node(1, "PREEMPTED")], ACTIVE)
    assert "slice 1: Google preempted the node" in said[0][2] and said[1][2] == said[0][2]
    records = [up(), up()]
    sightings = [Sighting(m, None, None, None, QueuedInfo("n", "FAILED", "valid_for ran out")) for m in SLICES]
    works = decide_group(sightings, records, NOW)
    assert works[0].plan.steps[0].detail == "valid_for ran out"  # slice 0 backs off, then tries the next zone
    assert [r.queued_state for r in records] == ["FAILED", "FAILED"]


def test_nothing_is_deleted_under_a_job_still_active_on_a_slice() -> None:
    """Its stop (signal, grace) comes first; the next pass after it deletes the queued resource."""
    sightings = [Sighting(m, None, n, None, SUSPENDED) for m, n in zip(SLICES, [node(0), node(1, "PREEMPTED")],
                                                                       strict=True)]
    works = decide_group(sightings, [up(), up()], NOW, busy=(7,))
    assert [w.plan.steps for w in works] == [[], []]
    assert all(w.plan.detail.startswith("waiting for job(s) 7 to stop before deleting the SUSPENDED queued resource")
               and w.plan.state == "recreating" for w in works), works
    strays = [Sighting(m, None, n, None, None) for m, n in zip(SLICES, [node(0), None], strict=True)]
    assert [w.plan.steps for w in decide_group(strays, [MachineRecord(), MachineRecord()], NOW, busy=(7,))] == [[], []]


def test_a_group_put_down_by_hand_says_how_to_bring_it_back() -> None:
    said = group([MachineRecord(kept_down=True), MachineRecord(kept_down=True)], [None, None], None)
    assert all("`jobtpu tpu apply` brings every slice back" in s[2] for s in said), said


# ---- the loader ------------------------------------------------------------------------------------

def fleet_of(tmp_path: Path, **entry: Any) -> Any:
    tmp_path.mkdir(exist_ok=True)
    machines = {"g": {"kind": "tpu", "node": "n", "zone": "z-a", "accelerator": "v5p-8", **entry}}
    (tmp_path / "machines.json").write_text(json.dumps({"gcp": {"project": "p"}, "machines": machines}))
    return load_fleet(Home(tmp_path))


def test_an_entry_of_n_slices_is_n_machines_of_one_queued_resource(tmp_path: Path) -> None:
    fleet = fleet_of(tmp_path, slices=3, setup=["echo hi"], spot=True)
    assert [(m.name, m.node, m.slice_group, m.slice_index, m.queued_resource_id) for m in fleet.machines.values()] == [
        ("g-0", "n-0", "g", 0, "n"), ("g-1", "n-1", "g", 1, "n"), ("g-2", "n-2", "g", 2, "n")]
    assert all(m.setup == ("echo hi",) and m.zone == "z-a" and m.accelerator == "v5p-8" and m.preemptible
               for m in fleet.machines.values())
    assert {m.queued_resource["tier"] for m in fleet.machines.values()} == {"spot"}
    assert [m.name for m in fleet.slices_of("g")] == ["g-0", "g-1", "g-2"] and fleet.slices_of("g-0") == []
    assert fleet.resolve("n-1").name == "g-1"  # a slice's node names it, as a node names its machine
    with pytest.raises(NotFoundError, match="'g' is 3 slices, each a machine: g-0, g-1, g-2"):
        fleet.resolve("g")
    on_demand = fleet_of(tmp_path, slices=2, queued_resource={"tier": "guaranteed", "valid_for": 60})
    assert on_demand.machines["g-1"].queued_resource == {"tier": "guaranteed", "valid_for": 60}
    assert fleet_of(tmp_path, slices=2).machines["g-0"].queued_resource == {"tier": "best-effort"}


def test_a_tpu_without_slices_is_the_machine_it_always_was(tmp_path: Path) -> None:
    fleet = fleet_of(tmp_path)
    machine = fleet.machines["g"]
    assert (machine.node, machine.slice_group, machine.slice_index, machine.queued_resource) == ("n", None, None, None)
    assert "slices" not in msgspec.to_builtins(machine) and machine.queued_resource_id == "n"


@pytest.mark.parametrize(("entry", "said"), [
    ({"slices": 1}, "'slices' must be a whole number of slices from 2 to 64 (got 1)"),
    ({"slices": "2"}, "'slices' must be a whole number of slices from 2 to 64 (got '2')"),
    ({"slices": True}, "'slices' must be a whole number of slices from 2 to 64 (got True)"),
    ({"slices": 65}, "'slices' must be a whole number of slices from 2 to 64 (got 65)"),
    ({"slices": 2, "queued_resource": False}, "'slices' needs a queued resource"),
    ({"slices": 2, "aliases": ["big"]}, "'aliases' cannot name an entry of 2 slices"),
    ({"slices": 2, "kind": "ssh", "hosts": ["h"]}, "'slices' is only for kind tpu"),
])
def test_a_bad_slices_entry_is_one_line_naming_it(tmp_path: Path, entry: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError) as e:
        fleet_of(tmp_path, **entry)
    assert e.value.message.startswith("machines.json: machine 'g': ") and said in e.value.message, e.value.message
    assert "\n" not in e.value.message


def test_a_slice_s_name_is_nobody_else_s(tmp_path: Path) -> None:
    machines = {"g-1": {"kind": "local"}, "g": {"kind": "tpu", "node": "n", "zone": "z", "accelerator": "v5p-8",
                                                "slices": 2}}
    (tmp_path / "machines.json").write_text(json.dumps({"gcp": {"project": "p"}, "machines": machines}))
    with pytest.raises(ConfigError, match="the name 'g-1' is taken twice"):
        load_fleet(Home(tmp_path))
