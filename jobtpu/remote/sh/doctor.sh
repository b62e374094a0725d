# `jobtpu doctor`'s look at a worker (needs common.sh).

# jobtpu_doctor ROOT HOME_ID [TOOL]... : a `root` report (whether it exists), a `disk` report (KiB free
# where root is or would be), a `tool` report per TOOL (its path, null when missing), and a `live`
# report for every live process of this home's jobs on this host: each process that carries a job's
# marker (an ended job's escaped children among them) and each live process-group leader named by a
# pid file.
jobtpu_doctor() {
  local r=${1/#-/./-} hid=$2 d tool path file pid job name attempt worker
  shift 2
  d=$r
  while [ ! -d "$d" ]; do d=$(dirname -- "$d"); done
  if [ -d "$r" ]; then jobtpu_say root b:exists 1; else jobtpu_say root b:exists 0; fi
  jobtpu_say disk n:free_kib "$(df -Pk -- "$d" | awk 'NR == 2 {print $4}')"
  for tool; do
    if path=$(command -v -- "$tool"); then jobtpu_say tool s:name "$tool" s:path "$path"
    else jobtpu_say tool s:name "$tool" n:path -; fi
  done
  for file in "$r"/meta/*/*.pid; do
    pid=$(jobtpu_live_pid "$file") || continue
    job=${file%/*}; name=${file##*/}; name=${name%.pid}
    jobtpu_say live n:job "${job##*/}" n:attempt "${name%%.*}" n:worker "${name#*.}" n:pid "$pid"
  done
  jobtpu_marks "$hid" | while read -r pid job attempt worker; do
    jobtpu_say live n:job "$job" n:attempt "$attempt" n:worker "$worker" n:pid "$pid"
  done
}
