"""The gate of `jobtpu serve` (docs/reference/commands.md §2.29): what a server is started with
(`Config`), and `Guard`, the ASGI layer every request passes before any route: a loopback Host (or
the --bind address), the person's cookie (or, for /metrics alone, the scraper's bearer token), for a
POST a same-origin Origin and a Content-Length within the form's cap (refused before a byte of the
body is read); and the security headers on every answer. The rules themselves are guard.py's."""

from __future__ import annotations

from starlette.requests import cookie_parser
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobtpu.home.layout import Home
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.web import guard

MAX_FORM = 64 * 1024
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
           (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY"), (b"cache-control", b"no-store")]


class Config(msgspec.Struct):
    home: Home
    user: str  # the jobtpu user every act is done as, fixed at start
    account: str
    secret: str
    cookie: str
    bind: str | None = None
    read_only: bool = False
    metrics_token: str | None = None  # --metrics-token-file's: a scraper's, for /metrics alone


class Guard:
    """Host, cookie and Origin checks before any route; security headers on every answer."""

    def __init__(self, app: ASGIApp, config: Config) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        refusal = self.refusal(scope)
        if refusal is not None:
            return await PlainTextResponse(refusal[1] + "\n", status_code=refusal[0])(scope, receive, with_headers)
        await self.app(scope, receive, with_headers)

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """Pure but for the config: why this request is refused (status, line), or None."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host")
        if not guard.host_allowed(host, self.config.bind):
            return 403, "refused: this server answers only to a loopback name (Host header)"
        method = scope["method"]
        if method not in ("GET", "HEAD", "POST"):
            return 405, "refused: GET shows, POST acts; nothing else"
        if scope["path"] == "/login" and method == "GET":
            return None  # the link's secret is checked there
        bearer = guard.bearer_token(headers.get("authorization"))
        if bearer is not None:  # a scraper: its token opens /metrics and nothing else, never a page or an act
            token = self.config.metrics_token
            if scope["path"] == "/metrics" and method in ("GET", "HEAD") and token is not None \
                    and guard.same_secret(bearer, token):
                return None
            return 401, "refused: a bearer token opens /metrics only, and only the one of --metrics-token-file"
        cookie = cookie_parser(headers.get("cookie", "")).get(self.config.cookie)
        if not guard.same_secret(cookie, self.config.secret):
            return 401, ("not logged in: open the link `jobtpu serve` printed (it carries your secret once; "
                         "the page keeps it as a cookie)")
        if method == "POST" and not guard.origin_allowed(headers.get("origin"), host):
            return 403, "refused: a POST must come from this server's own pages (Origin)"
        if method == "POST" and not body_fits(headers):
            return 413, f"refused: a form is at most {MAX_FORM} bytes, its Content-Length said first"
        return None


def body_fits(headers: dict[str, str]) -> bool:
    """Pure: a POST says its body's length (a browser's form always does) and it is within MAX_FORM:
    a larger or unsaid one is refused before it is read, never taken into memory whole first."""
    length = headers.get("content-length", "")
    return length.isdigit() and int(length) <= MAX_FORM and "transfer-encoding" not in headers
