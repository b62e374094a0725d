"""machines.json (docs/reference/machines-json.md §3): every kind validated, precise errors, defaults, and the home it lives in."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from jobtpu.errors import ConfigError
from jobtpu.home.layout import Home, find_home
from jobtpu.home.machines import load_fleet, split_host
from jobtpu.schema.fleet import DEFAULT_ERROR_PATTERNS, Fleet
from tests.helpers import cli, jobtpu

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


# The example of docs/reference/machines-json.md §3.1.
REFERENCE_EXAMPLE = {
    "defaults": {"user": "ubuntu", "port": 22, "identity_file": "~/.ssh/id_ed25519",
                 "root": "jobtpu", "host_key_policy": "accept-new", "connect_timeout": 10},
    "gcp": {"project": "my-project", "api_endpoint": None, "credentials": "default"},
    "machines": {
        "local": {"kind": "local", "resources": {"slot": 2}},
        "a100": {"kind": "ssh", "hosts": ["10.0.0.5"], "resources": {"gpu": 8}},
        "v3-32-p1": {"kind": "tpu", "node": "kmh-tpuvm-v3-32-preemptible-1", "zone": "europe-west4-a",
                     "accelerator": "v3-32", "preemptible": True,
                     "runtime_version": "tpu-ubuntu2204-base", "setup": ["bash ~/setup.sh"]},
    },
    "config_aliases": {"lr": "config.training.learning_rate", "bs": "config.training.batch_size"},
    "error_patterns": {"grpc": ["GRPC error", "DEADLINE_EXCEEDED", "Socket closed"]},
}


def load(tmp_path: Path, doc: Any) -> Fleet:
    home = Home(tmp_path)
    home.machines_file.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return load_fleet(home)


def refused(tmp_path: Path, doc: Any) -> str:
    home = Home(tmp_path)
    text = doc if isinstance(doc, str) else json.dumps(doc)
    home.machines_file.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_fleet(home)
    assert home.machines_file.read_text() == text  # never rewritten
    assert "\n" not in info.value.message and str(home.machines_file) in (info.value.hint or "")
    return info.value.message


def ssh(**spec: Any) -> dict[str, Any]:
    return {"machines": {"m": {"kind": "ssh", "hosts": ["10.0.0.5"], **spec}}}


def tpu(**spec: Any) -> dict[str, Any]:
    base = {"kind": "tpu", "node": "n1", "zone": "europe-west4-a", "accelerator": "v3-8"}
    return {"gcp": {"project": "p"}, "machines": {"t": {**base, **spec}}}


# ---- valid files -----------------------------------------------------------------------------------

def test_no_machines_json_is_one_local_machine(tmp_path: Path) -> None:
    fleet = load_fleet(Home(tmp_path))
    assert list(fleet.machines) == ["local"]
    m = fleet.machines["local"]
    assert (m.kind, m.capacity, m.hosts, m.root) == ("local", {"slot": 1}, (), str(tmp_path / "run"))
    assert fleet.error_patterns == DEFAULT_ERROR_PATTERNS and fleet.config_aliases == {}
    assert not (tmp_path / "machines.json").exists()  # nothing is written for it


def test_a_file_without_machines_is_one_local_machine(tmp_path: Path) -> None:
    fleet = load(tmp_path, {"config_aliases": {"lr": "config.lr"}})
    assert list(fleet.machines) == ["local"] and fleet.config_aliases == {"lr": "config.lr"}


def test_the_reference_example(tmp_path: Path) -> None:
    fleet = load(tmp_path, REFERENCE_EXAMPLE)
    local, a100, tpu_m = fleet.machines["local"], fleet.machines["a100"], fleet.machines["v3-32-p1"]
    assert local.capacity == {"slot": 2} and local.root == str(tmp_path / "run")
    assert (a100.kind, a100.hosts, a100.capacity, a100.user, a100.port, a100.root) == \
        ("ssh", ("10.0.0.5",), {"slot": 1, "gpu": 8}, "ubuntu", 22, "jobtpu")
    assert (a100.identity_file, a100.host_key_policy, a100.connect_timeout) == ("~/.ssh/id_ed25519", "accept-new", 10.0)
    assert (tpu_m.kind, tpu_m.node, tpu_m.zone, tpu_m.accelerator, tpu_m.preemptible) == \
        ("tpu", "kmh-tpuvm-v3-32-preemptible-1", "europe-west4-a", "v3-32", True)
    assert tpu_m.setup == ("bash ~/setup.sh",) and tpu_m.runtime_version == "tpu-ubuntu2204-base"
    assert tpu_m.default_rule() == "pre" and a100.default_rule() == "pass"
    assert fleet.gcp == {"project": "my-project", "api_endpoint": None, "credentials": "default"}
    assert fleet.config_aliases["lr"] == "config.training.learning_rate"
    # error_patterns given for a class replace that class; the others keep their defaults
    assert fleet.error_patterns["grpc"] == ("GRPC error", "DEADLINE_EXCEEDED", "Socket closed")
    assert fleet.error_patterns["oom"] == DEFAULT_ERROR_PATTERNS["oom"]


def test_error_patterns_extend_the_defaults_when_asked(tmp_path: Path) -> None:
    fleet = load(tmp_path, {"error_patterns": {"extend": True, "grpc": ["NCCL timeout", "Socket closed"]}})
    assert fleet.error_patterns["grpc"] == (*DEFAULT_ERROR_PATTERNS["grpc"], "NCCL timeout")
    assert fleet.error_patterns["oom"] == DEFAULT_ERROR_PATTERNS["oom"]
    assert "'error_patterns.extend' must be true or false" in refused(tmp_path, {"error_patterns": {"extend": "yes"}})


def test_defaults_are_overridden_per_machine(tmp_path: Path) -> None:
    fleet = load(tmp_path, {
        "defaults": {"user": "ubuntu", "port": 2222, "root": "/srv/jr", "connect_timeout": 5,
                     "host_key_policy": "strict", "identity_file": "~/.ssh/team"},
        "gcp": {"project": "p"},
        "machines": {
            "plain": {"kind": "ssh", "hosts": ["a"]},
            "own": {"kind": "ssh", "hosts": ["b", "c:2200"], "user": "alice", "port": 22, "root": "mine",
                    "connect_timeout": 1.5, "host_key_policy": "off", "identity_file": "/k"},
            "tp": {"kind": "tpu", "node": "n", "zone": "z", "accelerator": "v4-8", "port": 22022},
        }})
    plain, own, tp = fleet.machines["plain"], fleet.machines["own"], fleet.machines["tp"]
    assert (plain.user, plain.port, plain.root, plain.connect_timeout, plain.host_key_policy, plain.identity_file) \
        == ("ubuntu", 2222, "/srv/jr", 5.0, "strict", "~/.ssh/team")
    assert (own.user, own.port, own.root, own.connect_timeout, own.host_key_policy, own.identity_file) \
        == ("alice", 22, "mine", 1.5, "off", "/k")
    assert own.hosts == ("b", "c:2200") and split_host(own.hosts[1], own.port) == ("c", 2200)
    assert (tp.user, tp.port, tp.preemptible, tp.default_rule()) == ("ubuntu", 22022, False, "pass")


def test_builtin_defaults(tmp_path: Path) -> None:
    m = load(tmp_path, ssh()).machines["m"]
    assert (m.user, m.port, m.root, m.host_key_policy, m.connect_timeout, m.identity_file) == \
        (None, 22, "jobtpu", "accept-new", 10.0, None)


def test_local_root_lives_in_the_home_unless_given(tmp_path: Path) -> None:
    fleet = load(tmp_path, {"machines": {"a": {"kind": "local"}, "b": {"kind": "local", "root": "elsewhere"},
                                         "c": {"kind": "local", "root": "/abs/place"},
                                         "d": {"kind": "local", "root": None}, "e": {"kind": "local", "root": "~/runs"}},
                            "defaults": {"root": "ignored-for-local"}})
    assert [fleet.machines[n].root for n in "abcde"] == [str(tmp_path / "run"), str(tmp_path / "elsewhere"),
                                                         "/abs/place", str(tmp_path / "run"),
                                                         str(Path("~/runs").expanduser())]


@pytest.mark.parametrize(("host", "expected"), [
    ("10.0.0.5", ("10.0.0.5", 22)), ("10.0.0.5:2222", ("10.0.0.5", 2222)), ("box.example", ("box.example", 22)),
    ("[::1]:2200", ("::1", 2200)), ("[fe80::1]", ("fe80::1", 22)), ("::1", ("::1", 22)),
])
def test_host_forms(host: str, expected: tuple[str, int]) -> None:
    assert split_host(host, 22) == expected


# ---- errors -------------------------------------------------------------------------------------------

def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    text = '{\n  "machines": {\n    "local": {"kind": "local"}\n    "b": {}\n  }\n}\n'
    assert refused(tmp_path, text) == "machines.json:4:5: Expecting ',' delimiter"
    assert refused(tmp_path, '{"machines": {"local": {"kind": "local",}}}').startswith("machines.json:1:")
    assert refused(tmp_path, "").startswith("machines.json:1:1: ")


@pytest.mark.parametrize(("doc", "key", "where", "valid"), [
    ({"machine": {}}, "machine", "the top level", "defaults, gcp, machines, config_aliases, error_patterns"),
    ({"defaults": {"usr": "x"}}, "usr", "defaults", "user, port, identity_file, root, host_key_policy"),
    ({"gcp": {"projet": "p"}}, "projet", "gcp", "project, api_endpoint, credentials"),
    (ssh(hostname="x"), "hostname", "machine 'm'", "kind, hosts, resources, accelerator, preemptible"),
    (tpu(acelerator="v3-8"), "acelerator", "machine 't'", "node, zone"),
    ({"error_patterns": {"segfault": ["SIGSEGV"]}}, "segfault", "error_patterns", "grpc, oom"),
])
def test_unknown_key_is_named_with_the_valid_ones(tmp_path: Path, doc: Any, key: str, where: str, valid: str) -> None:
    message = refused(tmp_path, doc)
    assert message.startswith(f"machines.json: unknown key {key!r} in {where} (valid: ")
    assert valid in message


@pytest.mark.parametrize(("doc", "needle"), [
    ([], "the top level must be an object"),
    ({"machines": {}}, "'machines' must be a non-empty object"),
    ({"machines": []}, "'machines' must be a non-empty object"),
    ({"machines": {"m": "ssh"}}, "machine 'm' must be an object"),
    ({"machines": {"m": {}}}, "machine 'm': 'kind' is missing: it must be one of local, ssh, tpu, slurm"),
    ({"machines": {"m": {"kind": "gce"}}}, "'kind' must be one of local, ssh, tpu, slurm (got 'gce')"),
    ({"machines": {"bad name": {"kind": "local"}}}, "machine name 'bad name'"),
    ({"machines": {"m": {"kind": "ssh"}}}, "machine 'm': an ssh machine needs 'hosts'"),
    (ssh(hosts=[]), "an ssh machine needs 'hosts'"),
    (ssh(hosts="10.0.0.5"), "machine 'm': 'hosts' must be a non-empty list of \"addr\" or \"addr:port\" (got '10.0.0.5')"),
    (ssh(hosts=[""]), "an ssh machine needs 'hosts'"),
    (ssh(hosts=["h:99999"]), "machine 'm': host 'h:99999' has a bad port"),
    (ssh(hosts=["h:0"]), "host 'h:0' has a bad port"),
    (ssh(hosts=["h:ssh"]), "host 'h:ssh' has a bad port"),
    (ssh(hosts=["[::1]:x"]), "host '[::1]:x' has a bad port"),
    (ssh(port=0), "port 0 is out of range"),
    (ssh(port=65536), "port 65536 is out of range"),
    (ssh(port="22"), "'port' must be an integer port"),
    (ssh(port=True), "'port' must be an integer port"),
    (ssh(port=None), "machine 'm': port None is out of range"),
    ({"defaults": {"port": None}, **ssh()}, "port None is out of range"),
    ({"defaults": {"port": 70000}, **ssh()}, "port 70000 is out of range"),
    (ssh(connect_timeout=0), "connect_timeout must be positive"),
    (ssh(connect_timeout=None), "connect_timeout must be positive"),
    (ssh(connect_timeout="10"), "'connect_timeout' must be a number of seconds"),
    (ssh(host_key_policy="yes"), "'host_key_policy' must be one of strict, accept-new, off (got 'yes')"),
    (ssh(user=5), "'user' must be a string"),
    (ssh(root=["x"]), "'root' must be a string"),
    (ssh(resources={"GPU": 1}), "resource 'GPU' must be a lowercase name"),
    (ssh(resources={"gpu": -1}), "resource 'gpu' must be a lowercase name with a count"),
    (ssh(resources={"gpu": True}), "resource 'gpu'"),
    (ssh(resources={"gpu": 1.5}), "resource 'gpu'"),
    (ssh(resources=["gpu"]), "'resources' must map resource names to counts"),
    (ssh(setup="bash setup.sh"), "'setup' must be a list of shell commands"),
    (ssh(preemptible="yes"), "'preemptible' must be true or false"),
    (ssh(labels={"team": 1}), "'labels' must map strings to strings"),
    ({"machines": {"l": {"kind": "local", "hosts": ["x"]}}}, "'hosts' is only for kind ssh"),
    (tpu(hosts=["x"]), "'hosts' is only for kind ssh"),
    (tpu(node=None), "machine 't': a tpu machine needs 'node'"),
    (tpu(zone=""), "a tpu machine needs 'zone'"),
    (tpu(accelerator=None), "a tpu machine needs 'accelerator'"),
    (tpu(use_external_ip="true"), "'use_external_ip' must be true or false"),
    ({"gcp": {"project": 5}}, "'gcp.project' must be a string (got 5)"),
    ({"config_aliases": {"lr": 1}}, "'config_aliases' must map short names to config keys"),
    ({"config_aliases": ["lr"]}, "'config_aliases' must map"),
    ({"error_patterns": {"grpc": "GRPC"}}, "'error_patterns.grpc' must be a list of non-empty strings"),
    ({"error_patterns": {"oom": [""]}}, "'error_patterns.oom' must be a list of non-empty strings"),
])
def test_invalid_files_are_refused_precisely(tmp_path: Path, doc: Any, needle: str) -> None:
    message = refused(tmp_path, doc)
    assert message.startswith("machines.json: ") and needle in message, message


@pytest.mark.parametrize("tpu_missing", ["node", "zone", "accelerator"])
def test_tpu_required_fields(tmp_path: Path, tpu_missing: str) -> None:
    doc = tpu()
    del doc["machines"]["t"][tpu_missing]
    assert refused(tmp_path, doc) == f"machines.json: machine 't': a tpu machine needs '{tpu_missing}'"


# ---- through the CLI: one line, exit 1, file untouched ------------------------------------------------------

def test_cli_reports_a_bad_machines_json_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    text = json.dumps({"machines": {"m": {"kind": "ssh", "hosts": ["10.0.0.5"], "prot": 22}}}, indent=1)
    (home / "machines.json").write_text(text)
    done = jobtpu(home, "machines", "--json", check=False)
    assert done.returncode == 1 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0].startswith("jobtpu: error: machines.json: unknown key 'prot' in machine 'm' (valid: kind, ")
    assert len(lines) == 2 and lines[1].startswith("hint: ")
    assert (home / "machines.json").read_text() == text and not (home / "state.json").exists()
    (home / "machines.json").write_text(json.dumps(REFERENCE_EXAMPLE))
    rows = json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]
    assert [(r["name"], r["kind"], r["free"]) for r in rows] == [
        ("local", "local", {"slot": 2}), ("a100", "ssh", {"slot": 1, "gpu": 8}), ("v3-32-p1", "tpu", {"slot": 1})]


# Malformed machines.json files of every sort, each with a needle its one-line error must hold: wrong
# types, null and unknown keys at every level, numbers beyond any range, text that is not JSON.
TPU_T = {"kind": "tpu", "node": "n", "zone": "z-1", "accelerator": "v3-8"}


def machine_doc(**spec: Any) -> dict[str, Any]:
    return {"machines": {"t": {**TPU_T, **spec}}}


def node_spec(**fields: Any) -> dict[str, Any]:
    return machine_doc(node_spec=fields)


MALFORMED: list[tuple[str, Any, str]] = [
    # the top level and its sections
    ("array", [], "the top level must be an object"),
    ("null", None, "the top level must be an object"),
    ("number", 5, "the top level must be an object"),
    ("unknown top key", {"machine": {}}, "unknown key 'machine' in the top level (valid: defaults, gcp, machines,"),
    ("defaults null", {"defaults": None}, "'defaults' must be an object (got None)"),
    ("defaults port text", {"defaults": {"port": "22"}}, "'defaults.port' must be an integer port (got '22')"),
    ("defaults policy", {"defaults": {"host_key_policy": 1}}, "'defaults.host_key_policy' must be one of strict,"),
    ("defaults unknown", {"defaults": {"users": "u"}}, "unknown key 'users' in defaults (valid: user, port,"),
    ("gcp array", {"gcp": []}, "'gcp' must be an object (got [])"),
    ("gcp credentials", {"gcp": {"credentials": ["k"]}}, "'gcp.credentials' must be a string (got ['k'])"),
    ("gcp backoff text", {"gcp": {"recreate_backoff": "30"}}, "'gcp.recreate_backoff' must be a number of seconds"),
    ("gcp backoff negative", {"gcp": {"recreate_backoff": -1}}, "'gcp.recreate_backoff' must be a number of seconds"),
    ("gcp unknown", {"gcp": {"zone": "z"}}, "unknown key 'zone' in gcp (valid: project, api_endpoint, credentials,"),
    ("tpu without project", {"machines": {"t": TPU_T, "u": TPU_T, "l": {"kind": "local"}}},
     "machines.json: TPU machines (t, u) need gcp.project: add \"gcp\": {\"project\": \"...\"}"),
    ("machines null", {"machines": None}, "'machines' must be a non-empty object of name → machine (got None)"),
    ("machines array", {"machines": [TPU_T]}, "'machines' must be a non-empty object"),
    ("aliases null", {"config_aliases": None}, "'config_aliases' must map short names to config keys"),
    ("alias null", {"config_aliases": {"lr": None}}, "'config_aliases' must map short names to config keys"),
    ("patterns null", {"error_patterns": None}, "'error_patterns' must be an object (got None)"),
    ("pattern number", {"error_patterns": {"oom": [5]}}, "'error_patterns.oom' must be a list of non-empty strings"),
    ("patterns unknown", {"error_patterns": {"hang": ["x"]}}, "unknown key 'hang' in error_patterns (valid: grpc, oom, extend)"),
    # one machine
    ("machine null", {"machines": {"t": None}}, "machine 't' must be an object"),
    ("machine array", {"machines": {"t": [TPU_T]}}, "machine 't' must be an object"),
    ("kind null", machine_doc(kind=None), "machine 't': 'kind' must be one of local, ssh, tpu, slurm (got None)"),
    ("kind number", machine_doc(kind=1), "machine 't': 'kind' must be one of local, ssh, tpu, slurm (got 1)"),
    ("unknown machine key", machine_doc(zones=["z"]), "unknown key 'zones' in machine 't' (valid: kind,"),
    ("hosts object", {"machines": {"s": {"kind": "ssh", "hosts": {"a": 1}}}}, "machine 's': 'hosts' must be a non-empty list"),
    ("host number", {"machines": {"s": {"kind": "ssh", "hosts": [5]}}}, "machine 's': 'hosts' must be a non-empty list"),
    ("node on ssh", {"machines": {"s": {"kind": "ssh", "hosts": ["h"], "node": 5}}}, "machine 's': 'node' must be a string"),
    ("zone on ssh", {"machines": {"s": {"kind": "ssh", "hosts": ["h"], "zone": {}}}}, "machine 's': 'zone' must be a zone"),
    ("resources null", machine_doc(resources=None), "machine 't': 'resources' must map resource names to counts"),
    ("resource text", machine_doc(resources={"gpu": "8"}), "machine 't': resource 'gpu' must be a lowercase name"),
    ("resource huge float", machine_doc(resources={"gpu": 1e300}), "machine 't': resource 'gpu' must be a lowercase name"),
    ("resource huge int", machine_doc(resources={"gpu": 10**30}), "machine 't': resource 'gpu' count 1000000000000000000000000000000"),
    ("port huge int", machine_doc(port=10**30), "machine 't': port 1000000000000000000000000000000 is out of range"),
    ("port float", machine_doc(port=22.5), "machine 't': 'port' must be an integer port (got 22.5)"),
    ("timeout list", machine_doc(connect_timeout=[1]), "machine 't': 'connect_timeout' must be a number of seconds"),
    ("timeout beyond a float", '{"machines": {"t": {"kind": "local", "connect_timeout": 1e400}}}',
     "machine 't': 'connect_timeout' must be a number of seconds (got inf)"),
    ("setup null item", machine_doc(setup=[None]), "machine 't': 'setup' must be a list of shell commands"),
    ("labels array", machine_doc(labels=["a"]), "machine 't': 'labels' must map strings to strings"),
    ("spot number", machine_doc(spot=1), "machine 't': 'spot' must be true or false (got 1)"),
    ("external ip null", machine_doc(use_external_ip=None), "machine 't': 'use_external_ip' must be true or false"),
    ("zone null item", machine_doc(zone=[None]), "machine 't': 'zone' must be a zone, or a list of distinct zones"),
    ("queued text", machine_doc(queued_resource="spot"), "machine 't': 'queued_resource' must be true or {"),
    ("queued tier null", machine_doc(queued_resource={"tier": None}), "'queued_resource.tier' must be one of spot,"),
    ("valid_for float", machine_doc(queued_resource={"valid_for": 1.5}), "'queued_resource.valid_for' must be a number"),
    ("valid_for huge", machine_doc(queued_resource={"valid_for": 1e300}), "'queued_resource.valid_for' must be a number"),
    ("queued unknown", machine_doc(queued_resource={"wait": 5}), "unknown key 'queued_resource.wait' in machine 't'"),
    # node_spec, the TPU API's own objects
    ("node_spec null", machine_doc(node_spec=None), "machine 't': 'node_spec' must be an object"),
    ("node_spec unknown", node_spec(acceleratorTopology="2x2"), "unknown key 'node_spec.acceleratorTopology' in machine 't'"),
    ("network array", node_spec(networkConfig=[]), "machine 't': 'node_spec.networkConfig' must be an object"),
    ("network bool", node_spec(networkConfig={"enableExternalIps": "no"}), "'node_spec.networkConfig.enableExternalIps' must be true or false"),
    ("network unknown", node_spec(networkConfig={"externalIps": True}), "unknown key 'node_spec.networkConfig.externalIps' in machine 't'"),
    ("scheduling unknown", node_spec(schedulingConfig={"preemptable": True}), "'node_spec.schedulingConfig.preemptable'"),
    ("scope number", node_spec(serviceAccount={"scope": [1]}), "'node_spec.serviceAccount.scope' must be a list of OAuth scopes"),
    ("disk mode number", node_spec(dataDisks=[{"sourceDisk": "d", "mode": 5}]), "'node_spec.dataDisks' must be a list of"),
    ("disk null", node_spec(dataDisks=[None]), "'node_spec.dataDisks' must be a list of"),
    ("disk without source", node_spec(dataDisks=[{"mode": "READ_ONLY"}]), "'node_spec.dataDisks' must be a list of"),
    ("disk unknown", node_spec(dataDisks=[{"sourceDisk": "d", "size": 1}]), "unknown key 'node_spec.dataDisks[0].size'"),
    ("tag empty", node_spec(tags=[""]), "'node_spec.tags' must be a list of network tags"),
    ("metadata number", node_spec(metadata={"k": 1}), "'node_spec.metadata' must map strings to strings"),
    ("topology number", node_spec(acceleratorConfig={"topology": 4}), "'node_spec.acceleratorConfig.topology' must be"),
    ("description empty", node_spec(description=""), "'node_spec.description' must be a non-empty string"),
    # not JSON text at all
    ("empty file", "", "machines.json:1:1: Expecting value"),
    ("cut short", '{"machines": {', "machines.json:1:15: "),
    ("a wrong type, then cut short", '{"machines": 5, "gcp": {', "machines.json:1:25: "),
    ("NaN", '{"gcp": {"recreate_backoff": NaN}}', "machines.json: NaN"),
    ("not UTF-8", b'{"machines": {"l\xff": {"kind": "local"}}}', "machines.json: not UTF-8 text"),
    ("byte order mark", b'\xef\xbb\xbf{}', "machines.json:1:1: Unexpected UTF-8 BOM"),
    ("nested deeply", '{"machines": {"t": ' + "[" * 5000 + "]" * 5000 + "}}", "machines.json: nested too deeply"),
]


def run_malformed(base: Path, index: int, doc: Any) -> tuple[Path, bytes, list[str], Any]:
    home = base / f"home{index}"
    src = home.parent / f"src{index}"
    src.mkdir(parents=True)
    home.mkdir()
    (src / "train.py").write_text("print(1)\n")
    data = doc if isinstance(doc, bytes) else (doc if isinstance(doc, str) else json.dumps(doc)).encode()
    (home / "machines.json").write_bytes(data)
    # The pass and a submit are the commands that write most; either must refuse before writing anything.
    args = ["manage"] if index % 2 else ["submit", "--dir", str(src), "--cmd", "python3 train.py"]
    # In this process: eighty interpreters starting only to refuse a file cost more than the checks
    # (the real entry point's exit and lines are test_cli_reports_a_bad_machines_json_in_one_line's).
    code, out, err = cli(home, *args)
    return home, data, args, subprocess.CompletedProcess(args, code, out, err)


def test_malformed_files_are_one_line_each_and_change_nothing(tmp_path: Path) -> None:
    runs = [run_malformed(tmp_path, i, doc) for i, (_, doc, _) in enumerate(MALFORMED)]
    wrong = []
    for (label, _, needle), (home, data, args, done) in zip(MALFORMED, runs, strict=True):
        lines = done.stderr.splitlines()
        fine = (done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr and len(lines) == 2
                and lines[0].startswith("jobtpu: error: machines.json") and needle in lines[0]
                and lines[1].startswith("hint: ") and str(home / "machines.json") in lines[1])
        # The pass takes its lock before it reads anything; the lock file is all it may leave.
        left = sorted(p.name for p in home.iterdir()) == ["machines.json", *(["manage.lock"] if "manage" in args
                                                                             else [])]
        if not (fine and left and (home / "machines.json").read_bytes() == data):
            wrong.append(f"{label} ({args[0]}): exit {done.returncode}, {sorted(p.name for p in home.iterdir())}, "
                         f"{done.stderr!r}")
    assert not wrong, "\n".join(wrong)


# ---- which home -------------------------------------------------------------------------------------------

def test_which_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    deep = project / "src" / "pkg"
    deep.mkdir(parents=True)
    (project / "machines.json").write_text("{}")
    monkeypatch.delenv("JOBTPU_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert find_home(None, cwd=deep).root == project  # the nearest folder up with a machines.json
    assert find_home(None, cwd=tmp_path).root == tmp_path / "user" / ".jobtpu"
    monkeypatch.setenv("JOBTPU_HOME", str(tmp_path / "envhome"))
    assert find_home(None, cwd=deep).root == tmp_path / "envhome"
    assert find_home(str(tmp_path / "explicit"), cwd=deep).root == tmp_path / "explicit"
