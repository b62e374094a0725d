"""Cold start: read-only commands (--help, status, tail) never load the SSH or Google Cloud stacks
(docs/design.md §5: `transport` and `tpu` are the only modules that touch them; status runs from watch and scripts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobtpu.home.layout import Home
from jobtpu.home.store import Store
from jobtpu.schema.state import Attempt, Job, Status

# Needs no root, no sshd and no accounts: part of `python3 -m pytest -m fast`.
pytestmark = pytest.mark.fast

HEAVY = ("paramiko", "google.cloud", "fabric")

# Runs the real main() and records every module loaded by the time the command is done.
RUNNER = """
import json, sys
from jobtpu.cli import main

record, argv = sys.argv[1], sys.argv[2:]
try:
    code = main(argv)
except SystemExit as e:
    code = e.code
finally:
    with open(record, "w") as f:
        json.dump(sorted(sys.modules), f)
sys.exit(code)
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose fleet has every kind of machine, with a finished job that has a log."""
    root = tmp_path_factory.mktemp("imports")
    (root / "machines.json").write_text(json.dumps({
        "gcp": {"project": "p", "api_endpoint": "http://127.0.0.1:9", "credentials": "anonymous"},
        "machines": {"local": {"kind": "local"},
                     "box": {"kind": "ssh", "hosts": ["127.0.0.1:1"], "resources": {"gpu": 2}},
                     "v3": {"kind": "tpu", "node": "n", "zone": "z", "accelerator": "v3-8", "preemptible": True}}}))
    job = Job(id=1, user="tester", cmd="echo hi", archive="a.tar.gz", created=1.0, machine="box",
              status=Status.FINISHED, exit_code=0, attempts=[Attempt(0, "box", "finished", 0, 1.0, 2.0)])
    with Store(Home(root)).transaction() as state:
        state.jobs.append(job)
        state.next_id = 2
    log = Home(root).log_file(1, 0, 0)
    log.parent.mkdir(parents=True)
    log.write_text("hi\n")
    return root


@pytest.mark.parametrize("args", [
    ["--help"], ["status", "--help"], ["tail", "--help"],
    ["status"], ["status", "--all-users"], ["status", "--json"], ["status", "--json", "1"],
    ["tail", "1"], ["tail", "1", "-n", "5", "--attempt", "0"], ["tail", "-f", "1"], ["tail", "999"],
    ["status", "--all"], ["rules"], ["rules", "--json"],
    ["config", "get"], ["dir", "ls"], ["alias", "ls"], ["tldr"], ["exec", "--help"],
])
def test_read_only_commands_do_not_load_ssh_or_cloud_modules(home: Path, tmp_path: Path, args: list[str]) -> None:
    record = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", RUNNER, str(record), "--home", str(home), *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "JOBTPU_USER": "tester", "COLUMNS": "200"})
    assert done.returncode == (1 if "999" in args else 0), done.stderr
    assert "Traceback" not in done.stderr
    if args[0] == "tail" and "--help" not in args and "999" not in args:
        assert done.stdout == "hi\n"
    modules = json.loads(record.read_text())
    assert "jobtpu.cli" in modules  # the record is real
    heavy = [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert heavy == [], f"`jobtpu {' '.join(args)}` loaded {heavy[:5]}"


@pytest.mark.parametrize("args", [["--help"]])
def test_help_parses_nothing(home: Path, tmp_path: Path, args: list[str]) -> None:
    """`--help` loads no JSON library and no dataclasses (which orjson's import alone pulls in)."""
    record = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", RUNNER, str(record), "--home", str(home), *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "JOBTPU_USER": "tester"})
    assert done.returncode == 0, done.stderr
    if args == ["status", "--json"]:
        assert [j["id"] for j in json.loads(done.stdout)["jobs"]] == [1]
    modules = json.loads(record.read_text())
    assert not {"orjson", "dataclasses"} & set(modules), sorted({"orjson", "dataclasses"} & set(modules))


def test_the_check_would_see_a_heavy_import(home: Path, tmp_path: Path) -> None:
    """The runner is not blind: a command that does reach for SSH shows up in the record."""
    record = tmp_path / "modules.json"
    runner = RUNNER.replace("from jobtpu.cli import main", "from jobtpu.cli import main\nimport paramiko")
    subprocess.run([sys.executable, "-c", runner, str(record), "--home", str(home), "status"],
                   capture_output=True, text=True, timeout=60, env={**os.environ, "JOBTPU_USER": "tester"})
    assert "paramiko" in json.loads(record.read_text())


WEB = ("starlette", "uvicorn", "jinja2", "anyio", "jobtpu.web.app")


@pytest.mark.parametrize("args", [["--help"], ["status"], ["status", "--all-users", "--json"], ["manage"],
                                  ["metrics"], ["serve", "--help"]])
def test_status_manage_and_help_load_none_of_the_web_stack(tmp_path: Path, args: list[str]) -> None:
    """`jobtpu serve` is an optional extra (docs/reference/commands.md §2.29): nothing else loads it."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local"}}}))
    record = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", RUNNER, str(record), "--home", str(home), *args],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "JOBTPU_USER": "tester"})
    assert done.returncode == 0, done.stderr
    modules = json.loads(record.read_text())
    web = [m for m in modules if any(m == w or m.startswith(w + ".") for w in WEB)]
    assert web == [], f"`jobtpu {' '.join(args)}` loaded {web[:5]}"


def test_submit_loads_msgspec_without_typing_extensions(tmp_path: Path) -> None:
    """docs/design.md §9.2: msgspec comes through schema/msgspec_lib.py, which keeps typing_extensions
    (and inspect, ast, dis behind it: 8 ms) out of a submit; msgspec then uses typing's own functions.
    §9.1: a resubmit of an unchanged folder names its archive from the hash cache, without hashlib."""
    home, src = tmp_path / "home", tmp_path / "src"
    home.mkdir()
    src.mkdir()
    (src / "train.py").write_text("print(1)\n")
    os.utime(src / "train.py", ns=(10**18, 10**18))  # not racy: the hash cache remembers it
    (home / "machines.json").write_text(json.dumps({"machines": {"local": {"kind": "local"}}}))
    runner = RUNNER.replace("sys.exit(code)", "import msgspec._utils as u, typing\n"
                            "assert u._get_type_hints is typing.get_type_hints and u.NotRequired is typing.NotRequired\n"
                            "sys.exit(code)")
    loaded = []
    for n in range(2):
        record = tmp_path / f"modules{n}.json"
        done = subprocess.run([sys.executable, "-c", runner, str(record), "--home", str(home), "submit", "--dir",
                               str(src), "--cmd", "true"], capture_output=True, text=True, timeout=60,
                              env={**os.environ, "JOBTPU_USER": "tester"})
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == str(n + 1)
        loaded.append(set(json.loads(record.read_text())))
    assert {"msgspec", "jobtpu.commands.submit", "hashlib"} <= loaded[0]  # the record is real
    assert "typing_extensions" not in loaded[0] | loaded[1]
    assert "hashlib" not in loaded[1]
    # PyNaCl seals a shared home's requests (docs/design.md §7): a private home's submit never loads it.
    assert [m for m in loaded[0] | loaded[1] if m == "nacl" or m.startswith("nacl.")] == []
    # Nor the runner's lease (a submit holds none), a gang's planning (one slice), or socket.
    assert {"jobtpu.home.lease", "jobtpu.home.lease_rules", "jobtpu.decide.gang", "socket"} & (loaded[0] | loaded[1]) == set()


@pytest.mark.parametrize("program", [
    # a process that already holds typing_extensions (the TPU client imports it): msgspec's usual import
    "import typing_extensions, jobtpu.schema.msgspec_lib, msgspec._utils as u\n"
    "assert u._get_type_hints is typing_extensions.get_type_hints\n"
    "import sys; sys.modules.pop('typing_extensions')\n"
    "import typing_extensions as again; assert again.get_type_hints\n",
    # another thread might import typing_extensions while the name is marked absent: not hidden then
    "import threading; go = threading.Event(); t = threading.Thread(target=go.wait); t.start()\n"
    "import jobtpu.schema.msgspec_lib, msgspec._utils as u, typing_extensions\n"
    "go.set(); t.join()\n"
    "assert u._get_type_hints is typing_extensions.get_type_hints\n",
    # hidden while msgspec loads, then let go: a later import finds the real module
    "import jobtpu.schema.msgspec_lib, sys\n"
    "assert 'typing_extensions' not in sys.modules\n"
    "import typing_extensions; assert typing_extensions.get_type_hints\n",
], ids=["loaded-first", "another-thread", "after"])
def test_the_loader_hides_typing_extensions_only_while_msgspec_loads_alone(program: str) -> None:
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
