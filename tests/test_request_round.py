"""One round of a shared home's requests with two real accounts (docs/reference/home-files.md §1.3):
alice made the home and runs its passes, bob is a member. bob's odd acts, sent by his own jobtpu,
mean on alice's side what his command line parsed; a request left by an older jobtpu, and one whose
content makes the runner's code raise, each cost that request alone, with one line in its reply; the
round carries out every other request, and alice's `manage` exits 0."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from jobtpu.home.sealing import public_of
from tests.accounts import Team

HANG = 60  # a command that hangs fails the test at this bound; nothing waits on a product constant


def as_(team: Team, account: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", account, "--", "bash", "-c", f"umask 0022; {script}"],
                          capture_output=True, text=True, timeout=HANG, cwd=team.base)


def replies(home: Path, private: bytes) -> dict[str, dict[str, object]]:
    """Every reply of the home, opened with the sender's reply key, by what its request was (`what`,
    else its file name)."""
    from jobtpu.home.sealing import opened_reply
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.spool import Reply

    found = {}
    for path in sorted((home / "replies").iterdir()):
        reply = opened_reply(msgspec.json.decode(path.read_bytes(), type=Reply), private)
        found[reply.what or path.name] = msgspec.to_builtins(reply)
    return found


def test_odd_acts_and_a_request_that_raises_cost_themselves_alone(team: Team) -> None:
    alice, bob = team.accounts
    home = team.one_writer_home({"machines": {"local": {"kind": "local", "resources": {"slot": 2}}}})
    src = team.private_folder(bob, "src")
    ids = [int(team.run(bob, "--home", str(home), "submit", "--dir", str(src), "--cmd", "true", "--hold",
                        f"--name={name}", umask="0077").stdout) for name in ("--", "plain", "third")]
    team.run(alice, "--home", str(home), "manage", umask="0077", timeout=HANG)  # takes the three in, held
    first, plain, third = ids

    # Acts bob's own jobtpu sends: odd words, each parsed once, by his command line's parser.
    sent = [["kill", "--name=--"],  # the job named "--", not a list reaching fnmatch
            ["tag", str(plain), "+odd"], ["note", str(third), "-- ünï\tcode"],
            ["update", str(third), "--priority", "-5"], ["hold", "--tag=--"],
            ["tag", "²", "+x"]]  # a digit to str.isdigit, no number to int(): once a ValueError on the runner
    for words in sent:
        done = team.run(bob, "--home", str(home), *words, umask="0077")
        assert "requested: jobtpu" in done.stderr, (words, done.stderr)
    refused = team.run(bob, "--home", str(home), "kill", "--nme=x", umask="0077", check=False)
    assert refused.returncode == 2 and refused.stderr.count("jobtpu: error:") == 1, refused.stderr  # nothing sent
    # By hand: an act as an older jobtpu wrote it (words), and one whose values nest past what a
    # decoder follows (the runner's code raises RecursionError).
    private = (home / "spool" / f".cache-{team.uid(bob)}" / "reply.key").read_bytes()
    key = base64.b64encode(public_of(private)).decode()  # as jobtpu sends it: the reply is sealed to bob
    old = json.dumps({"argv": ["kill", "--name=--"], "user": bob, "at": 0, "reply_key": key})
    deep = '{"v":2,"command":"kill","args":' + "[" * 5000 + "]" * 5000 + f',"user":"{bob}"}}'
    for name, content in (("act-1-0123456789ab.json", old), ("act-2-0123456789ab.json", deep)):
        (team.base / name).write_text(content)
        assert as_(team, bob, f"cp {team.base / name} {home}/spool/{name}").returncode == 0

    done = team.run(alice, "--home", str(home), "manage", umask="0077", check=False, timeout=HANG)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert not [p.name for p in (home / "spool").iterdir() if p.name.startswith("act-")]  # every request answered

    jobs = {j["id"]: j for j in json.loads(team.run(alice, "--home", str(home), "status", "--all-users", "--all",
                                                   "--json").stdout)["jobs"]}
    assert jobs[first]["status"] == "killed", jobs[first]
    assert jobs[plain]["status"] == "queued" and jobs[plain]["tags"] == ["odd"], jobs[plain]
    assert jobs[third].get("note") == "-- ünï\tcode" and jobs[third].get("priority") == -5, jobs[third]
    said = replies(home, private)
    assert said["kill --name=--"]["code"] == 0, said
    assert said["hold --tag=--"]["lines"] == ["jobtpu: no job to hold matches the selection"], said
    assert said["tag ² +x"]["lines"][0] == "jobtpu: error: '²' is neither a job id nor a tag change", said
    old_reply = next(r for r in said.values() if "older jobtpu" in " ".join(map(str, r.get("lines", []))))
    assert len(old_reply["lines"]) == 1 and "send it again" in str(old_reply["lines"]), old_reply  # type: ignore[arg-type]
    deep_reply = said["act-2-0123456789ab.json"]  # no key could be read from it: its reply says its exit code alone
    assert deep_reply["code"] == 1 and "lines" not in deep_reply, deep_reply
    assert "RecursionError" in done.stderr, done.stderr
    assert "internal error in act-2-0123456789ab.json" in done.stderr, done.stderr


def test_a_request_nested_past_the_stack_is_listed_by_its_name(team: Team) -> None:
    """`jobtpu requests` reads every act that waits (the runner's sees everyone's): one nested too
    deeply to decode is listed by its file's name, as any other file that is no request, and the
    command says the rest."""
    alice, bob = team.accounts
    home = team.one_writer_home({"machines": {"local": {"kind": "local", "resources": {"slot": 2}}}})
    deep = '{"v":2,"command":"kill","args":' + "[" * 5000 + "]" * 5000 + f',"user":"{bob}"}}'
    (team.base / "deep.json").write_text(deep)
    assert as_(team, bob, f"cp {team.base / 'deep.json'} {home}/spool/act-1-0123456789ab.json").returncode == 0
    for account in (alice, bob):
        listed = team.run(account, "--home", str(home), "requests", check=False)
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
        assert "act-1-0123456789ab.json" in listed.stdout, listed.stdout
