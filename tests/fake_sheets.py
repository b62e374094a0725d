"""A fake Google Sheets v4 REST API on 127.0.0.1, driven by the real gspread client.

Standard library only. It answers the routes gspread's HTTPClient uses for values: spreadsheets.get,
values.get / batchGet, values.update (PUT), values.batchUpdate, values.append, values.clear /
batchClear, in Google's JSON shapes (ranges in A1 notation with the sheet title quoted as Google
quotes it, trailing empty cells trimmed, `values` left out when there are none) and Google's error
shape. Cells hold strings, as the API's FORMATTED_VALUE rendering returns them.

Hooks for tests: fail the next N calls (a 429 quota answer by default), go dead (refuse connections,
or accept and never answer), edit a cell by hand, and a log of every request.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

QUOTA_MESSAGE = ("Quota exceeded for quota metric 'Write requests' and limit 'Write requests per minute per user' "
                 "of service 'sheets.googleapis.com' for consumer 'project_number:000000000000'.")
STATUS_BY_CODE = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}
DEFAULT_ROWS, DEFAULT_COLUMNS = 1000, 26
_PREFIX = "/v4/spreadsheets/"
_CELLS = re.compile(r"^([A-Za-z]*)(\d*)(?::([A-Za-z]*)(\d*))?$")


class ApiError(Exception):
    def __init__(self, code: int, message: str, page: bool = False) -> None:
        super().__init__(message)
        self.code, self.message, self.page = code, message, page  # page: HTML, as Google's front end answers


def column_letters(index: int) -> str:
    """0 → A, 25 → Z, 26 → AA."""
    letters = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def column_index(letters: str) -> int:
    index = 0
    for letter in letters.upper():
        index = index * 26 + ord(letter) - ord("A") + 1
    return index - 1


def quote_title(title: str) -> str:
    """A sheet title as Google writes it in a range: quoted unless it is a plain word that is not a cell."""
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", title) and not re.fullmatch(r"[A-Za-z]{1,3}\d+", title):
        return title
    return "'" + title.replace("'", "''") + "'"


@dataclass
class Sheet:
    sheet_id: int
    title: str
    rows: int = DEFAULT_ROWS
    columns: int = DEFAULT_COLUMNS
    cells: dict[tuple[int, int], str] = field(default_factory=dict)  # (row, column), 0-based; no empty strings

    def set(self, row: int, column: int, value: str) -> None:
        self.rows, self.columns = max(self.rows, row + 1), max(self.columns, column + 1)  # a write grows the grid
        if value == "":
            self.cells.pop((row, column), None)
        else:
            self.cells[(row, column)] = value


@dataclass(frozen=True)
class Area:
    """A resolved A1 range: 0-based inclusive bounds, clipped to the grid."""

    sheet: Sheet
    top: int
    left: int
    bottom: int
    right: int

    def a1(self) -> str:
        return (f"{quote_title(self.sheet.title)}!{column_letters(self.left)}{self.top + 1}:"
                f"{column_letters(self.right)}{self.bottom + 1}")


@dataclass
class Spreadsheet:
    key: str
    title: str
    sheets: list[Sheet]

    def sheet(self, title: str) -> Sheet | None:
        return next((s for s in self.sheets if s.title == title), None)

    def resolve(self, text: str) -> Area:
        """An A1 range (`'My sheet'!A1:C`, `Sheet1`, `A:B`, `2:5`) → an area; 400 as Google answers a bad one."""
        bad = ApiError(400, f"Unable to parse range: {text}")
        title, cells = _split_range(text, bad)
        if title is None:  # no sheet named: a sheet's bare title, else cells of the first sheet
            sheet = self.sheet(cells) if cells else None
            if sheet is not None:
                return Area(sheet, 0, 0, sheet.rows - 1, sheet.columns - 1)
            sheet = self.sheets[0]
        else:
            found = self.sheet(title)
            if found is None:
                raise bad
            sheet = found
            if not cells:
                return Area(sheet, 0, 0, sheet.rows - 1, sheet.columns - 1)
        match = _CELLS.match(cells)
        if not match or not (match[1] or match[2]) or (match[0] != cells) or (":" in cells and not (match[3] or match[4])):
            raise bad
        c0, r0, c1, r1 = match[1], match[2], match[3], match[4]
        if ":" not in cells:
            if not (c0 and r0):
                raise bad
            c1, r1 = c0, r0
        top = int(r0) - 1 if r0 else 0
        left = column_index(c0) if c0 else 0
        bottom = int(r1) - 1 if r1 else sheet.rows - 1
        right = column_index(c1) if c1 else sheet.columns - 1
        if top < 0 or bottom < 0:
            raise bad
        top, bottom = min(top, bottom), max(top, bottom)
        left, right = min(left, right), max(left, right)
        return Area(sheet, top, left, bottom, right)


def _split_range(text: str, bad: ApiError) -> tuple[str | None, str]:
    """(sheet title or None, the cells part)."""
    if text.startswith("'"):
        i, title = 1, ""
        while True:
            end = text.find("'", i)
            if end < 0:
                raise bad
            title += text[i:end]
            if text[end + 1:end + 2] == "'":  # '' is a quote inside the title
                title += "'"
                i = end + 2
                continue
            rest = text[end + 1:]
            if rest and not rest.startswith("!"):
                raise bad
            return title, rest[1:]
    if "!" in text:
        title, cells = text.split("!", 1)
        return title, cells
    return None, text


class FakeSheetsApi:
    """The fake server. `endpoint` is what machines.json's `sheet.api_endpoint` names."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.spreadsheets: dict[str, Spreadsheet] = {}
        self.log: list[dict[str, Any]] = []  # every request: method, path, query, body
        self._failures: list[tuple[int, str, bool]] = []  # answers for the next calls, in order
        self._dead: str | None = None  # None, "refuse", "hang" or "drip"
        self._wake = threading.Event()  # releases hung requests
        self._stalls: list[tuple[str, str, threading.Event]] = []  # (method, path part, release)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ----- lifecycle
    def start(self) -> FakeSheetsApi:
        api = self

        class Handler(_Handler):
            owner = api

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def close(self) -> None:
        self._wake.set()
        with self.lock:
            for _, _, release in self._stalls:
                release.set()
        self._stop_server()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ----- test hooks
    def add_spreadsheet(self, key: str, titles: tuple[str, ...] = ("jobtpu",), title: str = "TPUs") -> Spreadsheet:
        with self.lock:
            book = Spreadsheet(key, title, [Sheet(1000 + i, t) for i, t in enumerate(titles)])
            self.spreadsheets[key] = book
            return book

    def stall_answers(self, method: str, path_contains: str) -> threading.Event:
        """Requests that match are carried out, but their answer waits until the returned event is
        set (or the fake closes): a caller that gives up meanwhile never learns what it did."""
        release = threading.Event()
        with self.lock:
            self._stalls.append((method, path_contains, release))
        return release

    def stall_of(self, method: str, path: str) -> threading.Event | None:
        with self.lock:
            return next((r for m, part, r in self._stalls if m == method and part in unquote(path) and not r.is_set()),
                        None)

    def fail_next(self, count: int = 1, code: int = 429, message: str = QUOTA_MESSAGE, page: bool = False) -> None:
        """`page`: an HTML error page instead of the API's JSON, as Google's front end sends a 502 or 503."""
        with self.lock:
            self._failures.extend([(code, message, page)] * count)

    def go_dead(self, how: str) -> None:
        """`refuse`: nothing listens on the port; `hang`: connections are accepted and never answered;
        `drip`: answers come a byte every 0.2 s (each read is quick: a socket timeout never fires)."""
        assert how in ("refuse", "hang", "drip"), how
        with self.lock:
            self._dead = how
            self._wake.clear()
        if how == "refuse":
            self._stop_server()

    def revive(self) -> None:
        """Answering again: no longer dead, and no failures left to answer (fail_next)."""
        with self.lock:
            was, self._dead = self._dead, None
            self._failures.clear()
            self._wake.set()
        if was == "refuse":
            self.start()  # the same port: the endpoint in machines.json stays right

    def edit(self, key: str, title: str, a1: str, value: str) -> None:
        """A person typing into one cell in the browser ("" empties it)."""
        with self.lock:
            area = self.spreadsheets[key].resolve(f"{quote_title(title)}!{a1}")
            area.sheet.set(area.top, area.left, value)

    def cell(self, key: str, title: str, a1: str) -> str:
        with self.lock:
            area = self.spreadsheets[key].resolve(f"{quote_title(title)}!{a1}")
            return area.sheet.cells.get((area.top, area.left), "")

    def grid(self, key: str, title: str) -> list[list[str]]:
        """The sheet's values as values.get returns them (trailing empties trimmed)."""
        with self.lock:
            sheet = self.spreadsheets[key].sheet(title)
            assert sheet is not None, title
            return _read(Area(sheet, 0, 0, sheet.rows - 1, sheet.columns - 1), "ROWS")

    def requests_made(self, writes_only: bool = False) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.log if not writes_only or r["write"]]

    def clear_log(self) -> None:
        with self.lock:
            self.log.clear()

    # ----- the API
    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, dict[str, Any]]:
        split = urlsplit(raw_path)
        query = parse_qs(split.query)
        path = split.path
        with self.lock:
            self.log.append({"method": method, "path": unquote(path), "query": query, "body": body,
                             "write": method != "GET"})
            if self._failures:
                code, message, page = self._failures.pop(0)
                raise ApiError(code, message, page)
        if not path.startswith(_PREFIX):
            raise ApiError(404, "Requested entity was not found.")
        rest = path[len(_PREFIX):]
        key, _, tail = rest.partition("/")
        key, colon, _ = key.partition(":")  # {id}:batchUpdate (formatting, sheets) is not served
        with self.lock:
            book = self.spreadsheets.get(unquote(key))
            if book is None:
                raise ApiError(404, "Requested entity was not found.")
            if not tail and not colon and method == "GET":
                return 200, _metadata(book)
            if tail.startswith("values:"):
                return 200, self._book_action(book, method, tail[len("values:"):], query, body)
            if tail.startswith("values/"):
                target, verb = tail[len("values/"):], ""
                if target.endswith((":append", ":clear")):  # the range itself travels percent-encoded
                    target, _, verb = target.rpartition(":")
                return 200, self._range_action(book, method, unquote(target), verb, query, body)
        raise ApiError(404, f"Method not found: {method} {path}")

    def _book_action(self, book: Spreadsheet, method: str, action: str, query: dict[str, list[str]],
                     body: Any) -> dict[str, Any]:
        dimension = (query.get("majorDimension") or ["ROWS"])[0]
        if action == "batchGet" and method == "GET":
            ranges = query.get("ranges") or []
            return {"spreadsheetId": book.key, "valueRanges": [_value_range(book.resolve(r), dimension) for r in ranges]}
        if action == "batchUpdate" and method == "POST":
            option = _input_option(body.get("valueInputOption"))
            _check_cells([v for d in body.get("data") or [] for line in d.get("values") or [] for v in line])
            responses = [_write(book, book.resolve(d["range"]), d.get("values") or [],
                                d.get("majorDimension") or "ROWS", option) for d in body.get("data") or []]
            return {"spreadsheetId": book.key,
                    "totalUpdatedRows": sum(r.get("updatedRows", 0) for r in responses),
                    "totalUpdatedColumns": sum(r.get("updatedColumns", 0) for r in responses),
                    "totalUpdatedCells": sum(r.get("updatedCells", 0) for r in responses),
                    "totalUpdatedSheets": len({r["updatedRange"].rsplit("!", 1)[0] for r in responses}),
                    "responses": responses}
        if action == "batchClear" and method == "POST":
            areas = [book.resolve(r) for r in body.get("ranges") or []]
            for area in areas:
                _clear(area)
            return {"spreadsheetId": book.key, "clearedRanges": [a.a1() for a in areas]}
        raise ApiError(404, f"Method not found: {method} {action}")

    def _range_action(self, book: Spreadsheet, method: str, target: str, verb: str, query: dict[str, list[str]],
                      body: Any) -> dict[str, Any]:
        area = book.resolve(target)
        if method == "GET" and not verb:
            return _value_range(area, (query.get("majorDimension") or ["ROWS"])[0])
        if method == "PUT" and not verb:
            option = _input_option(_first(query, "valueInputOption"))
            _check_cells([v for line in body.get("values") or [] for v in line])
            return _write(book, area, body.get("values") or [], body.get("majorDimension") or "ROWS", option)
        if method == "POST" and verb == "clear":
            _clear(area)
            return {"spreadsheetId": book.key, "clearedRange": area.a1()}
        if method == "POST" and verb == "append":
            option = _input_option(_first(query, "valueInputOption"))
            return _append(book, area, body.get("values") or [], option)
        raise ApiError(404, f"Method not found: {method} {target}:{verb}")

    @property
    def dripping(self) -> bool:
        with self.lock:
            return self._dead == "drip"

    def drip_pause(self) -> bool:
        """Wait between two dripped bytes; True when the API was revived or closed meanwhile."""
        return self._wake.wait(0.2)

    def wait_while_hung(self) -> bool:
        """True when this request must get no answer (the API hangs)."""
        with self.lock:
            hung = self._dead == "hang"
        if hung:
            self._wake.wait()
        return hung


