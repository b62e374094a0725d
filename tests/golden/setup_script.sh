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

# A machine's setup commands, once per incarnation and worker (needs common.sh).

# jobtpu_setup_run STEM UMASK [COMMAND]... : the detached setup process: record its pid or start nothing,
# run each command by bash with UMASK (the login's: what setup installs is the user's business) in
# turn until one fails, and record the exit code in STEM.exit.
jobtpu_setup_run() {
  local b=$1 mask=$2 code=0 step
  jobtpu_record_pid "$b" || exit "$JOBTPU_NO_PID_RECORD"
  shift 2
  for step; do (umask "$mask" && exec bash -c -- "$step"); code=$?; [ "$code" = 0 ] || break; done
  echo "$code" > "$b.exit.tmp" && mv "$b.exit.tmp" "$b.exit"
}

# jobtpu_setup_said OUTCOME [CODE [DETAIL]] : the one `setup` report of a setup script, its last line:
# done | running | failed, with the exit code and why (or the end of its log).
jobtpu_setup_said() {
  jobtpu_say setup s:outcome "$1" n:code "${2:-}" s:detail "${3:-}"
}

# jobtpu_setup_failed STEM CODE : the report of a failed setup, with the end of its log.
jobtpu_setup_failed() {
  jobtpu_setup_said failed "$2" "$(tail -c 300 "$1.log" | tr '\n' ' ')"
}

# jobtpu_setup root=ROOT tag=TAG worker=WORKER retry=RETRY -- [COMMAND]... (named arguments,
# jobtpu_named, then the commands) : run the setup commands detached, once per incarnation (TAG) and
# worker; report one line (jobtpu_setup_said): done | running | failed with its exit code and log
# tail. With RETRY=1, a failed one starts again.
jobtpu_setup() {
  local root="" tag="" worker="" retry="" r b c w
  jobtpu_named "root tag worker retry" "$@" || return 1
  # shellcheck disable=SC2154 # set by jobtpu_named (common.sh)
  shift "$jobtpu_named_n"
  r=${root/#-/./-}
  mkdir -p "$r/setup" || { jobtpu_setup_said failed 1 "cannot create $r/setup"; return 0; }
  jobtpu_private_root "$r"
  b="$(cd "$r/setup" && pwd -P)/$tag.$worker"
  if [ -s "$b.exit" ]; then
    read -r c < "$b.exit"
    if [ "$c" = 0 ]; then jobtpu_setup_said "done"; return 0; fi
    if [ "$retry" = 0 ]; then jobtpu_setup_failed "$b" "$c"; return 0; fi
    rm -f "$b.exit" "$b.pid"
  fi
  if jobtpu_live_pid "$b.pid" > /dev/null; then jobtpu_setup_said running; return 0; fi
  cd ~ && setsid nohup bash -c "$(jobtpu_program jobtpu_record_pid jobtpu_setup_run)" jobtpu-setup "$b" "$(jobtpu_job_umask)" "$@" \
    > "$b.log" 2>&1 < /dev/null &
  w=$!
  for _ in $(seq 50); do [ -s "$b.exit" ] && break; jobtpu_ended "$w" && break; sleep 0.02; done
  if [ -s "$b.exit" ]; then
    read -r c < "$b.exit"
    if [ "$c" = 0 ]; then jobtpu_setup_said "done"; else jobtpu_setup_failed "$b" "$c"; fi
  elif jobtpu_ended "$w" && { wait "$w"; [ $? = "$JOBTPU_NO_PID_RECORD" ]; }; then
    jobtpu_setup_said failed "$JOBTPU_NO_PID_RECORD" \
      "cannot write the pid record $b.pid (disk full or not writable); setup was not started"
  else jobtpu_setup_said running; fi
}

# jobtpu_setup_now ROOT TAG WORKER [COMMAND]... : `jobtpu tpu setup`: run the setup commands again
# now, in the foreground (the caller shows their output), and record the exit code where a pass's
# setup of this incarnation (TAG) looks; the last line is the report (jobtpu_setup_said): done, failed
# with the exit code, or running when a pass's detached setup is still running there (nothing else
# is started).
jobtpu_setup_now() {
  local r=${1/#-/./-} tag=$2 worker=$3 b code=0 step
  shift 3
  mkdir -p "$r/setup" || { jobtpu_setup_said failed 1 "cannot create $r/setup"; return 0; }
  b="$(cd "$r/setup" && pwd -P)/$tag.$worker"
  if jobtpu_live_pid "$b.pid" > /dev/null; then jobtpu_setup_said running; return 0; fi
  rm -f "$b.exit" "$b.pid"
  cd ~ || { jobtpu_setup_said failed 1 "no home folder"; return 0; }
  for step; do bash -c -- "$step" < /dev/null 2>&1; code=$?; [ "$code" = 0 ] || break; done
  echo "$code" > "$b.exit.tmp" && mv "$b.exit.tmp" "$b.exit"
  if [ "$code" = 0 ]; then jobtpu_setup_said "done"; else jobtpu_setup_said failed "$code"; fi
}

jobtpu_setup root=runs tag=2026-01-01T00-00-00Z worker=3 retry=1 -- 'pip install -r requirements.txt' 'echo '"'"'done'"'"''
