"""The published JSON Schemas (docs/reference/python.md §11.3): the files in the package are what
the types make, and every real output validates against its schema: `status --json`, `machines
--json`, `report --json`, the lines of events.jsonl, a webhook's body and a command's stdin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from jobtpu.schema import published
from tests.helpers import allow_private_webhooks, make_home, manage_until, run, submit, wait_for, write_tree
from tests.test_notify import Hook


@pytest.mark.fast
@pytest.mark.parametrize("stem", sorted(published.documents()))
def test_the_packaged_schema_is_the_one_its_type_makes(stem: str) -> None:
    packaged = published.file_of(stem)
    assert packaged.read_text(encoding="utf-8") == published.rendered(stem, published.documents()[stem]), \
        "run `python -m jobtpu.schema.published` and commit jobtpu/schemas/"
    assert published.load(stem)["x-jobtpu-version"] == published.VERSION
    assert f".v{published.VERSION}." in packaged.name


def _valid(stem: str, document: Any) -> None:
    schema = published.load(stem)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(document, schema, cls=jsonschema.Draft202012Validator)


def test_every_real_output_validates_against_its_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = Hook()
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.delenv("HTTP_PROXY", raising=False)
    try:
        stdin = tmp_path / "command-stdin.jsonl"
        home = make_home(tmp_path, notify=[{"webhook": hook.url, "events": ["finished", "failed"]},
                                           {"command": f"cat >> {stdin}", "events": ["finished", "failed"]}])
        allow_private_webhooks(home)
        src = write_tree(tmp_path / "src", {"a.py": ""})
        ok = submit(home, src, "echo JOBTPU_PROGRESS step=3 checkpoint=2; echo done", "--tag", "t")
        bad = submit(home, src, "exit 3", "--name", "broken")
        manage_until(home, [ok, bad], {"finished", "failed"})
        wait_for(lambda: len(hook.bodies) >= 2 and stdin.exists() and len(stdin.read_text().splitlines()) >= 2,
                 what="both notifications")

        _valid("status", json.loads(run(home, "status", "--json", "--all-users", in_process=True)[0]))
        _valid("machines", json.loads(run(home, "machines", "--json", in_process=True)[0]))
        report = json.loads(run(home, "report", "--json", str(ok), str(bad), in_process=True)[0])
        assert [r["job"] for r in report["reports"]] == [ok, bad]
        _valid("report", report)
        lines = (home / "events.jsonl").read_text().splitlines()
        assert {json.loads(line)["kind"] for line in lines} >= {"job_launched", "job_ended"}
        for line in lines:
            _valid("event", json.loads(line))
        for body in hook.bodies:
            _valid("webhook", body)
        for line in stdin.read_text().splitlines():
            _valid("command-notification", json.loads(line))
    finally:
        hook.close()

    # The check has teeth: a key no type names, or a value of the wrong type, fails.
    machines = json.loads(run(home, "machines", "--json", in_process=True)[0])
    machines["machines"][0]["colour"] = "red"
    with pytest.raises(jsonschema.ValidationError):
        _valid("machines", machines)
    with pytest.raises(jsonschema.ValidationError):
        _valid("event", {**json.loads(lines[0]), "job": "seven"})


@pytest.mark.fast
def test_report_json_goes_with_neither_html_nor_usage(tmp_path: Path) -> None:
    from tests.helpers import cli

    home = make_home(tmp_path)
    for extra in (["--html", str(tmp_path / "r.html")], ["--usage"]):
        code, out, err = cli(home, "report", "--json", *extra)
        assert (code, out) == (1, "")
        assert err.startswith("jobtpu: error: --json goes without --html and --usage\nhint: ")
    assert not (tmp_path / "r.html").exists()
    code, out, err = cli(home, "report", "--json")
    assert (code, json.loads(out)) == (0, {"reports": []})
