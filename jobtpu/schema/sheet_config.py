"""The machines.json `sheet` section: which spreadsheet and tab, how to reach the API, how long
to wait for it. `parse_config` turns the raw object into a SheetConfig or one ConfigError line."""

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from jobtpu.errors import ConfigError
from jobtpu.schema.msgspec_lib import msgspec

DEFAULT_WORKSHEET = "jobtpu"
DEFAULT_TIMEOUT = 5.0
DEFAULT_READ_EVERY = 60.0  # seconds a quiet pass trusts the last read (hand claims are seen this late)
MAX_TIMEOUT = 60.0
GOOGLE_BASE = "https://sheets.googleapis.com"
CALL_GRACE = 0.5  # beyond the deadline, for a call already under way to return its own error
_KEYS = ("spreadsheet", "worksheet", "credentials", "columns", "api_endpoint", "timeout", "read_every", "layout")
_KEY = re.compile(r"^[A-Za-z0-9_-]{1,200}$")
_URL_KEY = re.compile(r"/spreadsheets/d/([A-Za-z0-9_-]+)")

# jobtpu's column keys in their default order, and the header titles jobtpu writes for them.
TITLES: dict[str, str] = {
    "name": "Machine", "kind": "Kind", "accelerator": "Accelerator", "zone": "Zone",
    "provisioning": "Provisioning", "state": "State", "user": "User", "jobs": "Jobs", "since": "Since",
    "note": "Note", "updated": "Updated",
}
COLUMNS = tuple(TITLES)
# The layouts a tab may have (decide/sheet_layout.py is each one's behaviour).
LAYOUTS = ("jobtpu", "tpu-manager")
# What `sheet show` and `find` print of the tpu-manager tab, whose columns are fixed.
TPU_MANAGER_COLUMNS = ("name", "accelerator", "belongs", "state", "user", "note", "jobs", "env", "other")


def layout_columns(name: str) -> tuple[str, ...]:
    """What `sheet show` and `find` print on a tab of that layout (jobtpu's: `sheet.columns`)."""
    return TPU_MANAGER_COLUMNS if name == "tpu-manager" else COLUMNS


class SheetConfig(msgspec.Struct, frozen=True):
    spreadsheet: str  # the key (the id in the sheet's URL)
    worksheet: str = DEFAULT_WORKSHEET
    credentials: str = "default"  # a key file's path, "default" (ADC) or "anonymous" (tests, proxies)
    columns: tuple[str, ...] = COLUMNS
    api_endpoint: str = GOOGLE_BASE
    timeout: float = DEFAULT_TIMEOUT  # for everything one read or one write costs, retries included
    read_every: float = DEFAULT_READ_EVERY  # a pass with nothing to write reads no oftener than this
    layout: str = "jobtpu"  # or "tpu-manager": the older tool's tab as it is (jobtpu/decide/sheet_layout.py)
    # Fleet.resolve, given by load_fleet: the machine a tpu-manager row's name (or alias) means
    # (decide/sheet_layout.layout_of makes the tab's layout of both).
    resolve: Callable[[str], Any] | None = None


def parse_config(raw: Any, where: str = "machines.json") -> SheetConfig:
    """machines.json's `sheet` object → SheetConfig; anything wrong is one ConfigError line."""
    hint = f"fix the sheet section of {where}; nothing was changed"

    def fail(message: str) -> ConfigError:
        return ConfigError(f"{where}: sheet.{message}", hint)

    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: sheet must be an object", hint)
    for key in raw:
        if key not in _KEYS:
            raise ConfigError(f"{where}: unknown key {key!r} in sheet (valid: {', '.join(_KEYS)})", hint)
    for key in ("spreadsheet", "worksheet", "credentials", "api_endpoint"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key].strip()):
            raise fail(f"{key} must be a non-empty string")
    if "spreadsheet" not in raw:
        raise fail("spreadsheet is missing: the sheet's key or URL")
    layout = raw.get("layout", "jobtpu")
    if layout not in LAYOUTS:
        raise fail(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, not {str(layout)[:40]!r}")
    if layout != "jobtpu" and "columns" in raw:
        raise fail(f"columns is for the jobtpu layout: the {layout} tab's columns are fixed (docs/reference/machines-json.md §3.8)")
    timeout = raw.get("timeout", DEFAULT_TIMEOUT)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= MAX_TIMEOUT:
        raise fail(f"timeout must be a number of seconds above 0, at most {MAX_TIMEOUT:g}")
    read_every = raw.get("read_every", DEFAULT_READ_EVERY)
    if not isinstance(read_every, int | float) or isinstance(read_every, bool) or not 0 <= read_every <= 86400:
        raise fail("read_every must be a number of seconds from 0 to 86400 (0: every pass reads the sheet)")
    return SheetConfig(spreadsheet=_spreadsheet_key(raw["spreadsheet"].strip(), fail),
                       worksheet=raw.get("worksheet", DEFAULT_WORKSHEET),
                       credentials=raw.get("credentials", "default"),
                       columns=_columns(raw.get("columns", list(layout_columns(layout))), fail, layout),
                       api_endpoint=_endpoint(raw.get("api_endpoint", GOOGLE_BASE).strip(), fail),
                       timeout=float(timeout), read_every=float(read_every), layout=layout)


def _spreadsheet_key(text: str, fail: Callable[[str], ConfigError]) -> str:
    match = _URL_KEY.search(text)
    key = match[1] if match else text
    if not _KEY.match(key):
        raise fail("spreadsheet must be the sheet's key or its URL (https://docs.google.com/spreadsheets/d/KEY/...)")
    return key


def _columns(value: Any, fail: Callable[[str], ConfigError], layout: str) -> tuple[str, ...]:
    if layout != "jobtpu":
        return tuple(value)
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise fail("columns must be a list of column names")
    for column in value:
        if column not in TITLES:
            raise fail(f"columns: unknown column {column!r} (known: {', '.join(COLUMNS)})")
    if len(set(value)) != len(value):
        raise fail("columns names a column twice")
    if "name" not in value:
        raise fail("columns must include 'name': rows are found by the machine's name")
    return tuple(value)


def _endpoint(text: str, fail: Callable[[str], ConfigError]) -> str:
    url = text if "://" in text else f"https://{text}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise fail("api_endpoint must be a base URL like https://sheets.googleapis.com")
    return url.rstrip("/")



def sheet_id(config: SheetConfig) -> str:
    return f"{config.spreadsheet}/{config.worksheet}"
