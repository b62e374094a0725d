"""How a quiet `jobtpu manage` pass scales with the number of SSH hosts, against the floor: a bare
parallel paramiko probe (connect + one exec of `true` on every host, in threads) of the same hosts.

Starts real sshd servers on loopback (tests/sshfleet.py; run as root), one running job (`sleep 600`)
per host, then alternates the two measurements for a few rounds and prints medians, their ratio
(target: at most 1.5x at 32 hosts) and the SSH connections and exec sessions each host saw per quiet
pass, counted from the sshd logs (target: exactly 1). Cleans up its fleet on exit.

    sudo python3 bench/manage_scaling.py [--hosts 1,8,32] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import paramiko  # noqa: E402

from jobtpu.cli import main as jobtpu_main  # noqa: E402
from tests.sshfleet import Host, SshFleet  # noqa: E402


def jobtpu(home: Path, *args: str) -> str:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = jobtpu_main(["--home", str(home), *args])
    out.flush()
    if code != 0:
        raise SystemExit(f"jobtpu {' '.join(args)} failed ({code})")
    return out.buffer.getvalue().decode()


def bare_probe(hosts: list[Host], key: paramiko.PKey) -> None:
    """The floor: what any tool must spend to run one command on every host, verifying host keys."""
    def one(h: Host) -> None:
        sock = socket.create_connection((h.addr, h.port), timeout=10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = paramiko.SSHClient()
        ktype, data = h.public_key_line().split()
        client.get_host_keys().add(f"[{h.addr}]:{h.port}", ktype, paramiko.PKey.from_type_string(
            ktype, __import__("base64").b64decode(data)))
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        client.connect(h.addr, h.port, h.user, pkey=key, sock=sock, look_for_keys=False, allow_agent=False,
                       timeout=10)
        _, out, _ = client.exec_command("true")
        if out.channel.recv_exit_status() != 0:
            raise RuntimeError(f"true failed on {h.address()}")
        client.close()

    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        list(pool.map(one, hosts))


def counts(hosts: list[Host]) -> tuple[int, int]:
    text = [h.sshd_log.read_text(errors="replace") for h in hosts]
    return sum(t.count("Accepted publickey for ") for t in text), sum(t.count("Starting session: ") for t in text)


def setup_home(base: Path, fleet: SshFleet, hosts: list[Host], src: Path) -> Path:
    home = base / f"home-{len(hosts)}"
    home.mkdir()
    machines = {f"h{i}": {"kind": "ssh", "hosts": [h.address()], "user": h.user,
                          "identity_file": str(fleet.identity), "connect_timeout": 10}
                for i, h in enumerate(hosts)}
    (home / "machines.json").write_text(json.dumps({"machines": machines}))
    for i in range(len(hosts)):
        jobtpu(home, "submit", "--dir", str(src), "--cmd", "sleep 600", "--machine", f"h{i}")
    return start_all(home, 120)


def start_all(home: Path, timeout: float) -> Path:
    """Passes until every submitted job runs (a launch may take a few passes)."""
    deadline = time.monotonic() + timeout
    while True:
        jobtpu(home, "manage")
        jobs = json.loads(jobtpu(home, "status", "--json", "--all-users"))["jobs"]
        if all(j["status"] == "running" for j in jobs):
            return home
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs did not all start: {[(j['id'], j['status'], j['last_line']) for j in jobs]}")
        time.sleep(0.5)


def measure(home: Path, hosts: list[Host], key: paramiko.PKey, rounds: int) -> dict[str, float]:
    manage_t, bare_t, proc_t = [], [], []
    conns = sessions = 0
    for _ in range(rounds):
        t = time.perf_counter()
        bare_probe(hosts, key)
        bare_t.append(time.perf_counter() - t)
        c0, s0 = counts(hosts)
        t = time.perf_counter()
        jobtpu(home, "manage")
        manage_t.append(time.perf_counter() - t)
        time.sleep(0.3)  # let sshd flush its log lines
        c1, s1 = counts(hosts)
        conns, sessions = conns + c1 - c0, sessions + s1 - s0
        t = time.perf_counter()
        subprocess.run(["jobtpu", "--home", str(home), "manage"], check=True, capture_output=True)
        proc_t.append(time.perf_counter() - t)
    jobs = json.loads(jobtpu(home, "status", "--json", "--all-users"))["jobs"]
    if not all(j["status"] == "running" and j["reason"] is None for j in jobs):
        raise SystemExit("a job stopped running during the benchmark")
    n = rounds * len(hosts)
    return {"manage": statistics.median(manage_t), "bare": statistics.median(bare_t),
            "process": statistics.median(proc_t), "conns": conns / n, "sessions": sessions / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", default="1,8,32", help="comma-separated host counts")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(x) for x in args.hosts.split(",")]
    with tempfile.TemporaryDirectory(prefix="jobtpu-bench-") as tmp:
        base = Path(tmp)
        fleet = SshFleet(base / "fleet")
        try:
            t = time.perf_counter()
            machine = fleet.add_machine("bench", n_hosts=max(sizes))
            print(f"started {max(sizes)} sshd in {time.perf_counter() - t:.1f}s", flush=True)
            key = paramiko.PKey.from_path(str(fleet.identity))
            src = base / "code"
            src.mkdir()
            (src / "train.py").write_text("print('hi')\n")
            print(f"{'hosts':>5}  {'manage pass':>11}  {'bare probe':>10}  {'ratio':>5}  "
                  f"{'`jobtpu manage` process':>23}  {'conns/host/pass':>15}  {'sessions/host/pass':>18}")
            for n in sizes:
                hosts = machine.hosts[:n]
                home = setup_home(base, fleet, hosts, src)
                r = measure(home, hosts, key, args.rounds)
                print(f"{n:>5}  {r['manage'] * 1000:>9.0f}ms  {r['bare'] * 1000:>8.0f}ms  "
                      f"{r['manage'] / r['bare']:>5.2f}  {r['process'] * 1000:>21.0f}ms  "
                      f"{r['conns']:>15.2f}  {r['sessions']:>18.2f}", flush=True)
        finally:
            fleet.close()


if __name__ == "__main__":
    main()
