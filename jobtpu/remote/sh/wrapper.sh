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

# JOBTPU_w_timer SIGNAL DELAY LEADER LIMIT GRACE STEM : run in the background by the wrapper (LEADER, whose
# pid is the job's process group). With SIGNAL: after DELAY seconds, send it to every process of the
# group but the wrapper and this timer (--signal: the job may checkpoint before its --timeout). With
# LIMIT: LIMIT seconds after the start, mark STEM.timedout (the pass reads it: the attempt ran past
# its --timeout, whatever its exit code) and TERM the job's processes but the wrapper and this timer,
# KILL what is left after GRACE tenths of a second; the wrapper then records the exit as ever. The
# worker keeps the time, as Slurm's node does for --time: passes may be a minute apart, or stopped.
# TERM ends the timer at once, with its sleep, which it waits for: nothing of it outlives the job,
# whose exit is recorded after.
JOBTPU_w_timer() {
  local JOBTPU_w_s JOBTPU_w_p JOBTPU_w_all=()
  # Every child it started, even a sleep forked just before its pid was kept: TERM may come between.
  # shellcheck disable=SC2046  # one word per pid
  trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; exit 0' TERM
  if [ -n "$1" ]; then
    sleep "$2" & JOBTPU_w_s=$!
    wait "$JOBTPU_w_s" || exit 0
    for JOBTPU_w_p in $(ps -eo pid=,pgid= | awk -v g="$3" '$2 == g {print $1}'); do
      [ "$JOBTPU_w_p" = "$3" ] || [ "$JOBTPU_w_p" = "$BASHPID" ] || kill -s "$1" "$JOBTPU_w_p" 2>/dev/null
    done
  fi
  [ -n "${4:-}" ] || exit 0
  sleep "$(awk -v l="$4" -v d="${1:+$2}" 'BEGIN { r = l - d; print (r > 0 ? r : 0) }')" & JOBTPU_w_s=$!
  wait "$JOBTPU_w_s" || exit 0
  trap '' TERM
  : > "${6:?}.timedout"
  for JOBTPU_w_p in $(JOBTPU_w_procs "$3"); do
    [ "$JOBTPU_w_p" = "$3" ] || [ "$JOBTPU_w_p" = "$BASHPID" ] ||
      { kill -TERM "$JOBTPU_w_p" 2>/dev/null; JOBTPU_w_all+=("$JOBTPU_w_p"); }
  done
  for _ in $(seq "${5:-50}"); do
    JOBTPU_w_s=""
    for JOBTPU_w_p in ${JOBTPU_w_all[@]+"${JOBTPU_w_all[@]}"}; do JOBTPU_w_alive "$JOBTPU_w_p" && JOBTPU_w_s=1; done
    [ -z "$JOBTPU_w_s" ] && break
    sleep 0.1
  done
  for JOBTPU_w_p in $(JOBTPU_w_procs "$3"); do
    [ "$JOBTPU_w_p" = "$3" ] || [ "$JOBTPU_w_p" = "$BASHPID" ] || kill -KILL "$JOBTPU_w_p" 2>/dev/null
  done
}

# JOBTPU_w_alive PID : the process runs and is no zombie.
JOBTPU_w_alive() {
  local JOBTPU_w_st
  read -r -a JOBTPU_w_st 2>/dev/null < "/proc/$1/stat" && [ "${JOBTPU_w_st[2]}" != Z ]
}

# JOBTPU_w_procs LEADER : the job worker's processes, its process group's and those that carry its
# marker (left the group by setsid or a double fork), one pid a line; the caller leaves itself out.
JOBTPU_w_procs() {
  local JOBTPU_w_h=${JOBTPU_MARK%.*.*.*} JOBTPU_w_j JOBTPU_w_a JOBTPU_w_k
  IFS=. read -r JOBTPU_w_j JOBTPU_w_a JOBTPU_w_k <<< "${JOBTPU_MARK#"$JOBTPU_w_h".}"
  ps -eo pid=,pgid= | awk -v g="$1" '$2 == g {print $1}'
  jobtpu_marked "$JOBTPU_w_h" "$JOBTPU_w_j" "$JOBTPU_w_a" "$JOBTPU_w_k"
}

