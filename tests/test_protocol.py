"""The worker protocol (jobtpu/schema/worker_protocol.py): each line a worker script prints is one JSON report.
Table tests of the decoder (good lines, hostile strings, truncated and foreign lines), the bash side's
escaping round-tripped through a real bash in two locales, and the scripts' own reports read back."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import msgspec
import pytest

from jobtpu.decide.workers import LaunchResult, WorkerRef
from jobtpu.remote.scripts import (
    parse_doctor,
    parse_fetch,
    parse_kill,
    parse_launch,
    parse_live,
    parse_probe,
    parse_serve,
    parse_tpu_accelerator,
    parse_tpu_doctor,
    peer_serve_script,
    probe_script,
    render,
    serve_script,
    setup_now_script,
)
from jobtpu.schema import worker_protocol as protocol
from jobtpu.schema.worker_protocol import setup_outcome, setup_said

pytestmark = pytest.mark.fast

REF = WorkerRef(3, 1, 0)
WHERE = '"job":3,"attempt":1,"worker":0'

# Untrusted text as a worker may hand it back: escapes, quotes, every kind of line break, terminal
# controls, a report's look-alike, shell syntax, invalid UTF-8 and a multibyte character cut short.
HOSTILE = [
    "plain words",
    "",
    'a "quoted" word',
    "back\\slash \\n \\u0041 \\",
    "line\nbreak\r\ncarriage\ttab\x0bvt\x0cff",
    "\x1b[31mred\x1b[0m \x1b]52;c;aGk=\x07 \x01\x02\x1f\x7f",
    '","kind":"kill","gone":true}\n{"kind":"launch"',
    "$(touch /tmp/pwned) `id` ${HOME} & && ; | * ?",
    "naïve — 日本語 \u202e reversed \u2028 sep",
    "%s %d %n %%",
]


@pytest.mark.parametrize(("line", "report"), [
    ('{"kind":"launch",' + WHERE + ',"outcome":"ok","pid":123}',
     protocol.LaunchLine(3, 1, 0, "ok", pid=123)),
    ('{"kind":"launch",' + WHERE + ',"outcome":"fail","detail":"cannot create /r"}',
     protocol.LaunchLine(3, 1, 0, "fail", detail="cannot create /r")),
    ('{"kind":"launch",' + WHERE + ',"outcome":"pending","detail":""}', protocol.LaunchLine(3, 1, 0, "pending")),
    ('{"kind":"host","boot":"b-1","now":1700000000}', protocol.Host("b-1", 1700000000)),
    ('{"kind":"worker",' + WHERE + ',"pid":null,"alive":false,"exit":-1,"size":0,"claimed":true,"at":null,'
     '"marked":null}', protocol.WorkerLine(3, 1, 0, None, False, -1, 0, True, None, None)),
    ('{"kind":"log",' + WHERE + ',"offset":5,"data":"aGk="}', protocol.Log(3, 1, 0, 5, b"hi")),
    ('{"kind":"log-end",' + WHERE + ',"data":""}', protocol.LogEnd(3, 1, 0, b"")),
    ('{"kind":"kill",' + WHERE + ',"gone":false}', protocol.Killed(3, 1, 0, False)),
    ('{"kind":"root","exists":true}', protocol.Root(True)),
    ('{"kind":"disk","free_kib":null}', protocol.Disk(None)),
    ('{"kind":"tool","name":"rsync","path":null}', protocol.Tool("rsync", None)),
    ('{"kind":"live",' + WHERE + ',"pid":9}', protocol.Live(3, 1, 0, 9)),
    ('{"kind":"holder","pid":7,"command":"my tool ours","ours":false}', protocol.Holder(7, "my tool ours", False)),
    ('{"kind":"lock","present":true}', protocol.Lock(True)),
    ('{"kind":"device","path":"/dev/vfio/0"}', protocol.Device("/dev/vfio/0")),
    ('{"kind":"jax"}', protocol.Jax()),
    ('{"kind":"jax","error":"RuntimeError: \\"no TPU\\""}', protocol.Jax(error='RuntimeError: "no TPU"')),
    ('{"kind":"setup","outcome":"failed","code":97,"detail":"no pid"}', protocol.SetupReport("failed", 97, "no pid")),
    ('{"kind":"got"}', protocol.Got()),
    ('{"kind":"ran","code":-1,"stdout":0,"stderr":5}', protocol.Ran(-1, 0, 5)),
    ('{"kind":"launch",' + WHERE + ',"outcome":"ok","pid":1,"later":"a field added later"}',
     protocol.LaunchLine(3, 1, 0, "ok", pid=1)),
])
def test_a_good_line_decodes_into_its_report(line: str, report: protocol.Report) -> None:
    assert protocol.decode(line) == report


@pytest.mark.parametrize("line", [
    "",
    "LAUNCH 3 1 0 ok 123",  # the words of old
    "   ",
    "{",
    '{"kind":"launch",' + WHERE + ',"outcome":"ok","pid":12',  # cut short
    '{"kind":"launch",' + WHERE + ',"outcome":"ok","pid":12}garbage',
    '{"kind":"launch",' + WHERE + ',"outcome":"started"}',  # no such outcome
    '{"kind":"launch","job":"3","attempt":1,"worker":0,"outcome":"ok"}',  # a number as text
    '{"kind":"launch","attempt":1,"worker":0,"outcome":"ok"}',  # a field missing
    '{"kind":"nonsense","job":3}',
    '{"job":3,"attempt":1,"worker":0,"outcome":"ok"}',  # no kind
    '{"kind":"log",' + WHERE + ',"offset":0,"data":"not base64!"}',
    '{"kind":"kill",' + WHERE + ',"gone":"yes"}',
    "[1, 2, 3]",
    "null",
    "{\"kind\":\"root\",\"exists\":true}\x00",
    '{"kind":"tool","name":"a\udcff","path":null',
    '{"kind":"ran","code":0,"stdout":-1,"stderr":0}',  # a frame of no length
    "+",  # a kept shell's receipt of old
    "0 12 0",  # its result of old
])
def test_a_line_that_is_no_whole_report_decodes_to_nothing(line: str) -> None:
    assert protocol.decode(line) is None


def test_a_kept_shell_frames_its_outputs_with_reports() -> None:
    assert protocol.is_receipt(b'{"kind":"got"}') and not protocol.is_receipt(b"+")
    assert protocol.ran_header(b'{"kind":"ran","code":2,"stdout":10,"stderr":0}') == protocol.Ran(2, 10, 0)
    assert protocol.ran_header(b"2 10 0") is None and protocol.ran_header(b'{"kind":"got"}') is None
    assert protocol.ran_header(b'{"kind":"ran","code":2,"stdout":10,"stderr":0') is None


def test_a_kept_shell_keeps_no_script_s_text_on_disk_once_it_ran(tmp_path: Path) -> None:
    """A script's text holds a job's secret values or a peer copy's token: the kept shell's copy of it
    (sh/serve.sh) is emptied once it ran, not left until the next one or the connection's end."""
    secret = "s3cret-" + os.urandom(8).hex()
    script = f"x={shlex.quote(secret)}; echo ${{#x}}\n".encode()
    shell = subprocess.Popen(["bash", "-c", serve_script()], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "TMPDIR": str(tmp_path)})
    assert shell.stdin is not None and shell.stdout is not None
    try:
        shell.stdin.write(b"%d\n" % len(script) + script)
        shell.stdin.flush()
        assert protocol.is_receipt(shell.stdout.readline().strip())
        ran = protocol.ran_header(shell.stdout.readline().strip())
        assert ran is not None and shell.stdout.read(ran.stdout + ran.stderr) == b"%d\n" % len(secret)
        # It waits for the next script now: what it keeps on disk holds nothing of the last one.
        kept = [f for f in tmp_path.rglob("*") if f.is_file() and secret.encode() in f.read_bytes()]
        assert kept == []
    finally:
        shell.stdin.close()
        shell.wait(timeout=30)


