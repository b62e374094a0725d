"""`jobtpu import tpu-manager DATA_JSON`: a team moves over from the TPU manager (docs/guide.md,
"Moving from the TPU manager"). The translation's tables; then through the CLI: what a realistic
data.json becomes, a dry run and a second run that change nothing, --force, a bad file in one line,
a job on an imported TPU machine with an imported alias, and a shared home two accounts use."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from jobtpu.importer import ShapeError, accelerator_of, scheduling_kinds, time_zone_of
from tests.accounts import Team
from tests.helpers import jobtpu, make_home, passes_until, write_tree
from tests.tpufleet import PROJECT, ZONE, TpuFleet

fast = pytest.mark.fast
SECRET = "wandb-key-0123456789abcdef"


def data_json(folder: Path, ann: str = "ann", bob: str = "bob") -> Path:
    """The old tool's data.json as its README shows it: two users, three zones, aliases, a
    preemptible list, a running job, and the team's wandb key and conda env."""
    doc = {
        "users": {
            ann: {"id": 0, "name": ann, "tmux_name": ann, "working_dir": {"1": "/srv/ann/proj", "2": "/srv/ann/other"},
                  "job_data": [{"user": ann, "windows_id": 1, "tpu": "kmh-tpuvm-v3-32-1", "status": "running",
                                "extra_configs": "--lr=0.01", "rules": {"preempted": "reapply"}}],
                  "config_aliases": {"lr": "config.training.lr", "dr": "config.model.dropout"},
                  "settings": {"monitor_after_run": True, "monitor_upd_time": 5, "monitor_length": 800,
                               "monitor_verbose": False, "monitor_dir": True, "monitor_tpu": True,
                               "show_length": 300, "time_zone": "us"},
                  "windows_offset": 42, "logs": []},
            bob: {"id": 1, "name": bob, "tmux_name": bob, "working_dir": {"1": "/srv/bob/code"},
                  "job_data": [{"user": bob, "tpu": "kmh-tpuvm-v2-32-preemptible-1", "status": "finished"}],
                  "config_aliases": {"bsz": "config.training.batch_size"},
                  "settings": {"time_zone": "cn"}, "windows_offset": 3, "logs": []},
        },
        "user_list": [ann, bob], "id_list": [0, 1], "id_user_dict": {"0": ann, "1": bob},
        "user_id_dict": {ann: 0, bob: 1},
        "tpu_aliases": {"v3-1": "kmh-tpuvm-v3-32-1", "v2-p1": "kmh-tpuvm-v2-32-preemptible-1",
                        "v4-p1": "kmh-tpuvm-v4-8-preemptible-1"},
        "all_tpus": {
            "europe-west4-a": ["kmh-tpuvm-v3-32-1"],
            "us-central1-a": ["kmh-tpuvm-v2-32-preemptible-1"],
            "us-central2-b": ["kmh-tpuvm-v4-8-preemptible-1"],
            "preemptible": ["kmh-tpuvm-v2-32-preemptible-1", "kmh-tpuvm-v4-8-preemptible-1"],
        },
        "monitor_config": {"test_freq": 3600, "checking_freq": 600},
        "wandb_api_key": SECRET, "conda_env_name": "NNX",
        "monitor_all_check_time": 20, "MONITOR_logs": [], "ack_MONITOR": False,
    }
    path = folder / "data.json"
    path.write_text(json.dumps(doc, indent=4))
    return path


IMPORTED = """\
user ann
user bob
machine kmh-tpuvm-v3-32-1 (tpu v3-32, europe-west4-a, on-demand)
kmh-tpuvm-v3-32-1: alias v3-1
machine kmh-tpuvm-v2-32-preemptible-1 (tpu v2-32, us-central1-a, preemptible)
kmh-tpuvm-v2-32-preemptible-1: alias v2-p1
machine kmh-tpuvm-v4-8-preemptible-1 (tpu v4-8, us-central2-b, preemptible)
kmh-tpuvm-v4-8-preemptible-1: alias v4-p1
ann: working directory 1 = /srv/ann/proj
ann: working directory 2 = /srv/ann/other
ann: alias lr = config.training.lr
ann: alias dr = config.model.dropout
ann: time_zone = America/New_York
bob: working directory 1 = /srv/bob/code
bob: alias bsz = config.training.batch_size
bob: time_zone = Asia/Shanghai
"""


