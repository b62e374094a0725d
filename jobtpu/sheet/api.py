"""Talking to the Sheets API: gspread's HTTP client over a session routed to `sheet.api_endpoint`,
every call bounded by `sheet.timeout`, every failure one SheetError line (no URL, no traceback).
gspread, google-auth and requests are imported only here, inside the functions that call the API."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from jobtpu.decide.sheet_layout import layout_of
from jobtpu.errors import REFUSED_BY_GOOGLE, JobtpuError, credentials_line, credentials_message
from jobtpu.schema.msgspec_lib import msgspec
from jobtpu.schema.sheet_config import CALL_GRACE, GOOGLE_BASE, SheetConfig
from jobtpu.sheet.rows import SheetGrid, grid_from_values, quote_title

SCOPES = ["https://www.googleapis.com/auth/spreadsheets"]
T = TypeVar("T")


class SheetError(JobtpuError):
    """The Sheets API could not be used now (unreachable, slow, refused, credentials): one line."""


# ----------------------------------------------------------------------------- talking to the API
class SheetApi:
    """gspread's HTTPClient over a session that sends Google's URLs to `api_endpoint` and keeps
    every call within what remains of one deadline (a slow API costs a pass `timeout`, not more).
    One instance makes one call (a read or a write)."""

    def __init__(self, config: SheetConfig) -> None:
        self.config = config
        # The client's modules load first (a second or more on a busy host): `timeout` is for the
        # API's answer, and an import counted in it made a loaded machine report the API as slow.
        _load_client_modules()
        self.deadline = time.monotonic() + config.timeout
        self.client = _http_client(config, self)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def values(self) -> list[list[Any]]:
        doc = self._call(lambda c: c.values_get(self.config.spreadsheet, quote_title(self.config.worksheet),
                                                params={"majorDimension": "ROWS"}))
        values = doc.get("values", []) if isinstance(doc, dict) else None
        if not isinstance(values, list) or not all(isinstance(v, list) for v in values):
            raise SheetError(f"Sheets API at {self.host}: the answer holds no rows")
        return values

    def write(self, data: list[dict[str, Any]]) -> None:
        self._call(lambda c: c.values_batch_update(self.config.spreadsheet,
                                                   body={"valueInputOption": "RAW", "data": data}))

    @property
    def host(self) -> str:
        return urlsplit(self.config.api_endpoint).netloc

    def _call(self, request: Callable[[Any], T]) -> T:
        """One API call; every way it can fail becomes a SheetError line."""
        import requests
        from google.auth import exceptions as auth_errors
        from gspread.exceptions import APIError, GSpreadException

        try:
            return self._within_deadline(request)
        except APIError as e:
            if e.error.get("code") == -1 and e.response.status_code >= 500:  # Google's front end, down for now
                raise SheetError(f"Sheets API at {self.host}: HTTP {e.response.status_code}; {_AGAIN}") from None
            if e.error.get("code") == -1:  # gspread's mark for an error answer that is not JSON (a proxy's page)
                raise SheetError(f"Sheets API at {self.host}: HTTP {e.response.status_code}, not the API's answer"
                                 "; check sheet.api_endpoint") from None
            raise self._refused(e.response.status_code, e.error) from None
        except (requests.Timeout, _OutOfTime):
            raise SheetError(f"Sheets API at {self.host}: no answer within {self.config.timeout:g} s; {_AGAIN}") from None
        except requests.ConnectionError as e:
            why = "connection refused" if "refused" in str(e).lower() else "cannot connect"
            raise SheetError(f"Sheets API at {self.host}: {why}; {_AGAIN}") from None
        except auth_errors.TransportError as e:  # the token endpoint could not be reached: an outage
            raise SheetError(credentials_line("Sheets", self.config.credentials, _first_line(e), _AGAIN)) from None
        except auth_errors.GoogleAuthError as e:  # a key the token endpoint refuses, say
            raise SheetError(credentials_message("Sheets", "sheet.credentials", self.config.credentials, e)) from None
        except (requests.RequestException, GSpreadException, ValueError) as e:
            raise SheetError(f"Sheets API at {self.host}: {type(e).__name__}: {_first_line(e)}") from None
        finally:
            self.client.session.close()  # one call per SheetApi: no pooled sockets outlive it in a --loop process

    def _within_deadline(self, request: Callable[[Any], T]) -> T:
        """The call on a helper thread, given up at the deadline: socket timeouts alone do not bound
        an answer that trickles in a byte at a time. A call given up on ends with its socket (the
        session is closed) or with the process; its answer is dropped, and the next pass reads again."""
        outcome: list[tuple[bool, Any]] = []

        def run() -> None:
            try:
                outcome.append((True, request(self.client)))
            except BaseException as e:  # handed to the caller's thread, which sorts it
                outcome.append((False, e))

        worker = threading.Thread(target=run, name="sheets-call", daemon=True)
        worker.start()
        worker.join(max(self.remaining(), 0.0) + CALL_GRACE)
        if not outcome:
            raise _OutOfTime()
        ok, value = outcome[0]
        if ok:
            return value
        raise value

    def _refused(self, status: int, error: Mapping[str, Any]) -> SheetError:
        message = _first_line(error.get("message", ""))
        key, title = self.config.spreadsheet, self.config.worksheet
        if status == 404:
            return SheetError(f"spreadsheet {key} not found",
                              hint="check sheet.spreadsheet, and share the sheet with the credentials' account")
        if status == 400 and "Unable to parse range" in message:
            return SheetError(f"spreadsheet {key} has no worksheet {title!r}",
                              hint="add a tab of that name, or set sheet.worksheet")
        if status == 401:  # a revoked or deleted key, an expired login: Google's paragraph says only that
            return SheetError(credentials_message("Sheets", "sheet.credentials", self.config.credentials, None,
                                                  cause=REFUSED_BY_GOOGLE))
        if status == 403:
            return SheetError(f"Sheets API refused credentials {self.config.credentials!r}: {message}",
                              hint=_CREDENTIALS_HINT)
        if status >= 500:  # the API's own trouble, for now: nothing for the user to change
            return SheetError(f"Sheets API at {self.host}: {status} {error.get('status', '')}: "
                              f"{message.rstrip('.')}; {_AGAIN}".replace("  ", " "))
        return SheetError(f"Sheets API: {status} {error.get('status', '')}: {message}".replace("  ", " "))


_AGAIN = "the next pass tries again"


_CREDENTIALS_HINT = ("share the sheet with the key's client_email, or set sheet.credentials to a key file it is "
                     "shared with (docs/reference/machines-json.md §3.8)")


class _OutOfTime(Exception):
    """The deadline passed before a call could be sent."""


def _first_line(error: object) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"https?://\S+", "<url>", text)  # no endpoint URLs, query strings or tokens in a pass's line
    return text[:200]


# Loaded credentials by setting: a `manage --loop` process reuses its access token across passes
# instead of asking the token endpoint again for every read and write.
_LOADED_CREDENTIALS: dict[str, Any] = {}


def _credentials(config: SheetConfig) -> Any:
    kind = config.credentials
    if kind not in _LOADED_CREDENTIALS:
        _LOADED_CREDENTIALS[kind] = _load_credentials(kind)
    return _LOADED_CREDENTIALS[kind]


def _load_credentials(kind: str) -> Any:
    import google.auth
    from google.auth.credentials import AnonymousCredentials

    try:
        if kind == "anonymous":
            return AnonymousCredentials()
        if kind == "default":
            return google.auth.default(scopes=SCOPES)[0]
        return _key_file(Path(os.path.expanduser(kind)))
    except Exception as e:  # google.auth and the OS raise several unrelated types for a missing or bad key
        raise SheetError(credentials_message("Sheets", "sheet.credentials", kind, e)) from None


def _key_file(path: Path) -> Any:
    """A service-account key or a user's ADC file, each through its own loader (never an arbitrary
    external-account configuration, which could make google-auth run a command)."""
    kind = json.loads(path.read_text(encoding="utf-8")).get("type")
    if kind == "service_account":
        from google.oauth2 import service_account

        return service_account.Credentials.from_service_account_file(str(path), scopes=SCOPES)
    if kind == "authorized_user":
        from google.oauth2 import credentials

        return credentials.Credentials.from_authorized_user_file(str(path), scopes=SCOPES)
    raise ValueError(f"a key file of type {kind!r}; use a service-account key or an ADC file (authorized_user)")


def _load_client_modules() -> None:
    import google.auth.transport.requests  # noqa: F401 - loaded here, outside any call's deadline
    import gspread.http_client  # noqa: F401
    import requests  # noqa: F401


def _http_client(config: SheetConfig, api: SheetApi) -> Any:
    from google.auth.transport.requests import AuthorizedSession
    from gspread.http_client import HTTPClient

    class RoutedSession(AuthorizedSession):
        """Google's URLs go to api_endpoint; no call outlives the deadline."""

        def request(self, method: str, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
            url = url.decode() if isinstance(url, bytes) else url
            if url.startswith(GOOGLE_BASE):
                url = config.api_endpoint + url[len(GOOGLE_BASE):]
            left = api.remaining()
            if left <= 0.05:
                raise _OutOfTime()
            kwargs["timeout"] = min(config.timeout, left)
            kwargs["max_allowed_time"] = left  # a token refresh counts too
            return super().request(method, url, *args, **kwargs)

    session = RoutedSession(_credentials(config))
    return HTTPClient(None, session)  # type: ignore[arg-type]  # a session given: gspread never reads auth



def read_sheet(config: SheetConfig) -> SheetGrid:
    """One read of the worksheet (SheetError when it cannot be had)."""
    values = SheetApi(config).values()
    return msgspec.structs.replace(grid_from_values(values, layout_of(config)), taken=time.time())
