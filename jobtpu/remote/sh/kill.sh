# Stopping job workers (needs common.sh).

# jobtpu_group ROOT JOB ATTEMPT WORKER : the process group a worker's pid file names.
jobtpu_group() {
  local b="$1/meta/$2/$3.$4" pid
  [ -s "$b.pid" ] && read -r pid _ < "$b.pid" && echo "$pid"
}

# jobtpu_group_alive GROUP : a group is alive while it has a member that is not a zombie.
jobtpu_group_alive() {
  ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ {f=1} END {exit !f}'
}

# jobtpu_ask_stop ROOT JOB ATTEMPT [SUFFIX] : leave a stop request for an attempt whose processes another
# account runs (the local machine of a shared home, docs/design.md §7): an empty file in ROOT/stop,
# made new by mktemp and renamed in, so nothing is written through a link planted there. SUFFIX
# `.signal` asks for an eviction's stop (the job's --signal first, the grace, then TERM and KILL).
# Fails when ROOT/stop is no real folder (a machine whose wrappers watch for none).
jobtpu_ask_stop() {
  local d="$1/stop" t n="$2.$3${4:-}"
  [ -d "$d" ] && [ ! -L "$d" ] || return 1
  [ -f "$d/$n" ] && [ ! -L "$d/$n" ] && return 0
  t=$(mktemp "$d/.ask.XXXXXX") || return 1
  mv -T "$t" "$d/$n" 2>/dev/null || { rm -f "$t"; return 1; }
}

# jobtpu_first GROUP SIGNAL : send SIGNAL to every member of the group but its leader (the wrapper, whose
# bash would die of it and leave the job's exit unrecorded). Fails when this account may signal none.
jobtpu_first() {
  local pid ok=1
  for pid in $(ps -eo pid=,pgid= | awk -v g="$1" '$2 == g && $1 != g {print $1}'); do
    kill -s "$2" "$pid" 2>/dev/null && ok=0
  done
  return "$ok"
}

