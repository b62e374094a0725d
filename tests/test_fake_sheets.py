"""The fake Sheets API answers the real gspread client as Google does (the shapes jobtpu relies on)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import gspread
import pytest
import requests
from gspread.exceptions import APIError

from tests.fake_sheets import QUOTA_MESSAGE, FakeSheetsApi

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast


KEY = "1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms"


class Routed(requests.Session):
    """Google's URLs to the fake: the test's own way in, independent of jobtpu's."""

    def __init__(self, endpoint: str) -> None:
        super().__init__()
        self.endpoint = endpoint

    def request(self, method: str, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        assert isinstance(url, str) and url.startswith("https://sheets.googleapis.com/"), url
        return super().request(method, self.endpoint + url[len("https://sheets.googleapis.com"):], *args, **kwargs)


@pytest.fixture
def api() -> Iterator[FakeSheetsApi]:
    fake = FakeSheetsApi().start()
    fake.add_spreadsheet(KEY, ("jobtpu", "Team notes"))
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def client(api: FakeSheetsApi) -> gspread.Client:
    made = gspread.Client(None, session=Routed(api.endpoint))  # type: ignore[arg-type]
    made.set_timeout(2)
    return made


def test_metadata_lists_worksheets_like_google(client: gspread.Client) -> None:
    book = client.open_by_key(KEY)
    assert book.title == "TPUs"
    sheets = book.worksheets()
    assert [(w.title, w.index, w.id) for w in sheets] == [("jobtpu", 0, 1000), ("Team notes", 1, 1001)]
    assert (sheets[0].row_count, sheets[0].col_count) == (1000, 26)


def test_update_then_get_trims_and_quotes(client: gspread.Client, api: FakeSheetsApi) -> None:
    sheet = client.open_by_key(KEY).worksheet("Team notes")
    answer = sheet.update([["a", "b", ""], ["c"]], "B2:D3")
    assert answer["updatedRange"] == "'Team notes'!B2:D3"
    assert answer["updatedCells"] == 4
    assert sheet.get_all_values() == [["", "", ""], ["", "a", "b"], ["", "c", ""]]  # gspread pads; the API trims
    raw = client.http_client.values_get(KEY, "'Team notes'")
    assert raw == {"range": "'Team notes'!A1:Z1000", "majorDimension": "ROWS", "values": [[], ["", "a", "b"], ["", "c"]]}
    assert client.http_client.values_get(KEY, "jobtpu!A1:C3") == {"range": "jobtpu!A1:C3", "majorDimension": "ROWS"}
    assert api.cell(KEY, "Team notes", "C2") == "b"


def test_columns_and_batch_get(client: gspread.Client) -> None:
    sheet = client.open_by_key(KEY).worksheet("jobtpu")
    sheet.update([["x", "y"], ["z", "w"]], "A1:B2")
    assert client.http_client.values_get(KEY, "jobtpu!A1:B2", params={"majorDimension": "COLUMNS"})["values"] == [
        ["x", "z"], ["y", "w"]]
    got = sheet.batch_get(["A1", "B1:B2"])
    assert [list(r) for r in got] == [[["x"]], [["y"], ["w"]]]


def test_batch_update_append_and_clear(client: gspread.Client, api: FakeSheetsApi) -> None:
    sheet = client.open_by_key(KEY).worksheet("jobtpu")
    answer = sheet.batch_update([{"range": "A1:B1", "values": [["h1", "h2"]]}, {"range": "D5", "values": [["far"]]}])
    assert answer["totalUpdatedCells"] == 3 and len(answer["responses"]) == 2
    appended = sheet.append_row(["r2a", "r2b"], table_range="A1:B1")
    assert appended["updates"]["updatedRange"] == "jobtpu!A2:B2"
    assert api.grid(KEY, "jobtpu")[:2] == [["h1", "h2"], ["r2a", "r2b"]]
    sheet.batch_clear(["D5"])
    assert api.cell(KEY, "jobtpu", "D5") == ""
    sheet.clear()
    assert api.grid(KEY, "jobtpu") == []


def test_writing_past_the_range_and_bad_ranges_are_refused(client: gspread.Client) -> None:
    http = client.http_client
    with pytest.raises(APIError) as past:
        http.values_update(KEY, "jobtpu!A1:B1", params={"valueInputOption": "RAW"}, body={"values": [["1", "2", "3"]]})
    assert past.value.code == 400 and "tried writing to column [C]" in past.value.error["message"]
    with pytest.raises(APIError) as bad:
        http.values_get(KEY, "'no such tab'")
    assert (bad.value.code, bad.value.error["status"]) == (400, "INVALID_ARGUMENT")
    assert bad.value.error["message"] == "Unable to parse range: 'no such tab'"
    with pytest.raises(APIError) as no_option:
        http.values_update(KEY, "jobtpu!A1", body={"values": [["1"]]})
    assert "valueInputOption" in no_option.value.error["message"]


def test_unknown_spreadsheet_is_404(client: gspread.Client) -> None:
    with pytest.raises(gspread.exceptions.SpreadsheetNotFound):
        client.open_by_key("nope" * 10)
    with pytest.raises(APIError) as missing:
        client.http_client.values_get("nope" * 10, "jobtpu")
    assert missing.value.error == {"code": 404, "message": "Requested entity was not found.", "status": "NOT_FOUND"}


def test_fail_next_answers_googles_quota_error_then_recovers(client: gspread.Client, api: FakeSheetsApi) -> None:
    api.fail_next(2)
    for _ in range(2):
        with pytest.raises(APIError) as quota:
            client.http_client.values_get(KEY, "jobtpu")
        assert quota.value.error == {"code": 429, "message": QUOTA_MESSAGE, "status": "RESOURCE_EXHAUSTED"}
    assert client.http_client.values_get(KEY, "jobtpu")["majorDimension"] == "ROWS"
    assert [r["path"] for r in api.requests_made()] == [f"/v4/spreadsheets/{KEY}/values/jobtpu"] * 3


def test_a_dead_api_refuses_or_hangs_and_revives_on_the_same_port(client: gspread.Client, api: FakeSheetsApi) -> None:
    port = api.port
    api.go_dead("refuse")
    with pytest.raises(requests.ConnectionError):
        client.http_client.values_get(KEY, "jobtpu")
    api.revive()
    assert api.port == port
    assert "range" in client.http_client.values_get(KEY, "jobtpu")
    api.go_dead("hang")
    started = time.monotonic()
    with pytest.raises(requests.Timeout):
        client.http_client.values_get(KEY, "jobtpu")
    assert time.monotonic() - started > 1.9  # it waited its timeout out: the hung API never answers
    api.revive()
    assert "range" in client.http_client.values_get(KEY, "jobtpu")


def test_a_hand_edit_is_seen_and_the_log_tells_writes_from_reads(client: gspread.Client, api: FakeSheetsApi) -> None:
    api.edit(KEY, "jobtpu", "C3", "bob")
    assert client.open_by_key(KEY).worksheet("jobtpu").acell("C3").value == "bob"
    client.http_client.values_batch_update(KEY, body={"valueInputOption": "RAW",
                                                      "data": [{"range": "'jobtpu'!C3", "values": [[""]]}]})
    assert api.cell(KEY, "jobtpu", "C3") == ""
    writes = api.requests_made(writes_only=True)
    assert [(w["method"], w["path"]) for w in writes] == [("POST", f"/v4/spreadsheets/{KEY}/values:batchUpdate")]
    assert writes[0]["body"]["data"][0]["range"] == "'jobtpu'!C3"
