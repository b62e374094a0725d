"""Bench: `jobtpu serve`'s pages against `jobtpu status --json --all-users` on the same home
(docs/reference/commands.md §2.29): 10,000 jobs (50 on machines), a full event log (events.jsonl
and its rotated files, about 20 MiB), a job with a 200 MB log. Side by side, alternating, medians.

Targets (× the median `status --json --all-users`):
- the jobs page, state.json unchanged since the last request: ≤ 0.2×
- the jobs page just after a pass changed state.json (the save, the watcher's notice, the page): ≤ 1×
- the 200 MB log job's page, the events page: ≤ 1×
- an idle server with eight tabs open in headless Chromium (each polling): under 1% of a core
- the jobs page drawn in headless Chromium: within 1 s
Usage: python bench/serve_pages.py [--jobs 10000] [--rounds 9] [--idle 20]"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import msgspec  # noqa: E402
from status_scale import fake_jobs  # noqa: E402

from jobtpu.home.layout import Home  # noqa: E402
from jobtpu.home.store import Store  # noqa: E402
from jobtpu.schema.events import Event  # noqa: E402
from jobtpu.schema.state import Status  # noqa: E402

ON_MACHINES = 50
BIG_LOG = 200 * 1024 * 1024


def make_home(root: Path, n: int) -> int:
    """The home; the id of the job with the 200 MB log."""
    (root / "machines.json").write_text('{"machines": {"local": {"kind": "local", "resources": {"slot": 64}}}}')
    jobs = fake_jobs(n)
    active = 0
    for job in jobs:  # exactly ON_MACHINES on machines; the rest queued or ended
        if job.active:
            if active < ON_MACHINES:
                job.status = Status.RUNNING
                job.alloc = {"slot": [active]}
                active += 1
            else:
                job.status, job.exit_code = Status.FINISHED, 0
                last = job.attempts[-1]
                last.ended, last.outcome = float(last.started or 0) + 50, "finished"
    with Store(Home(root)).transaction() as state:
        state.jobs, state.next_id = jobs, n + 1
    big = next(j for j in jobs if j.status is Status.RUNNING)
    log = Home(root).log_file(big.id, big.attempts[-1].n, 0)
    log.parent.mkdir(parents=True)
    chunk = b"".join(b"step %d loss 0.%d lr 0.001 throughput 1234.5 examples/s\n" % (i, i) for i in range(20000))
    with open(log, "wb") as f:
        while f.tell() < BIG_LOG:
            f.write(chunk)
    encoder = msgspec.json.Encoder()
    lines = []
    for i in range(200_000):
        lines.append(encoder.encode(Event(time=1.7e9 + i, kind="running", job=1 + i % n, machine="local",
                                          user="alice", attempt=0, id=f"e{i}")) + b"\n")
        if sum(map(len, lines)) > 4 * 1024 * 1024 - 400 or i == 199_999:
            break
    body = b"".join(lines)
    for name in ("events.jsonl", *(f"events.jsonl.{k}" for k in range(1, 5))):
        (root / name).write_bytes(body)
    return big.id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Client:
    def __init__(self, port: int, cookie: str) -> None:
        self.port, self.cookie = port, cookie

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request("GET", path, headers={"Cookie": self.cookie, **(headers or {})})
            got = conn.getresponse()
            return got.status, got.read()
        finally:
            conn.close()

    def timed(self, path: str) -> float:
        start = time.perf_counter()
        code, _ = self.get(path)
        assert code == 200, (path, code)
        return time.perf_counter() - start


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds the eight tabs stay open idle")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "home"
        root.mkdir()
        big = make_home(root, args.jobs)
        person = Path(tmp) / "person"  # the server's user's own home directory: its secret
        person.mkdir()
        env = {**os.environ, "JOBTPU_USER": "alice", "HOME": str(person)}
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "jobtpu.cli", "--home", str(root), "serve", "--port", str(port)],
                                  env=env, stdout=subprocess.PIPE, text=True)
        try:
            line = ""
            while "login?k=" not in line:
                line = server.stdout.readline() if server.stdout else ""
                if not line:
                    raise SystemExit("serve did not start")
            secret = line.strip().rsplit("k=", 1)[1]
            from jobtpu.web import guard

            client = Client(port, f"{guard.cookie_name(guard.home_key(root))}={secret}")
            for _ in range(300):
                try:
                    client.get("/fresh")
                    break
                except OSError:
                    time.sleep(0.05)
            status = [sys.executable, "-c", "import sys; from jobtpu.cli import main; sys.exit(main())",
                      "--home", str(root), "status", "--json", "--all-users"]
            pages = {"jobs page, unchanged": "/", "job page (200 MB log)": f"/job/{big}", "events page": "/events"}
            for path in pages.values():
                client.timed(path)  # warm
            times: dict[str, list[float]] = {"status --json --all-users": [], "jobs page, after a pass's save": []}
            times.update({k: [] for k in pages})
            for _ in range(args.rounds):
                start = time.perf_counter()
                subprocess.run(status, env=env, stdout=subprocess.DEVNULL, check=True)
                times["status --json --all-users"].append(time.perf_counter() - start)
                for what, path in pages.items():
                    times[what].append(client.timed(path))
                # A pass's save (state.json rewritten), then the page: it reads the new state.json.
                with Store(Home(root)).transaction() as state:
                    state.jobs[0].note = f"touched {time.time()}"
                times["jobs page, after a pass's save"].append(client.timed("/"))
            base = statistics.median(times["status --json --all-users"])
            print(f"home: {args.jobs} jobs ({ON_MACHINES} on machines), event log "
                  f"{sum(p.stat().st_size for p in root.glob('events.jsonl*')) >> 20} MiB, a {BIG_LOG >> 20} MB log; "
                  f"medians of {args.rounds}")
            for what, samples in times.items():
                median = statistics.median(samples)
                print(f"  {what:<34} {median * 1000:8.1f} ms  {median / base:5.2f}×")
            idle(client, port, secret, server.pid, args.idle)
        finally:
            server.terminate()
            server.wait(timeout=30)


def idle(client: Client, port: int, secret: str, pid: int, seconds: float) -> None:
    """Eight tabs of headless Chromium on the jobs page, idle: the server's CPU time over `seconds`."""
    chromium = shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("  idle with eight tabs: skipped (no playwright)")
        return
    if chromium is None:
        print("  idle with eight tabs: skipped (no chromium)")
        return
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        context = browser.new_context()
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}/login?k={secret}")
        drawn = []
        for path in ("/?all_users=1", "/?all_users=1&all=1"):  # the default view; 500 rows of `all`
            start = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}{path}")
            page.wait_for_selector("table#jobs tbody tr")
            drawn.append(time.perf_counter() - start)
        print(f"  jobs page drawn in Chromium: default view {drawn[0] * 1000:.0f} ms, 500 rows {drawn[1] * 1000:.0f} ms")
        page.goto(f"http://127.0.0.1:{port}/")
        tabs = [page, *(context.new_page() for _ in range(7))]
        for tab in tabs[1:]:
            tab.goto(f"http://127.0.0.1:{port}/")
        time.sleep(2)
        before, start = cpu_seconds(pid), time.perf_counter()
        time.sleep(seconds)
        used = (cpu_seconds(pid) - before) / (time.perf_counter() - start)
        browser.close()
    print(f"  idle server, eight tabs open ({seconds:.0f} s)  {used * 100:5.2f}% of a core")


if __name__ == "__main__":
    main()
