"""`jobtpu serve` on a private home as this account (docs/reference/commands.md §2.29): a bad
address is one line and a broken state.json is said on every page, the server carrying on; a
second server of the same home is refused, and a port something else holds is one line with no
link; `jobtpu metrics` from the command line."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import jobtpu, make_home, wait_for

pytestmark = pytest.mark.fast


class Local:
    def __init__(self, home: Path, person: Path, *options: str) -> None:
        self.env = {**os.environ, "JOBTPU_USER": "tester", "HOME": str(person)}
        self.proc = subprocess.Popen([sys.executable, "-m", "jobtpu.cli", "--home", str(home), "serve", *options],
                                     env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out = ""
        while "login?k=" not in out:
            line = self.proc.stdout.readline() if self.proc.stdout else ""
            assert line, out + (self.proc.stderr.read() if self.proc.stderr else "")
            out += line
        self.said = out
        self.secret = re.search(r"k=(\S+)", out).group(1)  # type: ignore[union-attr]
        self.socket = re.search(r" on (/\S+\.sock)\n", out).group(1)  # type: ignore[union-attr]
        from jobtpu.web import guard

        self.cookie = f"{guard.cookie_name(guard.home_key(home))}={self.secret}"
        wait_for(self.answers, timeout=30, interval=0.05, what="serve to answer")

    def answers(self) -> bool:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(self.socket)
            except OSError:
                return False
        return True

    def get(self, path: str) -> tuple[int, str]:
        conn = http.client.HTTPConnection("localhost")
        conn.sock = socket.socket(socket.AF_UNIX)
        conn.sock.connect(self.socket)
        try:
            conn.request("GET", path, headers={"Host": "localhost:8787", "Cookie": self.cookie})
            got = conn.getresponse()
            return got.status, got.read().decode()
        finally:
            conn.close()

    def stop(self) -> str:
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=30)
        return err


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, Local]]:
    home = make_home(tmp_path)
    jobtpu(home, "submit", "--cmd", "true", "--dir", str(tmp_path), "--hold")
    person = Path(tempfile.mkdtemp(prefix="jtp-"))  # short: a Unix socket's path has at most 107 bytes
    server = Local(home, person)
    yield home, server
    err = server.stop()
    shutil.rmtree(person, ignore_errors=True)
    assert "Traceback" not in err, err


def test_bad_addresses_are_one_line_and_a_broken_state_is_said_on_every_page(served: tuple[Path, Local]) -> None:
    home, server = served
    for path, status, line in [
        ("/job/99", 404, "no job 99"),
        ("/job/x", 400, "job id: &#39;x&#39; is not a whole number"),
        ("/?status=runing", 400, "did you mean &#39;running&#39;"),
        ("/?page=-1&all=1", 400, "page: -1 is below 0"),
        ("/events?since=yesterday-ish", 400, "since:"),
        ("/job/1/log?attempt=a", 400, "attempt: 'a' is not a whole number"),
    ]:
        code, page = server.get(path)
        assert (code, line in page) == (status, True), (path, code, page[-600:])
    (home / "state.json").write_text("{not json")
    wait_for(lambda: server.get("/fresh")[1].find("state.json") >= 0, timeout=30, what="the broken state.json said")
    for path in ("/", "/job/1", "/machines"):
        code, page = server.get(path)
        assert code == 503 and "state.json" in page and "jobtpu: error:" in page, (path, page[-600:])
    code, page = server.get("/metrics")
    assert code == 503 and page.startswith("jobtpu: error: state.json")


def test_a_second_server_of_the_same_home_is_refused(served: tuple[Path, Local], tmp_path: Path) -> None:
    home, server = served
    done = subprocess.run([sys.executable, "-m", "jobtpu.cli", "--home", str(home), "serve"], env=server.env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith("jobtpu: error: a `jobtpu serve` of this home already"), done.stderr
    assert "Traceback" not in done.stderr
    bad = subprocess.run([sys.executable, "-m", "jobtpu.cli", "--home", str(home), "serve", "--bind", "0.0.0.0"],
                         env=server.env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.splitlines() == [
        "jobtpu: error: --bind goes with --port",
        "hint: give --port N too (or neither, for the private socket)"], bad.stderr
    deep = tmp_path / ("d" * 60)  # a home directory too deep for a socket's path
    far = subprocess.run([sys.executable, "-m", "jobtpu.cli", "--home", str(home), "serve"],
                         env={**server.env, "HOME": str(deep)}, capture_output=True, text=True, timeout=60)
    assert far.returncode == 1 and "longer than a Unix socket's path may be" in far.stderr, far.stderr
    assert far.stderr.splitlines()[-1] == "hint: use --port N (127.0.0.1 only)"


def test_jobtpu_metrics_prints_the_prometheus_text(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    home = make_home(tmp_path)
    jobtpu(home, "submit", "--cmd", "true", "--dir", str(tmp_path), "--hold")
    done = jobtpu(home, "metrics")
    families = {f.name: f for f in text_string_to_metric_families(done.stdout)}
    # The job is held: counted apart from the queued, every other status at 0 (a series never vanishes).
    assert {s.labels["status"]: s.value for s in families["jobtpu_jobs"].samples} == {
        "queued": 0, "held": 1, "launching": 0, "running": 0, "killing": 0, "finished": 0, "failed": 0, "killed": 0}
    assert families["jobtpu_oldest_queued_seconds"].samples[0].value == 0
    assert json.dumps(sorted(families)) == json.dumps(sorted([
        "jobtpu_jobs", "jobtpu_oldest_queued_seconds", "jobtpu_machines", "jobtpu_last_pass_age_seconds",
        "jobtpu_last_pass_duration_seconds", "jobtpu_accelerator_hours_used", "jobtpu_accelerator_hours_lost",
        "jobtpu_jobs_ended", "jobtpu_preemptions"]))


def test_a_page_draws_at_most_500_rows_and_says_what_it_left_out(tmp_path: Path) -> None:
    from jobtpu.home.layout import Home
    from jobtpu.home.store import Store
    from jobtpu.schema.state import Job, Status

    home = make_home(tmp_path)
    with Store(Home(home)).transaction() as state:
        state.jobs = [Job(id=i, user="tester", cmd="true", archive="a" * 64 + ".tar.gz", created=1.7e9 + i,
                          status=Status.QUEUED) for i in range(1, 1101)]
        state.next_id = 1101
    person = Path(tempfile.mkdtemp(prefix="jtp-"))
    server = Local(home, person)
    try:
        code, page = server.get("/")
        assert code == 200 and page.count('<tr data-id="') == 20
        assert "1080 more queued job(s) not shown" in page
        code, page = server.get("/?all=1")
        assert page.count('<tr data-id="') == 500 and "page 1 of 3: jobs 1–500 of 1100" in page
        assert 'href="?all=1&amp;page=2"' in page
        code, page = server.get("/?all=1&page=3")
        assert page.count('<tr data-id="') == 100 and 'data-id="1100"' in page and "page 3 of 3" in page
        # What an open page asks each poll: a 304 while nothing changed.
        conn = http.client.HTTPConnection("localhost")
        conn.sock = socket.socket(socket.AF_UNIX)
        conn.sock.connect(server.socket)
        headers = {"Host": "localhost:8787", "Cookie": server.cookie}
        conn.request("GET", "/fresh", headers=headers)
        first = conn.getresponse()
        generation = json.loads(first.read())["gen"]
        conn.request("GET", "/fresh", headers={**headers, "If-None-Match": first.getheader("etag") or ""})
        again = conn.getresponse()
        again.read()
        conn.request("GET", "/?all=1", headers={**headers, "X-Jobtpu-Part": "1", "If-None-Match": f'"{generation}"'})
        part = conn.getresponse()
        part.read()
        conn.close()
        assert (first.status, again.status, part.status) == (200, 304, 304)
    finally:
        assert "Traceback" not in server.stop()
        shutil.rmtree(person, ignore_errors=True)


def test_a_machines_note_and_a_jobs_tags_after_their_preview(served: tuple[Path, Local]) -> None:
    import urllib.parse

    home, server = served
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', server.get("/machines")[1]).group(1)  # type: ignore[union-attr]

    def post(fields: list[tuple[str, str]]) -> tuple[int, str]:
        conn = http.client.HTTPConnection("localhost")
        conn.sock = socket.socket(socket.AF_UNIX)
        conn.sock.connect(server.socket)
        try:
            conn.request("POST", "/act", body=urllib.parse.urlencode([("csrf", csrf), *fields]),
                         headers={"Host": "localhost:8787", "Cookie": server.cookie, "Origin": "http://localhost:8787",
                                  "Content-Type": "application/x-www-form-urlencoded"})
            got = conn.getresponse()
            return got.status, got.read().decode()
        finally:
            conn.close()

    note = [("verb", "note"), ("machine", "local"), ("value", "disk <full>")]
    code, page = post(note)
    assert code == 200 and "would run: jobtpu note --machine=local -- disk &lt;full&gt;" in page
    assert "disk" not in server.get("/machines")[1]
    code, page = post([*note, ("confirm", "1")])
    assert code == 200 and "machine local: note" in page
    assert "<dd>disk &lt;full&gt;</dd>" in server.get("/machines")[1]
    code, page = post([("verb", "tag"), ("id", "1"), ("value", "+best"), ("confirm", "1")])
    assert code == 200 and json.loads(jobtpu(home, "status", "--json", "1").stdout)["jobs"][0]["tags"] == ["best"]
    code, page = post([("verb", "tag"), ("id", "1"), ("value", "best")])
    assert code == 400 and "tag needs jobs and changes like +best -draft" in page


def test_a_big_sweeps_queued_members_are_one_row_linking_to_the_sweeps_view(served: tuple[Path, Local],
                                                                              tmp_path: Path) -> None:
    """The jobs page shows what `status` shows: a sweep of more than 8 queued members is one row,
    whose id span links to the sweep's own view (no box to tick: it is not one job)."""
    home, server = served
    printed = jobtpu(home, "submit", "--cmd", "true", "--dir", str(tmp_path), "--hold", "--sweep",
                     "lr=" + ",".join(f"0.{i}" for i in range(1, 10)), "--sweep", "bs=1,2").stdout
    first, last = map(int, printed.strip().split("-"))
    code, page = server.get("/")
    assert code == 200 and f'<a href="/?sweep={first}">{first}-{last}</a>' in page, page
    assert f'value="{first}-{last}"' not in page and "18 queued:" in page
    code, page = server.get(f"/?sweep={first}&all=1")
    assert code == 200 and page.count('<tr data-id="') == 18 and f'<a href="/job/{first + 3}">' in page


