"""Credentials that cannot be used are one short line naming the file, the cause and what to do
(jobtpu/errors.py's credentials_message), for the TPU API (gcp.credentials) and the team sheet
(sheet.credentials): the errors google-auth and the OS raise, then the CLI paths that meet them."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobtpu.errors import credentials_cause, credentials_message
from tests.accounts import Team
from tests.fake_sheets import FakeSheetsApi
from tests.helpers import jobtpu, make_home

KEY = "1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms"
INCOMPLETE = '{"type": "service_account", "project_id": "p"}'
BAD_PEM = json.dumps({"type": "service_account", "client_email": "a@p.iam.gserviceaccount.com", "private_key_id": "1",
                      "private_key": "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n",
                      "token_uri": "https://oauth2.googleapis.com/token"})
# What a key file holds → the cause said (None: no file there).
FILES = [(None, "no such file"), ("", "not a JSON key file"), ("not json {", "not a JSON key file"),
         ("[1, 2]", "not a JSON key file"), ('{"type": "api_key"}', 'not a service-account key (no known "type")'),
         ("{}", 'not a service-account key (no known "type")'),
         (INCOMPLETE, "an incomplete service-account key (no "), (BAD_PEM, "its private_key is not a valid key")]


@pytest.fixture
def short() -> Iterator[Path]:
    """A folder with a short path, as a key file's usually is (/home/alice/keys): lines are measured with it."""
    folder = Path(tempfile.mkdtemp(prefix="k"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def key_file(folder: Path, text: str | None) -> Path:
    path = folder / "sa.json"
    if text is not None:
        path.write_text(text)
    return path


def tpu_load(path: Path) -> BaseException:
    import google.auth

    with pytest.raises(Exception) as raised:
        google.auth.load_credentials_from_file(str(path), scopes=["https://www.googleapis.com/auth/cloud-platform"])
    return raised.value


def sheet_load(path: Path) -> BaseException:
    from jobtpu.sheet import api as sheetapi

    with pytest.raises(Exception) as raised:
        sheetapi._key_file(path)
    return raised.value


@pytest.mark.parametrize(("text", "cause"), FILES)
@pytest.mark.parametrize("load", [tpu_load, sheet_load])
def test_each_broken_key_file_is_named_with_its_cause_and_the_fix(short: Path, text: str | None, cause: str,
                                                                  load: object) -> None:
    path = key_file(short, text)
    error = load(path)  # type: ignore[operator]
    assert credentials_cause(error).startswith(cause), (credentials_cause(error), repr(error))
    line = credentials_message("TPU API", "gcp.credentials", str(path), error)
    assert line.startswith(f"TPU API credentials '{path}': {cause}")
    assert line.endswith("; set gcp.credentials to a valid service-account key file")
    assert len(line) < 200 and "\n" not in line and "http" not in line, line


@pytest.mark.parametrize(("error", "cause"), [
    (PermissionError(13, "Permission denied"), "not readable by this account (permission denied)"),
    (IsADirectoryError(21, "Is a directory"), "a folder, not a key file"),
    (ValueError("('Failed to load service account credentials from /k/sa.json', "
                "MalformedError('Service account info was not in the expected format, missing fields token_uri.'))"),
     "an incomplete service-account key (no token_uri)"),
])
def test_errors_of_the_os_and_of_google_auth_read_alike(error: BaseException, cause: str) -> None:
    assert credentials_cause(error) == cause


def test_missing_application_default_credentials_are_one_short_line(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    import google.auth
    from google.auth import exceptions

    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path))  # no gcloud login here
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")  # nor a metadata server
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    with pytest.raises(exceptions.DefaultCredentialsError) as raised:
        google.auth.default()
    assert "https://" in str(raised.value)  # Google's text: a paragraph and a URL
    line = credentials_message("Sheets", "sheet.credentials", "default", raised.value)
    assert line == ("Sheets credentials 'default': no application-default credentials on this machine; "
                    "run `gcloud auth application-default login`, or set sheet.credentials to a key file")
    refused = exceptions.RefreshError("invalid_grant: Invalid JWT Signature.",
                                      {"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
    assert credentials_cause(refused) == "Google refused it (invalid_grant: Invalid JWT Signature.)"


# ---- through the CLI ----------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "cause"), [(None, "no such file"), ("not json {", "not a JSON key file"),
                                             (INCOMPLETE, "an incomplete service-account key")])
def test_sheet_sync_with_a_broken_key_file_says_which_and_why_in_one_line(tmp_path: Path, short: Path,
                                                                         text: str | None, cause: str) -> None:
    api = FakeSheetsApi().start()
    api.add_spreadsheet(KEY, ("jobtpu",))
    try:
        path = key_file(short, text)
        home = make_home(tmp_path, {"v3-a": {"kind": "local", "accelerator": "v3-8"}},
                         sheet={"spreadsheet": KEY, "credentials": str(path), "api_endpoint": api.endpoint})
        done = jobtpu(home, "sheet", "sync", check=False)
        assert done.returncode == 1 and done.stdout == "", done.stdout
        [line] = done.stderr.splitlines()
        assert line == (f"jobtpu: error: sheet: Sheets credentials '{path}': {cause}"
                        + line.split(cause, 1)[1]), line
        assert line.endswith("; set sheet.credentials to a valid service-account key file")
        assert len(line) < 200 and "http" not in line and "Traceback" not in done.stderr
        shown = jobtpu(home, "sheet", "show", check=False)  # a command that raises it: the same one line
        assert shown.returncode == 1 and shown.stderr.splitlines() == [line.replace("error: sheet: ", "error: ")]
        passed = jobtpu(home, "manage")
        assert [x for x in passed.stderr.splitlines() if "credentials" in x] == [line.replace("jobtpu: error: ", "")]
        assert api.requests_made() == []
    finally:
        api.close()


def test_manage_with_a_broken_gcp_key_file_says_which_and_why_in_one_line(tmp_path: Path, short: Path) -> None:
    path = key_file(short, "not json {")
    home = make_home(tmp_path, {"local": {"kind": "local"},
                                "t": {"kind": "tpu", "node": "n", "zone": "z-1", "accelerator": "v3-8"}},
                     gcp={"project": "p", "api_endpoint": "http://127.0.0.1:9", "credentials": str(path)})
    for _ in range(2):  # every pass, one line
        done = jobtpu(home, "manage")
        assert "Traceback" not in done.stderr, done.stderr
        [line] = [x for x in done.stderr.splitlines() if "credentials" in x]
        assert line == (f"jobtpu: TPU API credentials '{path}': not a JSON key file; set gcp.credentials to a valid "
                        "service-account key file; TPU machines wait"), line
        assert len(line) < 200
    detail = {m["name"]: m for m in json.loads(jobtpu(home, "machines", "--json").stdout)["machines"]}["t"]["detail"]
    assert "not a JSON key file" in detail


def test_a_key_file_the_account_cannot_read_is_named_with_the_cause(team: Team, short: Path) -> None:
    alice = team.accounts[0]
    key = key_file(short, INCOMPLETE)
    key.chmod(0o600)  # root's: alice may not read it
    short.chmod(0o755)
    home = team.private_folder(alice, "home")
    (home / "machines.json").write_text(json.dumps({
        "machines": {"t": {"kind": "tpu", "node": "n", "zone": "z-1", "accelerator": "v3-8"}},
        "gcp": {"project": "p", "api_endpoint": "http://127.0.0.1:9", "credentials": str(key)},
        "sheet": {"spreadsheet": KEY, "credentials": str(key), "api_endpoint": "http://127.0.0.1:9"}}))
    os.chown(home / "machines.json", team.uid(alice), team.uid(alice))
    synced = team.run(alice, "--home", str(home), "sheet", "sync", check=False)
    assert synced.returncode == 1 and synced.stderr.splitlines() == [
        f"jobtpu: error: sheet: Sheets credentials '{key}': not readable by this account (permission denied); "
        "set sheet.credentials to a valid service-account key file"], synced.stderr
    passed = team.run(alice, "--home", str(home), "manage")
    assert f"jobtpu: TPU API credentials '{key}': not readable by this account (permission denied); " \
        "set gcp.credentials to a valid service-account key file; TPU machines wait" in passed.stderr.splitlines()


# ---- a key Google no longer accepts, at every call that meets it -------------------------------------
# A key's path (in `short`: /tmp/kXXXXXXXX/keys/sa.json, as long as /home/alice/keys/sa.json): the
# line names it whole and stays under 200 characters.
TEAM_KEY = "keys/sa.json"


def deleted_key(folder: Path, key_id: str, token_uri: str) -> Path:
    """A service-account key file, as the console downloads it, whose key was deleted since."""
    from tests.test_tpu_gcloud import write_key_file

    path = folder / TEAM_KEY
    path.parent.mkdir(parents=True, exist_ok=True)
    write_key_file(path, key_id)
    path.write_text(json.dumps({**json.loads(path.read_text()), "token_uri": token_uri}))
    return path


@pytest.fixture
def google() -> Iterator[Any]:
    """The fake TPU API, which also serves Google's token endpoint (tests/fake_tpu.py)."""
    from tests.fake_tpu import FakeTpuApi

    with FakeTpuApi() as api:
        yield api


def test_a_revoked_key_the_tpu_api_answers_401_is_one_short_line_in_a_pass_and_a_command(
        tmp_path: Path, short: Path, google: Any) -> None:
    """Google answers the deleted key's self-signed token with its 401 paragraph (tests/fake_tpu.py)."""
    key = deleted_key(short, "deleted-key-9", f"{google.url}/token")
    google.revoked_keys.add("deleted-key-9")
    home = make_home(tmp_path, {"local": {"kind": "local"},
                                "t": {"kind": "tpu", "node": "n", "zone": "z-1", "accelerator": "v3-8"}},
                     gcp={"project": "p", "api_endpoint": google.url, "credentials": str(key)})
    said = (f"TPU API credentials '{key}': Google refused it (invalid authentication credentials); "
            "set gcp.credentials to a valid service-account key file")
    passed = jobtpu(home, "manage")
    assert [x for x in passed.stderr.splitlines() if "credentials" in x] == [f"jobtpu: {said}; TPU machines wait"]
    asked = jobtpu(home, "tpu", "status", "t", check=False)
    assert asked.returncode == 1 and asked.stderr.splitlines() == [f"jobtpu: error: {said}"], asked.stderr
    for line in (*passed.stderr.splitlines(), *asked.stderr.splitlines()):
        assert len(line) < 200 and "http" not in line, line


def test_a_deleted_key_whose_token_google_refuses_is_one_short_line_for_the_sheet(
        tmp_path: Path, short: Path, google: Any) -> None:
    """The sheet's client trades the key for a token first: the token endpoint answers invalid_grant."""
    api = FakeSheetsApi().start()
    api.add_spreadsheet(KEY, ("jobtpu",))
    try:
        key = deleted_key(short, "deleted-key-8", f"{google.url}/token")
        home = make_home(tmp_path, {"v3-a": {"kind": "local", "accelerator": "v3-8"}},
                         sheet={"spreadsheet": KEY, "credentials": str(key), "api_endpoint": api.endpoint})
        done = jobtpu(home, "sheet", "sync", check=False)
        assert done.returncode == 1 and done.stderr.splitlines() == [
            f"jobtpu: error: sheet: Sheets credentials '{key}': Google refused it (invalid_grant: Invalid JWT "
            "Signature.); set sheet.credentials to a valid service-account key file"], done.stderr
        assert len(done.stderr.splitlines()[0]) < 200 and api.requests_made() == []
    finally:
        api.close()


def test_a_sheets_401_is_the_same_short_line_naming_the_credentials() -> None:
    """A 401 the Sheets API answers after a token was granted (the client refreshes once and asks
    again): Google's paragraph becomes the credentials line."""
    from jobtpu.schema.sheet_config import SheetConfig
    from jobtpu.sheet.api import SheetApi
    from tests.fake_tpu import UNAUTHENTICATED_MESSAGE

    api = SheetApi(SheetConfig(spreadsheet=KEY, credentials="anonymous"))
    error = api._refused(401, {"code": 401, "message": UNAUTHENTICATED_MESSAGE, "status": "UNAUTHENTICATED"})
    assert error.message == ("Sheets credentials 'anonymous': Google refused it (invalid "
                             "authentication credentials); set sheet.credentials to a valid service-account key file")
    assert error.hint is None


@pytest.mark.parametrize(("message", "said"), [
    ("disabled", ": the Cloud TPU API is not enabled in project p (Google answered 403)"),
    ("permission", ": its credentials lack the permission 'tpu.nodes.list' in project p (Google answered 403)"),
])
def test_a_403_of_the_tpu_api_is_one_short_line_with_what_to_do(tmp_path: Path, google: Any, message: str,
                                                                  said: str) -> None:
    """Google's 403 paragraphs (an API not enabled, a role without the permission) are one line under
    200 characters, in a pass and in a command, with what to do."""
    from tests.fake_tpu import PERMISSION_MESSAGE, SERVICE_DISABLED_MESSAGE

    text = SERVICE_DISABLED_MESSAGE if message == "disabled" else PERMISSION_MESSAGE.format(project="p", zone="z-1")
    google.inject_error("GET", "/nodes", "PERMISSION_DENIED", n=100, message=text)
    home = make_home(tmp_path, {"local": {"kind": "local"},
                                "t": {"kind": "tpu", "node": "n", "zone": "z-1", "accelerator": "v3-8"}},
                     gcp={"project": "p", "api_endpoint": google.url, "credentials": "anonymous"})
    passed = jobtpu(home, "manage")
    asked = jobtpu(home, "tpu", "status", "t", check=False)
    assert asked.returncode == 1, asked
    lines = [x for x in (*passed.stderr.splitlines(), *asked.stderr.splitlines()) if "TPU API" in x]
    assert len(lines) >= 2 and all(said in x for x in lines), lines
    hints = [x for x in asked.stderr.splitlines() if x.startswith("hint:")]
    assert hints and ("gcloud services enable tpu.googleapis.com" in hints[0] if message == "disabled"
                      else "roles/tpu.admin" in hints[0]), asked.stderr
    for line in (*passed.stderr.splitlines(), *asked.stderr.splitlines()):
        assert len(line) < 200 and "http" not in line, line


def test_a_403_without_a_known_cause_is_googles_first_sentence_cut() -> None:
    from jobtpu.tpu.api import forbidden

    said, hint = forbidden("The caller does not have permission. " + "x" * 500, "p")
    assert said == "The caller does not have permission. (Google answered 403)" and "roles" in hint
    said, _ = forbidden("y" * 300, "p")
    assert len(said) < 150 and said.endswith("… (Google answered 403)")
