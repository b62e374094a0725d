"""Whose account runs what in a shared home (docs/design.md §7, docs/reference/home-files.md §1.3): two real
Unix accounts in one group, alice runs the passes; bob may edit every group-writable file, yet no
code of his runs as alice, unless alice's own runner.json says so."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.accounts import Team
from tests.helpers import wait_for


class Counter:
    """An HTTP server on 127.0.0.1 that counts what it is sent."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        counter = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                counter.requests.append(f"{self.command} {self.path} {self.headers.get('Authorization', '')}")
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PUT = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def counter() -> Iterator[Counter]:
    made = Counter()
    try:
        yield made
    finally:
        made.close()


def shared_home(team: Team) -> Path:
    alice = team.accounts[0]
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    return home


def as_account(team: Team, account: str, script: str) -> None:
    """A shell script run by `account` itself (its files are its own), as a teammate would."""
    import subprocess

    subprocess.run(["runuser", "-u", account, "--", "bash", "-c", f"umask 0007; {script}"], check=True,
                   cwd=team.base)


def write_as(team: Team, account: str, path: Path, text: str) -> None:
    tmp = team.base / f"{account}-{path.name}.new"
    tmp.write_text(text)
    os.chown(tmp, team.uid(account), team.gid)
    tmp.chmod(0o660)
    as_account(team, account, f"cat {tmp} > {path}")  # the same file, rewritten in place
    tmp.unlink()


def submit(team: Team, account: str, home: Path, cmd: str, *extra: str) -> int:
    src = team.private_folder(account, f"src{len(list(team.base.iterdir()))}")
    (src / "x.txt").write_text("x\n")
    os.chown(src / "x.txt", team.uid(account), team.uid(account))
    return int(team.run(account, "--home", str(home), "submit", "--dir", str(src), "--cmd", cmd, *extra,
                        umask="0077").stdout)


def row(team: Team, home: Path, job: int) -> dict[str, Any]:
    rows = json.loads(team.run(team.accounts[0], "--home", str(home), "status", "--all-users", "--json",
                               str(job)).stdout)["jobs"]
    return rows[0]


def manage(team: Team, account: str, home: Path) -> str:
    done = team.run(account, "--home", str(home), "manage", umask="0077")
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout + done.stderr


def ends(team: Team, account: str, home: Path, job: int) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        manage(team, account, home)
        got = row(team, home, job)
        return got if got["status"] in ("finished", "failed", "killed") else None
    found: dict[str, Any] = wait_for(ended, timeout=60, interval=0.3, what=f"job {job} to end")
    return found


def runner_json(team: Team, account: str, home: Path, doc: dict[str, Any]) -> None:
    """runner.json as reference/home-files.md §1.3 says to write it: by the runner's account, `chmod 644`."""
    tmp = team.base / "runner.json.new"
    tmp.write_text(json.dumps(doc))
    tmp.chmod(0o644)
    as_account(team, account, f"cp {tmp} {home}/runner.json && chmod 644 {home}/runner.json")
    tmp.unlink()


def denied(team: Team, account: str, script: str) -> str:
    """`script` as `account` must fail for want of permission; what it said."""
    import subprocess

    done = subprocess.run(["runuser", "-u", account, "--", "bash", "-c", f"umask 0007; {script}"],
                          capture_output=True, text=True, cwd=team.base)
    assert done.returncode != 0 and "Permission denied" in done.stderr, (script, done.stderr)
    return done.stderr


