"""What a shared home's group must not read travels sealed (docs/reference/home-files.md §1.3, §1.5,
docs/design.md §7), with three real accounts: alice made the home and runs its passes, bob and carol
are members of its group. bob's secret --env values sit in the spool sealed to alice's runner.key,
and alice's replies to bob are sealed to bob's reply key: carol, reading every file she can, learns
neither."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from jobtpu.errors import JobtpuError
from jobtpu.home.sealing import public_of, reply_key, why_not_private_key, why_not_public_key
from tests.accounts import Team
from tests.helpers import wait_for
from tests.test_shared_home import init_shared, old_layout, rows, source_of, write_as_runner

WANDB = "wandb-key-of-bob-5f1d0c9e7a"
HANG = 60  # a command that hangs fails the test at this bound


def shared_home(team: Team) -> Path:
    return team.team_home(slots=4, consent=True)  # her passes run members' local jobs


def readable_by(team: Team, account: str, folder: Path) -> str:
    """Every byte `account` can read under `folder` (names and contents), read as that account."""
    done = subprocess.run(["runuser", "-u", account, "--", "bash", "-c",
                           f"find {folder} -print; find {folder} -type f -readable -exec cat {{}} +"],
                          capture_output=True, text=True, errors="replace", timeout=HANG)
    return done.stdout


def submit(team: Team, account: str, home: Path, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    src = source_of(team, account, 'echo "trained with key $WANDB_API_KEY"\n')
    return team.run(account, "--home", str(home), "submit", "--dir", str(src), "--cmd", "bash train.sh", *extra,
                    check=check, umask="0077")


def test_a_members_secret_env_is_sealed_to_the_runner_until_its_pass(trio: Team) -> None:
    alice, bob, carol = trio.accounts
    home = shared_home(trio)
    job = int(submit(trio, bob, home, "--env", f"WANDB_API_KEY={WANDB}").stdout)
    seen = readable_by(trio, carol, home / "spool")
    assert WANDB not in seen
    assert f"submit-{job}-1-" in seen and '"sealed"' in seen, seen[:2000]  # she read the request itself
    assert WANDB not in readable_by(trio, alice, home / "spool")  # nor the runner, before its pass opens it
    wait_for(lambda: trio.run(alice, "--home", str(home), "manage", umask="0077") and
             rows(trio, home)[job]["status"] == "finished", timeout=HANG, interval=0.3, what="bob's job to finish")
    assert json.loads((home / "secrets.json").read_text())[str(job)] == {"WANDB_API_KEY": WANDB}
    tail = trio.run(bob, "--home", str(home), "tail", str(job)).stdout
    assert f"trained with key {WANDB}" in tail, tail


def _rewrite(path: Path, **fields: object) -> None:
    """The request rewritten in place, as its sender could (the file stays its sender's)."""
    doc = json.loads(path.read_text())
    doc.update(fields)
    with open(path, "r+") as f:
        f.truncate()
        f.write(json.dumps(doc))


def test_a_forged_or_plain_secret_is_refused_for_that_submit_alone(trio: Team) -> None:
    alice, bob, _ = trio.accounts
    home = shared_home(trio)
    forged, plain, fine = (int(submit(trio, bob, home, "--env", f"WANDB_API_KEY={WANDB}-{n}", "--hold").stdout)
                           for n in range(3))
    spool = home / "spool"
    _rewrite(next(spool.glob(f"submit-{forged}-1-*.json")), sealed=base64.b64encode(os.urandom(90)).decode())
    # What an older jobtpu sent: the values in plain words, which the whole group could read.
    _rewrite(next(spool.glob(f"submit-{plain}-1-*.json")), sealed="", secrets={"WANDB_API_KEY": "plain"})
    said = trio.run(alice, "--home", str(home), "manage", umask="0077").stderr
    assert "Traceback" not in said, said
    assert list(rows(trio, home)) == [fine], said
    assert json.loads((home / "secrets.json").read_text()) == {str(fine): {"WANDB_API_KEY": f"{WANDB}-2"}}
    answers = trio.run(bob, "--home", str(home), "requests").stdout
    assert (f"submit of job {forged}: refused: jobtpu: error: its sealed secret --env values do not open with this "
            "home's runner.key: submit again") in answers, answers
    assert (f"submit of job {plain}: refused: jobtpu: error: its secret --env values came unsealed, readable by the "
            "whole group: the member's jobtpu is older than this home's (update jobtpu, then submit again)") \
        in answers, answers
    assert f"submit of job {fine}: done" in answers, answers


def test_sealed_values_are_only_for_the_names_the_job_shows_as_secret(trio: Team) -> None:
    """bob seals values to the runner's key himself, for a name his job does not show as <secret>
    (JOBTPU_MARK, which no --env may set): his submit is refused in one line, a well-made one is taken in."""
    from jobtpu.home.sealing import seal

    alice, bob, _ = trio.accounts
    home = shared_home(trio)
    forged, fine = (int(submit(trio, bob, home, "--env", f"WANDB_API_KEY={WANDB}", "--hold").stdout) for _ in range(2))
    values = {"WANDB_API_KEY": WANDB, "JOBTPU_MARK": "someone.else"}
    blob = seal((home / "runner.pub").read_bytes(), json.dumps(values).encode())
    _rewrite(next((home / "spool").glob(f"submit-{forged}-1-*.json")), sealed=base64.b64encode(blob).decode())
    said = trio.run(alice, "--home", str(home), "manage", umask="0077").stderr
    assert list(rows(trio, home)) == [fine], said
    answers = trio.run(bob, "--home", str(home), "requests").stdout
    assert (f"submit of job {forged}: refused: jobtpu: error: job {forged}: its secret values are not for the "
            "--env names it shows as <secret>") in answers, answers


def test_replies_are_sealed_to_their_sender(trio: Team) -> None:
    alice, bob, carol = trio.accounts
    home = shared_home(trio)
    hers = int(submit(trio, alice, home, "--hold").stdout)
    his = int(submit(trio, bob, home, "--hold").stdout)
    trio.run(bob, "--home", str(home), "kill", str(hers), umask="0077")  # refused: alice's job
    trio.run(bob, "--home", str(home), "note", str(his), "plum-coloured-words", umask="0077")
    trio.run(alice, "--home", str(home), "manage", umask="0077")
    trio.run(alice, "--home", str(home), "manage", umask="0077")  # the note acts on the job taken in first
    refusal = f"job {hers} is {alice}'s, not {bob}'s: kill refused"
    seen = readable_by(trio, carol, home / "replies")
    assert seen.count('"request"') == 3, seen  # she reads each reply file: only its words are sealed
    for words in (refusal, "plum-coloured-words", f"submit of job {his}", f"kill {hers}"):
        assert words not in seen, (words, seen)
    answers = trio.run(bob, "--home", str(home), "requests").stdout
    assert f"kill {hers}: refused: jobtpu: error: {refusal}" in answers, answers
    assert f"note {his} plum-coloured-words: done" in answers, answers
    assert f"submit of job {his}: done" in answers, answers
    assert rows(trio, home)[his]["note"] == "plum-coloured-words"
    theirs = trio.run(carol, "--home", str(home), "requests").stdout  # carol's own view shows none of bob's
    assert "plum" not in theirs and str(hers) not in theirs, theirs


@pytest.mark.parametrize("planted", ["bob's file", "a link to bob's file"])
def test_a_public_key_that_is_not_the_runners_is_refused_by_a_members_submit(trio: Team, planted: str) -> None:
    """bob's key where alice's should be: the home's folder lets no member put it there, so root
    plants it, as a folder another account could write would let it be."""
    _, bob, carol = trio.accounts
    home = shared_home(trio)
    pub = home / "runner.pub"
    own = trio.private_folder(bob, "keys") / "runner.pub"
    own.write_bytes(os.urandom(32))
    os.chown(own, trio.uid(bob), trio.gid)
    own.chmod(0o644)
    own.parent.chmod(0o755)
    pub.unlink(missing_ok=True)  # (a home made before runner keys has none)
    if planted == "bob's file":
        os.link(own, pub)
        own.unlink()
    else:
        pub.symlink_to(own)
    refused = submit(trio, carol, home, "--env", f"WANDB_API_KEY={WANDB}", check=False)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    why = "is not the runner's file" if planted == "bob's file" else "link"
    first = refused.stderr.splitlines()[0]
    assert first.startswith("jobtpu: error: ") and why in first and "nothing was sent" in first, refused.stderr
    assert list((home / "spool").glob("submit-*")) == [] and list((home / "spool").glob("archive-*")) == []


def test_a_home_without_runner_keys_gets_them_at_its_runners_next_pass(team: Team) -> None:
    """A home made before runner keys: a member's secret waits for them (one line, nothing sent)
    rather than going out unsealed; the runner's next pass makes them."""
    alice, bob = team.accounts
    home = init_shared(team)
    for name in ("runner.key", "runner.pub"):
        (home / name).unlink(missing_ok=True)
    early = submit(team, bob, home, "--env", f"WANDB_API_KEY={WANDB}", check=False)
    assert early.returncode == 1 and early.stderr.splitlines()[0] == (
        "jobtpu: error: this shared home has no runner.pub yet, so your secret --env values cannot be sealed to its "
        "runner; nothing was sent"), early.stderr
    assert list((home / "spool").glob("submit-*")) == []
    team.run(alice, "--home", str(home), "manage", umask="0077")
    for name, mode in (("runner.key", 0o600), ("runner.pub", 0o640)):
        st = (home / name).stat()
        assert (st.st_uid, st.st_mode & 0o777) == (team.uid(alice), mode), name
    job = int(submit(team, bob, home, "--env", f"WANDB_API_KEY={WANDB}").stdout)
    team.run(alice, "--home", str(home), "manage", umask="0077")
    assert json.loads((home / "secrets.json").read_text())[str(job)] == {"WANDB_API_KEY": WANDB}


def test_the_move_from_the_old_layout_replaces_a_key_pair_a_member_left(team: Team) -> None:
    """In the old layout any member could write the top folder: a runner.key bob left there (he knows
    it) must not become the runner's when the home moves to the one-writer layout."""
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", str(home), umask="0077")
    write_as_runner(team, home / "machines.json", {"machines": {"local": {"kind": "local", "resources": {"slot": 4}}}})
    old_layout(team, home)
    bobs = os.urandom(32)
    for name, data in (("runner.key", bobs), ("runner.pub", public_of(bobs))):
        (home / name).write_bytes(data)
        os.chown(home / name, team.uid(bob), team.gid)
        (home / name).chmod(0o660)
    team.run(alice, "init", "--shared", team.group, str(home), umask="0077")
    key, pub = (home / "runner.key"), (home / "runner.pub")
    assert (key.stat().st_uid, key.stat().st_mode & 0o777) == (team.uid(alice), 0o600)
    assert (pub.stat().st_uid, pub.stat().st_mode & 0o777) == (team.uid(alice), 0o640)
    assert key.read_bytes() != bobs and pub.read_bytes() == public_of(key.read_bytes())


@pytest.mark.fast
@pytest.mark.parametrize("mode,uid,links,size,private,public", [
    (0o100600, 7, 1, 32, None, None),
    (0o100640, 7, 1, 32, "is readable or writable by other accounts", None),
    (0o100660, 7, 1, 32, "is readable or writable by other accounts", "is writable by others than the runner"),
    (0o100602, 7, 1, 32, "is readable or writable by other accounts", "is writable by others than the runner"),
    (0o100600, 8, 1, 32, "is another account's", "is not the runner's file"),
    (0o100600, 7, 2, 32, "has other hard links", "has other hard links"),
    (0o100600, 7, 1, 31, "is not a 32-byte key", "is not a 32-byte key"),
    (0o120777, 7, 1, 32, "is not a regular file", "is not a regular file"),
    (0o010600, 7, 1, 32, "is not a regular file", "is not a regular file"),
])
def test_which_key_files_are_used(mode: int, uid: int, links: int, size: int, private: str | None,
                                  public: str | None) -> None:
    st = os.stat_result((mode, 0, 0, links, uid, 0, size, 0, 0, 0))
    assert why_not_private_key(st, 7) == private
    assert why_not_public_key(st, 7) == public
    # In a folder of its own a second link is its maker's (reply_key links it in, then drops the name).
    assert why_not_private_key(st, 7, links_count=False) == (None if private == "has other hard links" else private)


@pytest.mark.fast
def test_commands_making_the_reply_key_at_once_all_get_the_one_key(tmp_path: Path) -> None:
    """Two requests of one member at once (a script submitting a sweep in parallel): the second saw the
    first one's key with its temporary second link and refused it (1 in 10 rounds of 8 at once)."""
    def make(folder: Path, start: threading.Barrier, got: list[bytes | str]) -> None:
        start.wait()
        try:
            got.append(reply_key(folder))
        except JobtpuError as e:
            got.append(e.message)

    for round_no in range(100):
        folder = tmp_path / f"cache{round_no}"
        folder.mkdir(mode=0o700)
        start, got = threading.Barrier(8), []
        threads = [threading.Thread(target=make, args=(folder, start, got)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(got)) == 1 and isinstance(got[0], bytes), (round_no, set(got))
        assert [p.name for p in folder.iterdir()] == ["reply.key"]


def test_a_reply_key_left_with_its_makers_temporary_link_is_still_used(tmp_path: Path) -> None:
    """Its maker killed between the link and the removal of its temporary name."""
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    key = reply_key(folder)
    os.link(folder / "reply.key", folder / ".reply.key.left.tmp")
    assert reply_key(folder) == key
    folder.chmod(0o770)  # its group could have made that name: refused
    with pytest.raises(JobtpuError, match="has other hard links"):
        reply_key(folder)


def test_a_folder_where_the_runner_key_goes_is_one_line_at_each_pass(team: Team) -> None:
    """A folder bob made as runner.key in the old layout: the runner cannot write its key there; the
    move and each pass say so in one line (no traceback), and everything else goes on."""
    alice, bob = team.accounts
    home = team.shared_folder("homes") / "home"
    team.run(alice, "init", str(home), umask="0077")
    write_as_runner(team, home / "machines.json", {"machines": {"local": {"kind": "local", "resources": {"slot": 4}}}})
    old_layout(team, home)
    (home / "runner.key").mkdir()
    os.chown(home / "runner.key", team.uid(bob), team.gid)
    line = ("runner.key, runner.pub: cannot make the runner's key pair (Is a directory); move them away by hand "
            "(members cannot send secret --env values until then)")
    moved = team.run(alice, "--home", str(home), "manage", umask="0077")
    assert line in moved.stderr.splitlines() and "Traceback" not in moved.stderr, moved.stderr
    again = team.run(alice, "--home", str(home), "manage", umask="0077")
    assert again.stderr.splitlines().count(line) == 1, again.stderr
