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
