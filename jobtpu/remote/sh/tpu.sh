# The TPU device on a worker (needs common.sh).

# jobtpu_holds_tpu PROC_DIR : succeeds when the process /proc/<pid> has the TPU device open.
jobtpu_holds_tpu() {
  find "$1/fd" -maxdepth 1 \( -lname '*/dev/accel*' -o -lname '*/dev/vfio/*' \) -print -quit 2>/dev/null | grep -q .
}

# jobtpu_tpu_cleanup ROOT : before a launch on a TPU, stop stale holders of the TPU device that are
# not a live job of ours under ROOT, then remove the libtpu lock file (in that order: the holder would
# recreate it).
jobtpu_tpu_cleanup() {
  local ours dir pid group
  ours=$(jobtpu_our_groups "$1")
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}; [ "$pid" = $$ ] && continue
    if jobtpu_holds_tpu "$dir"; then
      group=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' ')
      case "$ours" in
        *" $group "*) ;;
        *) kill -TERM "$pid" 2>/dev/null; sleep 0.5; kill -KILL "$pid" 2>/dev/null;;
      esac
    fi
  done
  rm -f /tmp/libtpu_lockfile 2>/dev/null || sudo -n rm -f /tmp/libtpu_lockfile 2>/dev/null
}

# jobtpu_tpu_doctor ROOT FIX : `HOLDER pid comm ours|stale` for each process holding the TPU device,
# `LOCK yes|no` for /tmp/libtpu_lockfile; with FIX=1, the stale holders are stopped and the lock file
# removed first.
jobtpu_tpu_doctor() {
  local r=${1/#-/./-} ours dir pid group name
  if [ "$2" = 1 ]; then jobtpu_tpu_cleanup "$r"; fi
  ours=$(jobtpu_our_groups "$r")
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}
    if jobtpu_holds_tpu "$dir"; then
      group=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' '); name=$(ps -o comm= -p "$pid" 2>/dev/null)
      case "$ours" in
        *" $group "*) echo "HOLDER $pid $name ours";;
        *) echo "HOLDER $pid $name stale";;
      esac
    fi
  done
  if [ -e /tmp/libtpu_lockfile ]; then echo "LOCK yes"; else echo "LOCK no"; fi
}

# jobtpu_tpu_accelerator ROOT DEV : whether the TPU answers on this worker. `DEVICE path` for each
# device file under DEV (accel*, vfio/N), `HOLDER pid comm ours|stale` for each process holding one
# (as jobtpu_tpu_doctor); then, when no process holds the device (JAX would find it busy), `JAX
# count` (the devices JAX sees), `JAX error TEXT`, or `NOJAX` when python3 has no jax.
jobtpu_tpu_accelerator() {
  local r=${1/#-/./-} dev=$2 ours dir pid group name f held=0 out
  for f in "$dev"/accel* "$dev"/vfio/[0-9]*; do [ -e "$f" ] && echo "DEVICE $f"; done
  ours=$(jobtpu_our_groups "$r")
  for dir in /proc/[0-9]*; do
    pid=${dir#/proc/}; [ "$pid" = $$ ] && continue
    if jobtpu_holds_tpu "$dir"; then
      held=1
      group=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -d ' '); name=$(ps -o comm= -p "$pid" 2>/dev/null)
      case "$ours" in
        *" $group "*) echo "HOLDER $pid $name ours";;
        *) echo "HOLDER $pid $name stale";;
      esac
    fi
  done
  [ "$held" = 0 ] || return 0
  if ! python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("jax") is None)' 2>/dev/null; then
    echo "NOJAX"; return 0
  fi
  if out=$(cd ~ && timeout 300 python3 -c 'import jax; print(jax.device_count())' 2>&1); then
    echo "JAX $(printf '%s\n' "$out" | tail -n 1)"
  else
    echo "JAX error $(printf '%s\n' "$out" | tail -n 1 | cut -c1-300)"
  fi
}
