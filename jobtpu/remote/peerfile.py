"""Hand one snapshot from one worker of a machine to the others over the machine's own network.

Self-contained (standard library only, Python 3.7+): its source is sent to the workers and run there,
`python3 -c SOURCE serve ARCHIVE BIND PEERS WAIT PORTFILE` on the worker that holds the snapshot and
`python3 -c SOURCE fetch OUT WAIT` on each worker that fetches it (jobtpu/remote/sh/peer.sh). The token and
the URL come in the environment ($JOBTPU_PEER_TOKEN, $JOBTPU_PEER_URL), which only the worker's own
account may read: another account's `ps` never shows them.

The server answers exactly one path, /TOKEN/<archive name> (TOKEN random, new for every launch), and
nothing else; it ends once PEERS fetches got the whole file, when a `stop` file appears in the folder
of its PORTFILE, or after WAIT seconds. It listens on BIND,
the worker's internal address, or on all of the worker's addresses when BIND is not one of them (a box
behind NAT or a jump host: which of its addresses the others reach is not known). The fetcher trusts
nothing it gets: the launch checks the copy against its name (snapshot/unpack.py) before anything is unpacked."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_CHUNK = 1 << 20
NOT_MINE = (errno.EADDRNOTAVAIL,)  # BIND is no address of this worker's


class _Server(ThreadingHTTPServer):
    daemon_threads = True


def _server(bind: str, handler: Any) -> _Server:
    """Listen on BIND, port 0 (the kernel picks a free one); on every address when BIND is not ours."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    kind = type("Server", (_Server,), {"address_family": family})
    try:
        return kind((bind, 0), handler)
    except socket.gaierror:
        pass  # a name this worker cannot resolve: not one of its own
    except OSError as e:
        if e.errno not in NOT_MINE:
            raise
    return _Server(("", 0), handler)


def serve(archive: str, bind: str, token: str, peers: int, wait: float, portfile: str) -> int:
    path = f"/{token}/{os.path.basename(archive)}"
    lock, served, finished = threading.Lock(), [0], threading.Event()

    class Handler(BaseHTTPRequestHandler):
        timeout = wait  # a stalled fetcher never holds a thread past the server's own life

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
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

    server = _server(bind, Handler)
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


def fetch(url: str, out: str, wait: float) -> int:
    """Copy the served file to OUT (a new file); a proxy of the worker's environment is never used."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=wait) as answer, open(out, "xb") as f:
            shutil.copyfileobj(answer, f, _CHUNK)
    except (OSError, ValueError) as e:  # urllib's errors are OSErrors; a cut transfer too
        reason = getattr(e, "reason", None) or e
        text = getattr(reason, "strerror", None) or str(reason)  # "Connection refused", not "[Errno 111] ..."
        print(text.replace("\n", " ")[:200], file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"] and len(argv) == 6:
        return serve(argv[1], argv[2], os.environ["JOBTPU_PEER_TOKEN"], int(argv[3]), float(argv[4]), argv[5])
    if argv[:1] == ["fetch"] and len(argv) == 3:
        return fetch(os.environ["JOBTPU_PEER_URL"], argv[1], float(argv[2]))
    print("usage: serve ARCHIVE BIND PEERS WAIT PORTFILE | fetch OUT WAIT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
