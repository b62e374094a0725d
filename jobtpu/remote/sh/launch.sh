# Starting job workers (needs common.sh, wrapper.sh and tpu.sh).

# jobtpu_launch_init stale_minutes=M unpack_bad_exit=C unpack_source=TEXT reset_tenths=T : what every
# launch of this script shares (named arguments, jobtpu_named). A claim with no pid after M minutes
# means its start never happened; the snapshot is checked and unpacked by TEXT
# (jobtpu/snapshot/unpack.py, run by python3 on the worker), whose exit code C says the archive is
# damaged. Another worker replacing the job folder is given T tenths of a second (timing's reset_wait).
jobtpu_launch_init() {
  local stale_minutes="" unpack_bad_exit="" unpack_source="" reset_tenths=""
  jobtpu_named "stale_minutes unpack_bad_exit unpack_source reset_tenths" "$@" || return 1
  jobtpu_stale_minutes=$stale_minutes jobtpu_unpack_bad_exit=$unpack_bad_exit
  jobtpu_unpack_source=$unpack_source jobtpu_reset_tenths=$reset_tenths
}

# jobtpu_fence ROOT HOME_ID TOKEN: whether a launch from the runner holding lease TOKEN may start here
# (docs/reference/home-files.md §1.7): no launch of this home with a higher token came to ROOT before.
# Records TOKEN when it is the highest yet; 0 (a home without a lease) is never refused.
jobtpu_fence() {
  local f="$1/meta/.runner_token.$2" seen=0
  [ "$3" = 0 ] && return 0
  if [ -s "$f" ]; then read -r seen < "$f"; fi
  [[ $seen =~ ^[0-9]+$ ]] || seen=0
  [ "$3" -lt "$seen" ] && return 1
  if [ "$3" -gt "$seen" ]; then echo "$3" > "$f.$$" && mv -f "$f.$$" "$f"; fi
  return 0
}

# jobtpu_tree ROOT ARCHIVE : into jobtpu_tree_path, where the verified tree of ROOT/archives/ARCHIVE is
# kept: the folder a successful unpack of it left (jobtpu_keep_tree), named by the archive and by the
# identity of its file as it is now (inode, size, modification and change times, to the nanosecond).
# A copy rewritten or replaced in any way (a damaged one, a push) names another tree, so a tree is only
# ever used for the very file it was checked from. Empty when the file cannot be looked at.
jobtpu_tree() {
  local id
  jobtpu_tree_path=""
  id=$(stat -L -c '%i.%s.%y.%z' -- "$1/archives/$2" 2>/dev/null) || return 0
  jobtpu_tree_path="$1/archives/.tree.${2%.tar.gz}.${id//[!0-9.]/}"
}

# jobtpu_keep_tree ROOT ARCHIVE FROM TREE : keep a copy of FROM, a job folder just unpacked from
# ARCHIVE, as its TREE (jobtpu_tree), for the next job's folder to be copied from. Made aside and moved
# in whole, so a tree is never seen half made; a tree another launch made first is kept. Its failure
# (a full disk) costs only the next job an unpack.
jobtpu_keep_tree() {
  local x
  x=$(mktemp -d "$1/archives/.treetmp.${2%.tar.gz}.XXXXXX") || return 0
  cp -R -p -- "$3/." "$x" 2>/dev/null && mv -T "$x" "$4" 2>/dev/null && return 0
  rm -rf "$x"
}

