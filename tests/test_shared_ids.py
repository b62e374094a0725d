"""Job ids in a shared home (docs/reference/home-files.md §1.3, "Job ids"): unique across every
account's submits in every order, with or without a pass between, and never moved or blocked by what
another member leaves in the spool.

Real accounts: alice made the home and runs its passes, bob is the hostile member, carol another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobtpu.home.claims import Claim, holding, lowest_fit, mark_below
from tests.accounts import Team

HANG = 60


# ---- the rule, as a table ------------------------------------------------------------------------

def c(name: str, first: int, n: int, made: int) -> Claim:
    return Claim(name, first, n, made, 1000)


@pytest.mark.fast
@pytest.mark.parametrize(("claims", "floor", "taken", "held"), [
    ([], 0, set(), []),
    ([c("a", 1, 2, 5)], 0, set(), ["a"]),
    ([c("a", 1, 2, 5), c("b", 3, 1, 6)], 0, set(), ["a", "b"]),
    # overlapping: the one stamped first holds, whatever its name or ids
    ([c("a", 1, 3, 7), c("b", 2, 1, 6)], 0, set(), ["b"]),
    ([c("z", 5, 1, 1), c("a", 5, 1, 2)], 0, set(), ["z"]),
    # stamped alike and overlapping: neither holds (no name or id wins a tie)
    ([c("a", 1, 1, 5), c("b", 1, 3, 5)], 0, set(), []),
    ([c("a", 1, 1, 5), c("b", 2, 1, 5)], 0, set(), ["a", "b"]),
    # at or below the ids given out, or over ids state.json has: never
    ([c("a", 3, 1, 1)], 3, set(), []),
    ([c("a", 4, 3, 1)], 0, {5}, []),
    ([c("a", 4, 3, 1), c("b", 4, 1, 2)], 0, {5}, ["b"]),
    # a huge claim over one taken id: the walk goes over the smaller side
    ([c("a", 1, 100_000, 1)], 0, {70_000}, []),
])
def test_which_claims_hold_their_ids(claims: list[Claim], floor: int, taken: set[int], held: list[str]) -> None:
    assert [h.name for h in holding(claims, floor, taken)] == held


@pytest.mark.fast
@pytest.mark.parametrize(("floor", "held", "n", "first"), [
    (0, [], 1, 1),
    (7, [], 3, 8),
    (0, [c("a", 1, 2, 1)], 1, 3),
    # a claim far above the rest moves nobody: the lowest free run comes first
    (0, [c("far", 1_000_000, 999_999, 1)], 5, 1),
    (4, [c("a", 5, 1, 1), c("far", 900, 10, 2)], 2, 6),
    # a gap too small for the run is passed over, one big enough is taken
    (0, [c("a", 1, 1, 1), c("b", 3, 1, 2), c("d", 9, 1, 3)], 2, 4),
    (0, [c("a", 1, 1, 1), c("b", 3, 1, 2), c("d", 9, 1, 3)], 1, 2),
    (0, [c("b", 3, 1, 2), c("a", 1, 1, 1)], 1, 2),
])
def test_where_a_submit_places_its_ids(floor: int, held: list[Claim], n: int, first: int) -> None:
    assert lowest_fit(floor, held, n) == first


@pytest.mark.fast
@pytest.mark.parametrize(("last", "held", "mark"), [
    (9, [], 9),
    (9, [c("a", 5, 2, 1)], 4),
    (9, [c("a", 12, 2, 1)], 9),
    (9, [c("a", 12, 2, 1), c("b", 7, 1, 2)], 6),
])
def test_how_far_last_id_goes_while_claims_wait(last: int, held: list[Claim], mark: int) -> None:
    assert mark_below(last, held) == mark


# ---- real accounts -------------------------------------------------------------------------------

def shared_home(team: Team) -> Path:
    return team.team_home(slots=8)


def src_of(team: Team, account: str) -> Path:
    src = team.private_folder(account, "src")
    (src / "run.sh").write_text("true\n")
    os.chown(src / "run.sh", team.uid(account), team.uid(account))
    return src


def submit(team: Team, account: str, home: Path, *extra: str) -> list[int]:
    """The ids a submit printed (one a line for a sweep's jobs, or one)."""
    out = team.run(account, "--home", str(home), "submit", "--dir", str(src_of_cached(team, account)), "--cmd",
                   "bash run.sh", "--hold", *extra, umask="0077").stdout
    ids: list[int] = []
    for word in out.split():
        low, _, high = word.partition("-")
        ids.extend(range(int(low), int(high or low) + 1))
    return ids


_SOURCES: dict[tuple[str, str], Path] = {}


def src_of_cached(team: Team, account: str) -> Path:
    key = (team.base.name, account)
    if key not in _SOURCES:
        _SOURCES[key] = src_of(team, account)
    return _SOURCES[key]


def api_submit(team: Team, account: str, home: Path) -> int:
    """A submit through the Python API, as `account`."""
    script = ("import sys, jobtpu; h = jobtpu.Home(sys.argv[1]); "
              "print(h.submit(cmd='bash run.sh', dir=sys.argv[2], hold=True)[0].id)")
    done = subprocess.run(["runuser", "-u", account, "--", "env", f"PYTHONPATH={Path(__file__).parent.parent}",
                           sys.executable, "-c", script, str(home), str(src_of_cached(team, account))],
                          capture_output=True, text=True, timeout=HANG, cwd=team.base)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def owners(team: Team, home: Path) -> dict[int, int]:
    """Every job the runner's state.json holds: its id and the uid that submitted it."""
    rows = json.loads(team.run(team.accounts[0], "--home", str(home), "status", "--all-users", "--all",
                               "--json").stdout)["jobs"]
    return {r["id"]: r["uid"] for r in rows}


def test_ids_are_unique_across_every_accounts_submits_in_every_order(trio: Team) -> None:
    """The runner's own submits (the CLI and the API) and the members' claims, interleaved with and
    without passes: every id printed is given once, and names the job of the account it was printed to."""
    alice, bob, carol = trio.accounts
    home = shared_home(trio)
    printed: list[tuple[int, str]] = []

    def note(account: str, ids: list[int]) -> None:
        printed.extend((i, account) for i in ids)

    note(bob, submit(trio, bob, home))          # a claim waits in the spool
    note(alice, submit(trio, alice, home))      # the runner's own, before any pass
    note(carol, submit(trio, carol, home, "--sweep", "k=1,2,3"))
    note(alice, [api_submit(trio, alice, home)])
    trio.run(alice, "--home", str(home), "manage", umask="0077")
    note(alice, submit(trio, alice, home))
    note(bob, submit(trio, bob, home, "--sweep", "k=1,2"))
    note(alice, submit(trio, alice, home, "--sweep", "k=1,2"))
    note(carol, submit(trio, carol, home))
    trio.run(alice, "--home", str(home), "manage", umask="0077")
    note(carol, submit(trio, carol, home))
    trio.run(alice, "--home", str(home), "manage", umask="0077")

    ids = [i for i, _ in printed]
    assert len(ids) == len(set(ids)) == 13, printed
    assert owners(trio, home) == {i: trio.uid(account) for i, account in printed}
    mark = int((home / "last_id").read_text())
    assert mark == max(ids), mark
    assert not [n for n in os.listdir(home / "spool") if n.startswith("submit-")]


def test_what_a_member_leaves_in_the_spool_moves_no_one_elses_ids(trio: Team) -> None:
    """bob plants every kind of file that is not a claim of his where the next submits' claims would
    go, and one valid claim of his own far above the rest: carol's submit still gets the next id, and
    the runner's pass takes it in."""
    alice, bob, carol = trio.accounts
    home = shared_home(trio)
    spool = home / "spool"
    first = submit(trio, carol, home)[0]
    trio.run(alice, "--home", str(home), "manage", umask="0077")
    nxt = first + 1
    real = submit(trio, bob, home)[0]  # bob's own claim, copied below as the template of a far one
    template = json.loads(next(spool.glob(f"submit-{real}-1*.json")).read_text())
    template["first"] = nxt + 500_000
    far = json.dumps(template)
    planted = (
        f"touch submit-{nxt + 1_000_000}-999999.json",  # the reproduction: one empty file
        f"touch submit-{nxt + 1}-1.json submit-{nxt + 1}-5.json",
        f"printf 'garbage' > submit-{nxt + 1}-2.json",
        f"printf '%s' '{json.dumps({'first': nxt + 1, 'jobs': []})}' > submit-{nxt + 1}-3.json",
        f"mkdir submit-{nxt + 1}-4.json",
        f"ln -s ../state.json submit-{nxt + 1}-6.json",
        f"printf '%s' '{far}' > submit-{nxt + 500_000}-1-0123456789ab.json",
        f"printf '%s' '{far}' > submit-{nxt + 1}-7.json && chmod g+w submit-{nxt + 1}-7.json",
    )
    done = subprocess.run(["runuser", "-u", bob, "--", "bash", "-c", "umask 022; cd spool && " + " && ".join(planted)],
                          capture_output=True, text=True, cwd=home, timeout=HANG)
    assert done.returncode == 0, done.stderr
    got = submit(trio, carol, home)
    assert got == [real + 1], got
    again = submit(trio, carol, home, "--sweep", "k=1,2")
    assert again == [real + 2, real + 3], again
    said = trio.run(alice, "--home", str(home), "manage", umask="0077", timeout=HANG)
    have = owners(trio, home)
    assert {i: have.get(i) for i in (real, *got, *again)} == {real: trio.uid(bob), **{i: trio.uid(carol) for i in got},
                                                              **{i: trio.uid(carol) for i in again}}, said.stderr
    assert have.get(nxt + 500_000) == trio.uid(bob)  # his far claim is his to make: it costs only his ids
    assert "Traceback" not in said.stderr
    left = sorted(n for n in os.listdir(spool) if n.startswith("submit-"))
    assert left == [], left  # refused and gone (bob's folder renamed to a dot name no intake reads)
    # and the next submit after the pass still follows on
    assert submit(trio, carol, home) == [nxt + 500_001]


@pytest.mark.parametrize("squat", ["mkdir -m 777 {name}", "touch {name}", "ln -s /tmp {name}",
                                   "mkdir {name} {name}-0123456789ab"])
def test_a_name_another_member_took_first_in_the_spool_costs_nothing(trio: Team, squat: str) -> None:
    """bob takes the name of carol's snapshot cache in the spool (a folder, a file, a link, and the
    alternate name too): carol's submits work as ever, and keep one cache of her own."""
    _, bob, carol = trio.accounts
    home = shared_home(trio)
    name = f".cache-{trio.uid(carol)}"
    done = subprocess.run(["runuser", "-u", bob, "--", "bash", "-c", "cd spool && " + squat.format(name=name)],
                          capture_output=True, text=True, cwd=home, timeout=HANG)
    assert done.returncode == 0, done.stderr
    ids = submit(trio, carol, home) + submit(trio, carol, home)
    assert len(set(ids)) == 2, ids
    mine = [n for n in os.listdir(home / "spool") if n.startswith(name) and os.stat(home / "spool" / n,
                                                                                   follow_symlinks=False).st_uid
            == trio.uid(carol)]
    assert len(mine) == 1, mine


def test_a_settings_folder_made_under_another_accounts_name_speaks_for_nobody(trio: Team) -> None:
    """bob makes users/carol/ with a webhook of his: the runner's pass never reads it as carol's
    (his webhook would hear of her jobs), moves it aside with one line, and carol keeps settings of
    her own under her name from then on."""
    from jobtpu.passes.tell import users_destinations

    alice, bob, carol = trio.accounts
    home = shared_home(trio)
    plant = (f"mkdir users/{carol} && printf '%s' '{json.dumps({'notify': [{'webhook': 'https://example.com/bob', 'events': ['failed']}]})}'"
             f" > users/{carol}/settings.json")
    done = subprocess.run(["runuser", "-u", bob, "--", "bash", "-c", plant], capture_output=True, text=True,
                          cwd=home, timeout=HANG)
    assert done.returncode == 0, done.stderr
    found, lines = users_destinations(home)
    assert [d.webhook for d in found] == [] and any(f"users/{carol}/ is account {bob}'s" in line for line in lines), lines
    said = trio.run(alice, "--home", str(home), "manage", umask="0077")
    assert f"users/{carol}/ is account {bob}'s, not {carol}'s" in said.stderr, said.stderr
    trio.run(carol, "--home", str(home), "config", "set", "rule", "pass", umask="0077")
    assert os.stat(home / "users" / carol / "settings.json").st_uid == trio.uid(carol)
    assert "pass" in trio.run(carol, "--home", str(home), "config", "get", "rule").stdout


@pytest.mark.fast
def test_a_flood_of_one_accounts_submits_is_read_no_further_than_its_first_claims(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every submit reads the spool's claims: past an account's first CLAIMS_PER_ACCOUNT (the first
    stamped), its files are neither read nor counted, so a member's flood slows nobody else's submit
    into a busy claims lock; the claims read are the ones that came first."""
    from jobtpu.home import claims
    from jobtpu.schema.msgspec_lib import msgspec
    from jobtpu.schema.spool import Submission
    from jobtpu.schema.state import Job

    monkeypatch.setattr(claims, "CLAIMS_PER_ACCOUNT", 5)
    job = Job(id=1, user="ann", cmd="true", archive="a" * 64 + ".tar.gz", created=0.0)
    for first in range(1, 9):
        doc = Submission(first=first, jobs=[msgspec.structs.replace(job, id=first)])
        (tmp_path / f"submit-{first}-1-{first:012x}.json").write_bytes(msgspec.json.encode(doc))
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        known: dict[tuple[str, int, int], Claim | None] = {}
        found = claims.read_claims(fd, os.listdir(fd), known)
    finally:
        os.close(fd)
    stamped = sorted((os.stat(p).st_ctime_ns, p.name) for p in tmp_path.iterdir())
    assert len(known) == 5  # read: five files, not eight
    assert sorted(c.name for c in found) == sorted(name for _, name in stamped[:5])  # the first stamped


def test_the_ids_of_a_refused_submit_are_never_given_again(trio: Team) -> None:
    """bob's submit printed its id and the pass refused it (its command, rewritten by bob in place,
    is empty): that id stays spent, so carol's next submit is never given it."""
    alice, bob, carol = trio.accounts
    home = shared_home(trio)
    refused = submit(trio, bob, home)[0]
    claim = next((home / "spool").glob(f"submit-{refused}-1-*.json"))
    doc = json.loads(claim.read_text())
    doc["jobs"][0]["cmd"] = " "
    done = subprocess.run(["runuser", "-u", bob, "--", "bash", "-c", f"cat > {claim}"], input=json.dumps(doc),
                          capture_output=True, text=True, timeout=HANG)
    assert done.returncode == 0, done.stderr
    said = trio.run(alice, "--home", str(home), "manage", umask="0077")
    assert refused not in owners(trio, home), said.stderr
    assert submit(trio, carol, home) == [refused + 1]
    assert int((home / "last_id").read_text()) >= refused
