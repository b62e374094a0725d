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