def home_files(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def team_home(tmp_path: Path) -> Path:
    """A home that already has machines.json of its own: defaults, a project and an ssh box."""
    return make_home(tmp_path, {"box": {"kind": "ssh", "hosts": ["10.0.0.5"], "resources": {"gpu": 8}}},
                     defaults={"user": "train", "connect_timeout": 7}, gcp={"project": PROJECT},
                     config_aliases={"dp": "config.model.dropout"})


# ---- the translation's tables ---------------------------------------------------------------------

@fast
@pytest.mark.parametrize(("name", "accelerator"), [
    ("kmh-tpuvm-v3-32-1", "v3-32"), ("kmh-tpuvm-v2-32-preemptible-1", "v2-32"), ("kmh-tpuvm-v4-8", "v4-8"),
    ("kmh-tpuvm-v2-8-2", "v2-8"), ("kmh-tpuvm-v5p-64-spot-1", "v5p-64"), ("kmh-tpuvm-v5litepod-16-1", "v5litepod-16"),
    ("v6e-8", "v6e-8"), ("kmh-tpuvm-v3", None), ("my-tpu-1", None), ("kmh-tpuvm-v32-1", None), ("xv3-32", None),
])
def test_the_accelerator_comes_from_the_tpus_name(name: str, accelerator: str | None) -> None:
    assert accelerator_of(name) == accelerator


@fast
@pytest.mark.parametrize(("value", "zone"), [
    ("us", "America/New_York"), ("cn", "Asia/Shanghai"), ("eu", None), ("US", None), (None, None), (8, None),
])
def test_the_old_time_zones_become_iana_zones(value: object, zone: str | None) -> None:
    assert time_zone_of(value) == zone


@fast
@pytest.mark.parametrize(("doc", "kinds"), [
    ({"all_tpus": {"preemptible": ["a", "b"]}}, {"a": "preemptible", "b": "preemptible"}),
    ({"all_tpus": {"pre_info": {"a": "spot, us-central2-b", "b": "preemptible"}}}, {"a": "spot", "b": "preemptible"}),
    ({"all_tpus": {"preemptible": ["a"]}, "pre_info": {"a": {"type": "spot"}}}, {"a": "spot"}),
    ({"pre_info": ["c"]}, {"c": "preemptible"}),
    ({"all_tpus": {"europe-west4-a": ["a"]}}, {}),
    # the old tool's newer versions: kind → names
    ({"pre_info": {"preemptible": ["a", "b"], "spot": ["c"]}}, {"a": "preemptible", "b": "preemptible", "c": "spot"}),
    ({"all_tpus": {"preemptible": ["a"], "pre_info": {"spot": ["a"], "preemptible": ["b"]}}}, {"a": "spot", "b": "preemptible"}),
    ({"pre_info": {"spot": ["a"], "preemptible": ["a"]}}, {"a": "spot"}),
])
def test_preemptible_and_spot_come_from_the_preemptible_and_pre_info_lists(doc: dict[str, Any], kinds: dict[str, str]) -> None:
    assert scheduling_kinds(doc) == kinds


@fast
def test_a_pre_info_of_another_kind_is_refused_naming_it() -> None:
    with pytest.raises(ShapeError, match=r'^pre_info.normal: must be "preemptible" or "spot", a list of TPU names$'):
        scheduling_kinds({"pre_info": {"spot": ["a"], "normal": ["b"]}})


# ---- through the CLI ------------------------------------------------------------------------------

@fast
def test_a_team_is_imported_keeping_what_the_home_has_and_a_second_run_changes_nothing(tmp_path: Path) -> None:
    home = team_home(tmp_path)
    before = json.loads((home / "machines.json").read_text())
    done = jobtpu(home, "import", "tpu-manager", str(data_json(tmp_path)))
    assert done.stdout == IMPORTED
    err = done.stderr.splitlines()
    assert "skipped ann's settings monitor_after_run, monitor_dir, monitor_length, monitor_tpu, monitor_upd_time, " \
           "monitor_verbose, show_length: no equivalent in jobtpu" in err
    assert "skipped wandb_api_key: pass it per job as a secret, which jobtpu keeps private: --env WANDB_API_KEY=..." in err
    assert any(line.startswith("skipped conda_env_name NNX: ") for line in err), err
    assert any(line.startswith("left 2 job(s) of the old tool") for line in err), err
    assert SECRET not in done.stdout + done.stderr
    # What machines.json had is all still there; the TPUs were added beside it.
    after = json.loads((home / "machines.json").read_text())
    assert {k: v for k, v in after.items() if k != "machines"} == {k: v for k, v in before.items() if k != "machines"}
    assert after["machines"]["box"] == before["machines"]["box"]
    assert after["machines"]["kmh-tpuvm-v4-8-preemptible-1"] == {
        "kind": "tpu", "node": "kmh-tpuvm-v4-8-preemptible-1", "zone": "us-central2-b", "accelerator": "v4-8",
        "preemptible": True, "aliases": ["v4-p1"]}
    assert "preemptible" not in after["machines"]["kmh-tpuvm-v3-32-1"]
    # jobtpu reads it all back: machines by alias, users, and each user's own settings.
    machines = {m["name"]: m for m in json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]}
    assert machines["kmh-tpuvm-v2-32-preemptible-1"]["accelerator"] == "v2-32"
    assert jobtpu(home, "user", "ls").stdout.split() == ["ann", "bob"]
    assert jobtpu(home, "dir", "ls", "--user", "ann").stdout.split() == [
        "1", "/srv/ann/proj", "(missing)", "2", "/srv/ann/other", "(missing)"]
    assert jobtpu(home, "config", "get", "time_zone", "--user", "bob").stdout == "Asia/Shanghai\n"
    assert "config.training.lr" in jobtpu(home, "alias", "ls", "--user", "ann").stdout
    # The key is written nowhere.
    files = home_files(home)
    assert not any(SECRET.encode() in data for data in files.values())

    again = jobtpu(home, "import", "tpu-manager", str(data_json(tmp_path)))
    assert again.stdout == ""
    assert "nothing to import: this home already has everything data.json holds" in again.stderr
    assert home_files(home) == files


