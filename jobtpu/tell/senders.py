"""Sending one notification: a webhook's POST (to an address checked public at that moment, unless
the runner allows private ones: then through the environment's proxy) or a command run with the
event on stdin. Each returns None
when the destination took it, else one short line why not."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import orjson


class Sockets:
    """The connections a delivery has open: all closed at its deadline, which wakes a thread blocked
    reading from a webhook that drips its answer (a socket timeout bounds each read, not the whole)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()
        self.closed = False

    def add(self, conn: http.client.HTTPConnection) -> bool:
        with self._lock:
            if not self.closed:
                self._open.add(conn)
            return not self.closed

    def remove(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(conn)

    def close_all(self) -> None:
        with self._lock:
            self.closed = True
            conns = list(self._open)
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()



def _slack_escape(text: str) -> str:
    """Slack reads <…> as links and mentions (<!channel>): a job name must not ping anyone."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def post_webhook(url: str, text: str, event: dict[str, Any], timeout: float, sockets: Sockets) -> str | None:
    """POST the event; a redirect is reported as the HTTP status it is (followed, the POST would
    become a GET without the body, and its 200 be taken for a delivery)."""
    body = orjson.dumps({"text": _slack_escape(text), "event": event})
    parts = urllib.parse.urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    proxy = _proxy(parts)
    try:
        if proxy is None:
            conn = kind(parts.hostname or "", parts.port, timeout=timeout)
        elif parts.scheme == "https":  # a CONNECT tunnel through the proxy
            conn = kind(proxy.hostname or "", proxy.port, timeout=timeout)
            conn.set_tunnel(parts.hostname or "", parts.port)
        else:  # the proxy is asked for the whole URL
            conn = http.client.HTTPConnection(proxy.hostname or "", proxy.port, timeout=timeout)
            target = url
    except ValueError as e:  # a port that is not a number
        return str(e)
    if not sockets.add(conn):
        return "out of time"
    try:
        conn.connect()
        if sockets.closed:  # the deadline came while connecting: close_all may not have seen this socket
            return "timed out"
        conn.request("POST", target, body=body,
                     headers={"Content-Type": "application/json", "User-Agent": "jobtpu"})
        answer = conn.getresponse()
        answer.read(65536)
        return None if 200 <= answer.status < 300 else f"HTTP {answer.status}"
    except TimeoutError:
        return "timed out"
    except OSError as e:
        return "timed out" if sockets.closed else (e.strerror or str(e))
    finally:
        sockets.remove(conn)
        conn.close()


def _proxy(parts: urllib.parse.SplitResult) -> urllib.parse.SplitResult | None:
    """The HTTP proxy the environment names for this URL (http_proxy, https_proxy, no_proxy), as
    urllib would choose it; None to connect directly."""
    import urllib.request

    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    found = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return found if found.hostname else None


def post_pinned(url: str, text: str, event: dict[str, Any], timeout: float) -> str | None:
    """A checked webhook: every address its name resolves to judged now, the checked one used."""
    from jobtpu.tell.webhooks import check, post

    checked = check(url)
    address = checked.address
    if address is None:
        return f"skipped: {checked.why}"
    body = orjson.dumps({"text": _slack_escape(text), "event": event})
    try:
        status = post(url, address, body, {"Content-Type": "application/json", "User-Agent": "jobtpu"}, timeout)
    except TimeoutError:
        return "timed out"
    except OSError as e:
        return e.strerror or str(e)
    except ValueError as e:  # a port that is not one (machines.json is checked when read; a hand edit may race)
        return str(e)
    return None if 200 <= status < 300 else f"HTTP {status}"


def run_command(command: str, text: str, name: str, event: dict[str, Any], timeout: float, home: Path) -> str | None:
    env = {**os.environ, "JOBTPU_NOTIFY_EVENT": name, "JOBTPU_NOTIFY_TEXT": text}
    # stderr goes to a file, not a pipe: a child that keeps the pipe open could never block us.
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=err, env=env, cwd=home, start_new_session=True)
        except OSError as e:
            return f"cannot run bash: {e.strerror}"
        try:
            proc.communicate(orjson.dumps(event) + b"\n", timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return "timed out (stopped)"
        if proc.returncode == 0:
            return None
        err.seek(0)
        last = (err.read()[-4096:].decode(errors="replace").strip().splitlines() or [""])[-1]
        return f"exit {proc.returncode}" + (f": {last[:200]}" if last else "")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