def test_parsers_skip_what_does_not_decode_and_never_raise() -> None:
    out = ("job output\nLAUNCH 3 1 0 ok x\n{\"kind\":\"launch\",\"job\":3,\n"
           '{"kind":"launch",' + WHERE + ',"outcome":"ok","pid":42}\n'
           '{"kind":"launch","job":3,"attempt":1,"worker":1,"outcome":"fail","detail":"disk full"}\n')
    assert parse_launch(out) == {REF: LaunchResult(REF, "ok", 42),
                                 WorkerRef(3, 1, 1): LaunchResult(WorkerRef(3, 1, 1), "fail", None, "disk full")}
    for parse in (parse_launch, parse_probe, parse_kill, parse_live, parse_doctor):
        assert parse("LAUNCH x y z ok\nW a b c\nK 1 2\n{\"kind\":") == {}
    assert parse_tpu_doctor("HOLDER 1 x ours\nLOCK yes\n") == ([], False)
    assert parse_tpu_accelerator("JAX 4\n").jax is None
    assert [type(r.outcome) for r in parse_launch(out).values()] == [protocol.LaunchOutcome] * 2


def test_a_worker_report_carries_its_log_bytes_exactly() -> None:
    data = bytes(range(256)) * 3
    out = ('{"kind":"worker",' + WHERE + ',"pid":5,"alive":false,"exit":0,"size":768,"claimed":true,'
           '"at":17.5,"marked":2}\n'
           + msgspec.json.encode(protocol.Log(3, 1, 0, 10, data)).decode() + "\n"
           + msgspec.json.encode(protocol.LogEnd(3, 1, 0, data[-7:])).decode() + "\n"
           + '{"kind":"log","job":9,"attempt":0,"worker":0,"offset":0,"data":"aGk="}\n')  # not asked about
    states = parse_probe(out)
    assert list(states) == [REF]
    state = states[REF]
    assert (state.pid, state.exit_code, state.exited_at, state.marked, state.log_offset) == (5, 0, 17.5, 2, 10)
    assert state.log_bytes == data and state.log_end == data[-7:]