# jobtpu_wait_gone STEPS : wait up to STEPS tenths of a second (wall time) while a group in `groups` or
# a marked process of `wanted` is left; with HIT, signal a marked process forked meanwhile with it.
jobtpu_wait_gone() {
  local start=${EPOCHREALTIME:-} now left group
  start=${start//[!0-9]/}
  for _ in $(seq "$1"); do
    if [ -n "$start" ]; then now=${EPOCHREALTIME//[!0-9]/}; [ $((now - start)) -ge $(($1 * 100000)) ] && break; fi
    left=0
    for group in ${groups[@]+"${groups[@]}"}; do jobtpu_group_alive "$group" && left=1; done
    [ -n "$(jobtpu_ours "$hid" "$wanted")" ] && left=1
    [ "$left" = 0 ] && break
    if [ -n "${2:-}" ]; then jobtpu_hit "$hid" "$wanted" "$2"; fi
    sleep 0.1
  done
}

# jobtpu_kill ROOT HOME_ID STEPS ASK_STEPS FIRST [JOB ATTEMPT WORKER]... : TERM each worker's whole
# process group and every process that carries its marker (those that left the group by setsid or a
# double fork too), KILL what is left after STEPS tenths of a second. With FIRST (an eviction of a job
# with --signal, docs/reference/requests-and-rules.md §8), that signal goes to the job's processes
# first (never the wrapper) and STEPS tenths pass before the TERM: the job may checkpoint. A group
# this account may not signal (another account's) gets a stop request (jobtpu_ask_stop; `.signal`
# with FIRST) and ASK_STEPS tenths more for its wrapper to obey it. One `kill` report per worker:
# gone, or not (stuck).
jobtpu_kill() {
  local r=${1/#-/./-} hid=$2 steps=$3 wanted=" " refs=() groups=() asked=() sent=" " ref group job attempt worker
  local ask_steps=$4 first=$5 stuck="" polite=" "
  shift 5
  while [ $# -ge 3 ]; do refs+=("$1 $2 $3"); wanted="$wanted$1.$2.$3 "; shift 3; done
  if [ -n "$first" ]; then
    for ref in ${refs[@]+"${refs[@]}"}; do
      read -r job attempt worker <<< "$ref"
      if group=$(jobtpu_group "$r" "$job" "$attempt" "$worker"); then
        groups+=("$group"); sent="$sent$group "  # a wrapper is never sent FIRST (jobtpu_hit skips `sent`)
        if ! jobtpu_first "$group" "$first" && [ "$ask_steps" -gt 0 ] && jobtpu_group_alive "$group" &&
          jobtpu_ask_stop "$r" "$job" "$attempt" .signal; then
          asked+=("$r/stop/$job.$attempt.signal"); polite="$polite$group "
        fi
      fi
    done
    jobtpu_hit "$hid" "$wanted" "$first"
    [ ${#asked[@]} -eq 0 ] && jobtpu_wait_gone "$steps"  # an asked wrapper keeps the grace itself
    groups=(); sent=" "
  fi
  for ref in ${refs[@]+"${refs[@]}"}; do
    read -r job attempt worker <<< "$ref"
    if group=$(jobtpu_group "$r" "$job" "$attempt" "$worker"); then
      groups+=("$group")
      [[ $polite == *" $group "* ]] && continue  # its wrapper stops it, as asked
      if ! kill -TERM -- "-$group" 2>/dev/null && [ "$ask_steps" -gt 0 ] && jobtpu_group_alive "$group" &&
        jobtpu_ask_stop "$r" "$job" "$attempt"; then
        asked+=("$r/stop/$job.$attempt")
      fi
    fi
  done
  jobtpu_hit "$hid" "$wanted" TERM
  # The grace is wall time: each round's checks take time of their own on a busy host (bash 5's
  # EPOCHREALTIME; an older bash counts rounds). A child forked meanwhile gets its TERM too.
  [ ${#asked[@]} -gt 0 ] && steps=$((steps + ask_steps))
  jobtpu_wait_gone "$steps" TERM
  for _ in 1 2 3; do  # a process that forks while it is killed leaves a child: kill it too
    for group in ${groups[@]+"${groups[@]}"}; do jobtpu_group_alive "$group" && kill -KILL -- "-$group" 2>/dev/null; done
    sent=" "; jobtpu_hit "$hid" "$wanted" KILL; sleep 0.1
  done
  for ref in ${refs[@]+"${refs[@]}"}; do
    read -r job attempt worker <<< "$ref"
    # A wrapper stopped before it read its env file leaves the job's secrets behind: not any more.
    rm -f -- "$r/meta/$job/$attempt.$worker.env"
    group=$(jobtpu_group "$r" "$job" "$attempt" "$worker")
    if { [ -n "$group" ] && jobtpu_group_alive "$group"; } || [ -n "$(jobtpu_marked "$hid" "$job" "$attempt" "$worker")" ]; then
      jobtpu_say kill n:job "$job" n:attempt "$attempt" n:worker "$worker" b:gone 0; stuck=1
    else
      jobtpu_say kill n:job "$job" n:attempt "$attempt" n:worker "$worker" b:gone 1
    fi
  done
  # The requests are ours to remove (the folder is sticky) once every worker is gone; a stuck one's
  # stays for its wrapper, and the next stop finds it made.
  if [ -z "$stuck" ] && [ ${#asked[@]} -gt 0 ]; then rm -f -- "${asked[@]}"; fi
}

# jobtpu_ours HOME_ID WANTED : the marked processes of the workers asked about, WANTED being
# " job.attempt.worker ..." (zombies carry no environment: not listed).
jobtpu_ours() {
  local pid job attempt worker
  jobtpu_marks "$1" | while read -r pid job attempt worker; do
    if [[ $2 == *" $job.$attempt.$worker "* ]]; then echo "$pid"; fi
  done
}

# jobtpu_hit HOME_ID WANTED SIGNAL : signal every marked process of the workers asked about once per
# signal (the caller's `sent` holds " pid ..." of those already signalled): a job's TERM handler is not
# interrupted again.
jobtpu_hit() {
  local pid
  for pid in $(jobtpu_ours "$1" "$2"); do
    [[ $sent == *" $pid "* ]] && continue
    kill "-$3" "$pid" 2>/dev/null; sent="$sent$pid "
  done
}
