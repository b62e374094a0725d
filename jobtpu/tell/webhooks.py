"""A member's own webhook may not reach the pass account's private network (docs/design.md §7).

A webhook named in a user's settings that the pass's account does not own (a shared home) is posted by whichever account runs the passes, from its
host: pointed at loopback, a private, link-local or unspecified address, it would reach services
only that host can. Such a webhook is refused at `config set notify` and skipped by the pass,
unless the home's trusted runner.json says `"allow_private_webhooks": true`. The pass checks every
address the name resolves to when it delivers, and connects to the address it checked, so a name
that resolves elsewhere a moment later (DNS rebinding) changes nothing."""

from __future__ import annotations

import http.client
import ipaddress
import socket
import urllib.parse


def is_private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def check(url: str) -> tuple[str | None, str | None]:
    """(the address to connect to, None) when every address the URL's host resolves to is public;
    (None, why) otherwise (a private address, or a name that does not resolve)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        return None, f"{host} does not resolve ({e})"
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    private = [a for a in addresses if is_private(a)]
    if private or not addresses:
        return None, f"{host} resolves to a private address ({', '.join(private[:3])})"
    return addresses[0], None


class _Pinned(http.client.HTTPConnection):
    def __init__(self, host: str, address: str, port: int | None, timeout: float) -> None:
        super().__init__(host, port=port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self.address, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    def __init__(self, host: str, address: str, port: int | None, timeout: float) -> None:
        super().__init__(host, port=port, timeout=timeout)
        self.address = address

    def connect(self) -> None:
        sock = socket.create_connection((self.address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def post(url: str, address: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
    """POST to `url` over a connection to `address` (checked by `check`); the HTTP status. No
    redirect is followed and no proxy is used: either would reach an address nobody checked."""
    parts = urllib.parse.urlsplit(url)
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = _PinnedTLS(parts.hostname or "", address, parts.port, timeout)
    else:
        conn = _Pinned(parts.hostname or "", address, parts.port, timeout)
    try:
        path = parts.path or "/"
        conn.request("POST", path + (f"?{parts.query}" if parts.query else ""), body=body, headers=headers)
        answer = conn.getresponse()
        answer.read(65536)
        return answer.status
    finally:
        conn.close()
