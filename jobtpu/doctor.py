"""`jobtpu doctor NAME`: check every worker of a machine (reachable, logged in, disk, tools) and say,
for each problem, what to do about it. `--fix` repairs what is safe to repair (the remote root)."""

from __future__ import annotations

import getpass
import shutil
from collections.abc import Callable

from .connect import endpoints, transport
from .errors import RemoteError
from .fleet import Fleet, Machine
from .home import Home
from .manage import parallel
from .scripts import doctor_script, make_dirs_script, parse_doctor
from .store import Store
from .transport.base import Endpoint

DISK_WARN_GB = 5.0
# What a remote worker needs: bash scripts (tar to unpack), rsync for archives and fetch, python3 for jobs.
REMOTE_TOOLS = ("python3", "rsync", "tar")
LOCAL_TOOLS = ("python3", "tar")

Line = tuple[str, bool]  # (text, is a problem)


def doctor(home: Home, fleet: Fleet, machine: Machine, fix: bool, report: Callable[[str], None]) -> list[str]:
    """Check the machine's workers in parallel; report every check line; return the problems."""
    lines: list[Line] = []
    if machine.kind != "local" and shutil.which("rsync") is None:
        lines.append(("here: problem: rsync is not installed on this machine; install it "
                      "(e.g. `sudo apt-get install -y rsync`)", True))
    known = Store(home).load().machines.get(machine.name, {})
    addresses = known.get("addresses") if isinstance(known.get("addresses"), list) else None
    eps = endpoints(machine, addresses)
    if not eps:
        lines.append((f"{machine.name}: problem: no worker address is known yet; run `jobtpu manage` "
                      f"(or `jobtpu tpu status {machine.name}`) first", True))
    for worker_lines in parallel(lambda ep: _check_worker(home, machine, ep, fix), eps):
        lines.extend(worker_lines)
    lines.extend(_tpu_checks(home, machine, eps, fix))
    for text, _ in lines:
        report(text)
    return [text for text, problem in lines if problem]


def _label(machine: Machine, ep: Endpoint) -> str:
    if ep.addr is None:
        return f"{machine.name}[{ep.index}] (this machine)"
    host = f"[{ep.addr}]" if ":" in ep.addr else ep.addr
    return f"{machine.name}[{ep.index}] {host}:{ep.port}"


def _check_worker(home: Home, machine: Machine, ep: Endpoint, fix: bool) -> list[Line]:
    label = _label(machine, ep)
    ok = lambda text: (f"{label}: ok: {text}", False)  # noqa: E731
    bad = lambda text: (f"{label}: problem: {text}", True)  # noqa: E731
    tools = LOCAL_TOOLS if ep.addr is None else REMOTE_TOOLS
    t = transport(machine, ep, home)
    try:
        try:
            result = t.run(doctor_script(machine.root, tools), timeout=machine.connect_timeout + 30)
        except RemoteError as e:
            why = e.message.removeprefix(f"{label}: ")
            if "host key" in why or "authentication" in why:
                return [bad(why)]  # these messages already say what to do
            return [bad(f"not reachable: {why}; check that the host is up and sshd listens on "
                        f"port {ep.port}, then run `jobtpu doctor {machine.name}` again")]
        facts = parse_doctor(result.stdout)
        if not facts:
            return [bad(f"the check script failed ({result.exit_code}): {result.stderr.strip()[-200:]}; "
                        "the login shell must be able to run bash")]
        out = [ok("runs scripts" if ep.addr is None else
                  f"reachable, logged in as {machine.user or getpass.getuser()}")]
        if facts.get("root") == "yes":
            out.append(ok(f"root {machine.root} exists"))
        elif fix:
            made = t.run(make_dirs_script([machine.root]), timeout=machine.connect_timeout + 30)
            out.append(ok(f"created root {machine.root}") if made.ok else
                       bad(f"cannot create root {machine.root}: {made.stderr.strip()[-200:]}; "
                           "set a writable 'root' in machines.json"))
        else:
            out.append(ok(f"root {machine.root} does not exist yet (the first launch creates it; "
                          "--fix creates it now)"))
        kib = facts.get("disk_kib", "")
        if kib.isdigit():
            gb = int(kib) / 1024 / 1024
            out.append(ok(f"{gb:.1f} GB free in {machine.root}") if gb >= DISK_WARN_GB else
                       bad(f"only {gb:.1f} GB free in {machine.root}; free some space there "
                           "(`jobtpu clean --remote` deletes ended jobs' folders)"))
        else:
            out.append(bad(f"could not measure free disk in {machine.root} (df failed); check the disk by hand"))
        for tool in tools:
            path = facts.get(f"tool:{tool}", "-")
            out.append(ok(f"{tool}: {path}") if path != "-" else
                       bad(f"{tool} is not installed; install it (e.g. `sudo apt-get install -y {tool}`)"))
        return out
    except RemoteError as e:
        return [bad(f"the connection failed during the checks: {e.message}")]
    finally:
        t.close()


def _tpu_checks(home: Home, machine: Machine, eps: list[Endpoint], fix: bool) -> list[Line]:
    """TPU checks come with the TPU support: the node's state from the API, the TPU device free
    (no stale holder of /dev/accel*), and no stale /tmp/libtpu_lockfile (removed by --fix)."""
    return []
