# A machine's setup commands, once per incarnation and worker (needs common.sh).

# jobtpu_setup_run STEM UMASK [COMMAND]... : the detached setup process: record its pid or start nothing,
# run each command by bash with UMASK (the login's: what setup installs is the user's business) in
# turn until one fails, and record the exit code in STEM.exit.
jobtpu_setup_run() {
  local b=$1 mask=$2 code=0 step
  jobtpu_record_pid "$b" || exit "$JOBTPU_NO_PID_RECORD"
  shift 2
  for step; do (umask "$mask" && exec bash -c -- "$step"); code=$?; [ "$code" = 0 ] || break; done
  echo "$code" > "$b.exit.tmp" && mv "$b.exit.tmp" "$b.exit"
}

# jobtpu_setup_said OUTCOME [CODE [DETAIL]] : the one `setup` report of a setup script, its last line:
# done | running | failed, with the exit code and why (or the end of its log).
jobtpu_setup_said() {
  jobtpu_say setup s:outcome "$1" n:code "${2:-}" s:detail "${3:-}"
}

# jobtpu_setup_failed STEM CODE : the report of a failed setup, with the end of its log.
jobtpu_setup_failed() {
  jobtpu_setup_said failed "$2" "$(tail -c 300 "$1.log" | tr '\n' ' ')"
}

# jobtpu_setup root=ROOT tag=TAG worker=WORKER retry=RETRY -- [COMMAND]... (named arguments,
# jobtpu_named, then the commands) : run the setup commands detached, once per incarnation (TAG) and
# worker; report one line (jobtpu_setup_said): done | running | failed with its exit code and log
# tail. With RETRY=1, a failed one starts again.
jobtpu_setup() {
  local root="" tag="" worker="" retry="" r b c w
  jobtpu_named "root tag worker retry" "$@" || return 1
  # shellcheck disable=SC2154 # set by jobtpu_named (common.sh)
  shift "$jobtpu_named_n"
  r=${root/#-/./-}
  mkdir -p "$r/setup" || { jobtpu_setup_said failed 1 "cannot create $r/setup"; return 0; }
  jobtpu_private_root "$r"
  b="$(cd "$r/setup" && pwd -P)/$tag.$worker"
  if [ -s "$b.exit" ]; then
    read -r c < "$b.exit"
    if [ "$c" = 0 ]; then jobtpu_setup_said "done"; return 0; fi
    if [ "$retry" = 0 ]; then jobtpu_setup_failed "$b" "$c"; return 0; fi
    rm -f "$b.exit" "$b.pid"
  fi
  if jobtpu_live_pid "$b.pid" > /dev/null; then jobtpu_setup_said running; return 0; fi
  cd ~ && setsid nohup bash -c "$(jobtpu_program jobtpu_record_pid jobtpu_setup_run)" jobtpu-setup "$b" "$(jobtpu_job_umask)" "$@" \
    > "$b.log" 2>&1 < /dev/null &
  w=$!
  for _ in $(seq 50); do [ -s "$b.exit" ] && break; jobtpu_ended "$w" && break; sleep 0.02; done
  if [ -s "$b.exit" ]; then
    read -r c < "$b.exit"
    if [ "$c" = 0 ]; then jobtpu_setup_said "done"; else jobtpu_setup_failed "$b" "$c"; fi
  elif jobtpu_ended "$w" && { wait "$w"; [ $? = "$JOBTPU_NO_PID_RECORD" ]; }; then
    jobtpu_setup_said failed "$JOBTPU_NO_PID_RECORD" \
      "cannot write the pid record $b.pid (disk full or not writable); setup was not started"
  else jobtpu_setup_said running; fi
}

# jobtpu_setup_now ROOT TAG WORKER [COMMAND]... : `jobtpu tpu setup`: run the setup commands again
# now, in the foreground (the caller shows their output), and record the exit code where a pass's
# setup of this incarnation (TAG) looks; the last line is the report (jobtpu_setup_said): done, failed
# with the exit code, or running when a pass's detached setup is still running there (nothing else
# is started).
jobtpu_setup_now() {
  local r=${1/#-/./-} tag=$2 worker=$3 b code=0 step
  shift 3
  mkdir -p "$r/setup" || { jobtpu_setup_said failed 1 "cannot create $r/setup"; return 0; }
  b="$(cd "$r/setup" && pwd -P)/$tag.$worker"
  if jobtpu_live_pid "$b.pid" > /dev/null; then jobtpu_setup_said running; return 0; fi
  rm -f "$b.exit" "$b.pid"
  cd ~ || { jobtpu_setup_said failed 1 "no home folder"; return 0; }
  for step; do bash -c -- "$step" < /dev/null 2>&1; code=$?; [ "$code" = 0 ] || break; done
  echo "$code" > "$b.exit.tmp" && mv "$b.exit.tmp" "$b.exit"
  if [ "$code" = 0 ]; then jobtpu_setup_said "done"; else jobtpu_setup_said failed "$code"; fi
}
