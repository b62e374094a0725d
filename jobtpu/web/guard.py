"""Who may talk to `jobtpu serve`, as pure functions and the two private files it needs
(docs/reference/commands.md §2.29, docs/design.md §7).

- The secret: made once, 0600, in a folder of the person's own home directory that only they can
  enter (never in the jobtpu home, which the group reads). The printed link carries it once; the
  page swaps it for an HttpOnly, SameSite=Strict cookie named after the jobtpu home's id.
- The socket: in that same private folder, which is the guard whatever the socket's own mode.
- Each request: a loopback Host or the --bind address (DNS rebinding), the cookie; a POST also a
  same-origin Origin and the CSRF token derived from the secret (so tied to the cookie)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from jobtpu.errors import JobtpuError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
SECRET_BYTES = 32
MAX_TOKEN = 200  # characters of a metrics token file's one word


def private_folder(base: Path | None = None) -> Path:
    """~/.config/jobtpu/serve, made 0700 and checked to be this account's own real folder."""
    folder = (base if base is not None else Path.home() / ".config" / "jobtpu") / "serve"
    folder.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise JobtpuError(f"{folder} is not a folder of this account's own",
                          hint="remove it; `jobtpu serve` makes it again, private to you")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(folder, 0o700)  # ours: only we may enter it, the socket's guard
    return folder


def load_secret(folder: Path) -> str:
    """The person's secret, made on first use (0600, O_EXCL: never through a planted file)."""
    path = folder / "secret"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(SECRET_BYTES) + "\n")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            raise JobtpuError(f"{path} may be read by other accounts (or is not yours)",
                              hint=f"remove it: `rm {path}`; the next `jobtpu serve` makes a new one")
        text = f.read(200).strip()
    if len(text) < 20:
        raise JobtpuError(f"{path} does not hold a secret", hint=f"remove it: `rm {path}`")
    return text


def load_metrics_token(path: Path) -> str:
    """The bearer token a scraper (Prometheus) sends for /metrics, and for nothing else: made 0600 on
    first use (O_EXCL: never through a planted file). The person may let Prometheus's group read it
    (a scraper runs as an account of its own), never every account, and no one else may write it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    except OSError as e:
        raise JobtpuError(f"cannot make the metrics token {path}: {e.strerror or e}") from None
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(SECRET_BYTES) + "\n")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link (another account's, maybe): never followed
            raise JobtpuError(f"{path} is a link, not a file of this account's own: remove it, and `jobtpu serve` "
                              "makes the metrics token there") from None
        raise JobtpuError(f"cannot read the metrics token {path}: {e.strerror or e}") from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise JobtpuError(f"{path} is not a file of this account's own: remove it, and `jobtpu serve` makes "
                              "the metrics token again")
        if stat.S_IMODE(st.st_mode) & 0o026:
            raise JobtpuError(f"{path} may be read by every account or written by others: `chmod 600 {path}` "
                              "(or 640, for a scraper's group)")
        text = f.read(MAX_TOKEN + 2).strip()  # a longer one is refused, never cut (every scrape would be refused)
    if not 20 <= len(text) <= MAX_TOKEN or any(c.isspace() for c in text):
        raise JobtpuError(f"{path} does not hold a metrics token (one word of 20 to {MAX_TOKEN} characters): "
                          "remove it, and `jobtpu serve` makes one")
    return text


def bearer_token(authorization: str | None) -> str | None:
    """Pure: the token of an `Authorization: Bearer TOKEN` header, or None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def cookie_name(home_id: str) -> str:
    """Pure: the cookie's name. Browsers share cookies across the ports of one host, so two homes
    served to one browser must not overwrite each other's."""
    return f"jobtpu_{home_id}"


def home_key(root: Path) -> str:
    """The home's id (its `home_id` file) when it has one; else a digest of its path."""
    from jobtpu.home import safefs

    try:
        text = safefs.read_regular(root, "home_id", safefs.CAP_ID).decode("utf-8", "replace").strip()
    except (OSError, JobtpuError):
        text = ""
    if len(text) == 16 and all(c in "0123456789abcdef" for c in text):
        return text
    return hashlib.sha256(os.fsencode(root.resolve())).hexdigest()[:16]


def same_secret(given: str | None, secret: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), secret.encode())


def csrf_token(secret: str) -> str:
    """Pure: the token every form carries: derived from the secret the cookie holds, so a page of
    another origin, which cannot read our pages, cannot know it."""
    return hmac.new(secret.encode(), b"jobtpu serve csrf", hashlib.sha256).hexdigest()


def host_name(host_header: str) -> str:
    """Pure: the name in a Host header, without its port (`[::1]:8080` → `::1`)."""
    host = host_header.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_allowed(host_header: str | None, bind: str | None) -> bool:
    """Pure: a loopback name, or the address given with --bind: a page of another site whose name
    was made to resolve to us (DNS rebinding) sends its own name, and is refused."""
    if not host_header:
        return False
    name = host_name(host_header)
    return name in LOOPBACK_NAMES or (bind is not None and name == bind.lower().strip("[]"))


def origin_allowed(origin: str | None, host_header: str | None) -> bool:
    """Pure: a POST's Origin is this very server's (http://HOST as the browser reached it)."""
    if not origin or not host_header:
        return False
    return origin.rstrip("/").lower() == f"http://{host_header.strip().lower()}"