def _first(query: dict[str, list[str]], name: str) -> str | None:
    values = query.get(name)
    return values[0] if values else None


def _metadata(book: Spreadsheet) -> dict[str, Any]:
    return {"spreadsheetId": book.key,
            "properties": {"title": book.title, "locale": "en_US", "autoRecalc": "ON_CHANGE", "timeZone": "Etc/GMT"},
            "sheets": [{"properties": {"sheetId": s.sheet_id, "title": s.title, "index": i, "sheetType": "GRID",
                                       "gridProperties": {"rowCount": s.rows, "columnCount": s.columns}}}
                       for i, s in enumerate(book.sheets)],
            "spreadsheetUrl": f"https://docs.google.com/spreadsheets/d/{book.key}/edit"}


def _input_option(option: str | None) -> str:
    if option not in ("RAW", "USER_ENTERED"):
        if option is None:
            raise ApiError(400, "'valueInputOption' is required but not specified")
        raise ApiError(400, f"Invalid value at 'value_input_option' ({option})")
    return option


def _read(area: Area, dimension: str) -> list[list[str]]:
    rows = [[area.sheet.cells.get((r, c), "") for c in range(area.left, area.right + 1)]
            for r in range(area.top, area.bottom + 1)]
    if dimension == "COLUMNS":
        rows = [list(column) for column in zip(*rows, strict=True)] if rows else []
    trimmed = []
    for row in rows:
        while row and row[-1] == "":
            row.pop()
        trimmed.append(row)
    while trimmed and not trimmed[-1]:
        trimmed.pop()
    return trimmed