@fast
def test_a_dry_run_prints_the_same_lines_and_changes_nothing(tmp_path: Path) -> None:
    home = team_home(tmp_path)
    files = home_files(home)
    done = jobtpu(home, "import", "tpu-manager", str(data_json(tmp_path)), "--dry-run")
    assert done.stdout == "".join(f"would import: {line}\n" for line in IMPORTED.splitlines())
    assert home_files(home) == files


@fast
def test_a_differing_entry_is_kept_without_force_and_replaced_with_it(tmp_path: Path) -> None:
    home = team_home(tmp_path)
    jobtpu(home, "user", "add", "ann")
    jobtpu(home, "alias", "add", "lr", "config.optim.lr", "--user", "ann")
    jobtpu(home, "config", "set", "time_zone", "UTC", "--user", "ann")
    data = data_json(tmp_path)

    done = jobtpu(home, "import", "tpu-manager", str(data))
    assert "kept ann: alias lr = config.optim.lr, differs (config.training.lr): use --force" in done.stderr.splitlines()
    assert "kept ann: time_zone = UTC, differs (America/New_York): use --force" in done.stderr.splitlines()
    assert "ann: alias lr" not in done.stdout and "ann: alias dr = config.model.dropout\n" in done.stdout
    settings = json.loads((home / "users" / "ann" / "settings.json").read_text())
    assert (settings["aliases"]["lr"], settings["time_zone"]) == ("config.optim.lr", "UTC")

    forced = jobtpu(home, "import", "tpu-manager", str(data), "--force")
    assert forced.stdout == ("ann: alias lr = config.training.lr (was config.optim.lr)\n"
                             "ann: time_zone = America/New_York (was UTC)\n")
    settings = json.loads((home / "users" / "ann" / "settings.json").read_text())
    assert (settings["aliases"]["lr"], settings["time_zone"]) == ("config.training.lr", "America/New_York")


