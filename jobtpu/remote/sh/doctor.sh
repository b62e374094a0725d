# `jobtpu doctor`'s look at a worker (needs common.sh).

# jobtpu_doctor ROOT HOME_ID [TOOL]... : `ROOT yes|no`, `DISK <KiB free where root is or would be>`,
# `TOOL name path|-` lines, and a `LIVE job attempt worker pid` line for every live process of this
# home's jobs on this host: each process that carries a job's marker (an ended job's escaped children
# among them) and each live process-group leader named by a pid file.
jobtpu_doctor() {
  local r=${1/#-/./-} hid=$2 d tool file pid job name attempt worker
  shift 2
  d=$r
  while [ ! -d "$d" ]; do d=$(dirname -- "$d"); done
  if [ -d "$r" ]; then echo "ROOT yes"; else echo "ROOT no"; fi
  echo "DISK $(df -Pk -- "$d" | awk 'NR == 2 {print $4}')"
  for tool; do echo "TOOL $tool $(command -v -- "$tool" || echo -)"; done
  for file in "$r"/meta/*/*.pid; do
    pid=$(jobtpu_live_pid "$file") || continue
    job=${file%/*}; name=${file##*/}; name=${name%.pid}
    echo "LIVE ${job##*/} ${name%%.*} ${name#*.} $pid"
  done
  jobtpu_marks "$hid" | while read -r pid job attempt worker; do echo "LIVE $job $attempt $worker $pid"; done
}
