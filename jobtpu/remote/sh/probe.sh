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
