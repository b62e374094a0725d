"""`jobtpu serve`'s fleet acts and its submit form over HTTP, with two real accounts in one shared
home (docs/reference/commands.md §2.29): a drain and undrain only after their preview's
confirmation, the runner's alone (a member's preview is the command's own refusal, and a
confirmation sent anyway changes nothing), a TPU act on a machine that is no TPU the command's one
line; a submit filled from the folder's jobtpu.toml, previewed by `submit --dry-run`, made on
confirmation (a member's through the runner's next pass), a mistake the command line's one line."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.accounts import Team
from tests.serving import Served, cookie_name, csrf_of, form, record, shared_home, source


class Site:
    """One account's server of the shared home, and its form posts."""

    def __init__(self, team: Team, home: Path, account: str) -> None:
        self.team, self.home, self.account = team, home, account
        self.server = Served(team, account, home)
        self.cookie = self.server.cookie_header(cookie_name(home))
        self.csrf = csrf_of(self.get("/machines")[1])

    def get(self, path: str) -> tuple[int, str]:
        code, _, text = self.server.request("GET", path, self.cookie)
        return code, text

    def post(self, fields: list[tuple[str, str]], csrf: bool = True) -> tuple[int, str]:
        headers = {**self.cookie, "Origin": f"http://{self.server.host}",
                   "Content-Type": "application/x-www-form-urlencoded"}
        code, _, text = self.server.request("POST", "/act", headers,
                                            form([*([("csrf", self.csrf)] if csrf else []), *fields]))
        return code, text


@pytest.fixture
def sites(team: Team) -> Iterator[tuple[Site, Site]]:
    home = shared_home(team)
    alice = Site(team, home, team.accounts[0])
    try:
        bob = Site(team, home, team.accounts[1])
        try:
            yield alice, bob
        finally:
            bob.server.stop()
    finally:
        alice.server.stop()


def drained(site: Site) -> object:
    rows = json.loads(site.team.run(site.account, "--home", str(site.home), "machines", "--json").stdout)["machines"]
    return next(r for r in rows if r["name"] == "local")["drained"]


def unescaped(html: str) -> str:
    return html.replace("&#39;", "'").replace("&#34;", '"').replace("&quot;", '"').replace("&amp;", "&")


def test_a_machines_drain_is_previewed_confirmed_and_the_runners_alone(sites: tuple[Site, Site]) -> None:
    alice, bob = sites
    page = alice.get("/machines")[1]
    assert 'form method="post" action="/act" class="act machine-acts" data-machine="local"' in page
    assert 'value="drain"' in page and 'value="apply"' not in page  # a TPU's acts only on a TPU

    # The preview says what would run and does nothing; only the confirmation drains.
    code, text = alice.post([("verb", "drain"), ("machine", "local"), ("value", "disk full")])
    assert code == 200 and "would run: jobtpu machines drain local --reason=disk full" in unescaped(text)
    assert 'id="confirm"' in text and drained(alice) is None
    assert alice.post([("verb", "drain"), ("machine", "local"), ("confirm", "1")], csrf=False)[0] == 403
    assert drained(alice) is None
    code, text = alice.post([("verb", "drain"), ("machine", "local"), ("value", "disk full"), ("confirm", "1")])
    assert code == 200 and "done" in text
    assert drained(alice)["reason"] == "disk full"  # type: ignore[index]
    assert 'value="undrain"' in alice.get("/machines")[1]

    # bob, a member: the preview is the command's own refusal; a confirmation sent anyway changes nothing.
    code, text = bob.post([("verb", "undrain"), ("machine", "local")])
    assert "jobtpu: error:" in text and "runner" in text and 'id="confirm"' not in text
    code, text = bob.post([("verb", "undrain"), ("machine", "local"), ("confirm", "1")])
    assert "refused (exit" in text and "jobtpu: error:" in text
    assert drained(alice)["reason"] == "disk full"  # type: ignore[index]

    # A TPU's act on a machine that is none: the command's one line, nothing done.
    code, text = alice.post([("verb", "apply"), ("machine", "local"), ("confirm", "1")])
    assert "refused (exit" in text and len(re.findall("jobtpu: error:", text)) == 1
    # ... already in the preview, as every act the command would refuse (no confirm button)
    for fields in ([("verb", "apply"), ("machine", "local")], [("verb", "setup"), ("machine", "local")],
                   [("verb", "drain"), ("machine", "nosuch")], [("verb", "drain"), ("machine", "local"), ("value", "a\nb")]):
        code, text = alice.post(fields)
        assert len(re.findall("jobtpu: error:", text)) == 1 and 'id="confirm"' not in text, (fields, text)
    assert drained(alice)["reason"] == "disk full"  # type: ignore[index]

    code, text = alice.post([("verb", "undrain"), ("machine", "local"), ("confirm", "1")])
    assert "done" in text and drained(alice) is None


def ids_of(site: Site) -> list[tuple[int, str, list[str]]]:
    doc = json.loads(site.team.run(site.account, "--home", str(site.home), "status", "--json", "--all-users").stdout)
    return [(j["id"], j["user"], j["tags"]) for j in doc["jobs"]]