def test_another_members_local_job_waits_for_the_runners_consent(team: Team) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    job = submit(team, bob, home, "id -un")
    out = manage(team, alice, home)
    got = row(team, home, job)
    assert got["status"] == "queued", got
    assert got["waiting"] == (f"local jobs run as the runner ({alice}) only with its consent: runner.json "
                              f'"runner": "{alice}" gives it; {bob}\'s job waits'), got
    assert "launch" not in out
    # bob can neither run a pass nor give the consent himself: the top folder is alice's alone.
    refused = team.run(bob, "--home", str(home), "manage", check=False, umask="0077")
    assert refused.returncode == 1 and "is for this shared home's runner" in refused.stderr, refused.stderr
    denied(team, bob, f"echo '{{\"runner\": \"{alice}\"}}' > {home}/runner.json")
    # alice's own runner.json naming her: her passes run every member's local jobs, as her.
    runner_json(team, alice, home, {"runner": alice})
    assert ends(team, alice, home, job)["status"] == "finished"
    assert team.run(bob, "--home", str(home), "tail", str(job)).stdout.split() == [alice]


def test_a_member_can_rewrite_no_record_nor_move_what_a_pass_trusts(team: Team) -> None:
    """The reproductions of the one-writer issue (docs/reference/home-files.md §1.3): bob renaming specs/,
    run/ or state.json away, rewriting alice's records or her settings, planting a stop request or
    a notification: each is refused by the kernel, and alice's jobs run her own command."""
    alice, bob = team.accounts
    home = shared_home(team)
    marker = team.shared_folder("marks") / "stolen"
    job = submit(team, alice, home, "echo mine", "--on-resume", "--config.from=gs://b-{region}")
    manage(team, alice, home)
    team.run(alice, "--home", str(home), "config", "set", "rule", "pass", umask="0077")
    state = json.loads((home / "state.json").read_text())
    for each in state["jobs"]:
        each["cmd"], each["on_resume"] = f"id -un > {marker}; chmod 666 {marker}", f"; id -un > {marker}"
    forged = team.base / "forged-state.json"
    forged.write_text(json.dumps(state))
    forged.chmod(0o644)
    for script in (f"cat {forged} > {home}/state.json", f"mv {home}/state.json {home}/gone.json",
                   f"mv {home}/archives {home}/archives.old", f"mv {home}/run {home}/run.old", f"mkdir {home}/specs2",
                   f"touch {home}/run/stop/{job + 1}.0", f"echo '{{}}' > {home}/notify-outbox.json",
                   f"echo x >> {home}/events.jsonl", f"cat {forged} > {home}/secrets.json",
                   f"echo '{{\"dirs\": {{\"1\": \"/tmp\"}}}}' > {home}/users/{alice}/settings.json",
                   f"mkdir {home}/users/{alice}/x", f"echo 99 > {home}/last_id", f"mkfifo {home}/home_id.new"):
        denied(team, bob, script)
    got = ends(team, alice, home, job)
    assert got["status"] == "finished" and not marker.exists(), got
    assert team.run(alice, "--home", str(home), "tail", str(job)).stdout.split() == ["mine"]
    rerun = team.run(alice, "--home", str(home), "rerun", str(job), umask="0077")
    assert rerun.stdout.split() == [str(job)]
    assert ends(team, alice, home, job)["status"] == "finished" and not marker.exists()


def test_a_notify_command_in_machines_json_runs_only_from_alices_runner_json(team: Team, counter: Counter) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    marker = team.shared_folder("marks") / "ran-as-alice"
    machines = {"machines": {"local": {"kind": "local"}},
                "notify": [{"command": f"touch {marker}"}, {"webhook": f"{counter.url}/hook", "events": ["finished"]}]}
    denied(team, bob, f"echo '{{}}' > {home}/machines.json")  # alice's file, the group reads it
    as_account(team, alice, f"chmod 660 {home}/machines.json")  # alice's slip: her group may now write it
    write_as(team, bob, home / "machines.json", json.dumps(machines))
    runner_json(team, alice, home, {"allow_private_webhooks": True})  # the test's receiver is on 127.0.0.1
    job = submit(team, alice, home, "true")
    assert ends(team, alice, home, job)["status"] == "finished"
    out = manage(team, alice, home)
    assert "its notify[0].command is not used; move it into runner.json" in out, out
    wait_for(lambda: any("/hook" in r for r in counter.requests), timeout=30, what="the webhook to be posted")
    assert not marker.exists()
    # alice makes machines.json 0640 again; bob cannot move a file of his into its place.
    as_account(team, alice, f"chmod 640 {home}/machines.json")
    denied(team, bob, f"cp {home}/machines.json {home}/.bob-machines.json")
    assert not marker.exists()
    # The same command in alice's own runner.json runs.
    runner_json(team, alice, home, {"allow_private_webhooks": True,
                                    "notify": [{"command": f"touch {marker}", "events": ["finished"]}]})
    job = submit(team, alice, home, "true")
    assert ends(team, alice, home, job)["status"] == "finished"
    wait_for(lambda: marker.exists(), timeout=30, what="runner.json's command to run")