@fast
def test_a_machine_or_machine_alias_that_differs_is_kept_without_force(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"kmh-tpuvm-v3-32-1": {"kind": "tpu", "node": "kmh-tpuvm-v3-32-1", "zone": "us-east1-d",
                                                      "accelerator": "v3-32", "aliases": ["v2-p1"]}},
                     gcp={"project": PROJECT})
    data = data_json(tmp_path)
    done = jobtpu(home, "import", "tpu-manager", str(data))
    err = done.stderr.splitlines()
    assert any(line.startswith("kept machine kmh-tpuvm-v3-32-1, differs from the import (machine kmh-tpuvm-v3-32-1 "
                               "(tpu v3-32, europe-west4-a, on-demand)): use --force") for line in err), err
    assert "kept alias v2-p1 of machine kmh-tpuvm-v3-32-1, differs (kmh-tpuvm-v2-32-preemptible-1): use --force" in err
    forced = jobtpu(home, "import", "tpu-manager", str(data), "--force").stdout
    assert "machine kmh-tpuvm-v3-32-1 (tpu v3-32, europe-west4-a, on-demand) (replaced)\n" in forced
    assert "kmh-tpuvm-v2-32-preemptible-1: alias v2-p1 (was kmh-tpuvm-v3-32-1's)\n" in forced
    machines = json.loads((home / "machines.json").read_text())["machines"]
    assert machines["kmh-tpuvm-v3-32-1"]["zone"] == "europe-west4-a"
    assert machines["kmh-tpuvm-v3-32-1"]["aliases"] == ["v3-1"]


@fast
def test_names_jobtpu_cannot_take_are_reported_not_mangled(tmp_path: Path) -> None:
    home = team_home(tmp_path)
    doc = json.loads(data_json(tmp_path).read_text())
    doc["users"]["Dr Who"] = {"working_dir": {"1": "/srv/who"}, "job_data": []}
    doc["all_tpus"]["europe-west4-a"].append("shared tpu")
    doc["all_tpus"]["europe-west4-a"].append("old-tpu-1")
    doc["users"]["ann"]["working_dir"].update({"100": "/srv/ann/x", "3": "relative/path"})
    doc["users"]["ann"]["config_aliases"]["my lr"] = "config.lr"
    (tmp_path / "data.json").write_text(json.dumps(doc))
    done = jobtpu(home, "import", "tpu-manager", str(tmp_path / "data.json"))
    err = done.stderr.splitlines()
    assert any(line.startswith("not imported: user 'Dr Who' is not a jobtpu user name") for line in err), err
    assert any(line.startswith("not imported: TPU 'shared tpu' in europe-west4-a: not a machine name") for line in err)
    assert any(line.startswith("not imported: TPU 'old-tpu-1' in europe-west4-a: no accelerator") for line in err)
    assert "not imported: ann's working directory 100 '/srv/ann/x': jobtpu numbers them 1 to 99" in err
    assert "not imported: ann's working directory 3 'relative/path': not an absolute path" in err
    assert "not imported: ann's alias 'my lr' = 'config.lr' (not a name and a config key)" in err
    assert "who" not in done.stdout.lower() and "shared" not in done.stdout and "old-tpu" not in done.stdout
    assert jobtpu(home, "user", "ls").stdout.split() == ["ann", "bob"]


