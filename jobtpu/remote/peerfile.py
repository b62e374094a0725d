"""Hand one snapshot from one worker of a machine to the others over the machine's own network.

Self-contained (standard library only, Python 3.7+): its source is sent to the workers and run there,
`python3 -c SOURCE serve ARCHIVE BIND PEERS WAIT PORTFILE` on the worker that holds the snapshot and
`python3 -c SOURCE fetch URL OUT WAIT` on each worker that fetches it (jobtpu/remote/sh/peer.sh). The
token (random, new for every launch) comes on stdin, one line, never in an argument, a file name or the
environment: another account's `ps` on a worker never shows it, nor does its view of the folders.

The server answers one path, /<archive name>, and only to a request whose `Authorization: Bearer
TOKEN` header holds the token (compared in constant time); it ends once PEERS fetches got the whole
file, when a `stop` file appears in the folder of its PORTFILE, or after WAIT seconds. It listens on
BIND only, the address the other workers reach it at: when that is no address of this worker (or the
wildcard address) it does not start, and the peers get the home's copy instead. The fetcher trusts
nothing it gets: the launch checks the copy against its name (snapshot/unpack.py) before anything is
unpacked."""

from __future__ import annotations

import hmac
import ipaddress
import os
import shutil
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_CHUNK = 1 << 20


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class NotHere(Exception):
    """BIND is no address this server may listen on: the worker has no such address, or it is the
    wildcard one (every address of the worker, where any network it is on could fetch the snapshot)."""


def _wildcard(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%")[0]).is_unspecified
    except ValueError:
        return False  # a name


def _server(bind: str, handler: Any) -> _Server:
    """Listen on BIND alone, port 0 (the kernel picks a free one)."""
    everywhere = NotHere(f"{bind} is every address of this worker, not one the peers reach it at")
    if _wildcard(bind):
        raise everywhere
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    kind = type("Server", (_Server,), {"address_family": family})
    server = None
    try:
        server = kind((bind, 0), handler, bind_and_activate=False)
        server.server_bind()
        if _wildcard(server.server_address[0]):  # a name for it: found once bound, before it listens
            raise everywhere
        server.server_activate()
    except (OSError, NotHere) as e:  # gaierror too: a name this worker cannot resolve is not one of its own
        if server is not None:
            server.server_close()
        raise e if isinstance(e, NotHere) else NotHere(f"cannot listen on {bind}: {e.strerror or e}") from None
    return server


def read_token() -> bytes:
    """The token, the first line of stdin: never an argument or a variable others could read."""
    return sys.stdin.readline().strip().encode()


def authorized(header: str | None, token: bytes) -> bool:
    """The request's `Authorization` header names the token; in constant time, whatever it holds."""
    given = (header or "").encode("utf-8", "replace")
    return hmac.compare_digest(given, b"Bearer " + token)


def serve(archive: str, bind: str, token: bytes, peers: int, wait: float, portfile: str) -> int:
    path = f"/{os.path.basename(archive)}"
    lock, served, finished = threading.Lock(), [0], threading.Event()

    class Handler(BaseHTTPRequestHandler):
        timeout = wait  # a stalled fetcher never holds a thread past the server's own life

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if not authorized(self.headers.get("Authorization"), token):
                self.send_error(403)  # counts for nothing: a wrong guess never takes a peer's turn
                return
            if self.path != path:
                self.send_error(404)
                return
            with open(archive, "rb") as f:
                self.send_response(200)
                self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
                self.end_headers()
                self.wfile.flush()
                self.connection.sendfile(f)  # the kernel's sendfile: no copy through Python
            with lock:
                served[0] += 1
                if served[0] >= peers:
                    finished.set()

        def log_message(self, *args: Any) -> None:
            pass  # nothing on stdout or stderr: the launch reads the port from PORTFILE

    if not token:
        print("no token on stdin", file=sys.stderr)
        return 1
    try:
        server = _server(bind, Handler)
    except NotHere as e:
        print(e, file=sys.stderr)
        return 1
    with open(portfile + ".tmp", "w") as f:
        f.write(f"{server.server_address[1]}\n")
    os.replace(portfile + ".tmp", portfile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop, end = os.path.join(os.path.dirname(portfile), "stop"), time.monotonic() + wait
    while not finished.wait(0.2) and time.monotonic() < end and not os.path.exists(stop):
        pass  # until every peer fetched, the launch says no more will (jobtpu_peer_stop), or WAIT ran out
    server.shutdown()
    shutil.rmtree(os.path.dirname(portfile), ignore_errors=True)  # its folder, made for it by peer.sh
    return 0


def fetch(url: str, token: bytes, out: str, wait: float) -> int:
    """Copy the served file to OUT (a new file); a proxy of the worker's environment is never used."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token.decode()})
    try:
        with opener.open(request, timeout=wait) as answer, open(out, "xb") as f:
            shutil.copyfileobj(answer, f, _CHUNK)
    except (OSError, ValueError) as e:  # urllib's errors are OSErrors; a cut transfer too
        reason = getattr(e, "reason", None) or e
        text = getattr(reason, "strerror", None) or str(reason)  # "Connection refused", not "[Errno 111] ..."
        print(text.replace("\n", " ")[:200], file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"] and len(argv) == 6:
        return serve(argv[1], argv[2], read_token(), int(argv[3]), float(argv[4]), argv[5])
    if argv[:1] == ["fetch"] and len(argv) == 4:
        return fetch(argv[1], read_token(), argv[2], float(argv[3]))
    print("usage: serve ARCHIVE BIND PEERS WAIT PORTFILE | fetch URL OUT WAIT, the token on stdin", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
