set -u
# Shared functions of every script jobtpu runs on a machine (sourced text, not run on its own).
# Every function takes what it needs as arguments; none reads a global set elsewhere.
# A machine's root is relative to the login folder unless absolute, and may begin with '-': every
# function that takes one makes it ./-... first (r=${1/#-/./-}), so that no command takes it for an option.

# The exit code of a detached process that could not record its pid: it started nothing.
JOBTPU_NO_PID_RECORD=97

# jobtpu_own_folder DIR : succeeds when DIR is a real folder (not a link) of this account's that no other
# account may write to, so nothing another account plants in it is written or read through
# (docs/design.md §4). Else fails.
jobtpu_own_folder() {
  [ ! -L "$1" ] && [ -d "$1" ] && [ -O "$1" ] && [ -z "$(find "$1" -maxdepth 0 -perm /022 2>/dev/null)" ]
}

# jobtpu_private_root ROOT : a root made before its folders were private (or by hand) becomes the
# remote user's alone: the root and its containers lose every group and other bit, so nothing under
# them is reachable by another account. Never the login folder itself (a root of "~"), nor a folder of
# another account's; a failure changes nothing and is not one. Only in a remote script (its preamble
# sets jobtpu_login_umask): the local machine's run root follows the home's modes (transport/local.py).
jobtpu_private_root() {
  local r=${1/#-/./-} d
  [ -n "${jobtpu_login_umask:-}" ] || return 0
  for d in "$r" "$r/meta" "$r/jobs" "$r/archives" "$r/setup"; do
    if [ -d "$d" ] && [ ! -L "$d" ] && [ -O "$d" ] && ! [ "$d" -ef ~ ]; then chmod go-rwx -- "$d" 2>/dev/null; fi
  done
  return 0
}

# jobtpu_job_umask : the umask the job's own commands run with: the login's, which a remote script's
# preamble keeps in jobtpu_login_umask before it sets 077 (jobtpu/remote/scripts.py PRIVATE_PREAMBLE).
jobtpu_job_umask() {
  if [ -n "${jobtpu_login_umask:-}" ]; then echo "$jobtpu_login_umask"; else umask; fi
}

# jobtpu_program FUNCTION... : the text of a program for `bash -c` that defines the given functions
# (and the constants above) and calls the last one with the program's arguments. A detached process
# (setsid) starts a new bash, which knows none of this script's functions: this is how it gets them.
jobtpu_program() {
  declare -p JOBTPU_NO_PID_RECORD
  declare -f "$@"
  echo "${!#} \"\$@\""
}

# jobtpu_record_pid STEM : run by a detached process-group leader: its pid and /proc start time into
# STEM.pid, atomically, so that jobtpu_live_pid can tell it from a later process that reuses the pid.
# Fails unless the record reads back whole: a full disk or an unwritable folder must stop the start,
# not leave a job nobody can see.
jobtpu_record_pid() {
  local stat pid start
  read -r -a stat < "/proc/$$/stat" && echo "$$ ${stat[21]}" > "$1.pid.tmp" &&
    mv -f "$1.pid.tmp" "$1.pid" && read -r pid start < "$1.pid" && [ "$pid $start" = "$$ ${stat[21]}" ]
}

# jobtpu_live_pid PIDFILE : the one definition of "this worker's job is alive", for every script that
# asks: the pid in its pid file runs, is no zombie, and started when the file says (so a reused pid
# is not taken for the job). Prints the pid (the job's process group) and succeeds, or fails.
jobtpu_live_pid() {
  local pid start stat
  [ -s "$1" ] && read -r pid start < "$1" && [ -r "/proc/$pid/stat" ] &&
    read -r -a stat < "/proc/$pid/stat" 2>/dev/null && [ "${stat[2]}" != Z ] && [ "${stat[21]:-}" = "$start" ] &&
    echo "$pid"
}

# jobtpu_ended PID : succeeds once the process PID (a child of this shell) has exited: gone, or a
# zombie not yet reaped.
jobtpu_ended() {
  local stat
  read -r -a stat < "/proc/$1/stat" 2>/dev/null || return 0
  [ "${stat[2]}" = Z ]
}

# jobtpu_marks HOME_ID : the live processes of this home's jobs, as `pid job attempt worker` lines,
# read from the marker JOBTPU_MARK=<home id>.<job>.<attempt>.<worker> in /proc/*/environ (readable for
# the same user, or root). The home id is compared as text, never used as a pattern.
jobtpu_marks() {
  local entry pid mark job attempt worker
  grep -HzoE -- '^JOBTPU_MARK=.*[.][0-9]+[.][0-9]+[.][0-9]+$' /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' |
    while IFS= read -r entry; do
      # A line that does not name its process is the rest of a value with a newline in it.
      [[ $entry == /proc/[0-9]*/environ:JOBTPU_MARK=* ]] || continue
      pid=${entry#/proc/}; pid=${pid%%/*}; mark=${entry#*:JOBTPU_MARK=}
      [ "${mark%.*.*.*}" = "$1" ] || continue
      mark=${mark:${#1}+1}; job=${mark%%.*}; mark=${mark#*.}; attempt=${mark%%.*}; worker=${mark#*.}
      echo "$pid $job $attempt $worker"
    done
}

# jobtpu_marked HOME_ID JOB ATTEMPT WORKER : the pids of the live processes of one worker of a job.
jobtpu_marked() {
  local pid job attempt worker
  jobtpu_marks "$1" | while read -r pid job attempt worker; do
    if [ "$job $attempt $worker" = "$2 $3 $4" ]; then echo "$pid"; fi
  done
}

# jobtpu_our_groups ROOT : the process groups of our live jobs under ROOT (their leaders' pids),
# as " 12 34 ".
jobtpu_our_groups() {
  local file pid ours=" "
  for file in "$1"/meta/*/*.pid; do
    pid=$(jobtpu_live_pid "$file") && ours="$ours$pid "
  done
  echo "$ours"
}

# jobtpu_named NAMES [NAME=VALUE]... [-- REST...] : the named arguments of a call (jobtpu/remote/scripts.py
# `named`), each into the variable of its name, which the calling function declared local: NAMES (one
# word, space-separated) are the names it takes, each exactly once, in any order. jobtpu_named_n is how
# many words they took, `--` included, for the caller's shift. A name it does not take, one missing or
# one given twice is a fault of the renderer's, never of a value: one line on stderr, and it fails.
jobtpu_named() {
  # Its own names are prefixed: they must not hide the caller's variables it assigns.
  local jobtpu_n_names=" $1 " jobtpu_n_word jobtpu_n_key jobtpu_n_seen=" " jobtpu_n_all
  shift
  jobtpu_named_n=0
  for jobtpu_n_word; do
    jobtpu_named_n=$((jobtpu_named_n + 1))
    [ "$jobtpu_n_word" = -- ] && break
    jobtpu_n_key=${jobtpu_n_word%%=*}
    if [[ $jobtpu_n_word != *=* || $jobtpu_n_names != *" $jobtpu_n_key "* || $jobtpu_n_seen == *" $jobtpu_n_key "* ]]; then
      echo "jobtpu: ${FUNCNAME[1]}: an argument it does not take, or twice: ${jobtpu_n_key@Q}" >&2
      return 1
    fi
    printf -v "$jobtpu_n_key" '%s' "${jobtpu_n_word#*=}"
    jobtpu_n_seen+="$jobtpu_n_key "
  done
  read -r -a jobtpu_n_all <<< "$jobtpu_n_names"
  for jobtpu_n_key in "${jobtpu_n_all[@]}"; do
    [[ $jobtpu_n_seen == *" $jobtpu_n_key "* ]] || { echo "jobtpu: ${FUNCNAME[1]}: no $jobtpu_n_key given" >&2; return 1; }
  done
}

# jobtpu_say KIND [TYPE:NAME VALUE]... : one line of the worker protocol, the JSON object
# {"kind":"KIND","NAME":VALUE,...} (decoded by jobtpu/schema/worker_protocol.py). TYPE s: VALUE is a string,
# escaped (jobtpu_json_string): a log tail, a path or a remote message is untrusted text, and stays
# data; n: a number, null when VALUE is none (`-`, empty, or not a number); b: true when VALUE is 1,
# else false. KIND and the names are the scripts' own words, never a value.
jobtpu_say() {
  local line="{\"kind\":\"$1\"" key="" value
  shift
  # A for loop, not shift: a probe says this once per worker per round (bash's shift copies the rest).
  for value; do
    if [ -z "$key" ]; then key=$value; continue; fi
    case $key in
      s:*) jobtpu_json_string "$value"; value=$jobtpu_json ;;
      n:*) [[ $value == ?(-)@(0|[1-9]*([0-9]))?(.+([0-9])) ]] || value=null ;;
      b:*) if [ "$value" = 1 ]; then value=true; else value=false; fi ;;
    esac
    line+=",\"${key#?:}\":$value"
    key=""
  done
  printf '%s}\n' "$line"
}

# jobtpu_json_string TEXT : TEXT as a JSON string, quotes included, in jobtpu_json (a variable, not
# output: no subshell per value). Backslash and quote are escaped, and every control character
# becomes \u00XX, so no value can end its string or its line early. Bytes that are no UTF-8 stay as
# they are: the reader replaces them.
jobtpu_json_string() {
  local s=$1 bs=\\ q='"' h c i
  s=${s//"$bs"/"$bs$bs"}
  s=${s//"$q"/"$bs$q"}
  if [[ $s == *[[:cntrl:]]* ]]; then
    for ((i = 1; i < 32; i++)); do
      printf -v h '%02x' "$i"
      printf -v c '%b' "\\x$h"
      s=${s//"$c"/"${bs}u00$h"}
    done
  fi
  jobtpu_json="\"$s\""
}

# The reports that carry a worker's bytes, a probe's on every kind of machine (needs nothing else):
# probe.sh's and slurm.sh's. The bytes go straight from base64 into their report's string (only
# [A-Za-z0-9+/=]: nothing to escape), never held in a variable.

# jobtpu_say_log JOB ATTEMPT WORKER OFFSET CHUNK LOG : a `log` report, at most CHUNK bytes of LOG from OFFSET.
jobtpu_say_log() {
  printf '{"kind":"log","job":%d,"attempt":%d,"worker":%d,"offset":%d,"data":"' "$1" "$2" "$3" "$4"
  tail -c +$(($4 + 1)) "$6" | head -c "$5" | base64 -w0
  printf '"}\n'
}

# jobtpu_say_log_end JOB ATTEMPT WORKER TAIL LOG : a `log-end` report, the last TAIL bytes of LOG.
jobtpu_say_log_end() {
  printf '{"kind":"log-end","job":%d,"attempt":%d,"worker":%d,"data":"' "$1" "$2" "$3"
  tail -c "$4" "$5" | base64 -w0
  printf '"}\n'
}

# jobtpu_say_result JOB ATTEMPT WORKER SIZE LIMIT FILE : a `result` report of FILE, SIZE bytes: its bytes
# when SIZE is at most LIMIT, else its size alone (the pass fetches it).
jobtpu_say_result() {
  if [ "$4" -gt "$5" ]; then
    printf '{"kind":"result","job":%d,"attempt":%d,"worker":%d,"size":%d}\n' "$1" "$2" "$3" "$4"
  else
    printf '{"kind":"result","job":%d,"attempt":%d,"worker":%d,"size":%d,"data":"' "$1" "$2" "$3" "$4"
    head -c "$5" "$6" | base64 -w0
    printf '"}\n'
  fi
}

# Watching job workers (needs common.sh and reports.sh).

# jobtpu_probe root=ROOT home_id=HOME_ID chunk=CHUNK tail=TAIL result=RESULT -- [JOB ATTEMPT WORKER OFFSET]... (named
# arguments, jobtpu_named, then the workers asked about) : first a `host` report (boot
# id, clock), then for each worker (and the log bytes already pulled, OFFSET) a `worker` report (pid,
# alive, exit, size, claimed, timedout: its wrapper stopped it at its --timeout, at: when the exit
# record was written, marked: how many processes carry
# its marker; null, not counted, while every leader asked about lives: only a dead leader's escapees
# matter), then a `log` report with the log bytes past OFFSET (at most CHUNK, base64), and for an
# exited worker whose log is further behind than that, a `log-end` report with the log's last TAIL
# bytes, to classify its failure from, and for an exited worker 0 whose log this report completes, a
# `result` report: the value its job saved (jobtpu.save_result, $JOBTPU_RESULT: the file "<attempt>.<worker>.result"
# beside its log), its bytes when at most RESULT, else only its size (jobtpu/schema/worker_protocol.py).
jobtpu_probe() {
  local root="" home_id="" chunk="" tail="" result="" r all=- job attempt worker boot=- now i a w
  jobtpu_named "root home_id chunk tail result" "$@" || return 1
  # shellcheck disable=SC2154 # set by jobtpu_named (common.sh)
  shift "$jobtpu_named_n"
  r=${root/#-/./-}
  # One scan of /proc for every worker asked about (" job.attempt.worker " once per process), and
  # only when one of them has no live leader: the usual round, every job running, reads no environ.
  for ((i = 1; i + 3 <= $#; i += 4)); do
    a=$((i + 1)) w=$((i + 2))
    if ! jobtpu_live_pid "$r/meta/${!i}/${!a}.${!w}.pid" > /dev/null; then
      all=" $(jobtpu_marks "$home_id" | while read -r _ job attempt worker; do printf '%s ' "$job.$attempt.$worker"; done)"
      break
    fi
  done
  # Builtins, not cat and date: a probe runs on every busy worker every round.
  [ -r /proc/sys/kernel/random/boot_id ] && read -r boot < /proc/sys/kernel/random/boot_id
  printf -v now '%(%s)T' -1
  jobtpu_say host s:boot "$boot" n:now "$now"
  while [ $# -ge 4 ]; do
    jobtpu_probe_worker "$r" "$all" "$chunk" "$tail" "$1" "$2" "$3" "$4" "$result"
    shift 4
  done
}

# jobtpu_probe_worker ROOT MARKED CHUNK TAIL JOB ATTEMPT WORKER OFFSET RESULT : the lines of one worker.
jobtpu_probe_worker() {
  local b="$1/meta/$5/$6.$7" rest=$2 chunk=$3 tail=$4 id="$5.$6.$7" offset=$8 result=$9
  local pid=- alive=0 ex=- at=- size=0 claim=0 n=0 timedout=0 rsize
  [ -s "$b.pid" ] && read -r pid _ < "$b.pid"
  jobtpu_live_pid "$b.pid" > /dev/null && alive=1
  [ -s "$b.exit" ] && read -r ex < "$b.exit" && at=$(date -r "$b.exit" +%s.%N)
  [ -e "$b.claim" ] && claim=1
  [ -e "$b.timedout" ] && timedout=1
  [ -e "$b.log" ] && size=$(stat -c %s "$b.log")
  if [ "$rest" = - ]; then n=-; fi
  while [[ $rest == *" $id "* ]]; do n=$((n + 1)); rest=${rest#*" $id "}; rest=" $rest"; done
  jobtpu_say worker n:job "$5" n:attempt "$6" n:worker "$7" n:pid "$pid" b:alive "$alive" n:exit "$ex" \
    n:size "$size" b:claimed "$claim" n:at "$at" n:marked "$n" b:timedout "$timedout"
  if [ "$size" -gt "$offset" ]; then jobtpu_say_log "$5" "$6" "$7" "$offset" "$chunk" "$b.log"; fi
  if [ "$ex" != - ] && [ $((size - offset)) -gt "$chunk" ]; then jobtpu_say_log_end "$5" "$6" "$7" "$tail" "$b.log"; fi
  # Once, with the report that brings the rest of the log: a finished job's value comes home with it.
  if [ "$7" = 0 ] && [ "$ex" != - ] && [ $((size - offset)) -le "$chunk" ] && [ -f "$b.result" ] &&
    [ ! -L "$b.result" ]; then
    rsize=$(stat -c %s "$b.result") || return 0
    jobtpu_say_result "$5" "$6" "$7" "$rsize" "$result" "$b.result"
  fi
}

# jobtpu_probe_saved ROOT JOB ATTEMPT WORKER MARKER : a `saved` report (the marker's modification time,
# seconds since the epoch) when MARKER, a path relative to the job's folder, is a file written since
# the worker of that attempt started (newer than its pid record): a marker an earlier attempt left in
# the folder is not this attempt's save. Nothing otherwise. The marker is looked at, never opened.
jobtpu_probe_saved() {
  local r=${1/#-/./-} at
  local f="$r/jobs/$2/$5" b="$r/meta/$2/$3.$4"
  [ -f "$f" ] && [ -s "$b.pid" ] && [ "$f" -nt "$b.pid" ] || return 0
  at=$(date -r "$f" +%s.%N) || return 0
  jobtpu_say saved n:job "$2" n:attempt "$3" n:worker "$4" n:at "$at"
}

jobtpu_probe root=-runs home_id=home-1 chunk=1024 tail=65536 result=1048576 -- 7 2 0 0 7 2 1 4096
jobtpu_probe_saved -runs 7 2 0 ckpt/SAVED
