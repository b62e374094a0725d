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

# The wrapper: what runs as a job worker's detached process-group leader (needs common.sh).
# The wrapper's own variables are named JOBTPU_w_*: no --env name may start with JOBTPU_, so none can
# change them.

# JOBTPU_w_expand VALUE : VALUE with $NAME and ${NAME} replaced by the value of the environment
# variable NAME at job start on the worker (after the --env values before it), like a shell would;
# empty when it is not in the environment (bash's own variables, like RANDOM, are not). `\$` is a
# literal `$`. Nothing else is interpreted: no $(...), backticks, arithmetic or ${X:-...}, so a value
# can never run a command. Pure bash (no eval, no external tool): the job's PATH may already be in
# force when it runs. The result is left in JOBTPU_w_x.
JOBTPU_w_expand() {
  local JOBTPU_w_rest=$1 JOBTPU_w_pre JOBTPU_w_name JOBTPU_w_w=abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789
  local JOBTPU_w_bs="\\" JOBTPU_w_ds='$'
  JOBTPU_w_x=""
  while :; do
    JOBTPU_w_pre=${JOBTPU_w_rest%%["$JOBTPU_w_bs$JOBTPU_w_ds"]*}; JOBTPU_w_x+=$JOBTPU_w_pre; JOBTPU_w_rest=${JOBTPU_w_rest:${#JOBTPU_w_pre}}
    [ -z "$JOBTPU_w_rest" ] && return 0
    if [ "${JOBTPU_w_rest:0:2}" = "$JOBTPU_w_bs$JOBTPU_w_ds" ]; then JOBTPU_w_x+=$JOBTPU_w_ds; JOBTPU_w_rest=${JOBTPU_w_rest:2}; continue; fi
    if [ "${JOBTPU_w_rest:0:1}" = "$JOBTPU_w_bs" ]; then JOBTPU_w_x+=$JOBTPU_w_bs; JOBTPU_w_rest=${JOBTPU_w_rest:1}; continue; fi
    if [ "${JOBTPU_w_rest:1:1}" = "{" ]; then
      JOBTPU_w_name=${JOBTPU_w_rest:2}; JOBTPU_w_name=${JOBTPU_w_name%%[!"$JOBTPU_w_w"]*}
      if [ -n "$JOBTPU_w_name" ] && [[ ${JOBTPU_w_name:0:1} != [0123456789] ]] && [ "${JOBTPU_w_rest:$((2 + ${#JOBTPU_w_name})):1}" = "}" ]; then
        [[ ${!JOBTPU_w_name@a} == *x* ]] && JOBTPU_w_x+=${!JOBTPU_w_name}; JOBTPU_w_rest=${JOBTPU_w_rest:$((3 + ${#JOBTPU_w_name}))}; continue
      fi
    else
      JOBTPU_w_name=${JOBTPU_w_rest:1}; JOBTPU_w_name=${JOBTPU_w_name%%[!"$JOBTPU_w_w"]*}
      if [ -n "$JOBTPU_w_name" ] && [[ ${JOBTPU_w_name:0:1} != [0123456789] ]]; then
        [[ ${!JOBTPU_w_name@a} == *x* ]] && JOBTPU_w_x+=${!JOBTPU_w_name}; JOBTPU_w_rest=${JOBTPU_w_rest:$((1 + ${#JOBTPU_w_name}))}; continue
      fi
    fi
    JOBTPU_w_x+=$JOBTPU_w_ds; JOBTPU_w_rest=${JOBTPU_w_rest:1}
  done
}

# JOBTPU_w_load FILE : the job's environment from FILE (NUL-terminated `name mode value` triples, as
# jobtpu_launch writes it) into the arrays JOBTPU_w_n, JOBTPU_w_m and JOBTPU_w_v. The file is data,
# never run. Fails when it cannot be read or ends inside a triple.
JOBTPU_w_load() {
  local JOBTPU_w_a JOBTPU_w_b JOBTPU_w_c
  while IFS= read -r -d '' JOBTPU_w_a; do
    IFS= read -r -d '' JOBTPU_w_b && IFS= read -r -d '' JOBTPU_w_c || return 1
    JOBTPU_w_n+=("$JOBTPU_w_a"); JOBTPU_w_m+=("$JOBTPU_w_b"); JOBTPU_w_v+=("$JOBTPU_w_c")
  done < "$1"
}

# The wrapper's two watches, the time limit (JOBTPU_w_timer) and a stop request (JOBTPU_w_stopper), each
# run in a bash of its own session (JOBTPU_w_detach), a child of no process of the job's and without
# its marker: a job that signals its process group or its session (`kill 0`, `pkill -g`, `pkill -s`),
# its parent's children, or every process that carries its marker, reaches neither, and the limit
# holds without a pass, as slurmd's does. A watch's stdin is the wrapper's word: a line once the job
# has ended (the watch ends at once), or the end of the pipe with no line when the wrapper is gone
# (the job ended it): the watch then goes on while any process of the job is left, and ends with the
# last. Its stdout is a pipe the wrapper reads to its end: the wrapper records the job's exit only
# once the watch, and everything it started, is gone. A watch signals only the job's processes
# (JOBTPU_w_procs), never a process that reuses one of their pids.

# JOBTPU_w_now : microseconds since the epoch, in JOBTPU_w_us (bash 5's EPOCHREALTIME, else date).
JOBTPU_w_now() {
  if [ -n "${EPOCHREALTIME:-}" ]; then JOBTPU_w_us=${EPOCHREALTIME//[!0-9]/}; else JOBTPU_w_us=$(date +%s%6N); fi
}

# JOBTPU_w_nap UNTIL LEADER START MARK : wait until UNTIL (microseconds since the epoch) for the
# wrapper's word on stdin. Succeeds when the time came; fails when the job ended first: the wrapper
# said so, or, the wrapper gone, no process of the job's is left (looked for every second).
JOBTPU_w_nap() {
  local JOBTPU_w_left JOBTPU_w_rc
  while :; do
    JOBTPU_w_now; JOBTPU_w_left=$(($1 - JOBTPU_w_us))
    [ "$JOBTPU_w_left" -gt 0 ] || return 0
    if [ -z "${JOBTPU_w_alone:-}" ]; then
      IFS= read -r -t "$((JOBTPU_w_left / 1000000)).$(printf '%06d' $((JOBTPU_w_left % 1000000)))" _
      JOBTPU_w_rc=$?
      [ "$JOBTPU_w_rc" = 0 ] && return 1  # the job ended
      [ "$JOBTPU_w_rc" -gt 128 ] && return 0  # the time came
      JOBTPU_w_alone=1  # the end of the pipe, no word: the wrapper is gone
    else
      [ -n "$(JOBTPU_w_procs "$2" "$3" "$4")" ] || return 1
      [ "$JOBTPU_w_left" -gt 1000000 ] && JOBTPU_w_left=1000000
      sleep "$((JOBTPU_w_left / 1000000)).$(printf '%06d' $((JOBTPU_w_left % 1000000)))"
    fi
  done
}

# JOBTPU_w_timer SIGNAL DELAY LEADER START LIMIT GRACE STEM MARK : a watch (JOBTPU_w_detach) of the job
# whose wrapper is LEADER (its pid, the job's process group; START its /proc start time) and whose
# processes carry MARK. With SIGNAL: DELAY seconds after the start, send it to every process of the
# job's group but the wrapper (--signal: the job may checkpoint before its --timeout). With LIMIT:
# LIMIT seconds after the start, while a process of the job's is left, mark STEM.timedout (the pass
# reads it: the attempt ran past its --timeout, whatever its exit code) and TERM the job's processes
# but the wrapper, KILL what is left after GRACE tenths of a second; the wrapper then records the
# exit as ever. The worker keeps the time, as Slurm's node does for --time: passes may be a minute
# apart, or stopped.
JOBTPU_w_timer() {
  local JOBTPU_w_t0 JOBTPU_w_p JOBTPU_w_s JOBTPU_w_all=()
  JOBTPU_w_now; JOBTPU_w_t0=$JOBTPU_w_us
  if [ -n "$1" ]; then
    JOBTPU_w_nap "$((JOBTPU_w_t0 + ${2%.*} * 1000000))" "$3" "$4" "$8" || exit 0
    for JOBTPU_w_p in $(JOBTPU_w_group "$3" "$4" "$8"); do
      [ "$JOBTPU_w_p" = "$3" ] || kill -s "$1" "$JOBTPU_w_p" 2>/dev/null
    done
  fi
  [ -n "${5:-}" ] || exit 0
  JOBTPU_w_nap "$((JOBTPU_w_t0 + $(awk -v l="$5" 'BEGIN { printf "%d", l * 1000000 }')))" "$3" "$4" "$8" || exit 0
  for JOBTPU_w_p in $(JOBTPU_w_procs "$3" "$4" "$8"); do
    [ "$JOBTPU_w_p" = "$3" ] || JOBTPU_w_all+=("$JOBTPU_w_p")
  done
  [ ${#JOBTPU_w_all[@]} -gt 0 ] || exit 0  # the job ended as its time came
  : > "${7:?}.timedout"
  for JOBTPU_w_p in "${JOBTPU_w_all[@]}"; do kill -TERM "$JOBTPU_w_p" 2>/dev/null; done
  for _ in $(seq "${6:-50}"); do
    JOBTPU_w_s=""
    for JOBTPU_w_p in "${JOBTPU_w_all[@]}"; do JOBTPU_w_alive "$JOBTPU_w_p" && JOBTPU_w_s=1; done
    [ -z "$JOBTPU_w_s" ] && break
    sleep 0.1
  done
  for JOBTPU_w_p in $(JOBTPU_w_procs "$3" "$4" "$8"); do
    [ "$JOBTPU_w_p" = "$3" ] || kill -KILL "$JOBTPU_w_p" 2>/dev/null
  done
}

# JOBTPU_w_alive PID : the process runs and is no zombie.
JOBTPU_w_alive() {
  local JOBTPU_w_st
  read -r -a JOBTPU_w_st 2>/dev/null < "/proc/$1/stat" && [ "${JOBTPU_w_st[2]}" != Z ]
}

# JOBTPU_w_group LEADER START MARK : the members of the job's process group, one pid a line, while it
# is the job's: its leader is the wrapper (started at START), or a member carries MARK. A group that
# a later process made under a reused pid is none of the job's: nothing.
JOBTPU_w_group() {
  local JOBTPU_w_g JOBTPU_w_p JOBTPU_w_st JOBTPU_w_m
  JOBTPU_w_g=$(ps -eo pid=,pgid= | awk -v g="$1" '$2 == g {print $1}')
  [ -n "$JOBTPU_w_g" ] || return 0
  if read -r -a JOBTPU_w_st 2>/dev/null < "/proc/$1/stat" && [ "${JOBTPU_w_st[21]:-}" = "$2" ]; then
    echo "$JOBTPU_w_g"; return 0
  fi
  JOBTPU_w_m=" $(JOBTPU_w_marked "$3" | tr '\n' ' ') "
  for JOBTPU_w_p in $JOBTPU_w_g; do
    if [[ $JOBTPU_w_m == *" $JOBTPU_w_p "* ]]; then echo "$JOBTPU_w_g"; return 0; fi
  done
}

# JOBTPU_w_marked MARK : the live processes that carry MARK (<home id>.<job>.<attempt>.<worker>).
JOBTPU_w_marked() {
  local JOBTPU_w_h=${1%.*.*.*} JOBTPU_w_j JOBTPU_w_a JOBTPU_w_k
  IFS=. read -r JOBTPU_w_j JOBTPU_w_a JOBTPU_w_k <<< "${1#"$JOBTPU_w_h".}"
  jobtpu_marked "$JOBTPU_w_h" "$JOBTPU_w_j" "$JOBTPU_w_a" "$JOBTPU_w_k"
}

# JOBTPU_w_procs LEADER START MARK : the job worker's processes, its process group's (JOBTPU_w_group)
# and those that carry its marker (left the group by setsid or a double fork), one pid a line.
JOBTPU_w_procs() {
  JOBTPU_w_group "$@"
  JOBTPU_w_marked "$3"
}

# JOBTPU_w_stopper REQUEST POLL GRACE LEADER START MARK : a watch (JOBTPU_w_detach) of a job on the
# local machine. Every POLL seconds it looks for REQUEST (<root>/stop/<job>.<attempt>), which any
# member of a shared home's group may leave in the group's sticky folder, since only this account may
# signal the job (docs/design.md §7). Only a regular file counts, never a link, and it is never
# opened: the name is this attempt's, so a request can stop this job and nothing else. Then TERM the
# job's processes (the wrapper among them: no exit code, as when a pass stops it), and KILL what is
# left after GRACE tenths of a second. With FIRST (the job's --signal), REQUEST.signal asks for an
# eviction's stop (docs/reference/requests-and-rules.md §8): FIRST to the job's processes but the
# wrapper, GRACE tenths for the job to checkpoint and end, then the TERM and KILL as for REQUEST.
JOBTPU_w_stopper() {
  local JOBTPU_w_s JOBTPU_w_p JOBTPU_w_all=() JOBTPU_w_poll JOBTPU_w_q="$1.signal"
  JOBTPU_w_poll=$(awk -v l="$2" 'BEGIN { printf "%d", l * 1000000 }')
  [ -n "${7:-}" ] || JOBTPU_w_q="$1"
  until { [ -f "$1" ] && [ ! -L "$1" ]; } || { [ -f "$JOBTPU_w_q" ] && [ ! -L "$JOBTPU_w_q" ]; }; do
    JOBTPU_w_now
    JOBTPU_w_nap "$((JOBTPU_w_us + JOBTPU_w_poll))" "$4" "$5" "$6" || exit 0
  done
  if [ "$JOBTPU_w_q" != "$1" ] && [ ! -f "$1" ]; then
    for JOBTPU_w_p in $(JOBTPU_w_procs "$4" "$5" "$6"); do
      [ "$JOBTPU_w_p" = "$4" ] || { kill -s "$7" "$JOBTPU_w_p" 2>/dev/null; JOBTPU_w_all+=("$JOBTPU_w_p"); }
    done
    for _ in $(seq "$3"); do
      JOBTPU_w_s=""
      for JOBTPU_w_p in ${JOBTPU_w_all[@]+"${JOBTPU_w_all[@]}"}; do JOBTPU_w_alive "$JOBTPU_w_p" && JOBTPU_w_s=1; done
      [ -z "$JOBTPU_w_s" ] && exit 0  # it ended of its own (checkpointed): the wrapper records its exit
      sleep 0.1
    done
    JOBTPU_w_all=()
  fi
  for JOBTPU_w_p in $(JOBTPU_w_procs "$4" "$5" "$6"); do
    kill -TERM "$JOBTPU_w_p" 2>/dev/null; JOBTPU_w_all+=("$JOBTPU_w_p")
  done
  for _ in $(seq "$3"); do
    JOBTPU_w_s=""
    for JOBTPU_w_p in ${JOBTPU_w_all[@]+"${JOBTPU_w_all[@]}"}; do JOBTPU_w_alive "$JOBTPU_w_p" && JOBTPU_w_s=1; done
    [ -z "$JOBTPU_w_s" ] && break
    sleep 0.1
  done
  for JOBTPU_w_p in $(JOBTPU_w_procs "$4" "$5" "$6"); do kill -KILL "$JOBTPU_w_p" 2>/dev/null; done
}

# JOBTPU_w_detach FIFO FUNCTION ARG... : start the watch FUNCTION ARG... (a function of this program)
# in a bash of its own session, without the job's marker, whose parent is gone at once (so it is
# nobody's child in the job). Its stdin is the write end JOBTPU_w_L keeps, its stdout the read end
# JOBTPU_w_G keeps (through FIFO, a name in the wrapper's private meta folder, removed at once); both
# are added to JOBTPU_w_fds, which no watch started later and no job inherits. Fails when the watch
# did not say it runs.
JOBTPU_w_detach() {
  local JOBTPU_w_f=$1 JOBTPU_w_prog
  shift
  JOBTPU_w_prog="$(declare -f JOBTPU_w_now JOBTPU_w_nap JOBTPU_w_timer JOBTPU_w_alive JOBTPU_w_group JOBTPU_w_marked \
    JOBTPU_w_procs JOBTPU_w_stopper jobtpu_marks jobtpu_marked); echo ready; $1 \"\$@\""
  shift
  rm -f "$JOBTPU_w_f"; mkfifo -m 600 "$JOBTPU_w_f" || return 1
  exec {JOBTPU_w_L}> >(
    for JOBTPU_w_i in ${JOBTPU_w_fds[@]+"${JOBTPU_w_fds[@]}"}; do exec {JOBTPU_w_i}>&-; done
    env -u JOBTPU_MARK setsid "$BASH" -c "$JOBTPU_w_prog" jobtpu-watch "$@" <&0 > "$JOBTPU_w_f" &
  )
  exec {JOBTPU_w_G}< "$JOBTPU_w_f"
  rm -f "$JOBTPU_w_f"
  JOBTPU_w_fds+=("$JOBTPU_w_L" "$JOBTPU_w_G")
  # Its first word says it runs (no env, setsid or bash missing): a job without its watch never starts.
  IFS= read -r -u "$JOBTPU_w_G" JOBTPU_w_f && [ "$JOBTPU_w_f" = ready ]
}

# JOBTPU_w_end L G : tell the watch whose ends these are that the job has ended, and wait until it,
# and everything it started, is gone (the end of its stdout).
JOBTPU_w_end() {
  local JOBTPU_w_l=$1 JOBTPU_w_g=$2
  echo end 1>&"$JOBTPU_w_l" 2>/dev/null  # a watch that ended already (its pipe is closed): nothing to tell
  exec {JOBTPU_w_l}>&-
  while IFS= read -r -u "$JOBTPU_w_g" _; do :; done
  exec {JOBTPU_w_g}<&-
}
# jobtpu_wrapper STEM COMMAND [SIGNAL DELAY [UMASK [LIMIT GRACE [REQUEST POLL [FIRST]]]]] : runs in the login environment (never the job's, so an --env PATH
# cannot take bash, rm or mv away from it): record the pid or start nothing; load the env file STEM.env
# and delete it before the command starts; apply the env only in the process that becomes the
# command; record its exit code in STEM.exit; with SIGNAL, send it DELAY seconds after the start
# and with LIMIT, stop the job LIMIT seconds after the start, GRACE tenths between TERM and KILL
# (JOBTPU_w_timer); with REQUEST, obey a stop request (JOBTPU_w_stopper; FIRST: the job's --signal,
# which an eviction's request sends first). STEM is the absolute path
# stem of the worker's meta files. The command runs with UMASK (the login's): the wrapper's own files
# are private, the job's outputs are the user's business.
jobtpu_wrapper() {
  if ! jobtpu_record_pid "$1"; then
    rm -f "$1.pid.tmp"
    echo "jobtpu: cannot write the pid record $1.pid; the command was not started" >&2
    exit "$JOBTPU_NO_PID_RECORD"
  fi
  # The launch waits on fd 3 for this word (jobtpu_launch; a batch step starts the wrapper with fd 3
  # closed); closed at once, so that neither the job nor a watch holds it open. SIGPIPE is ignored
  # for the word alone: a launch that died meanwhile (its pass killed) must not take the job with it.
  trap '' PIPE; { echo up >&3; } 2>/dev/null; trap - PIPE; exec 3>&-
  JOBTPU_w_n=(); JOBTPU_w_m=(); JOBTPU_w_v=()
  JOBTPU_w_load "$1.env"; JOBTPU_w_read=$?; rm -f "$1.env"
  if [ "$JOBTPU_w_read" != 0 ] || [ -e "$1.env" ]; then
    echo "jobtpu: the job's environment file $1.env could not be read or deleted; the command was not started" >&2
    echo 1 > "$1.exit.tmp" && mv "$1.exit.tmp" "$1.exit"; exit 1
  fi
  # The watches' ends: a job started with none would run past its limit.
  local JOBTPU_w_start JOBTPU_w_st JOBTPU_w_t=() JOBTPU_w_r=()
  read -r -a JOBTPU_w_st < "/proc/$$/stat"; JOBTPU_w_start=${JOBTPU_w_st[21]}
  JOBTPU_w_fds=()
  if [ -n "${3:-}" ] || [ -n "${6:-}" ]; then
    JOBTPU_w_detach "$1.timer" JOBTPU_w_timer "${3:-}" "${4:-0}" "$$" "$JOBTPU_w_start" "${6:-}" "${7:-50}" "$1" \
      "$JOBTPU_MARK" && JOBTPU_w_t=("$JOBTPU_w_L" "$JOBTPU_w_G") || JOBTPU_w_t=(failed)
  fi
  if [ -n "${8:-}" ] && [ "${JOBTPU_w_t[0]:-}" != failed ]; then
    JOBTPU_w_detach "$1.stopper" JOBTPU_w_stopper "$8" "$9" "$7" "$$" "$JOBTPU_w_start" "$JOBTPU_MARK" "${10:-}" &&
      JOBTPU_w_r=("$JOBTPU_w_L" "$JOBTPU_w_G") || JOBTPU_w_r=(failed)
  fi
  if [ "${JOBTPU_w_t[0]:-}" = failed ] || [ "${JOBTPU_w_r[0]:-}" = failed ]; then
    echo "jobtpu: the job's time limit or stop watch could not start (mkfifo, setsid); the command was not started" >&2
    [ ${#JOBTPU_w_t[@]} = 2 ] && JOBTPU_w_end "${JOBTPU_w_t[@]}"
    echo 1 > "$1.exit.tmp" && mv "$1.exit.tmp" "$1.exit"; exit 1
  fi
  (
    for JOBTPU_w_i in ${JOBTPU_w_fds[@]+"${JOBTPU_w_fds[@]}"}; do exec {JOBTPU_w_i}>&-; done  # the watches' alone
    # Where jobtpu.save_result writes the job's value, beside the log: the probe brings worker 0's home.
    export JOBTPU_RESULT="$1.result"
    # The bash to run is kept where no --env name can reach it (BASH itself is a valid name).
    set -- "$BASH" "$2" "${3:-}" "${4:-}" "${5:-}"
    for JOBTPU_w_i in "${!JOBTPU_w_n[@]}"; do
      JOBTPU_w_x=${JOBTPU_w_v[JOBTPU_w_i]}; [ "${JOBTPU_w_m[JOBTPU_w_i]}" = x ] && JOBTPU_w_expand "$JOBTPU_w_x"
      export "${JOBTPU_w_n[JOBTPU_w_i]}=$JOBTPU_w_x"
    done
    if [ -n "${5:-}" ]; then umask "$5"; fi
    exec "$1" -c -- "$2"  # "--": a command that begins with "-" is a script, never options of bash
  )
  JOBTPU_w_c=$?
  trap '' PIPE  # (after the job: an ignored signal would be the job's too) a watch that ended is no error
  [ ${#JOBTPU_w_t[@]} = 2 ] && JOBTPU_w_end "${JOBTPU_w_t[@]}"
  [ ${#JOBTPU_w_r[@]} = 2 ] && JOBTPU_w_end "${JOBTPU_w_r[@]}"
  echo "$JOBTPU_w_c" > "$1.exit.tmp" && mv "$1.exit.tmp" "$1.exit"
}

# Starting job workers (needs common.sh, wrapper.sh and tpu.sh).

# jobtpu_launch_init stale_minutes=M unpack_bad_exit=C unpack_source=TEXT reset_tenths=T : what every
# launch of this script shares (named arguments, jobtpu_named). A claim with no pid after M minutes
# means its start never happened; the snapshot is checked and unpacked by TEXT
# (jobtpu/snapshot/unpack.py, run by python3 on the worker), whose exit code C says the archive is
# damaged. Another worker replacing the job folder is given T tenths of a second (timing's reset_wait).
jobtpu_launch_init() {
  local stale_minutes="" unpack_bad_exit="" unpack_source="" reset_tenths=""
  jobtpu_named "stale_minutes unpack_bad_exit unpack_source reset_tenths" "$@" || return 1
  jobtpu_stale_minutes=$stale_minutes jobtpu_unpack_bad_exit=$unpack_bad_exit
  jobtpu_unpack_source=$unpack_source jobtpu_reset_tenths=$reset_tenths
}

# jobtpu_fence ROOT HOME_ID TOKEN: whether a launch from the runner holding lease TOKEN may start here
# (docs/reference/home-files.md §1.7): no launch of this home with a higher token came to ROOT before.
# Records TOKEN when it is the highest yet; 0 (a home without a lease) is never refused.
jobtpu_fence() {
  local f="$1/meta/.runner_token.$2" seen=0
  [ "$3" = 0 ] && return 0
  if [ -s "$f" ]; then read -r seen < "$f"; fi
  [[ $seen =~ ^[0-9]+$ ]] || seen=0
  [ "$3" -lt "$seen" ] && return 1
  if [ "$3" -gt "$seen" ]; then echo "$3" > "$f.$$" && mv -f "$f.$$" "$f"; fi
  return 0
}

# jobtpu_tree ROOT ARCHIVE : into jobtpu_tree_path, where the verified tree of ROOT/archives/ARCHIVE is
# kept: the folder a successful unpack of it left (jobtpu_keep_tree), named by the archive and by the
# identity of its file as it is now (inode, size, modification and change times, to the nanosecond).
# A copy rewritten or replaced in any way (a damaged one, a push) names another tree, so a tree is only
# ever used for the very file it was checked from. Empty when the file cannot be looked at.
jobtpu_tree() {
  local id
  jobtpu_tree_path=""
  id=$(stat -L -c '%i.%s.%y.%z' -- "$1/archives/$2" 2>/dev/null) || return 0
  jobtpu_tree_path="$1/archives/.tree.${2%.tar.gz}.${id//[!0-9.]/}"
}

# jobtpu_keep_tree ROOT ARCHIVE FROM TREE : keep a copy of FROM, a job folder just unpacked from
# ARCHIVE, as its TREE (jobtpu_tree), for the next job's folder to be copied from. Made aside and moved
# in whole, so a tree is never seen half made; a tree another launch made first is kept. Its failure
# (a full disk) costs only the next job an unpack.
jobtpu_keep_tree() {
  local x
  x=$(mktemp -d "$1/archives/.treetmp.${2%.tar.gz}.XXXXXX") || return 0
  cp -R -p -- "$3/." "$x" 2>/dev/null && mv -T "$x" "$4" 2>/dev/null && return 0
  rm -rf "$x"
}

# jobtpu_launch root= home_id= job= attempt= worker= archive= fresh= tpu_cleanup= command= signal= delay=
#   poll= grace= limit= token= first= -- [NAME MODE VALUE]...
# Start one worker detached, idempotently, and print one report (jobtpu_say launch, outcome ok with its
# pid | pending | need-archive | bad-archive with why | fail with why). Named arguments (jobtpu_named),
# every one given. fresh=1: start from the snapshot, replacing a folder an earlier attempt left (a
# rerun). tpu_cleanup=1: clear stale TPU device holders and the libtpu lock file first. signal (empty:
# none) is sent to the job's processes `delay` seconds after the start (--signal). poll (seconds; 0:
# none) is how often the wrapper looks for a stop request in ROOT/stop, which then stops the job with
# `grace` tenths between TERM and KILL (the local machine: a teammate's kill, docs/design.md §7); first
# (empty: none) is the job's --signal, which an eviction's stop request sends before the TERM. limit
# (seconds; empty: none) is the job's --timeout, which the wrapper enforces on the worker (`grace`
# tenths between TERM and KILL). token is the launching runner's lease token (jobtpu_fence; 0: none). The NAME MODE VALUE triples after `--` are the job's environment (mode
# `x`: $NAME and ${NAME} in VALUE are expanded at job start; `=`: taken as it is). A subshell: every
# `exit` below ends this worker's launch only.
jobtpu_launch() (
  local root="" home_id="" job="" attempt="" worker="" archive="" fresh="" tpu_cleanup="" command="" signal="" delay=""
  local poll="" grace="" limit="" token="" first="" r
  jobtpu_named "root home_id job attempt worker archive fresh tpu_cleanup command signal delay poll grace limit token first" "$@" ||
    exit
  # shellcheck disable=SC2154 # set by jobtpu_named (common.sh)
  shift "$jobtpu_named_n"
  r=${root/#-/./-}
  # The one report of this worker's launch: OUTCOME, then the pid (ok) or why.
  said() {
    if [ "$1" = ok ]; then jobtpu_say launch n:job "$job" n:attempt "$attempt" n:worker "$worker" s:outcome ok n:pid "$2"
    else jobtpu_say launch n:job "$job" n:attempt "$attempt" n:worker "$worker" s:outcome "$1" s:detail "${2:-}"; fi
  }
  mkdir -p "$r/meta/$job" "$r/jobs" "$r/archives" || { said fail "cannot create $r"; exit; }
  jobtpu_private_root "$r"
  bad="is not a folder of this account's alone (a link, another account's, or writable by others)"
  jobtpu_own_folder "$r/meta/$job" || { said fail "$r/meta/$job $bad"; exit; }
  m=$(cd "$r/meta/$job" && pwd -P) || exit
  b="$m/$attempt.$worker"
  # A worker handed to a batch scheduler (slurm.sh) is launched once its job id is recorded.
  if [ -n "${jobtpu_batch_on:-}" ] && jobtpu_batch_adopt "$b" "jobtpu-$home_id.$job.$attempt.$worker"; then exit; fi
  if [ -s "$b.pid" ]; then read -r p _ < "$b.pid"; said ok "$p"; exit; fi
  if ! mkdir "$b.claim" 2>/dev/null; then
    if [ -n "$(find "$b.claim" -maxdepth 0 -mmin "-$jobtpu_stale_minutes")" ]; then said pending; exit; fi
    # A stale claim whose job still has a process here (it lost its pid record) is no dead launch.
    if [ -n "$(jobtpu_marked "$home_id" "$job" "$attempt" "$worker")" ]; then said pending; exit; fi
    rm -rf "$b.claim"; mkdir "$b.claim" 2>/dev/null || { said pending; exit; }
  fi

  # The job's folder "$j" from the snapshot, made with the worker's claim held. The archive is checked
  # against its name and unpacked by python3 on the worker, never trusted: a damaged copy is reported
  # as `bad-archive` for the home to push again. With FRESH, a folder an earlier attempt left is
  # replaced, once per attempt: workers that share the root agree through an atomic `mkdir` of
  # "$m/<attempt>.reset" (taken over when stale, like a claim).
  j="$r/jobs/$job"; s=""
  # Release the claim (and an unfinished reset) and report "OUTCOME [WHY]"; nothing was started.
  give_up() {
    rmdir "$b.claim"
    if [ -n "$s" ] && [ ! -e "$s/done" ]; then rm -rf "$s"; fi
    if [[ $1 == *" "* ]]; then said "${1%% *}" "${1#* }"; else said "$1"; fi
    exit
  }
  # A runner that lost its lease to a newer one starts nothing here, whatever it still believes.
  jobtpu_fence "$r" "$home_id" "$token" || give_up "fail fenced: a runner with a newer lease token launches here"
  if [ "$fresh" = 1 ]; then
    s="$m/$attempt.reset"; own=""
    if [ ! -e "$s/done" ]; then
      if mkdir "$s" 2>/dev/null; then own=1
      else  # another worker sharing this root is replacing the folder: give it a while
        for _ in $(seq "$jobtpu_reset_tenths"); do { [ -e "$s/done" ] || [ ! -d "$s" ]; } && break; sleep 0.1; done
        if [ ! -e "$s/done" ]; then
          if [ -n "$(find "$s" -maxdepth 0 -mmin "-$jobtpu_stale_minutes" 2>/dev/null)" ]; then s=""; give_up pending; fi
          rm -rf "$s"; if mkdir "$s" 2>/dev/null; then own=1; else s=""; give_up pending; fi
        fi
      fi
      if [ -n "$own" ] && { [ -e "$j" ] || [ -L "$j" ]; }; then
        mv -T "$j" "$s/old" 2>/dev/null || give_up "fail cannot move the folder of an earlier attempt aside"
        rm -rf "$s/old"
      fi
    fi
  fi
  if [ ! -d "$j" ]; then
    a="$r/archives/$archive"
    [ -f "$a" ] || give_up need-archive
    # An unpack cut short (the connection dropped, the worker rebooted) leaves its folder behind;
    # one older than a claim can live is nobody's any more. (A glob first: no `find` when none is left.)
    for x in "$r/jobs/.unpack.$job.$worker."*; do
      [ -e "$x" ] && find "$r/jobs" -mindepth 1 -maxdepth 1 -name ".unpack.$job.$worker.*" \
        -mmin "+$jobtpu_stale_minutes" -exec rm -rf {} + 2>/dev/null
      break
    done
    # The job's folder is made aside, in "$t", and moved in whole.
    new_t() { t=$(mktemp -d "$r/jobs/.unpack.$job.$worker.XXXXXX") || give_up "fail cannot create a folder in $r/jobs"; }
    new_t
    # The verified tree of this very archive file (jobtpu_tree) is copied, not unpacked again; without
    # one, python3 checks and unpacks the archive, and its result is kept as the tree for the next job.
    # (The copy gives "$t" the tree's mode, the umask's when it was made: no chmod.)
    jobtpu_tree "$r" "$archive"; tree=$jobtpu_tree_path; hit=""
    if [ -n "$tree" ] && jobtpu_own_folder "$tree"; then
      if cp -R -p --reflink=auto -- "$tree/." "$t" 2>/dev/null; then hit=1
      else rm -rf "$t"; new_t; fi
    fi
    if [ -n "$hit" ]; then
      mv -T "$t" "$j" 2>/dev/null || rm -rf "$t"
    else
      # mktemp makes it 0700 whatever the umask: in a shared home's run root a teammate's fetch reads it.
      chmod "$(umask -S)" "$t"
      command -v python3 > /dev/null || give_up "fail python3 is needed on the worker to unpack the snapshot"
      # -I -S: no site, no user site, no PYTHON* variable: the unpack needs only the standard library,
      # starts faster, and no module of the login's can change what it does.
      python3 -I -S -c "$jobtpu_unpack_source" "$a" "$t" 2> "$b.unpack.err"; c=$?
      e=$(head -c 300 "$b.unpack.err" | tr "\n" " "); rm -f "$b.unpack.err"
      if [ "$c" = 0 ]; then
        [ -n "$tree" ] && jobtpu_keep_tree "$r" "$archive" "$t" "$tree"
        mv -T "$t" "$j" 2>/dev/null || rm -rf "$t"
      else rm -rf "$t"; fi
      [ "$c" = "$jobtpu_unpack_bad_exit" ] && give_up "bad-archive $e"
      [ -d "$j" ] || give_up "fail unpack: $e"
    fi
  fi
  jobtpu_own_folder "$j" || give_up "fail $j $bad"
  if [ -n "$s" ]; then touch "$s/done"; fi

  if [ "$tpu_cleanup" = 1 ]; then jobtpu_tpu_cleanup "$r"; fi
  cd "$j" || { rmdir "$b.claim"; said fail cd; exit; }
  # The environment goes to a file only the wrapper reads (and deletes): values, secrets among them,
  # never appear on a command line that `ps` shows.
  (umask 077; for x; do printf '%s\0' "$x"; done > "$b.env") ||
    { rm -f "$b.env"; rmdir "$b.claim"; said fail "cannot write the env file $b.env"; exit; }
  if [ -n "${jobtpu_batch_on:-}" ]; then
    jobtpu_batch_submit "$b" "$j" "jobtpu-$home_id.$job.$attempt.$worker" "$command" "$signal" "$delay" "$limit" "$grace"
    exit
  fi
  ask=()  # the stop request this attempt obeys: its name only, in the run root's real path
  if [ "$poll" != 0 ]; then ask=("$(cd "$r" && pwd -P)/stop/$job.$attempt" "$poll" "$first"); fi
  # The wrapper says on its fd 3 that its pid is recorded: a pipe whose write end only the wrapper
  # holds, so the read below returns on its word, or on the pipe's end when the wrapper is gone,
  # never later than it must (an event, not a poll). /proc/self/fd reopens the one pipe as its two ends.
  exec {k}<> <(:)
  exec {up}> "/proc/self/fd/$k"
  exec {down}< "/proc/self/fd/$k" {k}>&-
  # SIGHUP ignored, as nohup would (its output is redirected already), without starting nohup; the
  # background subshell becomes setsid, then the wrapper, so $! is the wrapper's pid.
  (
    trap '' HUP
    JOBTPU_MARK="$home_id.$job.$attempt.$worker" exec setsid bash -c "$(jobtpu_program jobtpu_record_pid JOBTPU_w_expand \
      JOBTPU_w_load JOBTPU_w_now JOBTPU_w_nap JOBTPU_w_timer jobtpu_marks jobtpu_marked JOBTPU_w_alive JOBTPU_w_group \
      JOBTPU_w_marked JOBTPU_w_procs JOBTPU_w_stopper JOBTPU_w_detach JOBTPU_w_end jobtpu_wrapper)" \
      "jobtpu-$job" "$b" "$command" "$signal" "$delay" "$(jobtpu_job_umask)" "$limit" "$grace" ${ask[@]+"${ask[@]}"}
  ) > "$b.log" 2>&1 < /dev/null 3>&"$up" {up}>&- {down}<&- &
  w=$!
  exec {up}>&-
  IFS= read -r -t 4 -u "$down" _; c=$?
  exec {down}<&-
  if [ -s "$b.pid" ]; then read -r p _ < "$b.pid"; said ok "$p"; exit; fi
  # The pipe's end without a word: the wrapper has exited, or is exiting (its files close before
  # it is a zombie), so waiting for it is at once. Past the time (c > 128), it may still be running.
  if [ "$c" -gt 128 ] && ! jobtpu_ended "$w"; then said pending; exit; fi
  wait "$w"; c=$?
  # 0: setsid forked and left the wrapper to go on; it records its pid (or fails) on its own.
  [ "$c" = 0 ] && { said pending; exit; }
  rm -f "$b.env"; rmdir "$b.claim" 2>/dev/null
  if [ "$c" = "$JOBTPU_NO_PID_RECORD" ]; then
    said fail "cannot write the pid record $b.pid (disk full or not writable); the command was not started"
  else said fail "the wrapper could not start (exit $c): $(head -c 200 "$b.log" | tr '\n' ' ')"; fi
)

# A Slurm cluster's worker, reached at its login host (needs common.sh; reports.sh for the probe;
# launch.sh for the submit; a sweep's job array is slurm_array.sh). The run root is on the cluster's
# shared filesystem: the login host and every compute node see the same meta files, so the wrapper's
# pid, exit and log records are written on the node and read at the login.
# STEM.slurm holds the attempt's Slurm job id (docs/reference/machines-json.md, "A Slurm cluster"); an
# array member writes it when it starts, and until then the probe and the stop use the id the home
# has from the launch's report (an ID word after each worker).

# Slurm's job states that have ended (squeue --states=all keeps them a while, MinJobAge); every other
# state (pending, running, completing, suspended, requeued...) still holds the job in Slurm.
jobtpu_slurm_ended=" COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL PREEMPTED BOOT_FAIL DEADLINE OUT_OF_MEMORY REVOKED "

# jobtpu_batch OPTION... : the sbatch options of the next jobtpu_launch call, which then hands its worker
# to Slurm (jobtpu_batch_submit) instead of starting it on this host.
jobtpu_batch() {
  # shellcheck disable=SC2034 # read by jobtpu_launch (launch.sh)
  jobtpu_batch_on=1
  jobtpu_batch_opts=("$@")
}

# jobtpu_batch_record STEM ID : the Slurm job id into STEM.slurm, atomically.
jobtpu_batch_record() {
  echo "$2" > "$1.slurm.tmp" && mv "$1.slurm.tmp" "$1.slurm"
}

# jobtpu_batch_adopt STEM NAME : (in jobtpu_launch, before its claim) when this attempt was handed to
# Slurm already, say `ok` with its job id and succeed: a launch is never submitted twice. A claim with
# no recorded id may be a submit cut short after sbatch answered, and STEM.unsure one whose sbatch got
# no answer from Slurm's controller (jobtpu_batch_submit): Slurm is asked for a job of this attempt's
# name; when Slurm cannot be asked, the launch is `pending`. Fails when nothing was submitted.
jobtpu_batch_adopt() {
  local id=""
  if [ ! -s "$1.slurm" ]; then
    [ -e "$1.claim" ] || [ -e "$1.unsure" ] || return 1
    id=$(squeue --noheader --user="$(id -un)" --states=all --name="$2" --format=%i 2>/dev/null) || { said pending; return 0; }
    id=${id%%[!0-9]*}
    # Slurm answers and has none: the submit never took (or the controller lost it in a crash).
    if [ -z "$id" ]; then rm -f "$1.unsure"; return 1; fi
    jobtpu_batch_record "$1" "$id" || { said pending; return 0; }
    rm -f "$1.unsure"
  fi
  read -r id _ < "$1.slurm"
  jobtpu_batch_ok "$2" "$id"
}

# jobtpu_batch_ok NAME ID : the `launch` report, ok, of the worker whose Slurm job is named NAME
# (jobtpu-<home id>.<job>.<attempt>.<worker>, its marker) and has the id ID (a number, or an array
# member's <array id>_<index>).
jobtpu_batch_ok() {
  local h=${1#jobtpu-} j a w
  h=${h%.*.*.*}
  IFS=. read -r j a w <<< "${1#jobtpu-"$h".}"
  if [[ $2 =~ ^[0-9]+$ ]]; then
    jobtpu_say launch n:job "$j" n:attempt "$a" n:worker "$w" s:outcome ok n:slurm "$2"
  else
    jobtpu_say launch n:job "$j" n:attempt "$a" n:worker "$w" s:outcome ok s:slurm "$2"
  fi
}

# jobtpu_batch_program : the wrapper's program as a batch step runs it (a lone job's and every array
# member's): the batch step's exit is the job's, for Slurm's own records (sacct, squeue's FAILED).
jobtpu_batch_program() {
  jobtpu_program jobtpu_record_pid JOBTPU_w_expand JOBTPU_w_load JOBTPU_w_now JOBTPU_w_nap \
    JOBTPU_w_timer jobtpu_marks jobtpu_marked JOBTPU_w_alive JOBTPU_w_group JOBTPU_w_marked JOBTPU_w_procs \
    JOBTPU_w_stopper JOBTPU_w_detach JOBTPU_w_end jobtpu_wrapper
  # shellcheck disable=SC2016 # the wrapper program's text, expanded when it runs
  printf '\n%s' 'read -r JOBTPU_w_c < "$1.exit" 2> /dev/null && exit "$JOBTPU_w_c"; exit 1'
}

# jobtpu_batch_submit STEM FOLDER NAME COMMAND SIGNAL DELAY LIMIT GRACE : (in jobtpu_launch, with the
# claim held, the folder unpacked and STEM.env written) write the batch script STEM.sbatch and hand it to
# sbatch with the options jobtpu_batch gave: one `launch` report, ok with the Slurm job id, or fail
# with sbatch's own words, the env file and the claim taken back (nothing is left half-made). The
# batch script becomes the wrapper, as the launch on an ssh machine starts it, and
# exits with the job's code. A run Slurm requeued (`scontrol requeue`, a preemption, a node failure)
# never runs the command again under this attempt: the pass sees the requeue, and jobtpu's recovery
# rules start the next attempt, which resumes.
jobtpu_batch_submit() {
  local b=$1 out id program rc job=${3%.*.*}
  job=${job##*.}
  program=$(jobtpu_batch_program)
  {
    echo '#!/bin/bash'
    # A requeued run does nothing, and ends failed, never COMPLETED: a job handed over after this one
    # with afterok (--after, decide/slurm_after.py) must not start on a run that did not do the work.
    # shellcheck disable=SC2016 # written for the batch script, expanded there
    echo '[ "${SLURM_RESTART_COUNT:-0}" = 0 ] || exit 75'
    printf 'b=%q\n' "$b"
    # shellcheck disable=SC2016 # written for the batch script, expanded there
    echo 'i=$SLURM_JOB_ID; [ -z "${SLURM_ARRAY_JOB_ID:-}" ] || i=${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID'
    # shellcheck disable=SC2016 # written for the batch script, expanded there
    echo '[ -s "$b.slurm" ] || { echo "$i" > "$b.slurm.tmp" && mv "$b.slurm.tmp" "$b.slurm"; }'
    printf 'cd %q || exit 1\n' "$(pwd -P)"  # jobtpu_launch runs this in the job's folder, $2
    printf 'export JOBTPU_MARK=%q\n' "${3#jobtpu-}"
    # shellcheck disable=SC2016 # written for the batch script, expanded there
    # The wrapper is the batch step itself (slurmstepd made it a process-group leader, as the wrapper
    # wants): Slurm's signals and its end of the job reach every process of the job. Its fd 3 closed:
    # the wrapper says it runs on fd 3 only to a launch that waits there (jobtpu_launch).
    printf 'exec bash -c %q %q "$b" %q %q %q %q %q %q 3>&-\n' "$program" "jobtpu-$job" "$4" "$5" "$6" \
      "$(jobtpu_job_umask)" "$7" "$8"
  } > "$b.sbatch" || { rm -f "$b.env" "$b.sbatch"; give_up "fail cannot write the batch script $b.sbatch"; }
  out=$(sbatch --parsable --requeue --job-name="$3" --output="$b.log" --open-mode=append \
    ${jobtpu_batch_opts[@]+"${jobtpu_batch_opts[@]}"} "$b.sbatch" 2>&1)
  rc=$? id=${out%%;*}
  if [ "$rc" != 0 ] || [[ ! $id =~ ^[0-9]+$ ]]; then
    out=${out//$'\n'/ }
    if jobtpu_slurm_away "$out"; then
      # No answer from Slurm's controller (restarting, or it crashed during the submit): it may have
      # taken the job all the same. Nothing fails: the launch is `pending`, and the next one asks Slurm
      # for this attempt's name before it submits again (jobtpu_batch_adopt), never twice.
      touch "$b.unsure" && rmdir "$b.claim"
      said pending "${out:0:400}"
      exit
    fi
    rm -f "$b.env" "$b.sbatch"
    give_up "fail ${out:0:400}"
  fi
  jobtpu_batch_record "$b" "$id" || {
    said fail "Slurm job $id took the attempt, but its id could not be written to $b.slurm"; exit; }
  jobtpu_batch_ok "$3" "$id"
}

# jobtpu_slurm_away SAID : whether a Slurm command's error says the controller did not answer (never
# a refusal of what was asked).
jobtpu_slurm_away() {
  case $1 in
    *"Unable to contact slurm controller"* | *"Socket timed out"* | *"Zero Bytes were transmitted"* | \
      *"Communication connection failure"* | *"Communication send failure"* | \
      *"Communication receive failure"* | *"backup controller in standby"* | *"Connection reset by peer"* | \
      *"Connection refused"* | *"Broken pipe"*) return 0 ;;
  esac
  return 1
}

# jobtpu_slurm_probe root=ROOT chunk=CHUNK tail=TAIL result=RESULT -- [JOB ATTEMPT WORKER OFFSET ID]... :
# what jobtpu_probe says of each worker (ID: its Slurm job id as the home knows it, - when it does not;
# its STEM.slurm record, when there, wins) (an ended worker 0's saved value too, its `result` report, at
# most RESULT bytes of it), its liveness from Slurm: one squeue for every job of this account. When
# Slurm does not answer (slurmctld restarting), nothing is said and the probe fails: the pass takes the
# cluster as unreachable this once and changes none of its jobs. Besides, per worker: waiting, the
# reason Slurm holds it pending; preempted, Slurm requeued or preempted it.
# A worker whose job squeue no longer knows (it forgets an ended job MinJobAge after its end) and whose
# wrapper wrote no exit record is looked up in Slurm's accounting: one sacct for all of them, its state
# read as squeue's would have been (jobtpu_slurm_acct). Where accounting is disabled, nothing more is known.
# The per-worker work is one awk over squeue's lines, one listing of the jobs' meta folders and the
# worker list (a thousand workers a pass: a fork or a shell function per worker cost seconds); only
# the log, log-end and result reports, which carry bytes, are made per worker, by the shell.
jobtpu_slurm_probe() {
  local root="" chunk="" tail="" result="" r q boot=- now lost=() task k j a w offset rsize stem
  jobtpu_lines=() jobtpu_tasks=()
  jobtpu_named "root chunk tail result" "$@" || return 1
  # shellcheck disable=SC2154 # set by jobtpu_named (common.sh)
  shift "$jobtpu_named_n"
  r=${root/#-/./-}
  # --array with JobArrayID: each array member on its own line as <array id>_<index>, as recorded.
  q=$(squeue --noheader --user="$(id -un)" --states=all --array --Format='JobArrayID:|,State:|,Reason:|,RestartCnt:|,Name:|' 2>&1) ||
    { echo "squeue failed: ${q:0:300}" >&2; return 1; }
  # Nothing is said before sacct answered: a probe that fails says nothing.
  jobtpu_slurm_split "$(jobtpu_slurm_report "$r" "$q" "" "$@")"
  for task in ${jobtpu_tasks[@]+"${jobtpu_tasks[@]}"}; do
    read -r k j a w offset rsize <<< "$task"
    [ "$k" = =lost ] && lost+=("$j" "$a" "$w" "$offset" "$rsize")
  done
  if [ ${#lost[@]} -gt 0 ]; then
    jobtpu_slurm_acct "$r" "${lost[@]}" || return 1
    jobtpu_slurm_split "$(jobtpu_slurm_report "$r" "$jobtpu_acct" acct "${lost[@]}")"
  fi
  [ -r /proc/sys/kernel/random/boot_id ] && read -r boot < /proc/sys/kernel/random/boot_id
  printf -v now '%(%s)T' -1
  jobtpu_say host s:boot "$boot" n:now "$now"
  [ ${#jobtpu_lines[@]} = 0 ] || printf '%s\n' "${jobtpu_lines[@]}"
  for task in ${jobtpu_tasks[@]+"${jobtpu_tasks[@]}"}; do
    # The last word, when there, is the worker's files' stem: a member that refused to run wrote its
    # reason beside its array's table (jobtpu_array_refuse), not in its meta folder.
    read -r k j a w offset rsize stem <<< "$task"
    task=${stem:-$r/meta/$j/$a.$w}
    case $k in
      =unsub) rm -f "$task.slurm" && rmdir "$task.claim" 2> /dev/null ;;
      =log) jobtpu_say_log "$j" "$a" "$w" "$offset" "$chunk" "$task.log" ;;
      =end) jobtpu_say_log_end "$j" "$a" "$w" "$tail" "$task.log" ;;
      # As on every machine (probe.sh): once, with the report that brings the rest of an ended worker
      # 0's log, the value its job saved ($JOBTPU_RESULT, beside the log on the shared filesystem).
      =result) jobtpu_say_result "$j" "$a" "$w" "$rsize" "$result" "$task.result" ;;
    esac
  done
}

# jobtpu_slurm_split OUT : jobtpu_slurm_report's output OUT, its report lines appended to the array
# jobtpu_lines, its task lines (each starting with `=`, after them) to jobtpu_tasks. By mapfile, not by
# a pattern over OUT: bash's ${OUT%%...} over a thousand lines takes most of a second.
jobtpu_slurm_split() {
  local all=() n
  [ -n "$1" ] || return 0
  mapfile -t all <<< "$1"
  n=${#all[@]}
  while [ "$n" -gt 0 ] && [[ ${all[n - 1]} == =* ]]; do n=$((n - 1)); done
  jobtpu_lines+=("${all[@]:0:n}")
  jobtpu_tasks+=("${all[@]:n}")
}

# jobtpu_slurm_acct ROOT [JOB ATTEMPT WORKER OFFSET ID]... : what Slurm's accounting says of these
# workers' jobs, one sacct call, into jobtpu_acct (its JobID|State|ExitCode lines). Empty where
# accounting is disabled (as where it is not set up: nothing more is known); fails, the probe with it,
# when sacct does not answer otherwise (slurmdbd away): the next pass asks again, nothing is taken for lost.
jobtpu_slurm_acct() {
  local r=$1 ids=() id out i
  shift
  jobtpu_acct=""
  while [ $# -ge 5 ]; do
    id=$5
    [ -s "$r/meta/$1/$2.$3.slurm" ] && read -r id _ < "$r/meta/$1/$2.$3.slurm"
    [[ $id =~ ^[0-9]+(_[0-9]+)?$ ]] && ids+=("$id")
    shift 5
  done
  # A thousand ids a call: one argument may hold no more than 128 KiB.
  for ((i = 0; i < ${#ids[@]}; i += 1000)); do
    if out=$(IFS=,; sacct -X -n -P --format=JobID,State,ExitCode,JobName --jobs="${ids[*]:i:1000}" 2>&1); then
      jobtpu_acct+=${jobtpu_acct:+$'\n'}$out
    elif [[ $out == *"accounting storage is disabled"* ]]; then
      jobtpu_acct=""
      return 0
    else
      echo "sacct failed: ${out:0:300}" >&2
      return 1
    fi
  done
}

# jobtpu_list_entries DIR... : each entry right under each DIR, a TYPE|SIZE|MTIME|PATH line. One find per
# batch of folders, so that no command line outgrows the kernel's limit on one (at least 128 KiB; the
# folders share their root, so a batch is sized by the first one's name, with room for a longer id).
jobtpu_list_entries() {
  local i per=$((100000 / (${#1} + 24)))
  for ((i = 1; i <= $#; i += per)); do
    find "${@:i:per}" -mindepth 1 -maxdepth 1 -printf '%y|%s|%T@|%p\n' 2> /dev/null
  done
}

# jobtpu_slurm_report ROOT SLURM ACCT [JOB ATTEMPT WORKER OFFSET ID]... : the `worker` report of each
# worker, then a task line for each report that carries bytes (=log, =end, =result: KIND JOB ATTEMPT
# WORKER OFFSET SIZE [STEM], STEM when the files are not the worker's own) and each worker whose job
# Slurm's lines do not know and that wrote no exit record (=lost JOB ATTEMPT WORKER OFFSET ID, when
# ACCT is empty). A worker's Slurm id is its STEM.slurm record, else ID (the home's, - for none); a
# worker with no record whose id's member refused to run reads ROOT/meta/arrays/ID.log and .exit. SLURM is squeue's
# lines (ID|STATE|REASON|RESTARTS|), or with ACCT set, sacct's (ID|STATE|EXITCODE).
jobtpu_slurm_report() {
  local r=$1 slurm=$2 acct=$3 dirs=() i
  shift 3
  for ((i = 1; i <= $#; i += 5)); do dirs+=("$r/meta/${!i}"); done
  [ ${#dirs[@]} -gt 0 ] || return 0
  dirs+=("$r/meta/arrays")
  # shellcheck disable=SC2016 # awk's program
  r=$r acct=$acct chunk=$chunk ended=$jobtpu_slurm_ended awk -F'|' '
    BEGIN { acct = ENVIRON["acct"]; chunk = ENVIRON["chunk"] + 0; ended = ENVIRON["ended"] }
    # JSON s string: by index and substr, not gsub, whose replacement text each awk reads its own way.
    function rep(s, c, r,   out, i) {
      out = ""; while ((i = index(s, c)) > 0) { out = out substr(s, 1, i - 1) r; s = substr(s, i + 1) }
      return out s
    }
    function esc(s,   i) {
      s = rep(rep(s, "\\", "\\\\"), "\"", "\\\"")
      if (s ~ /[[:cntrl:]]/) for (i = 1; i < 32; i++) s = rep(s, sprintf("%c", i), sprintf("\\u%04x", i))
      return "\"" s "\""
    }
    function first(path,   line, p) {
      line = ""; if ((getline line < path) > 0) { close(path); split(line, p, " "); return p[1] }
      close(path); return ""
    }
    function whole(path,   line) {
      line = ""; if ((getline line < path) <= 0) line = ""; close(path); gsub(/^[ \t]+|[ \t]+$/, "", line); return line
    }
    FILENAME == ARGV[1] {
      if ($1 == "") next
      if (acct != "") {
        # sacct: CANCELLED by <uid> is CANCELLED; the exit code N:S is N, or 128+S for a signal.
        split($2, w, " "); state[$1] = w[1]; restarts[$1] = 0; split($3, x, ":")
        code[$1] = (x[2] + 0 > 0) ? 128 + x[2] : x[1] + 0
      } else { state[$1] = $2; reason[$1] = $3; restarts[$1] = $4 }
      name[$1] = (acct != "") ? $4 : $5
      next
    }
    FILENAME == ARGV[2] {
      # find: TYPE|SIZE|MTIME|PATH (a path may hold a |: it is the rest of the line).
      p = $0; for (i = 1; i <= 3; i++) p = substr(p, index(p, "|") + 1)
      type[p] = $1; size[p] = $2; mtime[p] = $3
      next
    }
    {
      split($0, f, " "); job = f[1]; att = f[2]; wk = f[3]; off = f[4] + 0
      b = ENVIRON["r"] "/meta/" job "/" att "." wk; alt = ""
      id = (size[b ".slurm"] > 0) ? first(b ".slurm") : ""
      if (id == "" && f[5] ~ /^[0-9]+(_[0-9]+)?$/) {
        id = f[5]
        if ((ENVIRON["r"] "/meta/arrays/" id ".exit") in type) { b = ENVIRON["r"] "/meta/arrays/" id; alt = " " b }
      }
      s = (id != "" && (id in state)) ? state[id] : ""
      # The id of a lone job that Slurm now gives another job is not this worker: a controller that
      # crashed before it saved our submit numbers its next jobs from where its saved state left off.
      suffix = "." job "." att "." wk; n = name[id]; foreign = 0
      if (s != "" && id ~ /^[0-9]+$/ && !(substr(n, 1, 7) == "jobtpu-" && length(n) > length(suffix) &&
          substr(n, length(n) - length(suffix) + 1) == suffix)) { s = ""; foreign = 1 }
      pid = (size[b ".pid"] > 0) ? first(b ".pid") : "-"
      ex = "-"; at = "-"
      if (size[b ".exit"] > 0) { ex = whole(b ".exit"); at = mtime[b ".exit"] }
      # Forgotten by squeue: asked of accounting (one sacct for all), unless the id names another job now.
      if (s == "" && ex == "-" && id != "" && acct == "" && !foreign) { lost[++nlost] = job " " att " " wk " " off " " id; next }
      alive = "false"; preempted = "false"; waiting = ""; unsubmitted = "false"
      claim = ((b ".claim") in type) ? "true" : "false"
      if (s == "" && ex == "-" && id != "" && pid == "-" && (acct != "" || foreign)) {
        # Slurm answered and has no job of ours by this id, and it never ran: the controller took the
        # submit and lost it (it crashed before it saved it). Its id and claim are taken back (=unsub,
        # by the shell): the pass hands the attempt over again, never taking it for lost.
        unsubmitted = "true"; claim = "false"; task[++ntask] = "=unsub " job " " att " " wk
      }
      timedout = ((b ".timedout") in type) ? "true" : "false"
      sz = ((b ".log") in type) ? size[b ".log"] + 0 : 0
      if (s != "") {
        if (index(ended, " " s " ") == 0) alive = "true"
        # Slurm s word for a pending job it has not looked at yet is "None".
        if (s == "PENDING") { waiting = reason[id]; if (waiting == "" || waiting == "None") waiting = "queued" }
        if ((restarts[id] != "" && restarts[id] != 0) || s == "PREEMPTED") preempted = "true"
        # Slurm ended it past its --time, or for its memory, before the wrapper wrote the exit.
        if (ex == "-" && s == "TIMEOUT") timedout = "true"
        if (ex == "-" && s == "OUT_OF_MEMORY") ex = 137
        # Only accounting keeps a failed job s code once the wrapper could not write it.
        if (ex == "-" && s == "FAILED" && (id in code)) ex = code[id]
      }
      # What the files held is checked as jobtpu_say checks a number.
      if (pid !~ /^[0-9]+$/) pid = "null"
      e = ex; sub(/^-/, "", e); if (e !~ /^[0-9]+$/) ex = "null"
      if (at !~ /^[0-9]+(\.[0-9]+)?$/) at = "null"
      printf "{\"kind\":\"worker\",\"job\":%d,\"attempt\":%d,\"worker\":%d,\"pid\":%s,\"alive\":%s,\"exit\":%s,\"size\":%d,\"claimed\":%s,\"at\":%s,\"marked\":null,\"timedout\":%s,\"preempted\":%s,\"waiting\":%s,\"unsubmitted\":%s}\n", \
        job, att, wk, pid, alive, ex, sz, claim, at, timedout, preempted, esc(waiting), unsubmitted
      if (sz > off) task[++ntask] = "=log " job " " att " " wk " " off " 0" alt
      if (ex != "null" && sz - off > chunk) task[++ntask] = "=end " job " " att " " wk " 0 0" alt
      if (wk == 0 && ex != "null" && sz - off <= chunk && type[b ".result"] == "f")
        task[++ntask] = "=result " job " " att " " wk " 0 " size[b ".result"] alt
    }
    END {
      for (i = 1; i <= ntask; i++) print task[i]
      for (i = 1; i <= nlost; i++) print "=lost " lost[i]
    }' <(printf '%s\n' "$slurm") \
      <(jobtpu_list_entries "${dirs[@]}") <(printf '%s %s %s %s %s\n' "$@")
}

# jobtpu_slurm_kill ROOT GRACE STEPS -- [JOB ATTEMPT WORKER ID]... : stop each worker's Slurm job (its
# STEM.slurm record, else ID, the home's, - for none: an array member Slurm still holds pending
# recorded none yet, and is cancelled all the same): TERM to
# every process of a running one (scancel --full --signal), then, GRACE tenths of a second later if
# it still runs, scancel (Slurm's KILL after its KillWait); then up to STEPS tenths for Slurm to say
# it ended. One `kill` report per worker: gone, or not yet (stuck). A worker never handed to Slurm
# (no id, no claim) is gone.
jobtpu_slurm_kill() {
  local r=${1/#-/./-} grace=$2 steps=$3 b id s i
  shift 4
  while [ $# -ge 4 ]; do
    b=$r/meta/$1/$2.$3 id=""
    [[ $4 =~ ^[0-9]+(_[0-9]+)?$ ]] && id=$4
    [ -s "$b.slurm" ] && read -r id _ < "$b.slurm"
    if [ -z "$id" ]; then
      if [ -e "$b.claim" ]; then s=claimed; else s=""; fi
    else
      s=$(jobtpu_slurm_state "$id")
      if [ "$s" = RUNNING ]; then
        scancel --full --signal=TERM "$id" 2> /dev/null
        for ((i = 0; i < grace; i++)); do s=$(jobtpu_slurm_state "$id"); [ "$s" = RUNNING ] || break; sleep 0.1; done
      fi
      if [ -n "$s" ] && [[ $jobtpu_slurm_ended != *" $s "* ]]; then
        scancel "$id" 2> /dev/null
        for ((i = 0; i < steps; i++)); do
          s=$(jobtpu_slurm_state "$id")
          # Ended; or Slurm does not answer: not gone, and the next stop asks again.
          { [ -z "$s" ] || [ "$s" = UNKNOWN ] || [[ $jobtpu_slurm_ended == *" $s "* ]]; } && break
          sleep 0.1
        done
      fi
    fi
    if [ -z "$s" ] || [[ $jobtpu_slurm_ended == *" $s "* ]]; then
      jobtpu_say kill n:job "$1" n:attempt "$2" n:worker "$3" b:gone 1
    else
      jobtpu_say kill n:job "$1" n:attempt "$2" n:worker "$3" b:gone 0
    fi
    shift 4
  done
}

# jobtpu_slurm_state ID : the Slurm job's state word; nothing when Slurm no longer knows the job;
# UNKNOWN when Slurm does not answer (never taken for an ended job).
jobtpu_slurm_state() {
  local out
  # --array: a member Slurm holds pending is one line of its own, not its array's folded line.
  if out=$(squeue --noheader --states=all --array --jobs="$1" --format=%T 2>&1); then
    echo "${out%%$'\n'*}"
  elif [[ $out != *"Invalid job id"* ]]; then
    echo UNKNOWN
  fi
}

# jobtpu_slurm_doctor : a `tool` report for each Slurm command jobtpu runs at the login host, then a
# `slurm` report: whether the controller answers (sinfo), with its partitions, or its error.
jobtpu_slurm_doctor() {
  local tool out p parts=()
  for tool in sbatch squeue scancel sinfo; do jobtpu_say tool s:name "$tool" s:path "$(command -v "$tool")"; done
  if out=$(sinfo --noheader --format=%R 2>&1); then
    while IFS= read -r p; do [ -n "$p" ] && parts+=("$p"); done <<< "$out"
    printf '{"kind":"slurm","answers":true,"partitions":['
    p=""
    # shellcheck disable=SC2154 # set by jobtpu_json_string (common.sh)
    for tool in ${parts[@]+"${parts[@]}"}; do jobtpu_json_string "$tool"; printf '%s%s' "$p" "$jobtpu_json"; p=,; done
    printf ']}\n'
  else
    jobtpu_say slurm b:answers 0 s:said "${out:0:300}"
  fi
}

# A sweep's members on a Slurm cluster as ONE job array (needs common.sh, wrapper.sh, launch.sh and
# slurm.sh; docs/reference/machines-json.md §3.3.1). The handover at the login host is a few files
# whatever the array's size, and one sbatch: a member table (one line each: its job, attempt, command,
# environment...), one batch script every member shares and one record of the array's Slurm id. Each
# member makes its own meta folder, env file, id record, claim and job folder (a copy of the
# snapshot's checked tree) when Slurm starts it, on its node, by its SLURM_ARRAY_TASK_ID: a thousand
# members cost the handover no thousand files. Only a member with secret values keeps an env file
# written here, so a secret never lies in a table. The snapshot is checked (and its tree made) once
# here, so a missing or damaged copy is still the launch's need-archive or bad-archive.

# jobtpu_array root=ROOT home_id=ID token=TOKEN throttle=M -- JOB... : start a handover of members of
# the given jobs, at most M running at once (empty: no cap). The lease's fence is checked once for all.
# An earlier table in meta/arrays means a handover may have been cut short after sbatch answered: its
# members are then looked for in Slurm (jobtpu_array_seek), once, before any is submitted again.
jobtpu_array() {
  local root="" home_id="" token="" throttle="" r old
  jobtpu_named "root home_id token throttle" "$@" || return 1
  # shellcheck disable=SC2154 # set by jobtpu_named (common.sh)
  shift "$jobtpu_named_n"
  r=${root/#-/./-}
  jobtpu_array_home=$home_id jobtpu_array_throttle=$throttle jobtpu_array_problem="" jobtpu_array_list=""
  jobtpu_array_table="" jobtpu_array_stems=() jobtpu_array_refs=() jobtpu_array_asked="" jobtpu_array_secret=()
  declare -gA jobtpu_array_trees=() jobtpu_array_handed=()
  # The job's umask is the login's (jobtpu_job_umask), kept before this handover's files go private.
  jobtpu_array_umask=$(jobtpu_job_umask)
  umask 077
  mkdir -p "$r/meta/arrays" "$r/jobs" "$r/archives" 2>/dev/null
  jobtpu_private_root "$r"
  old=("$r/meta/arrays/"*)
  jobtpu_array_earlier=""
  [ -e "${old[0]}" ] && jobtpu_array_earlier=1
  if ! { jobtpu_array_root=$(cd "$r" && pwd -P) && jobtpu_own_folder "$r/meta/arrays" &&
    jobtpu_array_list=$(mktemp "$jobtpu_array_root/meta/arrays/XXXXXXXX"); }; then
    jobtpu_array_problem="fail cannot create the array's files in $r/meta/arrays"; return 0
  fi
  jobtpu_array_name="jobtpu-$home_id.array.${jobtpu_array_list##*/}"
  jobtpu_fence "$r" "$home_id" "$token" ||
    { jobtpu_array_problem="fail fenced: a runner with a newer lease token launches here"; return 0; }
  return 0
}

# jobtpu_array_ok JOB ATTEMPT WORKER ID : a member's `launch` report, ok with its Slurm id: one printf when
# ID is an array member's <array id>_<index> (a handover run again says it of a thousand), else jobtpu_batch_ok's.
jobtpu_array_ok() {
  if [[ $4 =~ ^[0-9]+_[0-9]+$ ]]; then
    printf '{"kind":"launch","job":%d,"attempt":%d,"worker":%d,"outcome":"ok","slurm":"%s"}\n' "$1" "$2" "$3" "$4"
  else jobtpu_batch_ok "jobtpu-$jobtpu_array_home.$1.$2.$3" "$4"; fi
}

# jobtpu_array_said JOB ATTEMPT WORKER "OUTCOME [WHY]" : a member's `launch` report, not ok.
jobtpu_array_said() {
  if [[ $4 == *" "* ]]; then
    jobtpu_say launch n:job "$1" n:attempt "$2" n:worker "$3" s:outcome "${4%% *}" s:detail "${4#* }"
  else jobtpu_say launch n:job "$1" n:attempt "$2" n:worker "$3" s:outcome "$4"; fi
}

# jobtpu_array_member JOB ATTEMPT WORKER ARCHIVE FRESH COMMAND SIGNAL DELAY LIMIT GRACE SECRET [NAME MODE VALUE]... :
# one member (jobtpu_launch's arguments, by position; SECRET 1 when a value of its environment, after
# them, is a secret). Handed to Slurm already: its `launch` report, ok, at once (a launch is never
# submitted twice, even when the handover that submitted it was cut short before its reports were
# said: the table, written before sbatch, is the trace jobtpu_array_seek follows). Otherwise it joins
# the table, its environment with it, or, SECRET, in its own env file (as jobtpu_launch's: only the
# wrapper reads it, and deletes it); jobtpu_array_submit reports it.
jobtpu_array_member() {
  local b="$jobtpu_array_root/meta/$1/$2.$3" row x id
  if [ -n "$jobtpu_array_problem" ]; then jobtpu_array_said "$1" "$2" "$3" "$jobtpu_array_problem"; return 0; fi
  # An id recorded by the member itself (it started): no Slurm question.
  if [ -s "$b.slurm" ]; then read -r id _ < "$b.slurm"; jobtpu_array_ok "$1" "$2" "$3" "$id"; return 0; fi
  if [ -n "$jobtpu_array_earlier" ]; then
    jobtpu_array_seek || { jobtpu_array_said "$1" "$2" "$3" pending; return 0; }
    id=${jobtpu_array_handed["$1 $2 $3"]:-}
    if [ -n "$id" ]; then jobtpu_array_ok "$1" "$2" "$3" "$id"; return 0; fi
  fi
  # The snapshot, checked once per archive for the whole array.
  x=${jobtpu_array_trees[$4]-unset}
  if [ "$x" = unset ]; then jobtpu_array_tree "$4"; x=$jobtpu_array_got; jobtpu_array_trees[$4]=$x; fi
  if [ -n "$x" ]; then jobtpu_array_said "$1" "$2" "$3" "$x"; return 0; fi
  if [ "${11}" = 1 ]; then
    # Its meta folder made and checked here (jobtpu_own_folder), for its env file.
    if ! { mkdir -p "$jobtpu_array_root/meta/$1" 2>/dev/null && jobtpu_own_folder "$jobtpu_array_root/meta/$1"; }; then
      jobtpu_array_said "$1" "$2" "$3" "fail $jobtpu_array_root/meta/$1 is not a folder of this account's alone (a link, another account's, or writable by others)"
      return 0
    fi
    printf '%s\0' "${@:12}" > "$b.env" 2>/dev/null ||
      { rm -f "$b.env"; jobtpu_array_said "$1" "$2" "$3" "fail cannot write the env file $b.env"; return 0; }
    jobtpu_array_secret+=("$b.env")
    set -- "${@:1:11}"
  fi
  # The table's line starts with the member's job, attempt and worker: jobtpu_array_seek finds it there.
  # Its line number is its index, so the member needs no file of its own saying which array it is in.
  printf -v row '%q ' "$@"
  jobtpu_array_refs+=("$1" "$2" "$3")
  jobtpu_array_stems+=("$b")
  jobtpu_array_table+=$row$'\n'
}

# jobtpu_array_seek : (once per handover) into jobtpu_array_handed, "JOB ATTEMPT WORKER" -> the Slurm id
# <array id>_<line> of every member of this home's job arrays Slurm knows: one squeue for the account's
# arrays named jobtpu-<home id>.array.<table>, then each such table read once. Asked when an earlier
# table is there (a handover cut short after sbatch answered, or one sbatch got no answer from);
# fails when Slurm cannot be asked. The old files of arrays Slurm forgot go with it.
jobtpu_array_seek() {
  local out name id n j a w f base known=" "
  [ -n "$jobtpu_array_asked" ] && return 0
  out=$(squeue --noheader --user="$(id -un)" --states=all --format='%F %j' 2>/dev/null) || return 1
  jobtpu_array_asked=1
  declare -A seen=()
  while read -r id name; do
    [[ $name == jobtpu-*.array.* ]] && known+="${name##*.array.} "  # any home's: roots may be shared
    [[ $id =~ ^[0-9]+$ && $name == "jobtpu-$jobtpu_array_home.array."* && -z ${seen[$name]:-} ]] || continue
    seen[$name]=1 n=0
    # A table's first three words are numbers (printf %q leaves them as they are).
    while read -r j a w _; do
      jobtpu_array_handed["$j $a $w"]=${id}_$n
      n=$((n + 1))
    done < "$jobtpu_array_root/meta/arrays/${name##*.array.}" 2>/dev/null
  done <<< "$out"
  # The files of arrays Slurm no longer knows (every member ended, and MinJobAge past), two days old
  # and more, are taken away: a member reads its line only as it starts, and a pass reads a refusal
  # within minutes. Tables would otherwise pile up, each holding its members' environment.
  while IFS= read -r -d '' f; do
    base=${f##*/}; base=${base%%.*}
    [[ $known == *" $base "* ]] || rm -f -- "$f"
  done < <(find "$jobtpu_array_root/meta/arrays" -maxdepth 1 -type f -mtime +1 -print0 2>/dev/null)
  return 0
}

# jobtpu_array_tree ARCHIVE : into jobtpu_array_got, empty when the checked tree of ARCHIVE (jobtpu_tree)
# is there for the members to copy (made now, by one check and unpack, when it is not); else the
# members' outcome: need-archive, bad-archive WHY or fail WHY (jobtpu_launch's).
jobtpu_array_tree() {
  local r=$jobtpu_array_root t e c
  jobtpu_array_got=""
  jobtpu_tree "$r" "$1"
  # shellcheck disable=SC2154 # set by jobtpu_tree (launch.sh)
  if [ -z "$jobtpu_tree_path" ] || [ ! -f "$r/archives/$1" ]; then jobtpu_array_got=need-archive; return 0; fi
  jobtpu_own_folder "$jobtpu_tree_path" && return 0
  command -v python3 > /dev/null || { jobtpu_array_got="fail python3 is needed on the worker to unpack the snapshot"; return 0; }
  t=$(mktemp -d "$r/archives/.treetmp.${1%.tar.gz}.XXXXXX") || { jobtpu_array_got="fail cannot create a folder in $r/archives"; return 0; }
  chmod "$(umask -S)" "$t"
  # shellcheck disable=SC2154 # set by jobtpu_launch_init (launch.sh)
  e=$(python3 -I -S -c "$jobtpu_unpack_source" "$r/archives/$1" "$t" 2>&1 > /dev/null); c=$?
  e=${e//$'\n'/ }
  [ "$c" = 0 ] && mv -T "$t" "$jobtpu_tree_path" 2>/dev/null && return 0
  rm -rf "$t"
  # shellcheck disable=SC2154 # set by jobtpu_launch_init (launch.sh)
  if [ "$c" = "$jobtpu_unpack_bad_exit" ]; then jobtpu_array_got="bad-archive ${e:0:300}"
  elif [ "$c" != 0 ]; then jobtpu_array_got="fail unpack: ${e:0:300}"
  elif ! jobtpu_own_folder "$jobtpu_tree_path"; then jobtpu_array_got="fail cannot keep the snapshot's tree $jobtpu_tree_path"
  fi
}

# jobtpu_array_submit : the table, the shared batch script and one sbatch --array of every member that
# joined, then the array's id in one record beside the table (TABLE.slurm). One `launch` report per
# member: ok with its id <array id>_<i>, or, when sbatch refuses, fail with sbatch's own words, the
# table and every env file written taken back (nothing is left half-made).
jobtpu_array_submit() {
  local list=$jobtpu_array_list n=${#jobtpu_array_stems[@]} out rc id i t="" said="" f=("${jobtpu_array_refs[@]}")
  [ "$n" -gt 0 ] || { [ -z "$list" ] || rm -f "$list"; return 0; }
  [ -n "$jobtpu_array_throttle" ] && t="%$jobtpu_array_throttle"
  if printf '%s' "$jobtpu_array_table" > "$list" && jobtpu_array_script > "$list.sbatch"; then
    # shellcheck disable=SC2154 # set by jobtpu_batch (slurm.sh)
    out=$(sbatch --parsable --requeue --job-name="$jobtpu_array_name" --output=/dev/null \
      --array="0-$((n - 1))$t" ${jobtpu_batch_opts[@]+"${jobtpu_batch_opts[@]}"} "$list.sbatch" 2>&1)
    rc=$?
  else out="cannot write the array's files $list and $list.sbatch" rc=1; fi
  id=${out%%;*}
  if [ "$rc" != 0 ] || [[ ! $id =~ ^[0-9]+$ ]]; then
    out=${out//$'\n'/ }
    if [ "$rc" != 0 ] && jobtpu_slurm_away "$out"; then
      # No answer from Slurm's controller: it may have taken the array all the same. Nothing fails:
      # every member is `pending`, the table stays, and the next handover finds the array by its name
      # (jobtpu_array_seek) before it submits any member again, never twice.
      for i in "${!jobtpu_array_stems[@]}"; do
        jobtpu_array_said "${f[3 * i]}" "${f[3 * i + 1]}" "${f[3 * i + 2]}" "pending ${out:0:400}"
      done
      return 0
    fi
    rm -f ${jobtpu_array_secret[@]+"${jobtpu_array_secret[@]}"} "$list" "$list.sbatch"
    for i in "${!jobtpu_array_stems[@]}"; do
      jobtpu_array_said "${f[3 * i]}" "${f[3 * i + 1]}" "${f[3 * i + 2]}" "fail ${out:0:400}"
    done
    return 0
  fi
  # The array's id, for people and tools; each member records its own when it starts, and the home
  # keeps every member's from these reports. Slurm has them all: a failed write is no failed launch.
  jobtpu_batch_record "$list" "$id" 2>/dev/null
  # The ok reports gathered and printed at once, not by jobtpu_say: a thousand members say this together.
  for i in "${!jobtpu_array_stems[@]}"; do
    printf -v out '{"kind":"launch","job":%d,"attempt":%d,"worker":%d,"outcome":"ok","slurm":"%s"}\n' \
      "${f[3 * i]}" "${f[3 * i + 1]}" "${f[3 * i + 2]}" "${id}_$i"
    said+=$out
  done
  printf '%s' "$said"
}

# jobtpu_array_script : the batch script every member runs, for its own line of the table
# (jobtpu_array_run). The wrapper's program is jobtpu_batch_program's: the batch step becomes the wrapper.
jobtpu_array_script() {
  local program
  program=$(jobtpu_batch_program)
  echo '#!/bin/bash'
  # A run Slurm requeued never runs the command again under this attempt, and ends failed, never
  # COMPLETED: a dependent's afterok must not start on it (jobtpu_batch_submit).
  # shellcheck disable=SC2016 # written for the batch script, expanded there
  echo '[ "${SLURM_RESTART_COUNT:-0}" = 0 ] || exit 75'
  declare -p jobtpu_unpack_source
  declare -f jobtpu_own_folder jobtpu_tree jobtpu_keep_tree jobtpu_array_folder jobtpu_array_run jobtpu_array_refuse
  printf 'p=%q\n' "$program"
  # shellcheck disable=SC2016 # written for the batch script, expanded there
  printf 'jobtpu_array_run %q %q %q %q "$SLURM_ARRAY_JOB_ID" "$SLURM_ARRAY_TASK_ID" "$p"\n' \
    "$jobtpu_array_list" "$jobtpu_array_root" "$jobtpu_array_home" "$jobtpu_array_umask"
}

# jobtpu_array_run TABLE ROOT HOME_ID UMASK ARRAY INDEX PROGRAM : (on the node, the batch step) member
# INDEX of the array: its line of TABLE; its meta folder made and checked (jobtpu_own_folder), else it
# refuses to run (jobtpu_array_refuse); its output appended to its own log, its Slurm id recorded, its
# env file written from its line (unless the handover wrote it: a secret's), its claim and job folder
# made (jobtpu_array_folder), then the wrapper PROGRAM in its place: the wrapper reads and deletes
# the env file as on every machine. A member that cannot get its job folder writes why in its log and
# exit code 1 in its exit record: the attempt ends failed with that line in jobtpu, never as a silent
# Slurm FAILED.
jobtpu_array_run() {
  local row m b d
  mapfile -t -s "$6" -n 1 row < "$1"
  [ -n "${row[0]:-}" ] || { echo "jobtpu: no line $6 in $1" >&2; exit 1; }
  # The line was written with printf %q (jobtpu_array_member): its words come back as they were.
  eval "row=(${row[0]})"
  m=$2/meta/${row[0]} d=$2/jobs/${row[0]}
  b=$m/${row[1]}.${row[2]}
  umask 077
  mkdir "$m" 2> /dev/null
  jobtpu_own_folder "$m" ||
    jobtpu_array_refuse "$2" "$5_$6" "$m is not a folder of this account's alone (a link, another account's, or writable by others)"
  exec >> "$b.log" 2>&1
  [ -s "$b.slurm" ] || { echo "$5_$6" > "$b.slurm.tmp" && mv "$b.slurm.tmp" "$b.slurm"; }
  if [ "${row[10]}" != 1 ]; then
    { if [ ${#row[@]} -gt 11 ]; then printf '%s\0' "${row[@]:11}"; fi; } > "$b.env" ||
      { echo "jobtpu: the job's environment file $b.env could not be written on $(hostname); the command was not started"
        rm -f "$b.env"; echo 1 > "$b.exit.tmp" && mv "$b.exit.tmp" "$b.exit"; exit 1; }
  fi
  mkdir "$b.claim" 2> /dev/null
  jobtpu_array_why=""
  if ! jobtpu_array_folder "$2" "${row[3]}" "${row[4]}" "$m/${row[1]}.reset" "$d" "${row[0]}.${row[2]}" || ! cd "$d"; then
    echo "jobtpu: the job's folder $d could not be made on $(hostname): ${jobtpu_array_why:-cd failed}; the command was not started" >&2
    rm -f "$b.env"
    echo 1 > "$b.exit.tmp" && mv "$b.exit.tmp" "$b.exit"
    exit 1
  fi
  export JOBTPU_MARK="$3.${row[0]}.${row[1]}.${row[2]}"
  exec bash -c "$7" "jobtpu-${row[0]}" "$b" "${row[5]}" "${row[6]}" "${row[7]}" "$4" "${row[8]}" "${row[9]}" 3>&-
}

# jobtpu_array_refuse ROOT ID WHY : (on the node) a member whose meta folder is unsafe runs nothing and
# writes nothing there: WHY goes to ROOT/meta/arrays/ID.log and exit code 1 to ID.exit (ID: its Slurm
# id), where the probe reads a worker that recorded no id of its own (jobtpu_slurm_report).
jobtpu_array_refuse() {
  local s=$1/meta/arrays/$2
  echo "jobtpu: $3 on $(hostname); the command was not started" >> "$s.log"
  echo 1 > "$s.exit.tmp" && mv "$s.exit.tmp" "$s.exit"
  exit 1
}

# jobtpu_array_folder ROOT ARCHIVE FRESH RESET FOLDER TAG : (on the node) the job's FOLDER from the
# snapshot, as jobtpu_launch makes it: a copy of the archive's checked tree, or, the tree gone, an
# unpack of the archive (kept as the tree). FRESH: a folder an earlier attempt left is replaced, once
# (RESET/done). Fails with why in jobtpu_array_why.
jobtpu_array_folder() {
  local t tree e c
  if [ "$3" = 1 ] && [ ! -e "$4/done" ]; then
    if ! { mkdir -p "$4" && { { [ ! -e "$5" ] && [ ! -L "$5" ]; } || { mv -T "$5" "$4/old" && rm -rf "$4/old"; }; } &&
      touch "$4/done"; }; then
      jobtpu_array_why="the folder of an earlier attempt could not be moved aside"; return 1
    fi
  fi
  if [ ! -d "$5" ]; then
    t=$(mktemp -d "$1/jobs/.unpack.$6.XXXXXX") || { jobtpu_array_why="cannot create a folder in $1/jobs"; return 1; }
    jobtpu_tree "$1" "$2"; tree=$jobtpu_tree_path
    if [ -n "$tree" ] && jobtpu_own_folder "$tree" && cp -R -p --reflink=auto -- "$tree/." "$t" 2> /dev/null; then :
    else
      rm -rf "$t"
      if [ ! -f "$1/archives/$2" ]; then jobtpu_array_why="the snapshot $2 is missing on the cluster"; return 1; fi
      command -v python3 > /dev/null || { jobtpu_array_why="python3 is needed on the node to unpack the snapshot"; return 1; }
      if ! { mkdir "$t" && chmod "$(umask -S)" "$t"; }; then jobtpu_array_why="cannot create $t"; return 1; fi
      e=$(python3 -I -S -c "$jobtpu_unpack_source" "$1/archives/$2" "$t" 2>&1 > /dev/null); c=$?
      if [ "$c" != 0 ]; then rm -rf "$t"; jobtpu_array_why="the snapshot $2 could not be unpacked: ${e//$'\n'/ }"; return 1; fi
      [ -n "$tree" ] && jobtpu_keep_tree "$1" "$2" "$t" "$tree"
    fi
    mv -T "$t" "$5" 2> /dev/null || rm -rf "$t"
  fi
  jobtpu_own_folder "$5" || { jobtpu_array_why="$5 is not a folder of this account's alone"; return 1; }
}

jobtpu_launch_init stale_minutes=3 unpack_bad_exit=3 'unpack_source=<jobtpu/snapshot/unpack.py>' reset_tenths=200 --
jobtpu_batch --partition=gpu
jobtpu_array root=-runs/jobtpu home_id=home-1 token=0 throttle=4 -- 7 8
jobtpu_array_member 7 0 0 0123abcd.tar.gz 1 'python train.py --lr '"'"'a b'"'"' $HOME' USR1 30 3600.25 50 0 WANDB_NAME x 'run-$JOBTPU_JOB_ID' TOKEN = s3cr=t
jobtpu_array_member 8 0 0 0123abcd.tar.gz 1 'python train.py --lr '"'"'a b'"'"' $HOME' USR1 30 3600.25 50 1 WANDB_NAME x 'run-$JOBTPU_JOB_ID' TOKEN = s3cr=t
jobtpu_array_submit
