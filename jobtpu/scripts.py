"""Every shell text jobtpu runs on a machine, built by pure functions, and the parsers of their output.

Nothing else builds shell text: every value a user typed goes through shlex.quote here.
Remote layout under a machine's root R (workers of one machine may share it, e.g. over NFS, so
every per-worker file is named by attempt and worker index):
    R/archives/<sha>.tar.gz      code snapshots, content-addressed, copied once per machine
    R/jobs/<id>/                 the job's folder: its unpacked snapshot, where it runs
    R/meta/<id>/<a>.reset/       made when attempt a (a rerun) replaced the folder an earlier one left
    R/meta/<id>/<a>.<w>.pid      "pid starttime" of worker w's process-group leader, attempt a
    R/meta/<id>/<a>.<w>.exit     its exit code, written when the command returns
    R/meta/<id>/<a>.<w>.log      its stdout and stderr
    R/meta/<id>/<a>.<w>.claim/   made (atomically) before the start, so a launch never runs twice
Every process of a job carries JOBTPU_MARK=<home id>.<id>.<a>.<w> in its environment (the wrapper
starts with it, children inherit it), so a job's processes are found through /proc even after they
left its process group (setsid, double fork) or when its pid file is missing.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import unpack
from .unpack import BAD_ARCHIVE_EXIT

# Every script is read whole before it runs: a command inside that reads stdin cannot eat the script.
RUN_SCRIPT = """bash -c 'eval "$(cat)"'"""
LOG_CHUNK = 1 << 20  # bytes of new log pulled per worker per pass through the probe
TAIL_BYTES = 64 * 1024  # the end of a failed worker's log that its failure is classified from
# A claim with no pid after this long means the start never happened (its pass died). Longer than a
# pass waits for a launch script (120 s), so a slow unpack is never taken for a dead one.
CLAIM_STALE_MINUTES = 3
# How long (0.1 s steps) a worker waits for another worker sharing its root to replace a rerun's folder,
# before it reports `pending` and tries again next pass.
RESET_WAIT_STEPS = 200


@dataclass(frozen=True)
class WorkerRef:
    """One worker of one attempt of one job."""

    job: int
    attempt: int
    worker: int

    @property
    def stem(self) -> str:
        return f"{self.job} {self.attempt} {self.worker}"


@dataclass(frozen=True)
class LaunchSpec:
    ref: WorkerRef
    root: str
    archive: str
    command: str  # the job's full command, run by bash -c
    env: dict[str, str]
    tpu_cleanup: bool = False  # clear stale TPU device holders and the libtpu lock file first
    fresh: bool = False  # start from the snapshot: replace a folder an earlier attempt left (rerun)
    home_id: str = ""  # the home's stable id, part of the marker every process of the job carries
    literal: frozenset[str] = frozenset()  # env names whose values are never expanded (secrets)

    @property
    def mark(self) -> str:
        return marker(self.home_id, self.ref)


MARK_VAR = "JOBTPU_MARK"


def marker(home_id: str, ref: WorkerRef) -> str:
    """The value of JOBTPU_MARK in every process of this worker of this job of this home."""
    return f"{home_id}.{ref.job}.{ref.attempt}.{ref.worker}"


def q(value: str) -> str:
    return shlex.quote(value)


def _root(root: str) -> str:
    # A relative root is relative to the login folder, which is where every script starts.
    return q(root)


# ---- launch ---------------------------------------------------------------------------------------

def env_file(env: dict[str, str], literal: Iterable[str] = ()) -> str:
    """The job's environment as bash array appends, sourced by the wrapper (which exports nothing
    itself) and applied only in the process that runs the command. Values (secrets among them) never
    appear on a command line that `ps` shows. Mode `x`: $NAME and ${NAME} are expanded at job start
    (see EXPAND); mode `=`: the value is taken as it is."""
    fixed = set(literal)
    return "".join(f"JOBTPU_w_n+=({q(name)}); JOBTPU_w_m+=({'=' if name in fixed else 'x'}); JOBTPU_w_v+=({q(value)})\n"
                   for name, value in env.items())


# Run by a detached process-group leader: its pid and /proc start time into "$1.pid", atomically, so
# that LIVE_PID can tell it from a later process that reuses the pid. Fails unless the record reads
# back whole: a full disk or an unwritable folder must stop the start, not leave a job nobody can see.
RECORD_PID = ('read -r -a JOBTPU_w_s < /proc/$$/stat && echo "$$ ${JOBTPU_w_s[21]}" > "$1.pid.tmp"'
              ' && mv -f "$1.pid.tmp" "$1.pid" && read -r JOBTPU_w_p JOBTPU_w_t < "$1.pid"'
              ' && [ "$JOBTPU_w_p $JOBTPU_w_t" = "$$ ${JOBTPU_w_s[21]}" ]')
NO_PID_RECORD = 97  # the wrapper's exit code when it could not record its pid (it started nothing)

# $NAME and ${NAME} in an --env value take the value of the environment variable NAME at job start
# on the worker (after the --env values before it), like a shell would; empty when it is not in the
# environment (bash's own variables, like RANDOM, are not). `\$` is a literal `$`. Nothing else is
# interpreted: no $(...), backticks, arithmetic or ${X:-...}, so a value can never run a command.
# Pure bash (no eval, no external tool): the job's PATH may already be in force when it runs.
EXPAND = r"""JOBTPU_w_expand() {
  local JOBTPU_w_rest=$1 JOBTPU_w_pre JOBTPU_w_name JOBTPU_w_w=abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789
  local JOBTPU_w_bs='\' JOBTPU_w_ds='$'
  JOBTPU_w_x=""
  while :; do
    JOBTPU_w_pre=${JOBTPU_w_rest%%["$JOBTPU_w_bs$JOBTPU_w_ds"]*}; JOBTPU_w_x+=$JOBTPU_w_pre; JOBTPU_w_rest=${JOBTPU_w_rest:${#JOBTPU_w_pre}}
    [ -z "$JOBTPU_w_rest" ] && return 0
    if [ "${JOBTPU_w_rest:0:2}" = "$JOBTPU_w_bs$JOBTPU_w_ds" ]; then JOBTPU_w_x+=$JOBTPU_w_ds; JOBTPU_w_rest=${JOBTPU_w_rest:2}; continue; fi
    if [ "${JOBTPU_w_rest:0:1}" = "$JOBTPU_w_bs" ]; then JOBTPU_w_x+=$JOBTPU_w_bs; JOBTPU_w_rest=${JOBTPU_w_rest:1}; continue; fi
    if [ "${JOBTPU_w_rest:1:1}" = "{" ]; then
      JOBTPU_w_name=${JOBTPU_w_rest:2}; JOBTPU_w_name=${JOBTPU_w_name%%[!$JOBTPU_w_w]*}
      if [ -n "$JOBTPU_w_name" ] && [[ ${JOBTPU_w_name:0:1} != [0123456789] ]] && [ "${JOBTPU_w_rest:$((2 + ${#JOBTPU_w_name})):1}" = "}" ]; then
        [[ ${!JOBTPU_w_name@a} == *x* ]] && JOBTPU_w_x+=${!JOBTPU_w_name}; JOBTPU_w_rest=${JOBTPU_w_rest:$((3 + ${#JOBTPU_w_name}))}; continue
      fi
    else
      JOBTPU_w_name=${JOBTPU_w_rest:1}; JOBTPU_w_name=${JOBTPU_w_name%%[!$JOBTPU_w_w]*}
      if [ -n "$JOBTPU_w_name" ] && [[ ${JOBTPU_w_name:0:1} != [0123456789] ]]; then
        [[ ${!JOBTPU_w_name@a} == *x* ]] && JOBTPU_w_x+=${!JOBTPU_w_name}; JOBTPU_w_rest=${JOBTPU_w_rest:$((1 + ${#JOBTPU_w_name}))}; continue
      fi
    fi
    JOBTPU_w_x+=$JOBTPU_w_ds; JOBTPU_w_rest=${JOBTPU_w_rest:1}
  done
}"""


def wrapper(command: str) -> str:
    """What runs as the process-group leader, in the login environment (never the job's, so an --env
    PATH cannot take bash, rm or mv away from it): record the pid or start nothing; load the env file
    and delete it before the command starts; apply the env only in the process that becomes the
    command; record its exit code. $1 is the absolute path stem of the worker's meta files."""
    return (
        f"{RECORD_PID} || {{ rm -f \"$1.pid.tmp\"; "
        f"echo \"jobtpu: cannot write the pid record $1.pid; the command was not started\" >&2; exit {NO_PID_RECORD}; }}\n"
        "JOBTPU_w_n=(); JOBTPU_w_m=(); JOBTPU_w_v=()\n"
        '. "$1.env"; JOBTPU_w_read=$?; rm -f "$1.env"\n'
        'if [ "$JOBTPU_w_read" != 0 ] || [ -e "$1.env" ]; then\n'
        '  echo "jobtpu: the job\'s environment file $1.env could not be read or deleted; the command was not started" >&2\n'
        '  echo 1 > "$1.exit.tmp" && mv "$1.exit.tmp" "$1.exit"; exit 1\n'
        "fi\n"
        f"{EXPAND}\n"
        # The bash to run is kept where no --env name can reach it (BASH itself is a valid name). The
        # wrapper's own variables are named JOBTPU_w_*: no --env name may start with JOBTPU_.
        "(\n"
        '  set -- "$BASH"\n'
        '  for JOBTPU_w_i in "${!JOBTPU_w_n[@]}"; do\n'
        '    JOBTPU_w_x=${JOBTPU_w_v[JOBTPU_w_i]}; [ "${JOBTPU_w_m[JOBTPU_w_i]}" = x ] && JOBTPU_w_expand "$JOBTPU_w_x"\n'
        '    export "${JOBTPU_w_n[JOBTPU_w_i]}=$JOBTPU_w_x"\n'
        "  done\n"
        f"  exec \"$1\" -c {q(command)}\n"
        ")\n"
        'echo $? > "$1.exit.tmp" && mv "$1.exit.tmp" "$1.exit"\n'
    )


# The live processes of this home's jobs: `pid job attempt worker` lines, read from the marker in
# /proc/*/environ (readable for the same user, or root). Needs `hid` set to the home's id.
MARKS = r"""marks() {
  grep -HzoE -- "^JOBTPU_MARK=${hid}[.][0-9]+[.][0-9]+[.][0-9]+$" /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' |
    sed -n 's|^/proc/\([0-9]*\)/environ:JOBTPU_MARK=[^.]*[.]\([0-9]*\)[.]\([0-9]*\)[.]\([0-9]*\)$|\1 \2 \3 \4|p'
}
marked() { marks | while read -r _p _j _a _w; do [ "$_j $_a $_w" = "$1 $2 $3" ] && echo "$_p"; done; }"""


# Succeeds once the process $1 (a child of this shell) has exited: gone, or a zombie not yet reaped.
ENDED = r"""ended() { local s; read -r -a s < "/proc/$1/stat" 2>/dev/null || return 0; [ "${s[2]}" = Z ]; }"""


def launch_script(specs: Iterable[LaunchSpec]) -> str:
    """Start every given worker detached, idempotently. One line per worker:
    `LAUNCH job attempt worker ok PID` | `... pending` | `... need-archive` | `... bad-archive WHY` |
    `... fail WHY`."""
    parts = ["set -u", MARKS, ENDED]
    for spec in specs:
        r = spec.ref
        parts.append(f"""(
r={_root(spec.root)}; out="LAUNCH {r.stem}"; hid={q(spec.home_id)}
mkdir -p "$r/meta/{r.job}" "$r/jobs" || {{ echo "$out fail cannot create $r"; exit; }}
m=$(cd "$r/meta/{r.job}" && pwd -P) || exit; b="$m/{r.attempt}.{r.worker}"
if [ -s "$b.pid" ]; then read -r p x < "$b.pid"; echo "$out ok $p"; exit; fi
if ! mkdir "$b.claim" 2>/dev/null; then
  if [ -n "$(find "$b.claim" -maxdepth 0 -mmin -{CLAIM_STALE_MINUTES})" ]; then echo "$out pending"; exit; fi
  # A stale claim whose job still has a process here (it lost its pid record) is no dead launch.
  if [ -n "$(marked {r.job} {r.attempt} {r.worker})" ]; then echo "$out pending"; exit; fi
  rm -rf "$b.claim"; mkdir "$b.claim" 2>/dev/null || {{ echo "$out pending"; exit; }}
fi
{unpack_block(spec)}
{TPU_CLEANUP if spec.tpu_cleanup else ""}
cd "$j" || {{ rmdir "$b.claim"; echo "$out fail cd"; exit; }}
(umask 077; printf '%s' {q(env_file(spec.env, spec.literal))} > "$b.env") || {{ rm -f "$b.env"; rmdir "$b.claim"; echo "$out fail cannot write the env file $b.env"; exit; }}
env {MARK_VAR}={q(spec.mark)} setsid nohup bash -c {q(wrapper(spec.command))} jobtpu-{r.job} "$b" > "$b.log" 2>&1 < /dev/null &
w=$!
for i in $(seq 200); do [ -s "$b.pid" ] && break; ended "$w" && break; sleep 0.02; done
if [ -s "$b.pid" ]; then read -r p x < "$b.pid"; echo "$out ok $p"; exit; fi
ended "$w" || {{ echo "$out pending"; exit; }}
wait "$w"; c=$?
# 0: setsid forked and left the wrapper to go on; it records its pid (or fails) on its own.
[ "$c" = 0 ] && {{ echo "$out pending"; exit; }}
rm -f "$b.env"; rmdir "$b.claim" 2>/dev/null
if [ "$c" = {NO_PID_RECORD} ]; then echo "$out fail cannot write the pid record $b.pid (disk full or not writable); the command was not started"
else echo "$out fail the wrapper could not start (exit $c): $(head -c 200 "$b.log" | tr '\n' ' ')"; fi
)""")
    return "\n".join(parts) + "\n"


def unpack_block(spec: LaunchSpec) -> str:
    """The launch's part that makes the job's folder "$j" from the snapshot, run with the worker's claim
    held. The archive is checked against its name and unpacked by jobtpu/unpack.py (python3 on the
    worker), never trusted: a damaged copy is reported as `bad-archive` for the home to push again.
    With spec.fresh, a folder an earlier attempt left is replaced, once per attempt: workers that share
    the root agree through an atomic `mkdir` of "$m/<attempt>.reset" (taken over when stale, like a claim)."""
    r = spec.ref
    lines = [
        f'j="$r/jobs/{r.job}"; s=""',
        # Release the claim (and an unfinished reset) and report; nothing was started.
        'give_up() { rmdir "$b.claim"; if [ -n "$s" ] && [ ! -e "$s/done" ]; then rm -rf "$s"; fi; '
        'echo "$out $1"; exit; }',
    ]
    if spec.fresh:
        lines += [
            f's="$m/{r.attempt}.reset"; own=""',
            'if [ ! -e "$s/done" ]; then',
            '  if mkdir "$s" 2>/dev/null; then own=1',
            '  else',  # another worker sharing this root is replacing the folder: give it a while
            f'    for i in $(seq {RESET_WAIT_STEPS}); do [ -e "$s/done" ] || [ ! -d "$s" ] && break; sleep 0.1; done',
            '    if [ ! -e "$s/done" ]; then',
            f'      if [ -n "$(find "$s" -maxdepth 0 -mmin -{CLAIM_STALE_MINUTES} 2>/dev/null)" ]; then s=""; give_up pending; fi',
            '      rm -rf "$s"; if mkdir "$s" 2>/dev/null; then own=1; else s=""; give_up pending; fi',
            '    fi',
            '  fi',
            '  if [ -n "$own" ] && { [ -e "$j" ] || [ -L "$j" ]; }; then',
            '    mv -T "$j" "$s/old" 2>/dev/null || give_up "fail cannot move the folder of an earlier attempt aside"',
            '    rm -rf "$s/old"',
            '  fi',
            'fi',
        ]
    lines += [
        'if [ ! -d "$j" ]; then',
        f'  a="$r/archives/"{q(spec.archive)}',
        '  [ -f "$a" ] || give_up need-archive',
        '  command -v python3 > /dev/null || give_up "fail python3 is needed on the worker to unpack the snapshot"',
        f'  t=$(mktemp -d "$r/jobs/.unpack.{r.job}.{r.worker}.XXXXXX") || give_up "fail cannot create a folder in $r/jobs"',
        f'  python3 -c {q(unpack_source())} "$a" "$t" 2> "$b.unpack.err"; c=$?',
        '  e=$(head -c 300 "$b.unpack.err" | tr "\\n" " "); rm -f "$b.unpack.err"',
        '  if [ "$c" = 0 ]; then mv -T "$t" "$j" 2>/dev/null || rm -rf "$t"; else rm -rf "$t"; fi',
        f'  [ "$c" = {BAD_ARCHIVE_EXIT} ] && give_up "bad-archive $e"',
        '  [ -d "$j" ] || give_up "fail unpack: $e"',
        'fi',
        'if [ -n "$s" ]; then touch "$s/done"; fi',
    ]
    return "\n".join(lines)


@functools.cache
def unpack_source() -> str:
    """The source of jobtpu/unpack.py, which the worker runs with python3 -c."""
    return Path(unpack.__file__).read_text(encoding="utf-8")


@dataclass(frozen=True)
class LaunchResult:
    ref: WorkerRef
    outcome: str  # ok | pending | need-archive | bad-archive | fail
    pid: int | None = None
    detail: str = ""


def parse_launch(stdout: str) -> dict[WorkerRef, LaunchResult]:
    results: dict[WorkerRef, LaunchResult] = {}
    for line in stdout.splitlines():
        words = line.split(" ", 5)
        if len(words) < 5 or words[0] != "LAUNCH":
            continue
        ref = WorkerRef(int(words[1]), int(words[2]), int(words[3]))
        rest = words[5] if len(words) > 5 else ""
        pid = int(rest) if words[4] == "ok" and rest.isdigit() else None
        results[ref] = LaunchResult(ref, words[4], pid, rest if words[4] in ("fail", "bad-archive") else "")
    return results


# ---- probe ----------------------------------------------------------------------------------------

# The one definition of "this worker's job is alive", for every script that asks: the pid in its pid
# file runs, is no zombie, and started when the file says (so a reused pid is not taken for the job).
# Prints the pid (the job's process group) and succeeds, or fails.
LIVE_PID = r"""live_pid() {
  local pid st s
  [ -s "$1" ] && read -r pid st < "$1" && [ -r "/proc/$pid/stat" ] &&
    read -r -a s < "/proc/$pid/stat" 2>/dev/null && [ "${s[2]}" != Z ] && [ "${s[21]:-}" = "$st" ] && echo "$pid"
}"""

def probe_script(root: str, workers: Iterable[tuple[WorkerRef, int]], chunk: int = LOG_CHUNK,
                 home_id: str = "") -> str:
    """For each (worker, log bytes already pulled): one `W job attempt worker pid alive exit size claimed
    at marked` line (marked: how many processes carry its marker), then `L job attempt worker offset
    BASE64` with the log bytes past that offset (at most `chunk`)."""
    lines = [
        "set -u",
        f"r={_root(root)}; hid={q(home_id)}",
        LIVE_PID,
        MARKS,
        # One scan of /proc for every worker asked about: " job.attempt.worker " once per process.
        'all=" $(marks | while read -r _p j a w; do printf \'%s \' "$j.$a.$w"; done)"',
        "p() {",
        '  local b="$r/meta/$1/$2.$3" pid=- alive=0 ex=- at=- size=0 claim=0 x rest=$all n=0',
        '  [ -s "$b.pid" ] && read -r pid x < "$b.pid"',
        '  live_pid "$b.pid" > /dev/null && alive=1',
        '  [ -s "$b.exit" ] && read -r ex < "$b.exit" && at=$(date -r "$b.exit" +%s.%N)',
        '  [ -e "$b.claim" ] && claim=1',
        '  [ -e "$b.log" ] && size=$(stat -c %s "$b.log")',
        '  while [[ $rest == *" $1.$2.$3 "* ]]; do n=$((n + 1)); rest=${rest#*" $1.$2.$3 "}; rest=" $rest"; done',
        '  echo "W $1 $2 $3 $pid $alive $ex $size $claim $at $n"',
        '  if [ "$size" -gt "$4" ]; then',
        f'    echo "L $1 $2 $3 $4 $(tail -c +$(($4 + 1)) "$b.log" | head -c {chunk} | base64 -w0)"; fi',
        # An exited worker whose log is further behind than one pull: its end, to classify the failure.
        f'  if [ "$ex" != - ] && [ $((size - $4)) -gt {chunk} ]; then',
        f'    echo "T $1 $2 $3 $(tail -c {TAIL_BYTES} "$b.log" | base64 -w0)"; fi',
        "}",
        'echo "H $(cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo -) $(date +%s)"',
    ]
    lines += [f"p {w.job} {w.attempt} {w.worker} {int(offset)}" for w, offset in workers]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class WorkerState:
    ref: WorkerRef
    pid: int | None
    alive: bool
    exit_code: int | None
    log_size: int
    claimed: bool
    log_offset: int = 0
    log_bytes: bytes = b""
    exited_at: float | None = None  # when the exit record was written (the worker's clock)
    log_end: bytes = b""  # an exited worker's last TAIL_BYTES, when the pull is further behind than that
    marked: int = 0  # live processes that carry the worker's marker (its leader, children, escapees)

    @property
    def started(self) -> bool:
        return self.pid is not None or self.exit_code is not None


def parse_probe(stdout: str) -> dict[WorkerRef, WorkerState]:
    states: dict[WorkerRef, WorkerState] = {}
    for line in stdout.splitlines():
        words = line.split(" ")
        if words[0] == "W" and len(words) in (10, 11):
            ref = WorkerRef(int(words[1]), int(words[2]), int(words[3]))
            states[ref] = WorkerState(
                ref=ref, pid=int(words[4]) if words[4].isdigit() else None, alive=words[5] == "1",
                exit_code=int(words[6]) if words[6].lstrip("-").isdigit() else None,
                log_size=int(words[7]), claimed=words[8] == "1", exited_at=_number(words[9]),
                marked=int(words[10]) if len(words) == 11 and words[10].isdigit() else 0)
        elif words[0] == "L" and len(words) in (5, 6):
            ref = WorkerRef(int(words[1]), int(words[2]), int(words[3]))
            if ref in states:
                data = base64.b64decode(words[5]) if len(words) == 6 else b""
                old = states[ref]
                states[ref] = dataclasses.replace(old, log_offset=int(words[4]), log_bytes=data)
        elif words[0] == "T" and len(words) in (4, 5):
            ref = WorkerRef(int(words[1]), int(words[2]), int(words[3]))
            if ref in states:
                end = base64.b64decode(words[4]) if len(words) == 5 else b""
                states[ref] = dataclasses.replace(states[ref], log_end=end)
    return states


def _number(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None


# ---- kill -----------------------------------------------------------------------------------------

def kill_script(root: str, refs: Iterable[WorkerRef], grace: float = 5.0, home_id: str = "") -> str:
    """TERM each worker's whole process group and every process that carries its marker (those that
    left the group by setsid or a double fork too), KILL what is left after `grace` seconds.
    One `K job attempt worker gone|stuck` line per worker."""
    refs = list(refs)
    wanted = " ".join(f"{r.job}.{r.attempt}.{r.worker}" for r in refs)
    lines = [
        "set -u",
        f"r={_root(root)}; hid={q(home_id)}; wanted=' {wanted} '",
        MARKS,
        "pg() { local b=\"$r/meta/$1/$2.$3\" p x; [ -s \"$b.pid\" ] && read -r p x < \"$b.pid\" && echo \"$p\"; }",
        # A group is alive while it has a member that is not a zombie.
        "alive() { ps -eo pgid=,stat= | awk -v g=\"$1\" '$1 == g && $2 !~ /^Z/ {f=1} END {exit !f}'; }",
        # The marked processes of the workers asked about (zombies carry no environment: not listed).
        "ours() { marks | while read -r p j a w; do [[ $wanted == *\" $j.$a.$w \"* ]] && echo \"$p\"; done; }",
        # Signal every marked process once per signal: a job's TERM handler is not interrupted again.
        'hit() { local p; for p in $(ours); do [[ $2 == *" $p "* ]] && continue; kill "-$1" "$p" 2>/dev/null; '
        'sent="$sent$p "; done; }',
        "groups=(); sent=' '",
    ]
    for ref in refs:
        lines.append(f"g=$(pg {ref.job} {ref.attempt} {ref.worker}) && {{ groups+=(\"$g\"); "
                     f"kill -TERM -- -\"$g\" 2>/dev/null; }}")
    steps = max(1, int(grace / 0.1))
    lines += [
        'hit TERM "$sent"',
        f"for i in $(seq {steps}); do",
        "  left=0; for g in ${groups[@]+\"${groups[@]}\"}; do alive \"$g\" && left=1; done",
        '  [ -n "$(ours)" ] && left=1',
        '  [ $left = 0 ] && break; hit TERM "$sent"; sleep 0.1',  # a child forked meanwhile gets its TERM too
        "done",
        "for _ in 1 2 3; do",  # a process that forks while it is killed leaves a child: kill it too
        "  for g in ${groups[@]+\"${groups[@]}\"}; do alive \"$g\" && kill -KILL -- -\"$g\" 2>/dev/null; done",
        "  hit KILL ' '; sleep 0.1",
        "done",
    ]
    for ref in refs:
        # A wrapper stopped before it read its env file leaves the job's secrets behind: not any more.
        lines.append(f'rm -f -- "$r/meta/{ref.job}/{ref.attempt}.{ref.worker}.env"')
        lines.append(f"g=$(pg {ref.job} {ref.attempt} {ref.worker}); "
                     f"if {{ [ -n \"$g\" ] && alive \"$g\"; }} || [ -n \"$(marked {ref.stem})\" ]; "
                     f"then echo \"K {ref.stem} stuck\"; else echo \"K {ref.stem} gone\"; fi")
    return "\n".join(lines) + "\n"


def parse_kill(stdout: str) -> dict[WorkerRef, bool]:
    """worker → True when its processes are gone."""
    done: dict[WorkerRef, bool] = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) == 5 and words[0] == "K":
            done[WorkerRef(int(words[1]), int(words[2]), int(words[3]))] = words[4] == "gone"
    return done


# ---- housekeeping ---------------------------------------------------------------------------------

def remove_job_script(root: str, job_ids: Iterable[int], keep_archives: Iterable[str] | None = None) -> str:
    """Delete jobs' remote folders; with keep_archives, also every archive not in that list."""
    lines = ["set -u", f"r={_root(root)}"]
    for job in job_ids:
        lines.append(f'rm -rf -- "$r/jobs/{int(job)}" "$r/meta/{int(job)}"')
    if keep_archives is not None:
        keep = " ".join(q(a) for a in keep_archives)
        lines += [f"keep=({keep})",
                  'for f in "$r"/archives/*.tar.gz; do [ -e "$f" ] || continue; n=${f##*/}; k=0',
                  '  for x in ${keep[@]+"${keep[@]}"}; do [ "$x" = "$n" ] && k=1; done',
                  '  [ $k = 0 ] && rm -f -- "$f"; done']
    return "\n".join(lines) + "\n"


def job_folder(root: str, job_id: int) -> str:
    return f"{root.rstrip('/')}/jobs/{job_id}"


def archive_path(root: str, archive: str) -> str:
    return f"{root.rstrip('/')}/archives/{archive}"


def make_dirs_script(paths: Iterable[str]) -> str:
    """mkdir -p each path (relative to the login folder unless absolute)."""
    return "mkdir -p -- " + " ".join(q(p) for p in paths) + "\n"


def doctor_script(root: str, tools: Iterable[str] = ("python3", "rsync", "tar"), home_id: str = "") -> str:
    """`ROOT yes|no`, `DISK <KiB free where root is or would be>`, `TOOL name path|-` lines, and a
    `LIVE job attempt worker pid` line for every live process of this home's jobs on this host: each
    process that carries a job's marker (an ended job's escaped children among them) and each live
    process-group leader named by a pid file."""
    return "\n".join([
        f"r={_root(root)}; d=$r; hid={q(home_id)}",
        'while [ ! -d "$d" ]; do d=$(dirname -- "$d"); done',
        'if [ -d "$r" ]; then echo "ROOT yes"; else echo "ROOT no"; fi',
        'echo "DISK $(df -Pk -- "$d" | awk \'NR == 2 {print $4}\')"',
        *(f'echo "TOOL {t} $(command -v {q(t)} || echo -)"' for t in tools),
        LIVE_PID,
        MARKS,
        'for f in "$r"/meta/*/*.pid; do pid=$(live_pid "$f") || continue',
        '  j=${f%/*}; n=${f##*/}; n=${n%.pid}; echo "LIVE ${j##*/} ${n%%.*} ${n#*.} $pid"',
        "done",
        'marks | while read -r p j a w; do echo "LIVE $j $a $w $p"; done',
    ]) + "\n"


def parse_live(stdout: str) -> dict[WorkerRef, list[int]]:
    """The job workers alive on a host (from doctor_script), with their live processes' pids."""
    out: dict[WorkerRef, list[int]] = {}
    for line in stdout.splitlines():
        words = line.split()
        if len(words) == 5 and words[0] == "LIVE" and all(w.isdigit() for w in words[1:]):
            pids = out.setdefault(WorkerRef(int(words[1]), int(words[2]), int(words[3])), [])
            if int(words[4]) not in pids:
                pids.append(int(words[4]))
    return {ref: sorted(pids) for ref, pids in out.items()}


def parse_doctor(stdout: str) -> dict[str, str]:
    """{"root": "yes", "disk_kib": "123", "tool:python3": "/usr/bin/python3" or "-"}."""
    out: dict[str, str] = {}
    for line in stdout.splitlines():
        words = line.split(" ", 2)
        if words[0] == "ROOT" and len(words) == 2:
            out["root"] = words[1]
        elif words[0] == "DISK" and len(words) == 2:
            out["disk_kib"] = words[1]
        elif words[0] == "TOOL" and len(words) == 3:
            out[f"tool:{words[1]}"] = words[2]
    return out


# ---- machine setup (TPU incarnations) ---------------------------------------------------------------

def setup_tag(incarnation: str) -> str:
    """A file-name-safe name for one incarnation of a machine."""
    return "".join(c if c.isalnum() else "-" for c in incarnation)[:64] or "static"


def setup_script(root: str, tag: str, worker: int, commands: Iterable[str], retry: bool = False) -> str:
    """Run the setup commands detached, once per incarnation and worker; report one line:
    `SETUP done` | `SETUP running` | `SETUP failed CODE: LOG TAIL`. With retry, a failed one starts again."""
    chain = " && ".join(f"bash -c {q(c)}" for c in commands) or "true"
    # Like a job: no setup runs without its pid record, or the next pass would start a second one.
    body = f'{RECORD_PID} || exit {NO_PID_RECORD}; {chain}; echo $? > "$1.exit.tmp" && mv "$1.exit.tmp" "$1.exit"'
    return f"""set -u
{LIVE_PID}
{ENDED}
r={_root(root)}; mkdir -p "$r/setup" || {{ echo "SETUP failed 1: cannot create $r/setup"; exit 0; }}
b="$(cd "$r/setup" && pwd -P)/{tag}.{int(worker)}"
if [ -s "$b.exit" ]; then
  read -r c < "$b.exit"
  if [ "$c" = 0 ]; then echo "SETUP done"; exit 0; fi
  if [ {int(retry)} = 0 ]; then echo "SETUP failed $c: $(tail -c 300 "$b.log" | tr '\\n' ' ')"; exit 0; fi
  rm -f "$b.exit" "$b.pid"
fi
if live_pid "$b.pid" > /dev/null; then echo "SETUP running"; exit 0; fi
cd ~ && setsid nohup bash -c {q(body)} jobtpu-setup "$b" > "$b.log" 2>&1 < /dev/null &
w=$!
for i in $(seq 50); do [ -s "$b.exit" ] && break; ended "$w" && break; sleep 0.02; done
if [ -s "$b.exit" ]; then read -r c < "$b.exit"; [ "$c" = 0 ] && echo "SETUP done" || echo "SETUP failed $c: $(tail -c 300 "$b.log" | tr '\\n' ' ')"
elif ended "$w" && {{ wait "$w"; [ $? = {NO_PID_RECORD} ]; }}; then
  echo "SETUP failed {NO_PID_RECORD}: cannot write the pid record $b.pid (disk full or not writable); setup was not started"
else echo "SETUP running"; fi
"""


# The process groups of our live jobs on this worker (their leaders' pids), as " 12 34 ".
OUR_GROUPS = LIVE_PID + r"""
ours=" "
for f in "$r"/meta/*/*.pid; do p=$(live_pid "$f") && ours="$ours$p "; done
"""

TPU_CLEANUP = OUR_GROUPS + r"""
# Before a launch on a TPU: stop stale holders of the TPU device that are not a live job of ours,
# then remove the libtpu lock file (in that order: the holder would recreate it).
for d in /proc/[0-9]*; do
  p=${d#/proc/}; [ "$p" = $$ ] && continue
  if ls -l "$d/fd" 2>/dev/null | grep -qE '/dev/(accel|vfio/)'; then
    g=$(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' ')
    case "$ours" in *" $g "*) ;; *) kill -TERM "$p" 2>/dev/null; sleep 0.5; kill -KILL "$p" 2>/dev/null;; esac
  fi
done
rm -f /tmp/libtpu_lockfile 2>/dev/null || sudo -n rm -f /tmp/libtpu_lockfile 2>/dev/null
"""


def tpu_doctor_script(root: str, fix: bool) -> str:
    """`HOLDER pid comm ours|stale` for each process holding the TPU device, `LOCK yes|no` for
    /tmp/libtpu_lockfile; with fix, the stale holders are stopped and the lock file removed first."""
    return f"""set -u
r={_root(root)}
{TPU_CLEANUP if fix else ""}
{OUR_GROUPS}for d in /proc/[0-9]*; do
  p=${{d#/proc/}}
  if ls -l "$d/fd" 2>/dev/null | grep -qE '/dev/(accel|vfio/)'; then
    g=$(ps -o pgid= -p "$p" 2>/dev/null | tr -d ' '); c=$(ps -o comm= -p "$p" 2>/dev/null)
    case "$ours" in *" $g "*) echo "HOLDER $p $c ours";; *) echo "HOLDER $p $c stale";; esac
  fi
done
if [ -e /tmp/libtpu_lockfile ]; then echo "LOCK yes"; else echo "LOCK no"; fi
"""
