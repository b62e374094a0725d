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

# jobtpu_kill ROOT HOME_ID STEPS [JOB ATTEMPT WORKER]... : TERM each worker's whole process group and
# every process that carries its marker (those that left the group by setsid or a double fork too),
# KILL what is left after STEPS tenths of a second. One `K job attempt worker gone|stuck` line per
# worker.
jobtpu_kill() {
  local r=${1/#-/./-} hid=$2 steps=$3 wanted=" " refs=() groups=() sent=" " ref group left job attempt worker
  shift 3
  while [ $# -ge 3 ]; do refs+=("$1 $2 $3"); wanted="$wanted$1.$2.$3 "; shift 3; done
  for ref in ${refs[@]+"${refs[@]}"}; do
    read -r job attempt worker <<< "$ref"
    if group=$(jobtpu_group "$r" "$job" "$attempt" "$worker"); then
      groups+=("$group"); kill -TERM -- "-$group" 2>/dev/null
    fi
  done
  jobtpu_hit "$hid" "$wanted" TERM
  # The grace is wall time: each round's checks take time of their own on a busy host (bash 5's
  # EPOCHREALTIME; an older bash counts rounds).
  local start=${EPOCHREALTIME:-} now
  start=${start//[!0-9]/}
  for _ in $(seq "$steps"); do
    if [ -n "$start" ]; then now=${EPOCHREALTIME//[!0-9]/}; [ $((now - start)) -ge $((steps * 100000)) ] && break; fi
    left=0
    for group in ${groups[@]+"${groups[@]}"}; do jobtpu_group_alive "$group" && left=1; done
    [ -n "$(jobtpu_ours "$hid" "$wanted")" ] && left=1
    [ "$left" = 0 ] && break
    jobtpu_hit "$hid" "$wanted" TERM  # a child forked meanwhile gets its TERM too
    sleep 0.1
  done
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
      echo "K $job $attempt $worker stuck"
    else
      echo "K $job $attempt $worker gone"
    fi
  done
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