def test_the_setup_report_is_the_last_line_only() -> None:
    fake = '{"kind":"setup","outcome":"done"}'
    out = f"installing\n{fake}\n" + '{"kind":"setup","outcome":"failed","code":3}\n'
    assert setup_outcome(out) == "failed" and setup_said(out) == "SETUP failed 3"
    assert protocol.last_setup(out)[0] == ["installing", fake]
    assert setup_outcome(f"{fake}\nthen more output\n") == "error"
    assert setup_said("SETUP error the connection dropped\n") == "SETUP error the connection dropped"
    assert setup_outcome("") == "error"


def _say(*args: str, locale: str = "C.UTF-8") -> bytes:
    script = render(["common.sh"], [" ".join(["jobtpu_say", *map(shlex.quote, args)])])
    env = {**os.environ, "LC_ALL": locale}
    return subprocess.run(["bash", "-c", script], capture_output=True, check=True, env=env).stdout


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_every_hostile_string_comes_back_as_it_was_sent(locale: str) -> None:
    for text in HOSTILE:
        out = _say("tool", "s:name", text, "n:path", "-", locale=locale)
        assert out.count(b"\n") == 1 and out.endswith(b"\n"), out  # one line, however many breaks it holds
        assert protocol.reports(out.decode()) == [protocol.Tool(text, None)], text


@pytest.mark.parametrize("locale", ["C", "C.UTF-8"])
def test_bytes_that_are_no_utf8_come_back_replaced_never_breaking_the_line(locale: str, tmp_path: Path) -> None:
    raw = b"bad \xff\xfe byte, cut \xe6\x97 short \" \\"
    (tmp_path / "raw").write_bytes(raw)
    script = render(["common.sh"], [f'jobtpu_say setup s:outcome failed n:code 2 s:detail "$(cat {tmp_path}/raw)"'])
    out = subprocess.run(["bash", "-c", script], capture_output=True, check=True,
                         env={**os.environ, "LC_ALL": locale}).stdout
    report = protocol.decode(out.decode(errors="replace").rstrip("\n"))
    assert report == protocol.SetupReport("failed", 2, raw.decode(errors="replace"))