# jobtpu_launch root= home_id= job= attempt= worker= archive= fresh= tpu_cleanup= command= signal= delay=
#   poll= grace= limit= token= first= -- [NAME MODE VALUE]...
# Start one worker detached, idempotently, and print one report (jobtpu_say launch, outcome ok with its
# pid | pending | need-archive | bad-archive with why | fail with why). Named arguments (jobtpu_named),
# every one given. fresh=1: start from the snapshot, replacing a folder an earlier attempt left (a
# rerun). tpu_cleanup=1: clear stale TPU device holders and the libtpu lock file first. signal (empty:
# none) is sent to the job's processes `delay` seconds after the start (--signal). poll (seconds; 0:
# none) is how often the wrapper looks for a stop request in ROOT/stop, which then stops the job with
# `grace` tenths between TERM and KILL (the local machine: a teammate's kill, docs/design.md §7); first
# (empty: none) is the job's --signal, which an eviction's stop request sends before the TERM. limit
# (seconds; empty: none) is the job's --timeout, which the wrapper enforces on the worker (`grace`
# tenths between TERM and KILL). token is the launching runner's lease token (jobtpu_fence; 0: none). The NAME MODE VALUE triples after `--` are the job's environment (mode
# `x`: $NAME and ${NAME} in VALUE are expanded at job start; `=`: taken as it is). A subshell: every
# `exit` below ends this worker's launch only.
jobtpu_launch() (
  local root="" home_id="" job="" attempt="" worker="" archive="" fresh="" tpu_cleanup="" command="" signal="" delay=""
  local poll="" grace="" limit="" token="" first="" r
  jobtpu_named "root home_id job attempt worker archive fresh tpu_cleanup command signal delay poll grace limit token first" "$@" ||
    exit
  # shellcheck disable=SC2154 # set by jobtpu_named (common.sh)
  shift "$jobtpu_named_n"
  r=${root/#-/./-}
  # The one report of this worker's launch: OUTCOME, then the pid (ok) or why.
  said() {
    if [ "$1" = ok ]; then jobtpu_say launch n:job "$job" n:attempt "$attempt" n:worker "$worker" s:outcome ok n:pid "$2"
    else jobtpu_say launch n:job "$job" n:attempt "$attempt" n:worker "$worker" s:outcome "$1" s:detail "${2:-}"; fi
  }
  mkdir -p "$r/meta/$job" "$r/jobs" "$r/archives" || { said fail "cannot create $r"; exit; }
  jobtpu_private_root "$r"
  bad="is not a folder of this account's alone (a link, another account's, or writable by others)"
  jobtpu_own_folder "$r/meta/$job" || { said fail "$r/meta/$job $bad"; exit; }
  m=$(cd "$r/meta/$job" && pwd -P) || exit
  b="$m/$attempt.$worker"
  # A worker handed to a batch scheduler (slurm.sh) is launched once its job id is recorded.
  if [ -n "${jobtpu_batch_on:-}" ] && jobtpu_batch_adopt "$b" "jobtpu-$home_id.$job.$attempt.$worker"; then exit; fi
  if [ -s "$b.pid" ]; then read -r p _ < "$b.pid"; said ok "$p"; exit; fi
  if ! mkdir "$b.claim" 2>/dev/null; then
    if [ -n "$(find "$b.claim" -maxdepth 0 -mmin "-$jobtpu_stale_minutes")" ]; then said pending; exit; fi
    # A stale claim whose job still has a process here (it lost its pid record) is no dead launch.
    if [ -n "$(jobtpu_marked "$home_id" "$job" "$attempt" "$worker")" ]; then said pending; exit; fi
    rm -rf "$b.claim"; mkdir "$b.claim" 2>/dev/null || { said pending; exit; }
  fi

  # The job's folder "$j" from the snapshot, made with the worker's claim held. The archive is checked
  # against its name and unpacked by python3 on the worker, never trusted: a damaged copy is reported
  # as `bad-archive` for the home to push again. With FRESH, a folder an earlier attempt left is
  # replaced, once per attempt: workers that share the root agree through an atomic `mkdir` of
  # "$m/<attempt>.reset" (taken over when stale, like a claim).
  j="$r/jobs/$job"; s=""
  # Release the claim (and an unfinished reset) and report "OUTCOME [WHY]"; nothing was started.
  give_up() {
    rmdir "$b.claim"
    if [ -n "$s" ] && [ ! -e "$s/done" ]; then rm -rf "$s"; fi
    if [[ $1 == *" "* ]]; then said "${1%% *}" "${1#* }"; else said "$1"; fi
    exit
  }
  # A runner that lost its lease to a newer one starts nothing here, whatever it still believes.
  jobtpu_fence "$r" "$home_id" "$token" || give_up "fail fenced: a runner with a newer lease token launches here"
  if [ "$fresh" = 1 ]; then
    s="$m/$attempt.reset"; own=""
    if [ ! -e "$s/done" ]; then
      if mkdir "$s" 2>/dev/null; then own=1
      else  # another worker sharing this root is replacing the folder: give it a while
        for _ in $(seq "$jobtpu_reset_tenths"); do { [ -e "$s/done" ] || [ ! -d "$s" ]; } && break; sleep 0.1; done
        if [ ! -e "$s/done" ]; then
          if [ -n "$(find "$s" -maxdepth 0 -mmin "-$jobtpu_stale_minutes" 2>/dev/null)" ]; then s=""; give_up pending; fi
          rm -rf "$s"; if mkdir "$s" 2>/dev/null; then own=1; else s=""; give_up pending; fi
        fi
      fi
      if [ -n "$own" ] && { [ -e "$j" ] || [ -L "$j" ]; }; then
        mv -T "$j" "$s/old" 2>/dev/null || give_up "fail cannot move the folder of an earlier attempt aside"
        rm -rf "$s/old"
      fi
    fi
  fi
  if [ ! -d "$j" ]; then
    a="$r/archives/$archive"
    [ -f "$a" ] || give_up need-archive
    # An unpack cut short (the connection dropped, the worker rebooted) leaves its folder behind;
    # one older than a claim can live is nobody's any more. (A glob first: no `find` when none is left.)
    for x in "$r/jobs/.unpack.$job.$worker."*; do
      [ -e "$x" ] && find "$r/jobs" -mindepth 1 -maxdepth 1 -name ".unpack.$job.$worker.*" \
        -mmin "+$jobtpu_stale_minutes" -exec rm -rf {} + 2>/dev/null
      break
    done
    # The job's folder is made aside, in "$t", and moved in whole.
    new_t() { t=$(mktemp -d "$r/jobs/.unpack.$job.$worker.XXXXXX") || give_up "fail cannot create a folder in $r/jobs"; }
    new_t
    # The verified tree of this very archive file (jobtpu_tree) is copied, not unpacked again; without
    # one, python3 checks and unpacks the archive, and its result is kept as the tree for the next job.
    # (The copy gives "$t" the tree's mode, the umask's when it was made: no chmod.)
    jobtpu_tree "$r" "$archive"; tree=$jobtpu_tree_path; hit=""
    if [ -n "$tree" ] && jobtpu_own_folder "$tree"; then
      if cp -R -p --reflink=auto -- "$tree/." "$t" 2>/dev/null; then hit=1
      else rm -rf "$t"; new_t; fi
    fi
    if [ -n "$hit" ]; then
      mv -T "$t" "$j" 2>/dev/null || rm -rf "$t"
    else
      # mktemp makes it 0700 whatever the umask: in a shared home's run root a teammate's fetch reads it.
      chmod "$(umask -S)" "$t"
      command -v python3 > /dev/null || give_up "fail python3 is needed on the worker to unpack the snapshot"
      # -I -S: no site, no user site, no PYTHON* variable: the unpack needs only the standard library,
      # starts faster, and no module of the login's can change what it does.
      python3 -I -S -c "$jobtpu_unpack_source" "$a" "$t" 2> "$b.unpack.err"; c=$?
      e=$(head -c 300 "$b.unpack.err" | tr "\n" " "); rm -f "$b.unpack.err"
      if [ "$c" = 0 ]; then
        [ -n "$tree" ] && jobtpu_keep_tree "$r" "$archive" "$t" "$tree"
        mv -T "$t" "$j" 2>/dev/null || rm -rf "$t"
      else rm -rf "$t"; fi
      [ "$c" = "$jobtpu_unpack_bad_exit" ] && give_up "bad-archive $e"
      [ -d "$j" ] || give_up "fail unpack: $e"
    fi
  fi
  jobtpu_own_folder "$j" || give_up "fail $j $bad"
  if [ -n "$s" ]; then touch "$s/done"; fi

  if [ "$tpu_cleanup" = 1 ]; then jobtpu_tpu_cleanup "$r"; fi
  cd "$j" || { rmdir "$b.claim"; said fail cd; exit; }
  # The environment goes to a file only the wrapper reads (and deletes): values, secrets among them,
  # never appear on a command line that `ps` shows.
  (umask 077; for x; do printf '%s\0' "$x"; done > "$b.env") ||
    { rm -f "$b.env"; rmdir "$b.claim"; said fail "cannot write the env file $b.env"; exit; }
  if [ -n "${jobtpu_batch_on:-}" ]; then
    jobtpu_batch_submit "$b" "$j" "jobtpu-$home_id.$job.$attempt.$worker" "$command" "$signal" "$delay" "$limit" "$grace"
    exit
  fi
  ask=()  # the stop request this attempt obeys: its name only, in the run root's real path
  if [ "$poll" != 0 ]; then ask=("$(cd "$r" && pwd -P)/stop/$job.$attempt" "$poll" "$first"); fi
  # The wrapper says on its fd 3 that its pid is recorded: a pipe whose write end only the wrapper
  # holds, so the read below returns on its word, or on the pipe's end when the wrapper is gone,
  # never later than it must (an event, not a poll). /proc/self/fd reopens the one pipe as its two ends.
  exec {k}<> <(:)
  exec {up}> "/proc/self/fd/$k"
  exec {down}< "/proc/self/fd/$k" {k}>&-
  # SIGHUP ignored, as nohup would (its output is redirected already), without starting nohup; the
  # background subshell becomes setsid, then the wrapper, so $! is the wrapper's pid.
  (
    trap '' HUP
    JOBTPU_MARK="$home_id.$job.$attempt.$worker" exec setsid bash -c "$(jobtpu_program jobtpu_record_pid JOBTPU_w_expand \
      JOBTPU_w_load JOBTPU_w_now JOBTPU_w_nap JOBTPU_w_timer jobtpu_marks jobtpu_marked JOBTPU_w_alive JOBTPU_w_group \
      JOBTPU_w_marked JOBTPU_w_procs JOBTPU_w_stopper JOBTPU_w_detach JOBTPU_w_end jobtpu_wrapper)" \
      "jobtpu-$job" "$b" "$command" "$signal" "$delay" "$(jobtpu_job_umask)" "$limit" "$grace" ${ask[@]+"${ask[@]}"}
  ) > "$b.log" 2>&1 < /dev/null 3>&"$up" {up}>&- {down}<&- &
  w=$!
  exec {up}>&-
  IFS= read -r -t 4 -u "$down" _; c=$?
  exec {down}<&-
  if [ -s "$b.pid" ]; then read -r p _ < "$b.pid"; said ok "$p"; exit; fi
  # The pipe's end without a word: the wrapper has exited, or is exiting (its files close before
  # it is a zombie), so waiting for it is at once. Past the time (c > 128), it may still be running.
  if [ "$c" -gt 128 ] && ! jobtpu_ended "$w"; then said pending; exit; fi
  wait "$w"; c=$?
  # 0: setsid forked and left the wrapper to go on; it records its pid (or fails) on its own.
  [ "$c" = 0 ] && { said pending; exit; }
  rm -f "$b.env"; rmdir "$b.claim" 2>/dev/null
  if [ "$c" = "$JOBTPU_NO_PID_RECORD" ]; then
    said fail "cannot write the pid record $b.pid (disk full or not writable); the command was not started"
  else said fail "the wrapper could not start (exit $c): $(head -c 200 "$b.log" | tr '\n' ' ')"; fi
)
