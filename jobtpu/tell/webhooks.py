"""No webhook may reach the private network of the host that runs the passes (docs/design.md §7).

A webhook, wherever it is declared (machines.json, runner.json, a user's settings), is posted by
whichever account runs the passes, from its host: pointed at loopback, a private, link-local,
multicast, reserved or unspecified address, it would reach services only that host can. Unless the
home's trusted runner.json says `"allow_private_webhooks": true`, the pass checks every address the
URL's host resolves to when it delivers, and connects to the address it checked, so a name that
resolves elsewhere a moment later (DNS rebinding) changes nothing; `config set notify` checks the
same way. `refusal` is the one judge of an address: an IPv6 address that carries an IPv4 one
(IPv4-mapped, -compatible or -translated, NAT64, 6to4, Teredo) is judged by the IPv4 address it
carries, and a host spelled as inet_aton reads it (`2130706433`, `0177.0.0.1`, `0x7f.1`) is the
address it spells."""

from __future__ import annotations

import http.client
import ipaddress
import re
import socket
import urllib.parse
from ipaddress import IPv4Address, IPv6Address, IPv6Network

from jobtpu.schema.msgspec_lib import msgspec

Address = IPv4Address | IPv6Address

_COMPATIBLE = IPv6Network("::/96")  # ::a.b.c.d, deprecated but still routed by some stacks
_TRANSLATED = IPv6Network("::ffff:0:0:0/96")  # SIIT
_NAT64 = IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = IPv6Network("64:ff9b:1::/48")  # local-use NAT64 (RFC 8215): the prefix length is the site's
_TEREDO = IPv6Network("2001::/32")
_IPV4_PART = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")


def address_of(host: str) -> Address | None:
    """The IP address a URL's host spells (None: a name). IPv4 in every spelling the resolver reads
    as an address (inet_aton: one to four parts, each decimal, octal or hex; `127.1`, `0x7f.1`,
    `2130706433`); IPv6 with or without its zone (`fe80::1%eth0`)."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    parts = host.split(".")
    if not 1 <= len(parts) <= 4 or not all(_IPV4_PART.fullmatch(part) for part in parts):
        return None
    values = [int(part, 16 if part[:2] in ("0x", "0X") else 8 if part.startswith("0") else 10) for part in parts]
    *head, last = values  # the last part fills every byte the others leave
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        return None
    return IPv4Address(sum(v << (8 * (3 - i)) for i, v in enumerate(head)) + last)


def carried(ip: IPv6Address) -> list[IPv4Address]:
    """The IPv4 addresses an IPv6 address carries, which a packet to it ends up reaching."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if any(ip in net for net in (_COMPATIBLE, _TRANSLATED, _NAT64, _NAT64_LOCAL)):
        return [IPv4Address(int(ip) & 0xFFFFFFFF)]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    return list(ip.teredo) if ip.teredo is not None else []


def refusal(ip: Address) -> str | None:
    """Why the pass may not post to `ip` (what kind of address it is), None when it may: only a
    public unicast address passes. Pure."""
    for kind, found in (("loopback", ip.is_loopback), ("link-local", ip.is_link_local),
                        ("multicast", ip.is_multicast), ("unspecified", ip.is_unspecified)):
        if found:
            return kind
    if isinstance(ip, IPv6Address):
        inner = carried(ip)
        for v4 in inner:
            why = refusal(v4)
            if why is not None:
                return f"{why} {v4} inside"
        if ip in _NAT64_LOCAL or ip in _TEREDO:
            return "not public"  # a site's own translator, or a tunnel whose relay nobody chose
        if inner:
            return None  # judged by the public IPv4 address it carries
    if ip.is_reserved:
        return "reserved"
    return None if ip.is_global else "private"


def is_private(address: str) -> bool:
    ip = address_of(address)
    return ip is None or refusal(ip) is not None


class Checked(msgspec.Struct, frozen=True):
    """What `check` found for a webhook's URL."""

    address: str | None  # the address to connect to, when every address the host resolves to passed
    why: str | None = None  # else one line why not
    private: bool = False  # refused for what an address is (not for a name that does not resolve)


def check(url: str) -> Checked:
    """Resolve the URL's host and judge every address it resolves to (`refusal`)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    literal = address_of(host)
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            found = socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80),
                                       type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError, ValueError) as e:
            return Checked(None, f"{host} does not resolve ({e})")
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    private = [a for a in addresses if is_private(a)]
    if private or not addresses:
        return Checked(None, f"{host} resolves to a private address ({', '.join(private[:3])})", private=True)
    return Checked(addresses[0])


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