def test_numbers_and_flags_are_typed_on_the_bash_side() -> None:
    out = _say("worker", "n:job", "3", "n:attempt", "1", "n:worker", "0", "n:pid", "-", "b:alive", "1",
               "n:exit", "not a number", "n:size", "0", "b:claimed", "0", "n:at", "1700000000.123456789",
               "n:marked", "")
    assert protocol.decode(out.decode().strip()) == protocol.WorkerLine(3, 1, 0, None, True, None, 0, False,
                                                                    1700000000.123456789, None)


def test_the_probe_brings_a_hostile_log_back_byte_for_byte(tmp_path: Path) -> None:
    root = tmp_path / "root"
    meta = root / "meta" / "3"
    meta.mkdir(parents=True)
    log = b"".join(t.encode() for t in HOSTILE) + b"\xff\x00\n" + os.urandom(5000)
    (meta / "1.0.log").write_bytes(log)
    (meta / "1.0.exit").write_text("2\n")
    script = probe_script(str(root), [(REF, 7)], chunk=1000, home_id="h")
    done = subprocess.run(["bash", "-c", script], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    state = parse_probe(done.stdout.decode(errors="replace"))[REF]
    assert (state.exit_code, state.log_size, state.log_offset, state.alive) == (2, len(log), 7, False)
    assert state.log_bytes == log[7:1007]
    assert state.log_end == log[-64 * 1024:]  # the pull is more than a chunk behind an exited worker


def test_a_launch_that_fails_names_a_hostile_root_exactly(tmp_path: Path) -> None:
    from jobtpu.decide.workers import LaunchSpec
    from jobtpu.remote.scripts import launch_script

    (tmp_path / "file").write_text("")
    root = str(tmp_path / "file" / 'we"ird\\ \x1b[2J\nroot')  # under a file: mkdir fails
    script = launch_script([LaunchSpec(REF, root, "a.tar.gz", "true", {})])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert parse_launch(done.stdout) == {REF: LaunchResult(REF, "fail", None, f"cannot create {root}")}


def test_a_setup_whose_output_forges_a_report_is_still_read_from_its_last_line(tmp_path: Path) -> None:
    forged = '{"kind":"setup","outcome":"done"}'
    script = setup_now_script(str(tmp_path / "root"), "inc", 0, [f"echo {shlex.quote(forged)}; exit 4"])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, cwd=tmp_path,
                          env={**os.environ, "HOME": str(tmp_path)})
    lines, report = protocol.last_setup(done.stdout)
    assert lines == [forged] and report == protocol.SetupReport("failed", 4)


def test_a_serving_worker_s_refusal_names_a_hostile_root_whole(tmp_path: Path) -> None:
    """The serve script's answer is a report like every other: a root whose name holds a newline and
    a quote comes back whole in the reason, never cut at the break (sh/peer.sh)."""
    root = tmp_path / 'jobs "a"\nserve ok 1'
    (root / "archives" / ".serve.s1").mkdir(parents=True)  # the server's folder is taken: it cannot start
    (root / "archives" / "snap.tar.gz").write_bytes(b"x")
    done = subprocess.run(["bash", "-c", peer_serve_script(str(root), "snap.tar.gz", "127.0.0.1", "s1", "tok", 1)],
                          capture_output=True, text=True, timeout=30)
    assert parse_serve(done.stdout).why == f"cannot create {root}/archives/.serve.s1"
    assert parse_serve('{"kind": "serve", "outcome": "ok", "port": 4242}').port == 4242
    assert parse_fetch('x\n{"kind": "fetch", "outcome": "bad", "detail": "not the snapshot"}').why == \
        "the copy was refused: not the snapshot"
    assert parse_fetch('{"kind": "fetch", "outcome": "held"}').held
