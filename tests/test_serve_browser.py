"""`jobtpu serve` in headless Chromium (Playwright driving Debian's chromium, never a browser it
downloads), with two real accounts in one shared home (docs/reference/commands.md §2.29): a job's
page follows it and its log while `manage --loop` runs and turns its freshness line red once the
loop stops; kills, a forced act on the other account's job, a sweep's bulk rerun after its preview;
a hostile note and log line stay text; eight tabs load and keep updating."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtpu import timing
from tests.accounts import REPO, Team
from tests.serving import Served, record, shared_home, source

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason="needs Debian's chromium (.ci/run installs it)")

QUICK = timing.env(serve_poll=0.3, serve_watch=0.2, log_stream=0.3, follow_poll=0.2, spool_poll=0.2)
# A page that does not show what it must fails the test at this bound (Playwright's own waits).
SHOWN = 20_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Site:
    def __init__(self, team: Team, home: Path, server: Served, browser: Any) -> None:
        self.team, self.home, self.server, self.browser = team, home, server, browser
        self.context = browser.new_context()
        self.dialogs: list[str] = []
        first = self.page()
        first.goto(f"{server.origin}/login?k={server.secret}")  # the cookie, for every tab of the context
        first.close()

    def page(self, path: str | None = None) -> Any:
        page = self.context.new_page()
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        if path is not None:
            page.goto(self.server.origin + path)
        return page

    def run(self, account: str, *words: str) -> str:
        return self.team.run(account, "--home", str(self.home), *words, umask="0077", env=QUICK).stdout


@pytest.fixture
def site(team: Team) -> Iterator[Site]:
    alice = team.accounts[0]
    home = shared_home(team)
    server = Served(team, alice, home, "--port", str(free_port()), env=QUICK)
    try:
        with playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            try:
                yield Site(team, home, server, browser)
            finally:
                browser.close()
    finally:
        server.stop()


def loop(team: Team, account: str, home: Path) -> subprocess.Popen[str]:
    """`manage --loop 1` as the account (the runner)."""
    home_dir = pwd.getpwnam(account).pw_dir
    cmd = ["runuser", "-u", account, "--", "env", "-i", f"HOME={home_dir}", f"USER={account}", f"LOGNAME={account}",
           "PATH=/usr/local/bin:/usr/bin:/bin", f"PYTHONPATH={REPO}", *(f"{k}={v}" for k, v in QUICK.items()),
           "bash", "-c", 'umask 0077; exec "$0" -m jobtpu.cli "$@"', sys.executable,
           "--home", str(home), "manage", "--loop", "1"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True, cwd=team.base)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_a_job_page_follows_the_job_and_its_log_and_turns_red_when_passes_stop(site: Site) -> None:
    from playwright.sync_api import expect

    alice = site.team.accounts[0]
    gate = site.team.private_folder(alice, "gate")
    src = source(site.team, alice, f"echo started; while [ ! -e {gate}/go ]; do sleep 0.1; done; echo finishing\n")
    job = int(site.run(alice, "submit", "--dir", str(src), "--cmd", "bash run.sh"))
    page = site.page(f"/job/{job}")
    expect(page.locator("#status")).to_have_text("queued")
    assert page.locator("#user").inner_text() == alice
    looping = loop(site.team, alice, site.home)
    try:
        expect(page.locator("#status")).to_have_text("running", timeout=SHOWN)
        expect(page.locator("pre.log")).to_contain_text("started", timeout=SHOWN)
        expect(page.locator("#fresh")).to_have_class("fresh", timeout=SHOWN)
        (gate / "go").touch()
        expect(page.locator("#status")).to_have_text("finished", timeout=SHOWN)
        expect(page.locator("pre.log")).to_contain_text("finishing", timeout=SHOWN)
    finally:
        stop(looping)
    expect(page.locator("#fresh")).to_have_class("stale", timeout=SHOWN)
    expect(page.locator("#fresh")).to_contain_text("STALE")
    assert page.evaluate("getComputedStyle(document.getElementById('fresh')).color") == "rgb(204, 0, 0)"
    assert site.dialogs == []


def test_kills_a_forced_act_and_a_sweeps_bulk_rerun_after_previews(site: Site) -> None:
    from playwright.sync_api import expect

    alice, bob = site.team.accounts
    mine = int(site.run(alice, "submit", "--dir", str(source(site.team, alice, "sleep 600\n")), "--cmd", "bash run.sh",
                        "--hold"))
    bobs = int(site.team.run(bob, "--home", str(site.home), "submit", "--dir",
                             str(source(site.team, bob, "sleep 600\n")), "--cmd", "bash run.sh", "--hold",
                             umask="0077").stdout)
    site.run(alice, "manage")  # bob's submit request taken in

    def act(path: str, ticked: list[int], verb: str, force: bool = False) -> Any:
        page = site.page(path)
        for job_id in ticked:
            page.locator(f'input[name=id][value="{job_id}"]').check()
        page.select_option("select[name=verb]", verb)
        if force:
            page.locator("input[name=force]").check()
        page.locator("fieldset.act button[type=submit]").click()
        return page

    # A kill of one's own job: the preview says what it would do; only the confirmation does it.
    page = act("/", [mine], "kill")
    expect(page.locator("#preview")).to_contain_text(f"would kill job {mine}")
    assert record(site.team, alice, site.home, mine)["status"] == "queued"
    page.locator("#confirm").click()
    expect(page.locator("#result")).to_be_visible()
    assert record(site.team, alice, site.home, mine)["status"] == "killed"

    # bob's job: refused without the force box, nothing done; with it, done and recorded as forced.
    page = act("/?all_users=1", [bobs], "kill")
    expect(page.locator("#preview")).to_contain_text("jobtpu: error:")
    assert page.locator("#confirm").count() == 0
    assert record(site.team, alice, site.home, bobs)["status"] == "queued"
    page = act("/?all_users=1", [bobs], "kill", force=True)
    expect(page.locator("#preview")).to_contain_text(f"would kill job {bobs}")
    page.locator("#confirm").click()
    expect(page.locator("#result")).to_be_visible()
    killed = record(site.team, alice, site.home, bobs)
    assert killed["status"] == "killed"
    assert [(f["act"], f["account"]) for f in killed["forced"]] == [("kill", alice)]  # type: ignore[index,union-attr]

    # A sweep that ran, rerun as a whole from its view after the preview lists each member.
    sweep_src = source(site.team, alice, "echo ok\n", "sweep")
    first = int(site.run(alice, "submit", "--dir", str(sweep_src), "--cmd", "bash run.sh",
                         "--sweep", "lr=1,2,3").split("-")[0])
    members = list(range(first, first + 3))

    def ended() -> bool:
        site.run(alice, "manage")
        return all(record(site.team, alice, site.home, j)["status"] == "finished" for j in members)
    from tests.helpers import wait_for
    wait_for(ended, timeout=60, interval=0.2, what="the sweep to finish")
    page = site.page(f"/?sweep={first}")
    page.locator("#whole-view").check()
    page.select_option("select[name=verb]", "rerun")
    page.locator("fieldset.act button[type=submit]").click()
    for job_id in members:
        expect(page.locator("#preview")).to_contain_text(f"would rerun job {job_id}")
    assert all(record(site.team, alice, site.home, j)["status"] == "finished" for j in members)
    page.locator("#confirm").click()
    expect(page.locator("#result")).to_be_visible()
    assert [record(site.team, alice, site.home, j)["status"] for j in members] == ["queued"] * 3
    assert site.dialogs == []


def test_a_hostile_note_and_log_line_show_as_text(site: Site) -> None:
    from playwright.sync_api import expect

    alice, bob = site.team.accounts
    hostile = "<img src=x onerror=alert(1)>"
    src = source(site.team, bob, "printf '\\033[31mred</script><script>alert(2)</script>\\n'\n")
    job = int(site.team.run(bob, "--home", str(site.home), "submit", "--dir", str(src), "--cmd", "bash run.sh",
                            umask="0077").stdout)
    site.run(alice, "manage")
    site.team.run(bob, "--home", str(site.home), "note", str(job), hostile, umask="0077")
    from tests.helpers import wait_for

    def ended() -> bool:
        site.run(alice, "manage")
        return record(site.team, alice, site.home, job)["status"] == "finished"
    wait_for(ended, timeout=60, interval=0.2, what="the job to finish")
    page = site.page(f"/job/{job}")
    expect(page.locator("#note")).to_have_text(hostile)
    expect(page.locator("pre.log")).to_contain_text("\\x1b[31mred</script><script>alert(2)</script>")
    listing = site.page("/?all_users=1")
    expect(listing.locator(f'tr[data-id="{job}"] td.c-info')).to_contain_text(hostile)
    for shown in (page, listing):
        assert shown.locator("#live img, #live script").count() == 0
    page.wait_for_timeout(1000)  # a poll or two: a redraw must not bring them to life either
    assert site.dialogs == []


def test_eight_tabs_load_and_keep_updating(site: Site) -> None:
    from playwright.sync_api import expect

    alice = site.team.accounts[0]
    src = source(site.team, alice, "echo ok\n")
    tabs = [site.page("/") for _ in range(8)]
    for tab in tabs:
        expect(tab.locator("table#jobs")).to_be_visible()
    job = int(site.run(alice, "submit", "--dir", str(src), "--cmd", "bash run.sh", "--name", "eighth"))
    for tab in tabs:
        expect(tab.locator(f'tr[data-id="{job}"] td.c-status')).to_have_text("queued", timeout=SHOWN)
    site.run(alice, "kill", str(job))
    for tab in tabs:
        expect(tab.locator(f'tr[data-id="{job}"] td.c-status')).to_have_text("killed", timeout=SHOWN)
    assert json.loads(site.run(alice, "status", "--json", str(job)))["jobs"][0]["status"] == "killed"
    assert os.path.exists(site.home / "state.json")


def test_the_dashboard_puts_work_first_in_colour_with_a_summary_links_and_charts(site: Site, tmp_path: Path) -> None:
    """What a lead keeps open: work on machines first, a colour per status, the summary, tags and
    event ids as links, events newest first, a job page without a Python None that ends readable,
    and the charts drawn (each page's screenshot is kept for a person to look at)."""
    from playwright.sync_api import expect

    from tests.helpers import wait_for

    alice = site.team.accounts[0]
    shots = Path(os.environ.get("JOBTPU_SCREENSHOTS") or tmp_path)
    fleet = json.loads((site.home / "machines.json").read_text())
    fleet["machines"]["local"]["resources"]["gpu"] = 2  # GPUs a job asks for count as in use (report's count)
    (site.home / "machines.json").write_text(json.dumps(fleet))
    markers = "for i in 1 2 3; do echo \"JOBTPU_PROGRESS step=$i loss=$(( 10 - i * JOBTPU_SWEEP_LR ))\"; done\n"
    first = int(site.run(alice, "submit", "--dir", str(source(site.team, alice, markers, "sweep")), "--cmd", "bash run.sh",
                         "--sweep", "lr=1,2").split("-")[0])
    best = int(site.run(alice, "submit", "--dir", str(source(site.team, alice, "echo ok\n", "best")), "--cmd", "bash run.sh",
                        "--tag", "best"))
    failed = int(site.run(alice, "submit", "--dir", str(source(site.team, alice, "exit 3\n", "bad")), "--cmd", "bash run.sh"))

    def ended() -> bool:
        site.run(alice, "manage")
        return all(record(site.team, alice, site.home, j)["status"] in ("finished", "failed")
                   for j in (first, first + 1, best, failed))
    wait_for(ended, timeout=60, interval=0.2, what="the first jobs to end")
    gate = site.team.private_folder(alice, "gate")
    running = int(site.run(alice, "submit", "--dir", str(source(site.team, alice, f"while [ ! -e {gate}/go ]; do sleep 0.1; "
                                                                    "done\n", "gated")), "--cmd", "bash run.sh",
                             "--req", "gpu=1"))
    site.run(alice, "manage")
    held = int(site.run(alice, "submit", "--dir", str(source(site.team, alice, "echo ok\n", "held")), "--cmd", "bash run.sh",
                        "--hold"))
    assert record(site.team, alice, site.home, running)["status"] == "running"
    try:
        page = site.page("/")
        page.set_viewport_size({"width": 1400, "height": 1000})
        rows = page.locator("table#jobs tbody tr")
        expect(rows).to_have_count(6)
        order = [int(rows.nth(i).get_attribute("data-id") or 0) for i in range(6)]
        ends = {j: record(site.team, alice, site.home, j)["attempts"][-1]["ended"]  # type: ignore[index]
                for j in (first, first + 1, best, failed)}
        assert order == [running, held, *sorted(ends, key=lambda j: -ends[j])]  # the last to end leads what ended
        colours = {page.locator(f'tr[data-id="{j}"]').evaluate("r => getComputedStyle(r).backgroundColor")
                   for j in (running, held, failed, best)}
        assert len(colours) == 4
        mine = page.locator(f'#by-user tr[data-user="{alice}"] td')
        assert [mine.nth(i).inner_text() for i in (1, 2, 3, 4)] == ["1 GPU", "1", "1", "1"]
        expect(page.locator("#passes")).to_have_class("on-time")
        page.screenshot(path=str(shots / "jobs.png"), full_page=True)
        page.locator(f'tr[data-id="{best}"] a.tag[href="/?tag=best"]').click()
        expect(page.locator("table#jobs tbody tr")).to_have_count(1)
        page.goto(site.server.origin + "/")
        page.locator(f'tr[data-id="{first}"] a.tag.sweep').click()
        expect(page.locator("#chart-sweep.drawn canvas").first).to_be_visible()
        chart = json.loads(page.locator("#chart-sweep").get_attribute("data-chart") or "{}")
        assert chart["x"] == [1, 2, 3] and [s["values"] for s in chart["series"]] == [[9, 8, 7], [8, 6, 4]]
        page.screenshot(path=str(shots / "sweep.png"), full_page=True)

        events = site.page("/events")
        links = events.locator("ol#events li a.job")
        assert links.first.get_attribute("href") == f"/job/{running}"  # the newest: the gated job's launch
        assert events.locator("ol#events li a.machine").first.get_attribute("href") == "/machines#m-local"
        lines = events.locator("ol#events li span.line").all_inner_texts()
        times = [line[:19] for line in lines]  # to the second: events of one second keep the log's order
        assert times == sorted(times, reverse=True) and len(times) > 10
        events.screenshot(path=str(shots / "events.png"), full_page=True)

        job = site.page(f"/job/{running}")
        expect(job.locator("#status")).to_have_text("running")
        assert "None" not in job.locator("#live").inner_text()
        assert job.locator("#live > :last-child").get_attribute("id") == "details"
        expect(job.locator("#details")).to_contain_text("bash run.sh")
        expect(job.locator("#chart-timeline.drawn canvas").first).to_be_visible()
        job.screenshot(path=str(shots / "job.png"), full_page=True)

        charts = site.page("/charts")
        expect(charts.locator("div.chart.drawn")).to_have_count(2)
        expect(charts.locator("#chart-chips canvas").first).to_be_visible()
        chips = json.loads(charts.locator("#chart-chips").get_attribute("data-chart") or "{}")
        assert [(c["label"], c["values"][-1]) for c in chips["series"]] == [(f"{alice} (GPUs)", 1)]
        expect(charts.locator("#chart-goodput canvas").first).to_be_visible()
        goodput = json.loads(charts.locator("#chart-goodput").get_attribute("data-chart") or "{}")
        assert goodput["series"][0]["values"][-1] is not None  # today's jobs ran
        charts.screenshot(path=str(shots / "charts.png"), full_page=True)
        site.page("/machines").screenshot(path=str(shots / "machines.png"), full_page=True)
    finally:
        (gate / "go").touch()
    assert site.dialogs == []