def test_privileged_keys_in_an_untrusted_machines_json_are_refused(team: Team, counter: Counter) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    key = team.base / "bobs-key"
    machines = {"machines": {"local": {"kind": "local"},
                             "box": {"kind": "ssh", "hosts": ["127.0.0.1:1"], "identity_file": str(key),
                                     "resources": {"disk": 1}}},
                "gcp": {"project": "p", "api_endpoint": f"{counter.url}/tpu"},
                "sheet": {"spreadsheet": "s", "credentials": "anonymous", "api_endpoint": f"{counter.url}/sheet",
                          "timeout": 2}}
    as_account(team, alice, f"chmod 660 {home}/machines.json")  # alice's slip: her group may now write it
    write_as(team, bob, home / "machines.json", json.dumps(machines))
    job = submit(team, alice, home, "true", "--req", "disk=1")
    out = manage(team, alice, home)
    for name in ("machines.box.identity_file", "gcp.api_endpoint", "sheet.api_endpoint"):
        assert f"its {name} is not used; move it into runner.json" in out, out
    assert "box's identity_file is refused" in row(team, home, job)["waiting"]
    assert counter.requests == []  # the pass's token went nowhere bob chose


@pytest.mark.fast
def test_the_ssh_transport_never_forwards_an_agent(tmp_path: Path) -> None:
    from jobtpu.home.layout import Home
    from jobtpu.schema.fleet import Machine
    from jobtpu.transport.base import Endpoint
    from jobtpu.transport.ssh import SshTransport

    machine = Machine(name="box", kind="ssh", hosts=("10.0.0.9",), user="u", identity_file=str(tmp_path / "k"))
    args = SshTransport(Endpoint("box", 0, "10.0.0.9", 22), machine, Home(tmp_path)).ssh_command()
    options = {args[i + 1] for i, word in enumerate(args[:-1]) if word == "-o"}
    assert {"ForwardAgent=no", "ClearAllForwardings=yes"} <= options, args
    # paramiko forwards an agent only through an AgentRequestHandler on a session: jobtpu opens none.
    source = Path(__file__).resolve().parent.parent / "jobtpu" / "transport" / "ssh.py"
    assert "AgentRequestHandler" not in source.read_text() and "forward_agent" not in source.read_text()