def test_a_submit_from_the_page_takes_the_job_files_defaults_and_runs_submits_own_code(sites: tuple[Site, Site]) -> None:
    alice, bob = sites
    src = source(alice.team, alice.account, "echo ok\n")
    (src / "jobtpu.toml").write_text('[job]\ncmd = "bash run.sh"\ntags = ["from-file"]\nreq = ["slot=1"]\n')
    os.chown(src / "jobtpu.toml", alice.team.uid(alice.account), alice.team.uid(alice.account))

    page = alice.get(f"/submit?dir={src}")[1]
    assert 'name="cmd" value="bash run.sh"' in page and 'name="req" value="slot=1"' in page
    fields = [("verb", "submit"), ("dir", str(src)), ("cmd", "bash run.sh"), ("sweep", "lr=1,2"), ("tag", "from-file")]
    code, text = alice.post(fields)
    assert code == 200 and "sweep: lr=1,2" in unescaped(text) and 'id="confirm"' in text
    assert ids_of(alice) == []  # the preview submits nothing

    code, text = alice.post([*fields, ("confirm", "1")])
    assert code == 200 and 'id="submitted"' in text
    assert [(user, tags) for _, user, tags in ids_of(alice)] == [(alice.account, ["from-file", "sweep:1"])] * 2

    # A mistake is the command line's one line, and no job (confirmed without the preview here: the
    # preview, `submit --dry-run`, says the same line; the test below).
    code, text = alice.post([("verb", "submit"), ("dir", str(src)), ("req", "slot=lots"), ("confirm", "1")])
    assert "refused (exit" in text and len(re.findall("jobtpu: error:", text)) == 1 and "slot=lots" in text
    code, text = alice.post([("verb", "submit"), ("dir", "relative/folder"), ("confirm", "1")])
    assert code == 400 and "is not a full path" in text
    assert len(ids_of(alice)) == 2

    # bob, a member: his submit is a request the runner's next pass takes in, as from the command line.
    mine = source(bob.team, bob.account, "echo ok\n", "bobs")
    code, text = bob.post([("verb", "submit"), ("dir", str(mine)), ("cmd", "bash run.sh"), ("confirm", "1")])
    assert code == 200 and "done" in text, text
    alice.team.run(alice.account, "--home", str(alice.home), "manage", umask="0077")
    assert [user for _, user, _ in ids_of(alice)].count(bob.account) == 1


def test_the_submit_pages_preview_checks_as_a_submit_and_it_snapshots_only_the_servers_own_folders(
        sites: tuple[Site, Site]) -> None:
    alice, bob = sites
    src = source(alice.team, alice.account, "echo ok\n")
    spool = sorted(p.name for p in (alice.home / "spool").iterdir())

    # The preview of a mistake is the submit's own line, with no confirm button (`submit --dry-run`
    # checks what a submit checks), for the runner and for a member, and writes nothing.
    for site, folder in ((alice, src), (bob, source(bob.team, bob.account, "echo ok\n", "bobs"))):
        for wrong in (("req", "slot=lots"), ("machine", "nosuch"), ("sweep", "lr")):
            code, text = site.post([("verb", "submit"), ("dir", str(folder)), ("cmd", "true"), wrong])
            assert len(re.findall("jobtpu: error:", text)) == 1 and 'id="confirm"' not in text, (wrong, text)
        code, text = site.post([("verb", "submit"), ("dir", str(folder)), ("cmd", "true"), ("sweep", "lr=1,2")])
        assert 'id="confirm"' in text and "sweep: lr=1,2" in text, text  # a good one: its options
    assert ids_of(alice) == [] and sorted(p.name for p in (alice.home / "spool").iterdir()) == spool

    # bob's folder, which alice may read, and a link of alice's to it: not hers, so neither its job
    # file fills her form nor a submit snapshots it, previewed or confirmed.
    theirs = bob.team.private_folder(bob.account, "open")
    theirs.chmod(0o755)
    (theirs / "jobtpu.toml").write_text('[job]\ncmd = "bash steal.sh"\n')
    (theirs / "jobtpu.toml").chmod(0o644)
    link = src / "link"
    link.symlink_to(theirs)
    os.lchown(link, alice.team.uid(alice.account), alice.team.uid(alice.account))
    for folder in (theirs, link):
        page = unescaped(alice.get(f"/submit?dir={folder}")[1])
        assert "steal.sh" not in page and "not a folder of this account's own" in page, page
        for confirm in ([], [("confirm", "1")]):
            code, text = alice.post([("verb", "submit"), ("dir", str(folder)), ("cmd", "true"), *confirm])
            assert "not a folder of this account&#39;s own" in text and 'id="confirm"' not in text, text
    assert ids_of(alice) == []


def test_the_job_files_overrides_are_shown_beside_the_form_and_given_once(sites: tuple[Site, Site]) -> None:
    """Overrides add up, the job file's then the form's (docs/reference/commands.md §2.2.9): the form
    shows the file's beside its field, not in it, so a submit as the page fills it gives each once."""
    alice, _ = sites
    src = source(alice.team, alice.account, "echo ok\n")
    (src / "jobtpu.toml").write_text('[job]\ncmd = "bash run.sh"\noverrides = ["lr=0.1"]\n')
    os.chown(src / "jobtpu.toml", alice.team.uid(alice.account), alice.team.uid(alice.account))
    page = alice.get(f"/submit?dir={src}")[1]
    filled = dict(re.findall(r'<input type="text" name="(\w+)" value="([^"]*)"', page))
    assert filled["overrides"] == "" and "lr=0.1" in page.split('id="file-adds"')[1].split("</p>")[0], page
    fields = [("verb", "submit"), ("dir", str(src)), *((k, v) for k, v in filled.items() if k != "dir")]
    code, text = alice.post(fields)
    assert "overrides: lr=0.1\n" in unescaped(text), text
    code, text = alice.post([*fields, ("confirm", "1")])
    assert 'id="submitted"' in text
    job = ids_of(alice)[0][0]
    assert record(alice.team, alice.account, alice.home, job)["overrides"] == ["--config.training.learning_rate=0.1"]