def _value_range(area: Area, dimension: str) -> dict[str, Any]:
    if dimension not in ("ROWS", "COLUMNS"):
        raise ApiError(400, f"Invalid value at 'major_dimension' ({dimension})")
    out: dict[str, Any] = {"range": area.a1(), "majorDimension": dimension}
    values = _read(area, dimension)
    if values:
        out["values"] = values
    return out


CELL_LIMIT = 50_000  # Google refuses a whole request holding one longer cell


def _check_cells(values: list[Any]) -> None:
    if any(len(str(v)) > CELL_LIMIT for v in values):
        raise ApiError(400, f"Your input contains more than the maximum of {CELL_LIMIT} characters in a single cell.")


def _as_cell(value: Any, option: str) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    text = str(value)
    if option == "USER_ENTERED" and text.startswith("'"):
        return text[1:]  # a leading apostrophe forces text and is not shown
    return text


def _write(book: Spreadsheet, area: Area, values: list[list[Any]], dimension: str, option: str) -> dict[str, Any]:
    rows = values if dimension == "ROWS" else [list(r) for r in zip(*values, strict=False)]
    height, width = len(rows), max((len(r) for r in rows), default=0)
    sized = area.bottom - area.top + 1, area.right - area.left + 1
    explicit = area.sheet.rows - 1 != area.bottom or area.sheet.columns - 1 != area.right
    if explicit and (height > sized[0] or width > sized[1]):
        raise ApiError(400, f"Requested writing within range [{area.a1()}], but tried writing "
                            f"{'to row [' + str(area.top + height) + ']' if height > sized[0] else 'to column [' + column_letters(area.left + width - 1) + ']'}")
    cells = 0
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            if value is None:  # null skips the cell
                continue
            area.sheet.set(area.top + r, area.left + c, _as_cell(value, option))
            cells += 1
    written = Area(area.sheet, area.top, area.left, area.top + max(height, 1) - 1, area.left + max(width, 1) - 1)
    return {"spreadsheetId": book.key, "updatedRange": written.a1(), "updatedRows": height,
            "updatedColumns": width, "updatedCells": cells}


