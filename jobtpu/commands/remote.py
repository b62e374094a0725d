"""`jobtpu exec` (a command on a machine's workers at once) and `jobtpu ssh` (a shell on one), reaching
the workers as a pass does: the machine's user, key and port, the home's known_hosts and host key
policy, and a TPU's workers where the last pass saw them. Given a job instead of a machine, they
reach where it runs (commands/remote_job.py)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

from jobtpu.commands import args
from jobtpu.errors import JobtpuError, RemoteError
from jobtpu.home.layout import Home

if TYPE_CHECKING:
    from jobtpu.passes.session import Session
    from jobtpu.schema.fleet import Machine
    from jobtpu.transport.base import Endpoint


def chosen_workers(session: Session, machine: Machine, worker: int | None) -> list[Endpoint]:
    """The machine's workers (`worker` None: all of them), or one line saying why there are none."""
    endpoints = session.endpoints(machine)
    if not endpoints:
        raise JobtpuError(f"{machine.name}: no worker address is known yet",
                          hint=f"run `jobtpu manage` (or `jobtpu tpu status {machine.name}`) first")
    if worker is None:
        return endpoints
    if worker >= len(endpoints):
        raise JobtpuError(f"{machine.name} has no worker {worker}",
                          hint=f"its workers are 0 to {len(endpoints) - 1}")
    return [endpoints[worker]]


def exec_command(home: Home, name: str, worker: int | None, words: list[str]) -> int:
    """Run the command on the chosen workers at once; each output line prefixed by its worker; the
    worst exit code (255 for a worker that could not be reached)."""
    from jobtpu.commands.remote_job import job_named, job_target
    from jobtpu.passes.session import load_session, parallel
    from jobtpu.remote.execute import Worker, run_everywhere

    session = load_session(home)
    command = " ".join(words)  # as ssh joins the words of its command
    if not command.strip():
        raise JobtpuError("no command to run", hint=f"`jobtpu exec {name} -- nvidia-smi`")
    job = job_named(session, name)
    if job is None:
        machine = session.fleet.resolve(name)
        endpoints = chosen_workers(session, machine, worker)
    else:  # the workers its attempt holds, the command in its folder; on Slurm, a step of the job
        machine, endpoints, command = job_target(session, job, worker, words)
    with contextlib.ExitStack() as stack:
        transports = [stack.enter_context(session.connected(machine, ep)) for ep in endpoints]
        # Connected in parallel (a pod has dozens of workers), then handed to fabric already open.
        clients = parallel(_connect, list(zip(endpoints, transports, strict=True)))
        workers = [Worker(ep.index, _opened(client)) for ep, client in zip(endpoints, clients, strict=True)]
        return run_everywhere(workers, command, sys.stdout)


def _connect(pair: tuple[Endpoint, Any]) -> Any:
    """A worker's paramiko client, None for this computer, or the RemoteError that kept it away."""
    endpoint, transport = pair
    if endpoint.addr is None:
        return None
    try:
        return transport.connect()
    except RemoteError as e:
        return e


def _opened(client: Any) -> Any:
    def connect() -> Any:
        if isinstance(client, RemoteError):
            raise client
        return client
    return connect


def ssh(home: Home, name: str, worker: int, words: list[str]) -> int:
    """Replace this process by the OpenSSH client, logged in to one worker (a shell, or `words`)."""
    from jobtpu.commands.remote_job import job_named, job_target
    from jobtpu.fleet.drivers import driver_for
    from jobtpu.passes.session import load_session

    session = load_session(home)
    job = job_named(session, name)
    tty = False
    if job is None:
        machine = session.fleet.resolve(name)
        endpoint = chosen_workers(session, machine, worker)[0]
    else:  # a shell (or `words`) in its folder on worker K it holds; on Slurm, a step of the job
        machine, (endpoint, *_), command = job_target(session, job, worker, words)
        tty, words = not words, [command]
    driver = driver_for(machine)
    if not driver.remote:
        raise JobtpuError(f"{machine.name} is this computer: there is nothing to ssh to",
                          hint=f"run the command here, or `jobtpu exec {name} -- CMD`")
    if job is not None and endpoint.addr is None:  # a Slurm cluster whose login node is this computer
        _replace_by(["bash", "-c", words[0]], "bash", "install bash")
    t = driver.transport(machine, endpoint, home, driver.trusted_keys(session.state.machines.get(machine.name),
                                                                     endpoint.index))
    from jobtpu.transport.ssh import SshTransport

    if not isinstance(t, SshTransport):  # a worker without an address is this computer
        t.close()
        raise JobtpuError(f"worker {endpoint.index} of {machine.name} has no address to ssh to",
                          hint=f"`jobtpu machines` shows its state; `jobtpu exec {machine.name} -- CMD` runs here")
    try:
        args = t.login_command(words, tty=tty)
    finally:
        t.close()
    _replace_by(args, "the OpenSSH client (ssh)", "install it (e.g. `sudo apt-get install -y openssh-client`)")
    return 255  # not reached: _replace_by returns only by raising


def _replace_by(args: list[str], what: str, hint: str) -> None:
    """Replace this process by `args`; its own streams flushed first."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(args[0], args)
    except FileNotFoundError:
        raise JobtpuError(f"{what} is not installed here", hint=hint) from None


def worker_choice(text: str) -> int | None:
    """--worker K, or `all` (None)."""
    return None if text == "all" else args.count(text)


def add_parser(subparsers: args.Subparsers) -> None:
    """exec and ssh: a machine's workers."""
    p = args.add_command(subparsers, "exec")
    p.add_argument("name", metavar="MACHINE|JOB", help="the machine: its name, an alias, or a TPU's node name; "
                   "or a running job's id: the workers it runs on, in its folder (on Slurm, its node)")
    p.add_argument("--worker", type=worker_choice, default=None, metavar="K|all",
                   help="only worker K (default: all)")
    p.add_argument("words", nargs="*", metavar="CMD", help="the command, after `--` (run by the login shell)")
    p.after_dashes = "words"  # type: ignore[attr-defined]
    p.set_defaults(func=lambda home, a: exec_command(home, a.name, a.worker, a.words))

    p = args.add_command(subparsers, "ssh")
    p.add_argument("name", metavar="MACHINE|JOB", help="the machine: its name, an alias, or a TPU's node name; "
                   "or a running job's id: a worker it runs on, in its folder (on Slurm, its node)")
    p.add_argument("--worker", type=args.count, default=0, metavar="K", help="this worker (default 0)")
    p.add_argument("words", nargs="*", metavar="CMD", help="a command to run instead of a shell, after `--`")
    p.after_dashes = "words"  # type: ignore[attr-defined]
    p.set_defaults(func=lambda home, a: ssh(home, a.name, a.worker, a.words))
