"""`jobtpu serve`: the home's pages in a browser, as this account's jobtpu user (fixed at start),
behind this person's secret (docs/reference/commands.md §2.29). Needs the web extra
(`pip install jobtpu[web]`); nothing imports it but the parser, which loads it by its row in the
command table. It lives here, with the front end it starts, because web/ calls the commands: a
command module that imported web/ would make the two a knot (docs/design.md §5.1)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from jobtpu.commands import args
from jobtpu.errors import JobtpuError, UsageError
from jobtpu.home.layout import Home

LOCAL_PORT = 8787  # the laptop's end of the printed `ssh -L` line
SOCKET_PATH_MAX = 108  # sockaddr_un's sun_path on Linux, its closing NUL included


def serve(home: Home, port: int | None, bind: str | None, read_only: bool) -> int:
    if bind is not None and port is None:
        raise UsageError("--bind goes with --port", hint="give --port N too (or neither, for the private socket)")
    try:
        import uvicorn

        from jobtpu.web.app import Config, make_app
    except ImportError as e:
        raise JobtpuError(f"`jobtpu serve` needs the web extra ({e.name} is not installed)",
                          hint="pip install 'jobtpu[web]'") from None
    from jobtpu.home.trust import account_name
    from jobtpu.home.users import known_user
    from jobtpu.web import guard

    if not home.machines_file.exists():
        raise JobtpuError(f"{home.root} is not a jobtpu home (no machines.json)",
                          hint="pass --home DIR (or set $JOBTPU_HOME) naming the home to show")
    user = known_user(home, None)
    folder = guard.private_folder()
    secret = guard.load_secret(folder)
    key = guard.home_key(home.root)
    config = Config(home=home, user=user, account=account_name(os.getuid()), secret=secret,
                    cookie=guard.cookie_name(key), bind=bind, read_only=read_only)
    app = make_app(config)
    common = {"log_level": "warning", "lifespan": "on", "proxy_headers": False, "server_header": False,
              "date_header": False, "access_log": False}
    if port is None:
        path = folder / f"{key}.sock"
        if len(os.fsencode(path)) >= SOCKET_PATH_MAX:
            raise JobtpuError(f"the socket's path {path} is longer than a Unix socket's path may be "
                              f"({SOCKET_PATH_MAX - 1} bytes)", hint="use --port N (127.0.0.1 only)")
        _clear_socket(path)
        out = (f"serving {home.root} as {user} on {path}\n"
               f"from your laptop: ssh -N -L {LOCAL_PORT}:{path} {socket.getfqdn()}\n"
               f"then open http://localhost:{LOCAL_PORT}/login?k={secret}\n")
        server = uvicorn.Server(uvicorn.Config(app, uds=str(path), **common))  # type: ignore[arg-type]
        listening = None
    else:
        host = bind or "127.0.0.1"
        shown = f"[{host}]" if ":" in host else host
        # Listening before the link is printed: a port something else holds is one line and no
        # link, and a browser that opens the link at once finds the server there.
        listening = [_listen(host, port)]
        out = f"serving {home.root} as {user}\nopen http://{shown}:{port}/login?k={secret}\n"
        server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, **common))  # type: ignore[arg-type]
    sys.stdout.write(out)
    sys.stdout.flush()
    server.run(sockets=listening)
    return 0


def _listen(host: str, port: int) -> socket.socket:
    """A TCP socket listening on host:port, or the one line that says why not."""
    import errno

    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart right after a stop
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise JobtpuError(f"port {port} on {host} is taken: something else listens there",
                              hint="give another --port N (or stop what holds it)") from None
        raise JobtpuError(f"cannot listen on {host} port {port} ({e.strerror})",
                          hint="--bind takes an address of this machine" if bind_problem(e) else
                          "give another --port N") from None
    return sock


def bind_problem(e: OSError) -> bool:
    import errno

    return e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT, errno.EINVAL)


def _clear_socket(path: Path) -> None:
    """A socket left by a server that died is removed; one a live server answers on is refused."""
    if not path.exists() and not path.is_symlink():
        return
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()
        return
    finally:
        probe.close()
    raise JobtpuError(f"a `jobtpu serve` of this home already answers on {path}",
                      hint="use that one (its link was printed when it started), or stop it first")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: give a whole number from 1 to 65535")
    return value


def add_parser(subparsers: args.Subparsers) -> None:
    p = args.add_command(subparsers, "serve")
    p.add_argument("--port", type=_port, metavar="N", help="listen on 127.0.0.1:N instead of the private socket")
    p.add_argument("--bind", metavar="ADDR", help="with --port: listen on ADDR instead of 127.0.0.1 (its pages "
                   "then answer to that address too)")
    p.add_argument("--read-only", action="store_true", help="the pages without the acts")
    p.set_defaults(func=lambda home, a: serve(home, a.port, a.bind, a.read_only))