# JOBTPU_w_stopper REQUEST POLL GRACE LEADER : run in the background by the wrapper (LEADER) of a job on
# the local machine. Every POLL seconds it looks for REQUEST (<root>/stop/<job>.<attempt>), which any
# member of a shared home's group may leave in the group's sticky folder, since only this account may
# signal the job (docs/design.md §7). Only a regular file counts, never a link, and it is never
# opened: the name is this attempt's, so a request can stop this job and nothing else. Then TERM the
# job's processes (the wrapper among them: no exit code, as when a pass stops it), and KILL what is
# left after GRACE tenths of a second. TERM before a request ends the watch at once, with its sleep.
JOBTPU_w_stopper() {
  local JOBTPU_w_s JOBTPU_w_p JOBTPU_w_all=()
  trap '' USR1 USR2 INT HUP QUIT ALRM  # a --signal the timer sends the job's group is not for this watch
  # Every child it started, even a sleep forked just before its pid was kept: TERM may come between.
  # shellcheck disable=SC2046  # one word per pid
  trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; exit 0' TERM
  until [ -f "$1" ] && [ ! -L "$1" ]; do
    sleep "$2" & JOBTPU_w_s=$!
    wait "$JOBTPU_w_s" || exit 0
  done
  trap '' TERM  # its own TERM to the job must not end it before the KILL
  for JOBTPU_w_p in $(JOBTPU_w_procs "$4"); do
    [ "$JOBTPU_w_p" = "$BASHPID" ] || { kill -TERM "$JOBTPU_w_p" 2>/dev/null; JOBTPU_w_all+=("$JOBTPU_w_p"); }
  done
  for _ in $(seq "$3"); do
    JOBTPU_w_s=""
    for JOBTPU_w_p in ${JOBTPU_w_all[@]+"${JOBTPU_w_all[@]}"}; do JOBTPU_w_alive "$JOBTPU_w_p" && JOBTPU_w_s=1; done
    [ -z "$JOBTPU_w_s" ] && break
    sleep 0.1
  done
  for JOBTPU_w_p in $(JOBTPU_w_procs "$4"); do
    [ "$JOBTPU_w_p" = "$BASHPID" ] || kill -KILL "$JOBTPU_w_p" 2>/dev/null
  done
}

# jobtpu_wrapper STEM COMMAND [SIGNAL DELAY [UMASK [LIMIT GRACE [REQUEST POLL]]]] : runs in the login environment (never the job's, so an --env PATH
# cannot take bash, rm or mv away from it): record the pid or start nothing; load the env file STEM.env
# and delete it before the command starts; apply the env only in the process that becomes the
# command; record its exit code in STEM.exit; with SIGNAL, send it DELAY seconds after the start
# and with LIMIT, stop the job LIMIT seconds after the start, GRACE tenths between TERM and KILL
# (JOBTPU_w_timer); with REQUEST, obey a stop request (JOBTPU_w_stopper). STEM is the absolute path
# stem of the worker's meta files. The command runs with UMASK (the login's): the wrapper's own files
# are private, the job's outputs are the user's business.
jobtpu_wrapper() {
  if ! jobtpu_record_pid "$1"; then
    rm -f "$1.pid.tmp"
    echo "jobtpu: cannot write the pid record $1.pid; the command was not started" >&2
    exit "$JOBTPU_NO_PID_RECORD"
  fi
  JOBTPU_w_n=(); JOBTPU_w_m=(); JOBTPU_w_v=()
  JOBTPU_w_load "$1.env"; JOBTPU_w_read=$?; rm -f "$1.env"
  if [ "$JOBTPU_w_read" != 0 ] || [ -e "$1.env" ]; then
    echo "jobtpu: the job's environment file $1.env could not be read or deleted; the command was not started" >&2
    echo 1 > "$1.exit.tmp" && mv "$1.exit.tmp" "$1.exit"; exit 1
  fi
  JOBTPU_w_t=""
  if [ -n "${3:-}" ] || [ -n "${6:-}" ]; then JOBTPU_w_timer "${3:-}" "${4:-0}" "$$" "${6:-}" "${7:-50}" "$1" & JOBTPU_w_t=$!; fi
  JOBTPU_w_r=""
  if [ -n "${8:-}" ]; then JOBTPU_w_stopper "$8" "$9" "$7" "$$" & JOBTPU_w_r=$!; fi
  (
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
  if [ -n "$JOBTPU_w_t" ]; then kill "$JOBTPU_w_t" 2>/dev/null; wait "$JOBTPU_w_t"; fi
  if [ -n "$JOBTPU_w_r" ]; then kill "$JOBTPU_w_r" 2>/dev/null; wait "$JOBTPU_w_r"; fi
  echo "$JOBTPU_w_c" > "$1.exit.tmp" && mv "$1.exit.tmp" "$1.exit"
}