@fast
@pytest.mark.parametrize(("content", "says"), [
    (None, "cannot read it"),
    ("{\"users\": {", "not JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"users": ["ann"]}', "users: must be an object"),
    ('{"users": {"ann": {"working_dir": ["/x"]}}}', "users.ann.working_dir: must be an object"),
    ('{"users": {}, "all_tpus": {"europe-west4-a": "kmh-tpuvm-v3-32-1"}}', "all_tpus.europe-west4-a: must be a list"),
    ('{"users": {}, "tpu_aliases": {"v3-1": 3}}', "tpu_aliases: must map names to strings"),
])
def test_a_bad_data_json_is_one_line_and_changes_nothing(tmp_path: Path, content: str | None, says: str) -> None:
    home = team_home(tmp_path)
    path = tmp_path / "data.json"
    if content is not None:
        path.write_text(content)
    files = home_files(home)
    done = jobtpu(home, "import", "tpu-manager", str(path), check=False)
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert len(lines) == 2 and lines[0].startswith(f"jobtpu: error: {path}: ") and says in lines[0], done.stderr
    assert lines[1] == "hint: pass the TPU manager's data.json; nothing was changed"
    assert home_files(home) == files


@fast
def test_a_machines_json_jobtpu_refuses_is_refused_in_the_same_words(tmp_path: Path) -> None:
    home = make_home(tmp_path, {"box": {"kind": "ssh"}})
    files = home_files(home)
    done = jobtpu(home, "import", "tpu-manager", str(data_json(tmp_path)), check=False)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.splitlines()[0] == "jobtpu: error: machines.json: machine 'box': an ssh machine needs 'hosts', " \
        'a non-empty list of "addr" or "addr:port"', done.stderr
    assert home_files(home) == files


@fast
def test_tpus_without_a_project_are_refused_until_project_names_it(tmp_path: Path) -> None:
    home = make_home(tmp_path)
    files = home_files(home)
    data = str(data_json(tmp_path))
    done = jobtpu(home, "import", "tpu-manager", data, check=False)
    assert done.returncode == 1 and "need the Google Cloud project" in done.stderr.splitlines()[0]
    assert home_files(home) == files
    assert "gcp.project = my-proj\n" in jobtpu(home, "import", "tpu-manager", data, "--project", "my-proj").stdout
    assert json.loads((home / "machines.json").read_text())["gcp"] == {"project": "my-proj"}


# ---- end to end ---------------------------------------------------------------------------------

def test_a_job_runs_on_an_imported_tpu_with_an_imported_alias(tmp_path: Path, tpus: TpuFleet) -> None:
    node = "kmh-tpuvm-v3-32-1"
    tpus.add_node(node, workers=2, accelerator="v3-32", preemptible=False, zone=ZONE)
    home = tmp_path / "home"
    home.mkdir()
    # What the team writes once: how jobtpu reaches TPU workers, and the fake TPU API.
    doc = tpus.machines_json(home)
    doc["defaults"].update(user=tpus.nodes[node].user, port=tpus.port(node))
    (home / "machines.json").write_text(json.dumps(doc))
    imported = jobtpu(home, "import", "tpu-manager", str(data_json(tmp_path)))
    assert imported.stdout == IMPORTED

    src = write_tree(tmp_path / "src", {"train.sh": 'echo "train args: $*"\n'})
    job = json.loads(jobtpu(home, "submit", "--json", "--user", "ann", "--dir", str(src), "--machine", "v3-1",
                            "--cmd", "bash train.sh", "lr=0.01").stdout)["id"]
    jobs = passes_until(home, lambda jobs: jobs[job]["status"] in ("finished", "failed"), "the job to end")
    assert (jobs[job]["status"], jobs[job]["machine"]) == ("finished", node), jobs[job]
    assert "train args: --config.training.lr=0.01" in jobtpu(home, "tail", str(job)).stdout


def test_a_shared_home_imported_by_one_account_is_the_other_accounts_own(tmp_path: Path, team: Team) -> None:
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    data = data_json(team.shared_folder("old"), ann=alice, bob=bob)
    os.chmod(data, 0o644)
    team.run(alice, "--home", str(home), "import", "tpu-manager", str(data), "--project", PROJECT, umask="0077")
    # bob reads what alice imported for him, uses his alias, and changes his own settings.
    src = team.private_folder(bob, "src")
    write_tree(src, {"train.sh": "echo hi\n"})
    os.chown(src / "train.sh", team.uid(bob), team.uid(bob))
    job = json.loads(team.run(bob, "--home", str(home), "submit", "--json", "--dir", str(src), "--machine", "local",
                              "--cmd", "bash train.sh", "bs=64", umask="0077").stdout)["id"]
    team.run(alice, "--home", str(home), "manage", umask="0077")  # the runner takes bob's submit in
    record = json.loads(team.run(bob, "--home", str(home), "status", "--json", str(job)).stdout)["jobs"][0]
    assert record["overrides"] == ["--config.training.batch_size=64"]
    team.run(bob, "--home", str(home), "alias", "add", "bsz", "config.data.batch_size", umask="0077")
    assert "config.data.batch_size" in team.run(bob, "--home", str(home), "alias", "ls").stdout
    # The wandb key is in no file of the shared home.
    assert not any(SECRET.encode() in p.read_bytes() for p in home.rglob("*") if p.is_file())
    # bob's settings are his file now: alice's --force may not overwrite them, and then writes nothing.
    files = home_files(home)
    refused = team.run(alice, "--home", str(home), "import", "tpu-manager", str(data), "--force", check=False)
    assert (refused.returncode, refused.stdout) == (1, ""), refused.stdout
    assert f"jobtpu: error: users/{bob}/settings.json is account {bob}'s" in refused.stderr
    assert home_files(home) == files


def newer_data_json(folder: Path, gone: Path, here: Path) -> Path:
    """data.json as the old tool's newer versions keep it: pre_info by kind, each user's name in the
    sheet, the built-in aliases copied into every user's, and working folders that moved since."""
    builtin = {"lr": "config.training.learning_rate", "bs": "config.training.batch_size",
               "ep": "config.training.num_epochs"}
    doc = {
        "users": {
            "lyy": {"working_dir": {"1": str(here), "2": str(gone)}, "spreadsheet_name": "Lyy",
                    "config_aliases": {**builtin, "dr": "config.model.dropout"}, "settings": {"time_zone": "cn"}},
            "ann": {"working_dir": {}, "spreadsheet_name": "ann", "config_aliases": dict(builtin), "settings": {}},
        },
        "tpu_aliases": {},
        "all_tpus": {"europe-west4-a": ["kmh-tpuvm-v3-32-1", "kmh-tpuvm-v3-32-preemptible-2"],
                     "us-central2-b": ["kmh-tpuvm-v4-8-spot-1"]},
        "pre_info": {"preemptible": ["kmh-tpuvm-v3-32-preemptible-2"], "spot": ["kmh-tpuvm-v4-8-spot-1"]},
    }
    path = folder / "data.json"
    path.write_text(json.dumps(doc))
    return path


@fast
def test_a_newer_data_json_pre_info_sheet_names_own_aliases_only_and_moved_folders(tmp_path: Path) -> None:
    home = team_home(tmp_path)
    here, gone = tmp_path / "mae", tmp_path / "moved-away"
    here.mkdir()
    done = jobtpu(home, "import", "tpu-manager", str(newer_data_json(tmp_path, gone, here)))
    assert done.stdout.splitlines() == [
        "user lyy", "user ann",
        "machine kmh-tpuvm-v3-32-1 (tpu v3-32, europe-west4-a, on-demand)",
        "machine kmh-tpuvm-v3-32-preemptible-2 (tpu v3-32, europe-west4-a, preemptible)",
        "machine kmh-tpuvm-v4-8-spot-1 (tpu v4-8, us-central2-b, spot)",
        f"lyy: working directory 1 = {here}", f"lyy: working directory 2 = {gone}",
        "lyy: alias dr = config.model.dropout", "lyy: time_zone = Asia/Shanghai", "lyy: sheet_name = Lyy"]
    err = done.stderr.splitlines()
    assert [line for line in err if "does not exist" in line] == [
        f"lyy's working directory 2 {gone} does not exist here: `jobtpu dir set 2 PATH --user lyy` points it elsewhere"]
    assert "left out the aliases that are jobtpu's built-in ones (bs, ep, lr): every user has them already" in err
    machines = json.loads((home / "machines.json").read_text())["machines"]
    assert machines["kmh-tpuvm-v4-8-spot-1"]["spot"] is True
    assert machines["kmh-tpuvm-v3-32-preemptible-2"]["preemptible"] is True
    assert jobtpu(home, "config", "get", "sheet_name", "--user", "lyy").stdout == "Lyy\n"
    assert not (home / "users" / "ann" / "settings.json").exists()  # ann has nothing of her own
    assert json.loads((home / "users" / "lyy" / "settings.json").read_text())["aliases"] == {"dr": "config.model.dropout"}
    again = jobtpu(home, "import", "tpu-manager", str(newer_data_json(tmp_path, gone, here)))
    assert again.stdout == "" and "nothing to import" in again.stderr


@fast
def test_the_sheet_names_a_user_by_their_sheet_name(tmp_path: Path) -> None:
    from jobtpu.home.layout import Home
    from jobtpu.home.machines import load_fleet
    from jobtpu.home.store import Store
    from jobtpu.passes.sheet_hook import sheet_rows

    home = make_home(tmp_path, {"v3-a": {"kind": "local", "accelerator": "v3-8", "resources": {"slot": 2}}})
    jobtpu(home, "config", "set", "sheet_name", "Lyy", "--user", "lyy")
    src = write_tree(tmp_path / "src", {"a": "1\n"})
    for user in ("lyy", "ann"):
        jobtpu(home, "submit", "--user", user, "--dir", str(src), "--cmd", "sleep 30")
    jobtpu(home, "manage")
    try:
        [row] = sheet_rows(load_fleet(Home(home)), Store(Home(home)).load(), Home(home))
        assert row.users == ("Lyy", "ann")
    finally:
        jobtpu(home, "kill", "--all-users", "--force", "1", "2", check=False)
    bad = jobtpu(home, "config", "set", "sheet_name", "Lyy,", "Bob", "--user", "lyy", check=False)
    assert bad.returncode == 1 and "no comma" in bad.stderr and "Traceback" not in bad.stderr


@fast
def test_the_import_says_which_tpus_have_no_node_by_one_listing_per_zone(tmp_path: Path) -> None:
    from tests.fake_tpu import FakeTpuApi

    here = tmp_path / "mae"
    here.mkdir()
    with FakeTpuApi() as api:
        api.add_node(PROJECT, "europe-west4-a", "kmh-tpuvm-v3-32-1", accelerator_type="v3-32")
        home = make_home(tmp_path, gcp={"project": PROJECT, "api_endpoint": api.url, "credentials": "anonymous"})
        done = jobtpu(home, "import", "tpu-manager", str(newer_data_json(tmp_path, here, here)), "--dry-run")
        absent = [line for line in done.stderr.splitlines() if line.startswith("no node: ")]
        assert absent == [
            "no node: kmh-tpuvm-v3-32-preemptible-2 does not exist in europe-west4-a now: a pass creates it for a job "
            "that needs it (rule pre, reapply or rerun), or `jobtpu tpu apply kmh-tpuvm-v3-32-preemptible-2`",
            "no node: kmh-tpuvm-v4-8-spot-1 does not exist in us-central2-b now: a pass creates it for a job that "
            "needs it (rule pre, reapply or rerun), or `jobtpu tpu apply kmh-tpuvm-v4-8-spot-1`"], done.stderr
        assert api.list_calls("europe-west4-a") == 1 and api.list_calls("us-central2-b") == 1