def test_a_gang_is_one_job_of_n_slices_on_its_pages_and_the_submit_page_asks_for_slices(tmp_path: Path) -> None:
    """docs/reference/commands.md §2.2.10 and §2.29: the jobs table and the job page show a gang as
    one job with its slices; the submit page has a slices field."""
    boxes = {name: {"kind": "ssh", "hosts": [f"{name}.invalid"], "accelerator": "v4-16"} for name in ("a", "b")}
    home = make_home(tmp_path, boxes)
    for _ in range(2):
        jobtpu(home, "submit", "--cmd", "true", "--dir", str(tmp_path), "--hold", "--slices", "2")
    doc = json.loads((home / "state.json").read_text())
    ended = doc["jobs"][1]  # as a gang that ran: its attempt on both slices
    ended.update(status="finished", held=False, waiting=None, exit_code=0, attempts=[
        {"n": 0, "machine": "a", "started": ended["created"], "ended": ended["created"] + 5, "workers": 2,
         "outcome": "finished", "exit_code": 0, "gang": ["a", "b"]}])
    (home / "state.json").write_text(json.dumps(doc))
    person = Path(tempfile.mkdtemp(prefix="jtp-"))
    server = Local(home, person)
    try:
        code, page = server.get("/?all=1")
        row = page[page.index('<tr data-id="1"'):]
        assert code == 200 and "2 slices" in row[:row.index("</tr>")], page
        code, page = server.get("/job/2")
        assert code == 200 and '2 slices: <a href="/machines#m-a">a</a>, <a href="/machines#m-b">b</a>' in page, page
        code, page = server.get("/submit")
        assert code == 200 and 'name="slices"' in page, page
    finally:
        assert "Traceback" not in server.stop()
        shutil.rmtree(person, ignore_errors=True)