def _clear(area: Area) -> None:
    for r in range(area.top, area.bottom + 1):
        for c in range(area.left, area.right + 1):
            area.sheet.cells.pop((r, c), None)


def _append(book: Spreadsheet, area: Area, values: list[list[Any]], option: str) -> dict[str, Any]:
    """After the last row holding anything in the range's columns (Google's "table"), from its left column."""
    used = [r for (r, c) in area.sheet.cells if area.left <= c <= area.right and r >= area.top]
    first_free = max(used) + 1 if used else area.top
    table = Area(area.sheet, area.top, area.left, max(first_free - 1, area.top), area.right)
    width = max((len(r) for r in values), default=1)
    target = Area(area.sheet, first_free, area.left, first_free + max(len(values), 1) - 1,
                  area.left + max(width, 1) - 1)
    updates = _write(book, target, values, "ROWS", option)
    return {"spreadsheetId": book.key, "tableRange": table.a1(), "updates": updates}


def _error_page(status: int) -> bytes:
    """The page Google's front end sends for an error of its own (no JSON, no API message)."""
    return (f"<!DOCTYPE html><html lang=en><meta charset=utf-8><title>Error {status} (Server Error)!!1</title>"
            f"<p><b>{status}.</b> <ins>That's an error.</ins><p>The server encountered a temporary error and "
            "could not complete your request.<p>Please try again in 30 seconds. <ins>That's all we know.</ins>"
            ).encode()


class _Handler(BaseHTTPRequestHandler):
    owner: FakeSheetsApi  # HTTP/1.0: one request per connection, so going dead reaches every client at once

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _serve(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.owner.wait_while_hung():
            self.close_connection = True
            return
        page = False
        try:
            body = json.loads(raw) if raw else {}
            status, payload = self.owner.handle(method, self.path, body)
        except ApiError as e:
            status, page = e.code, e.page
            payload = {"error": {"code": e.code, "message": e.message, "status": STATUS_BY_CODE.get(e.code, "UNKNOWN")}}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            status = 400
            payload = {"error": {"code": 400, "message": f"Invalid JSON payload received. {e}",
                                 "status": "INVALID_ARGUMENT"}}
        data = json.dumps(payload).encode()
        kind = "application/json; charset=UTF-8"
        if page:
            data, kind = _error_page(status), "text/html; charset=UTF-8"
        stall = self.owner.stall_of(method, self.path)
        if stall is not None:
            stall.wait()
        try:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.owner.dripping:
                self.wfile.flush()
                for byte in data:
                    if self.owner.drip_pause():
                        break
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                return
            self.wfile.write(data)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._serve("GET")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")
