# Watching job workers (needs common.sh).

# jobtpu_probe ROOT HOME_ID CHUNK TAIL [JOB ATTEMPT WORKER OFFSET]... : first `H boot_id now`, then
# for each worker (and the log bytes already pulled, OFFSET) one line
# `W job attempt worker pid alive exit size claimed at marked` (marked: how many processes carry its
# marker; `-`, not counted, while every leader asked about lives: only a dead leader's escapees
# matter), then `L job attempt worker offset BASE64` with the log bytes past OFFSET (at most CHUNK),
# and for an exited worker whose log is further behind than that, `T job attempt worker BASE64` with
# the log's last TAIL bytes, to classify its failure from.
jobtpu_probe() {
  local r=${1/#-/./-} chunk=$3 tail=$4 all=- job attempt worker boot=- now i a w
  # One scan of /proc for every worker asked about (" job.attempt.worker " once per process), and
  # only when one of them has no live leader: the usual round, every job running, reads no environ.
  for ((i = 5; i + 3 <= $#; i += 4)); do
    a=$((i + 1)) w=$((i + 2))
    if ! jobtpu_live_pid "$r/meta/${!i}/${!a}.${!w}.pid" > /dev/null; then
      all=" $(jobtpu_marks "$2" | while read -r _ job attempt worker; do printf '%s ' "$job.$attempt.$worker"; done)"
      break
    fi
  done
  shift 4
  # Builtins, not cat and date: a probe runs on every busy worker every round.
  [ -r /proc/sys/kernel/random/boot_id ] && read -r boot < /proc/sys/kernel/random/boot_id
  printf -v now '%(%s)T' -1
  echo "H ${boot:--} $now"
  while [ $# -ge 4 ]; do
    jobtpu_probe_worker "$r" "$all" "$chunk" "$tail" "$1" "$2" "$3" "$4"
    shift 4
  done
}

# jobtpu_probe_worker ROOT MARKED CHUNK TAIL JOB ATTEMPT WORKER OFFSET : the lines of one worker.
jobtpu_probe_worker() {
  local b="$1/meta/$5/$6.$7" rest=$2 chunk=$3 tail=$4 id="$5.$6.$7" offset=$8
  local pid=- alive=0 ex=- at=- size=0 claim=0 n=0
  [ -s "$b.pid" ] && read -r pid _ < "$b.pid"
  jobtpu_live_pid "$b.pid" > /dev/null && alive=1
  [ -s "$b.exit" ] && read -r ex < "$b.exit" && at=$(date -r "$b.exit" +%s.%N)
  [ -e "$b.claim" ] && claim=1
  [ -e "$b.log" ] && size=$(stat -c %s "$b.log")
  if [ "$rest" = - ]; then n=-; fi
  while [[ $rest == *" $id "* ]]; do n=$((n + 1)); rest=${rest#*" $id "}; rest=" $rest"; done
  echo "W $5 $6 $7 $pid $alive $ex $size $claim $at $n"
  if [ "$size" -gt "$offset" ]; then
    echo "L $5 $6 $7 $offset $(tail -c +$((offset + 1)) "$b.log" | head -c "$chunk" | base64 -w0)"
  fi
  if [ "$ex" != - ] && [ $((size - offset)) -gt "$chunk" ]; then
    echo "T $5 $6 $7 $(tail -c "$tail" "$b.log" | base64 -w0)"
  fi
}