def run_labelled(team: Team, account: str, label: str, *args: str) -> Any:
    """`jobtpu ARGS` as `account` with JOBTPU_USER naming another member, as anyone may set it."""
    import pwd
    import subprocess
    import sys

    from tests.accounts import REPO

    home = pwd.getpwnam(account).pw_dir
    cmd = ["runuser", "-u", account, "--", "env", "-i", f"HOME={home}", f"USER={account}", f"JOBTPU_USER={label}",
           "PATH=/usr/local/bin:/usr/bin:/bin", f"PYTHONPATH={REPO}", sys.executable, "-m", "jobtpu.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=team.base)


def test_a_label_naming_another_member_does_not_make_their_jobs_yours(team: Team) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    job = submit(team, alice, home, "sleep 300")
    sent = run_labelled(team, bob, alice, "--home", str(home), "kill", str(job))
    assert sent.returncode == 0 and "carried out by the next pass of" in sent.stderr, sent.stderr
    manage(team, alice, home)  # takes bob's request in: as bob's account, whatever label it carries
    answers = run_labelled(team, bob, alice, "--home", str(home), "requests").stdout
    assert (f"kill {job}: refused: jobtpu: error: job {job} is {alice}'s, submitted by account {alice}, "
            f"not by {bob}: kill refused") in answers, answers
    assert row(team, home, job)["status"] in ("queued", "running")
    forced = run_labelled(team, bob, alice, "--home", str(home), "kill", "--force", str(job))
    assert forced.returncode == 0, forced.stderr
    manage(team, alice, home)
    got = row(team, home, job)
    assert got["status"] == "killed"
    assert [(f["by"], f["act"], f["uid"], f["account"]) for f in got["forced"]] == \
        [(alice, "kill", team.uid(bob), bob)]
    team.run(alice, "--home", str(home), "config", "set", "rule", "pass", umask="0077")
    settings = home / "users" / alice / "settings.json"
    before = settings.read_bytes()
    changed = run_labelled(team, bob, alice, "--home", str(home), "config", "set", "rule", "pre")
    assert changed.returncode == 1 and changed.stderr.splitlines()[0] == (
        f"jobtpu: error: users/{alice}/settings.json is account {alice}'s: account {bob} may not change it")
    assert settings.read_bytes() == before
    ends(team, alice, home, submit(team, alice, home, "true"))
    lines = [json.loads(line) for line in (home / "events.jsonl").read_text().splitlines()]
    assert lines and all(e["account"] == alice and e["uid"] == team.uid(alice) for e in lines), lines  # one writer


@pytest.mark.fast
def test_the_reference_runner_json_example_is_what_a_pass_reads(tmp_path: Path) -> None:
    from jobtpu.home.privileged import gate
    from jobtpu.home.trust import load_runner

    text = (Path(__file__).resolve().parent.parent / "docs" / "reference" / "home-files.md").read_text()
    section = text.split("### 1.3 ", 1)[1].split("\n### ", 1)[0]
    example = section.split("```\n", 2)[1].rsplit("```", 1)[0]
    (tmp_path / "runner.json").write_text(example)
    (tmp_path / "runner.json").chmod(0o644)
    runner = load_runner(tmp_path)
    assert runner.problem is None and runner.runner == "alice" and not runner.allow_private_webhooks
    machines = {"machines": {"local": {"kind": "local"}, "gpu1": {"kind": "ssh", "hosts": ["10.0.0.5"]}}}
    (tmp_path / "machines.json").write_text(json.dumps(machines))
    (tmp_path / "machines.json").chmod(0o664)  # group-writable: its own privileged keys would be refused
    import os as _os

    st = _os.stat(tmp_path / "machines.json")
    gated = gate(((tmp_path / "machines.json").read_bytes(), st), tmp_path)
    doc = json.loads(gated.data or b"{}")
    assert doc["machines"]["gpu1"]["identity_file"] == "~/.ssh/gpu1_key"
    assert doc["gcp"]["credentials"] == "/home/alice/tpu-sa.json"
    assert doc["notify"] == [{"command": "notify-send jobtpu", "events": ["failed"]}]
    assert gated.lines() == () and gated.refused_machines == {}
    (tmp_path / "runner.json").chmod(0o664)
    assert "runner.json is writable by its group or by everyone: not used" in (load_runner(tmp_path).problem or "")


def test_a_members_webhook_at_a_private_address_is_refused_unless_the_runner_allows_it(
        team: Team, counter: Counter) -> None:
    alice, bob = team.accounts
    home = shared_home(team)
    runner_json(team, alice, home, {"runner": alice})
    hook = json.dumps([{"webhook": f"{counter.url}/mine", "events": ["finished"]}])
    refused = team.run(bob, "--home", str(home), "config", "set", "notify", hook, check=False, umask="0077")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.startswith("jobtpu: error: notify[0].webhook: 127.0.0.1 resolves to a private address")
    team.run(bob, "--home", str(home), "config", "set", "rule", "pass", umask="0077")
    settings = home / "users" / bob / "settings.json"
    assert settings.stat().st_uid == team.uid(bob) and (home / "users" / bob).stat().st_uid == team.uid(bob)
    doc = json.loads(settings.read_text())
    doc["notify"] = json.loads(hook)
    write_as(team, bob, settings, json.dumps(doc))  # his own file, by hand: a pass must check it too
    job = submit(team, bob, home, "true")
    said: list[str] = []

    def finished() -> bool:
        said.append(manage(team, alice, home))
        return bool(row(team, home, job)["status"] == "finished")
    wait_for(finished, timeout=60, interval=0.3, what="bob's job to finish")
    assert f"notify: {bob}'s webhook 127.0.0.1: 127.0.0.1 resolves to a private address (127.0.0.1): skipped" \
        in "".join(said), said
    assert counter.requests == []
    runner_json(team, alice, home, {"runner": alice, "allow_private_webhooks": True})
    job = submit(team, bob, home, "true")
    assert ends(team, alice, home, job)["status"] == "finished"
    wait_for(lambda: any("/mine" in r for r in counter.requests), timeout=30, what="the allowed webhook")
    # alice's runner.json now allows them: bob's `config set` keeps his, with a line saying whose passes post it.
    other = json.dumps([{"webhook": f"{counter.url}/other", "events": ["finished"]}])
    kept = team.run(bob, "--home", str(home), "config", "set", "notify", other, umask="0077")
    assert f"runner.json allows private webhooks; passes run by {alice} post it, others skip it" in kept.stderr, \
        kept.stderr
    assert json.loads(settings.read_text())["notify"] == json.loads(other)


def test_sharing_a_private_home_makes_its_files_the_runners_for_the_group_to_read(team: Team) -> None:
    alice, _ = team.accounts
    home = team.private_folder(alice, "home")
    team.run(alice, "init", str(home), umask="0077")
    job = submit(team, alice, home, "id -un", "--env", "WANDB_API_KEY=k")
    assert stat.S_IMODE((home / "state.json").stat().st_mode) == 0o600
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    assert stat.S_IMODE(home.stat().st_mode) == 0o3750
    for name, mode in (("state.json", 0o640), ("machines.json", 0o640), ("secrets.json", 0o600),
                       ("archives", 0o2750), ("spool", 0o3770), ("users", 0o3770), ("results", 0o3770)):
        st = (home / name).stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (mode, team.uid(alice), team.gid), name
    assert ends(team, alice, home, job)["status"] == "finished"


def test_settings_a_member_made_under_anothers_name_are_never_used_as_theirs(team: Team) -> None:
    """bob makes users/newcomer/ before its user ever sets anything, with a working directory of his:
    the account that then submits as `newcomer` is told whose folder it is, in one line, and nothing
    of bob's is snapshotted."""
    alice, bob = team.accounts
    home = shared_home(team)
    bobs_code = team.private_folder(bob, "code")
    settings = json.dumps({"dirs": {"1": str(bobs_code)}})
    as_account(team, bob, f"mkdir -m 750 {home}/users/newcomer && echo '{settings}' > {home}/users/newcomer/settings.json")
    before = (home / "state.json").read_bytes() if (home / "state.json").exists() else b""
    refused = team.run(alice, "--home", str(home), "submit", "--user", "newcomer", "--dir", "1", "--cmd", "true",
                       check=False, umask="0077")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.splitlines()[0] == (f"jobtpu: error: users/newcomer/ is account {bob}'s, not {alice}'s: "
                                              "not used as your settings"), refused.stderr
    assert ((home / "state.json").read_bytes() if (home / "state.json").exists() else b"") == before
