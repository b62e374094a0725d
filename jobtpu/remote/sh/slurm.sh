# A Slurm cluster's worker, reached at its login host (needs common.sh; reports.sh for the probe;
# launch.sh for the submit; a sweep's job array is slurm_array.sh). The run root is on the cluster's
# shared filesystem: the login host and every compute node see the same meta files, so the wrapper's
# pid, exit and log records are written on the node and read at the login.
# STEM.slurm holds the attempt's Slurm job id (docs/reference/machines-json.md, "A Slurm cluster"); an
# array member writes it when it starts, and until then the probe and the stop use the id the home
# has from the launch's report (an ID word after each worker).

# Slurm's job states that have ended (squeue --states=all keeps them a while, MinJobAge); every other
# state (pending, running, completing, suspended, requeued...) still holds the job in Slurm.
jobtpu_slurm_ended=" COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL PREEMPTED BOOT_FAIL DEADLINE OUT_OF_MEMORY REVOKED "

# jobtpu_batch OPTION... : the sbatch options of the next jobtpu_launch call, which then hands its worker
# to Slurm (jobtpu_batch_submit) instead of starting it on this host.
jobtpu_batch() {
  # shellcheck disable=SC2034 # read by jobtpu_launch (launch.sh)
  jobtpu_batch_on=1
  jobtpu_batch_opts=("$@")
}

# jobtpu_batch_record STEM ID : the Slurm job id into STEM.slurm, atomically.
jobtpu_batch_record() {
  echo "$2" > "$1.slurm.tmp" && mv "$1.slurm.tmp" "$1.slurm"
}

# jobtpu_batch_adopt STEM NAME : (in jobtpu_launch, before its claim) when this attempt was handed to
# Slurm already, say `ok` with its job id and succeed: a launch is never submitted twice. A claim with
# no recorded id may be a submit cut short after sbatch answered, and STEM.unsure one whose sbatch got
# no answer from Slurm's controller (jobtpu_batch_submit): Slurm is asked for a job of this attempt's
# name; when Slurm cannot be asked, the launch is `pending`. Fails when nothing was submitted.
jobtpu_batch_adopt() {
  local id=""
  if [ ! -s "$1.slurm" ]; then
    [ -e "$1.claim" ] || [ -e "$1.unsure" ] || return 1
    id=$(squeue --noheader --user="$(id -un)" --states=all --name="$2" --format=%i 2>/dev/null) || { said pending; return 0; }
    id=${id%%[!0-9]*}
    # Slurm answers and has none: the submit never took (or the controller lost it in a crash).
    if [ -z "$id" ]; then rm -f "$1.unsure"; return 1; fi
    jobtpu_batch_record "$1" "$id" || { said pending; return 0; }
    rm -f "$1.unsure"
  fi
  read -r id _ < "$1.slurm"
  jobtpu_batch_ok "$2" "$id"
}

# jobtpu_batch_ok NAME ID : the `launch` report, ok, of the worker whose Slurm job is named NAME
# (jobtpu-<home id>.<job>.<attempt>.<worker>, its marker) and has the id ID (a number, or an array
# member's <array id>_<index>).
jobtpu_batch_ok() {
  local h=${1#jobtpu-} j a w
  h=${h%.*.*.*}
  IFS=. read -r j a w <<< "${1#jobtpu-"$h".}"
  if [[ $2 =~ ^[0-9]+$ ]]; then
    jobtpu_say launch n:job "$j" n:attempt "$a" n:worker "$w" s:outcome ok n:slurm "$2"
  else
    jobtpu_say launch n:job "$j" n:attempt "$a" n:worker "$w" s:outcome ok s:slurm "$2"
  fi
}

# jobtpu_batch_program : the wrapper's program as a batch step runs it (a lone job's and every array
# member's): the batch step's exit is the job's, for Slurm's own records (sacct, squeue's FAILED).
jobtpu_batch_program() {
  jobtpu_program jobtpu_record_pid JOBTPU_w_expand JOBTPU_w_load JOBTPU_w_now JOBTPU_w_nap \
    JOBTPU_w_timer jobtpu_marks jobtpu_marked JOBTPU_w_alive JOBTPU_w_group JOBTPU_w_marked JOBTPU_w_procs \
    JOBTPU_w_stopper JOBTPU_w_detach JOBTPU_w_end jobtpu_wrapper
  # shellcheck disable=SC2016 # the wrapper program's text, expanded when it runs
  printf '\n%s' 'read -r JOBTPU_w_c < "$1.exit" 2> /dev/null && exit "$JOBTPU_w_c"; exit 1'
}

# jobtpu_batch_submit STEM FOLDER NAME COMMAND SIGNAL DELAY LIMIT GRACE : (in jobtpu_launch, with the
# claim held, the folder unpacked and STEM.env written) write the batch script STEM.sbatch and hand it to
# sbatch with the options jobtpu_batch gave: one `launch` report, ok with the Slurm job id, or fail
# with sbatch's own words, the env file and the claim taken back (nothing is left half-made). The
# batch script becomes the wrapper, as the launch on an ssh machine starts it, and
# exits with the job's code. A run Slurm requeued (`scontrol requeue`, a preemption, a node failure)
# never runs the command again under this attempt: the pass sees the requeue, and jobtpu's recovery
# rules start the next attempt, which resumes.
jobtpu_batch_submit() {
  local b=$1 out id program rc job=${3%.*.*}
  job=${job##*.}
  program=$(jobtpu_batch_program)
  {
    echo '#!/bin/bash'
    # A requeued run does nothing, and ends failed, never COMPLETED: a job handed over after this one
    # with afterok (--after, decide/slurm_after.py) must not start on a run that did not do the work.
    # shellcheck disable=SC2016 # written for the batch script, expanded there
    echo '[ "${SLURM_RESTART_COUNT:-0}" = 0 ] || exit 75'
    printf 'b=%q\n' "$b"
    # shellcheck disable=SC2016 # written for the batch script, expanded there
    echo 'i=$SLURM_JOB_ID; [ -z "${SLURM_ARRAY_JOB_ID:-}" ] || i=${SLURM_ARRAY_JOB_ID}_$SLURM_ARRAY_TASK_ID'
    # shellcheck disable=SC2016 # written for the batch script, expanded there
    echo '[ -s "$b.slurm" ] || { echo "$i" > "$b.slurm.tmp" && mv "$b.slurm.tmp" "$b.slurm"; }'
    printf 'cd %q || exit 1\n' "$(pwd -P)"  # jobtpu_launch runs this in the job's folder, $2
    printf 'export JOBTPU_MARK=%q\n' "${3#jobtpu-}"
    # shellcheck disable=SC2016 # written for the batch script, expanded there
    # The wrapper is the batch step itself (slurmstepd made it a process-group leader, as the wrapper
    # wants): Slurm's signals and its end of the job reach every process of the job. Its fd 3 closed:
    # the wrapper says it runs on fd 3 only to a launch that waits there (jobtpu_launch).
    printf 'exec bash -c %q %q "$b" %q %q %q %q %q %q 3>&-\n' "$program" "jobtpu-$job" "$4" "$5" "$6" \
      "$(jobtpu_job_umask)" "$7" "$8"
  } > "$b.sbatch" || { rm -f "$b.env" "$b.sbatch"; give_up "fail cannot write the batch script $b.sbatch"; }
  out=$(sbatch --parsable --requeue --job-name="$3" --output="$b.log" --open-mode=append \
    ${jobtpu_batch_opts[@]+"${jobtpu_batch_opts[@]}"} "$b.sbatch" 2>&1)
  rc=$? id=${out%%;*}
  if [ "$rc" != 0 ] || [[ ! $id =~ ^[0-9]+$ ]]; then
    out=${out//$'\n'/ }
    if jobtpu_slurm_away "$out"; then
      # No answer from Slurm's controller (restarting, or it crashed during the submit): it may have
      # taken the job all the same. Nothing fails: the launch is `pending`, and the next one asks Slurm
      # for this attempt's name before it submits again (jobtpu_batch_adopt), never twice.
      touch "$b.unsure" && rmdir "$b.claim"
      said pending "${out:0:400}"
      exit
    fi
    rm -f "$b.env" "$b.sbatch"
    give_up "fail ${out:0:400}"
  fi
  jobtpu_batch_record "$b" "$id" || {
    said fail "Slurm job $id took the attempt, but its id could not be written to $b.slurm"; exit; }
  jobtpu_batch_ok "$3" "$id"
}

# jobtpu_slurm_away SAID : whether a Slurm command's error says the controller did not answer (never
# a refusal of what was asked).
jobtpu_slurm_away() {
  case $1 in
    *"Unable to contact slurm controller"* | *"Socket timed out"* | *"Zero Bytes were transmitted"* | \
      *"Communication connection failure"* | *"Communication send failure"* | \
      *"Communication receive failure"* | *"backup controller in standby"* | *"Connection reset by peer"* | \
      *"Connection refused"* | *"Broken pipe"*) return 0 ;;
  esac
  return 1
}

# jobtpu_slurm_probe root=ROOT chunk=CHUNK tail=TAIL result=RESULT -- [JOB ATTEMPT WORKER OFFSET ID]... :
# what jobtpu_probe says of each worker (ID: its Slurm job id as the home knows it, - when it does not;
# its STEM.slurm record, when there, wins) (an ended worker 0's saved value too, its `result` report, at
# most RESULT bytes of it), its liveness from Slurm: one squeue for every job of this account. When
# Slurm does not answer (slurmctld restarting), nothing is said and the probe fails: the pass takes the
# cluster as unreachable this once and changes none of its jobs. Besides, per worker: waiting, the
# reason Slurm holds it pending; preempted, Slurm requeued or preempted it.
# A worker whose job squeue no longer knows (it forgets an ended job MinJobAge after its end) and whose
# wrapper wrote no exit record is looked up in Slurm's accounting: one sacct for all of them, its state
# read as squeue's would have been (jobtpu_slurm_acct). Where accounting is disabled, nothing more is known.
# The per-worker work is one awk over squeue's lines, one listing of the jobs' meta folders and the
# worker list (a thousand workers a pass: a fork or a shell function per worker cost seconds); only
# the log, log-end and result reports, which carry bytes, are made per worker, by the shell.
jobtpu_slurm_probe() {
  local root="" chunk="" tail="" result="" r q boot=- now lost=() task k j a w offset rsize stem
  jobtpu_lines=() jobtpu_tasks=()
  jobtpu_named "root chunk tail result" "$@" || return 1
  # shellcheck disable=SC2154 # set by jobtpu_named (common.sh)
  shift "$jobtpu_named_n"
  r=${root/#-/./-}
  # --array with JobArrayID: each array member on its own line as <array id>_<index>, as recorded.
  q=$(squeue --noheader --user="$(id -un)" --states=all --array --Format='JobArrayID:|,State:|,Reason:|,RestartCnt:|,Name:|' 2>&1) ||
    { echo "squeue failed: ${q:0:300}" >&2; return 1; }
  # Nothing is said before sacct answered: a probe that fails says nothing.
  jobtpu_slurm_split "$(jobtpu_slurm_report "$r" "$q" "" "$@")"
  for task in ${jobtpu_tasks[@]+"${jobtpu_tasks[@]}"}; do
    read -r k j a w offset rsize <<< "$task"
    [ "$k" = =lost ] && lost+=("$j" "$a" "$w" "$offset" "$rsize")
  done
  if [ ${#lost[@]} -gt 0 ]; then
    jobtpu_slurm_acct "$r" "${lost[@]}" || return 1
    jobtpu_slurm_split "$(jobtpu_slurm_report "$r" "$jobtpu_acct" acct "${lost[@]}")"
  fi
  [ -r /proc/sys/kernel/random/boot_id ] && read -r boot < /proc/sys/kernel/random/boot_id
  printf -v now '%(%s)T' -1
  jobtpu_say host s:boot "$boot" n:now "$now"
  [ ${#jobtpu_lines[@]} = 0 ] || printf '%s\n' "${jobtpu_lines[@]}"
  for task in ${jobtpu_tasks[@]+"${jobtpu_tasks[@]}"}; do
    # The last word, when there, is the worker's files' stem: a member that refused to run wrote its
    # reason beside its array's table (jobtpu_array_refuse), not in its meta folder.
    read -r k j a w offset rsize stem <<< "$task"
    task=${stem:-$r/meta/$j/$a.$w}
    case $k in
      =unsub) rm -f "$task.slurm" && rmdir "$task.claim" 2> /dev/null ;;
      =log) jobtpu_say_log "$j" "$a" "$w" "$offset" "$chunk" "$task.log" ;;
      =end) jobtpu_say_log_end "$j" "$a" "$w" "$tail" "$task.log" ;;
      # As on every machine (probe.sh): once, with the report that brings the rest of an ended worker
      # 0's log, the value its job saved ($JOBTPU_RESULT, beside the log on the shared filesystem).
      =result) jobtpu_say_result "$j" "$a" "$w" "$rsize" "$result" "$task.result" ;;
    esac
  done
}

# jobtpu_slurm_split OUT : jobtpu_slurm_report's output OUT, its report lines appended to the array
# jobtpu_lines, its task lines (each starting with `=`, after them) to jobtpu_tasks. By mapfile, not by
# a pattern over OUT: bash's ${OUT%%...} over a thousand lines takes most of a second.
jobtpu_slurm_split() {
  local all=() n
  [ -n "$1" ] || return 0
  mapfile -t all <<< "$1"
  n=${#all[@]}
  while [ "$n" -gt 0 ] && [[ ${all[n - 1]} == =* ]]; do n=$((n - 1)); done
  jobtpu_lines+=("${all[@]:0:n}")
  jobtpu_tasks+=("${all[@]:n}")
}

# jobtpu_slurm_acct ROOT [JOB ATTEMPT WORKER OFFSET ID]... : what Slurm's accounting says of these
# workers' jobs, one sacct call, into jobtpu_acct (its JobID|State|ExitCode lines). Empty where
# accounting is disabled (as where it is not set up: nothing more is known); fails, the probe with it,
# when sacct does not answer otherwise (slurmdbd away): the next pass asks again, nothing is taken for lost.
jobtpu_slurm_acct() {
  local r=$1 ids=() id out i
  shift
  jobtpu_acct=""
  while [ $# -ge 5 ]; do
    id=$5
    [ -s "$r/meta/$1/$2.$3.slurm" ] && read -r id _ < "$r/meta/$1/$2.$3.slurm"
    [[ $id =~ ^[0-9]+(_[0-9]+)?$ ]] && ids+=("$id")
    shift 5
  done
  # A thousand ids a call: one argument may hold no more than 128 KiB.
  for ((i = 0; i < ${#ids[@]}; i += 1000)); do
    if out=$(IFS=,; sacct -X -n -P --format=JobID,State,ExitCode,JobName --jobs="${ids[*]:i:1000}" 2>&1); then
      jobtpu_acct+=${jobtpu_acct:+$'\n'}$out
    elif [[ $out == *"accounting storage is disabled"* ]]; then
      jobtpu_acct=""
      return 0
    else
      echo "sacct failed: ${out:0:300}" >&2
      return 1
    fi
  done
}

# jobtpu_list_entries DIR... : each entry right under each DIR, a TYPE|SIZE|MTIME|PATH line. One find per
# batch of folders, so that no command line outgrows the kernel's limit on one (at least 128 KiB; the
# folders share their root, so a batch is sized by the first one's name, with room for a longer id).
jobtpu_list_entries() {
  local i per=$((100000 / (${#1} + 24)))
  for ((i = 1; i <= $#; i += per)); do
    find "${@:i:per}" -mindepth 1 -maxdepth 1 -printf '%y|%s|%T@|%p\n' 2> /dev/null
  done
}

# jobtpu_slurm_report ROOT SLURM ACCT [JOB ATTEMPT WORKER OFFSET ID]... : the `worker` report of each
# worker, then a task line for each report that carries bytes (=log, =end, =result: KIND JOB ATTEMPT
# WORKER OFFSET SIZE [STEM], STEM when the files are not the worker's own) and each worker whose job
# Slurm's lines do not know and that wrote no exit record (=lost JOB ATTEMPT WORKER OFFSET ID, when
# ACCT is empty). A worker's Slurm id is its STEM.slurm record, else ID (the home's, - for none); a
# worker with no record whose id's member refused to run reads ROOT/meta/arrays/ID.log and .exit. SLURM is squeue's
# lines (ID|STATE|REASON|RESTARTS|), or with ACCT set, sacct's (ID|STATE|EXITCODE).
jobtpu_slurm_report() {
  local r=$1 slurm=$2 acct=$3 dirs=() i
  shift 3
  for ((i = 1; i <= $#; i += 5)); do dirs+=("$r/meta/${!i}"); done
  [ ${#dirs[@]} -gt 0 ] || return 0
  dirs+=("$r/meta/arrays")
  # shellcheck disable=SC2016 # awk's program
  r=$r acct=$acct chunk=$chunk ended=$jobtpu_slurm_ended awk -F'|' '
    BEGIN { acct = ENVIRON["acct"]; chunk = ENVIRON["chunk"] + 0; ended = ENVIRON["ended"] }
    # JSON s string: by index and substr, not gsub, whose replacement text each awk reads its own way.
    function rep(s, c, r,   out, i) {
      out = ""; while ((i = index(s, c)) > 0) { out = out substr(s, 1, i - 1) r; s = substr(s, i + 1) }
      return out s
    }
    function esc(s,   i) {
      s = rep(rep(s, "\\", "\\\\"), "\"", "\\\"")
      if (s ~ /[[:cntrl:]]/) for (i = 1; i < 32; i++) s = rep(s, sprintf("%c", i), sprintf("\\u%04x", i))
      return "\"" s "\""
    }
    function first(path,   line, p) {
      line = ""; if ((getline line < path) > 0) { close(path); split(line, p, " "); return p[1] }
      close(path); return ""
    }
    function whole(path,   line) {
      line = ""; if ((getline line < path) <= 0) line = ""; close(path); gsub(/^[ \t]+|[ \t]+$/, "", line); return line
    }
    FILENAME == ARGV[1] {
      if ($1 == "") next
      if (acct != "") {
        # sacct: CANCELLED by <uid> is CANCELLED; the exit code N:S is N, or 128+S for a signal.
        split($2, w, " "); state[$1] = w[1]; restarts[$1] = 0; split($3, x, ":")
        code[$1] = (x[2] + 0 > 0) ? 128 + x[2] : x[1] + 0
      } else { state[$1] = $2; reason[$1] = $3; restarts[$1] = $4 }
      name[$1] = (acct != "") ? $4 : $5
      next
    }
    FILENAME == ARGV[2] {
      # find: TYPE|SIZE|MTIME|PATH (a path may hold a |: it is the rest of the line).
      p = $0; for (i = 1; i <= 3; i++) p = substr(p, index(p, "|") + 1)
      type[p] = $1; size[p] = $2; mtime[p] = $3
      next
    }
    {
      split($0, f, " "); job = f[1]; att = f[2]; wk = f[3]; off = f[4] + 0
      b = ENVIRON["r"] "/meta/" job "/" att "." wk; alt = ""
      id = (size[b ".slurm"] > 0) ? first(b ".slurm") : ""
      if (id == "" && f[5] ~ /^[0-9]+(_[0-9]+)?$/) {
        id = f[5]
        if ((ENVIRON["r"] "/meta/arrays/" id ".exit") in type) { b = ENVIRON["r"] "/meta/arrays/" id; alt = " " b }
      }
      s = (id != "" && (id in state)) ? state[id] : ""
      # The id of a lone job that Slurm now gives another job is not this worker: a controller that
      # crashed before it saved our submit numbers its next jobs from where its saved state left off.
      suffix = "." job "." att "." wk; n = name[id]; foreign = 0
      if (s != "" && id ~ /^[0-9]+$/ && !(substr(n, 1, 7) == "jobtpu-" && length(n) > length(suffix) &&
          substr(n, length(n) - length(suffix) + 1) == suffix)) { s = ""; foreign = 1 }
      pid = (size[b ".pid"] > 0) ? first(b ".pid") : "-"
      ex = "-"; at = "-"
      if (size[b ".exit"] > 0) { ex = whole(b ".exit"); at = mtime[b ".exit"] }
      # Forgotten by squeue: asked of accounting (one sacct for all), unless the id names another job now.
      if (s == "" && ex == "-" && id != "" && acct == "" && !foreign) { lost[++nlost] = job " " att " " wk " " off " " id; next }
      alive = "false"; preempted = "false"; waiting = ""; unsubmitted = "false"
      claim = ((b ".claim") in type) ? "true" : "false"
      if (s == "" && ex == "-" && id != "" && pid == "-" && (acct != "" || foreign)) {
        # Slurm answered and has no job of ours by this id, and it never ran: the controller took the
        # submit and lost it (it crashed before it saved it). Its id and claim are taken back (=unsub,
        # by the shell): the pass hands the attempt over again, never taking it for lost.
        unsubmitted = "true"; claim = "false"; task[++ntask] = "=unsub " job " " att " " wk
      }
      timedout = ((b ".timedout") in type) ? "true" : "false"
      sz = ((b ".log") in type) ? size[b ".log"] + 0 : 0
      if (s != "") {
        if (index(ended, " " s " ") == 0) alive = "true"
        # Slurm s word for a pending job it has not looked at yet is "None".
        if (s == "PENDING") { waiting = reason[id]; if (waiting == "" || waiting == "None") waiting = "queued" }
        if ((restarts[id] != "" && restarts[id] != 0) || s == "PREEMPTED") preempted = "true"
        # Slurm ended it past its --time, or for its memory, before the wrapper wrote the exit.
        if (ex == "-" && s == "TIMEOUT") timedout = "true"
        if (ex == "-" && s == "OUT_OF_MEMORY") ex = 137
        # Only accounting keeps a failed job s code once the wrapper could not write it.
        if (ex == "-" && s == "FAILED" && (id in code)) ex = code[id]
      }
      # What the files held is checked as jobtpu_say checks a number.
      if (pid !~ /^[0-9]+$/) pid = "null"
      e = ex; sub(/^-/, "", e); if (e !~ /^[0-9]+$/) ex = "null"
      if (at !~ /^[0-9]+(\.[0-9]+)?$/) at = "null"
      printf "{\"kind\":\"worker\",\"job\":%d,\"attempt\":%d,\"worker\":%d,\"pid\":%s,\"alive\":%s,\"exit\":%s,\"size\":%d,\"claimed\":%s,\"at\":%s,\"marked\":null,\"timedout\":%s,\"preempted\":%s,\"waiting\":%s,\"unsubmitted\":%s}\n", \
        job, att, wk, pid, alive, ex, sz, claim, at, timedout, preempted, esc(waiting), unsubmitted
      if (sz > off) task[++ntask] = "=log " job " " att " " wk " " off " 0" alt
      if (ex != "null" && sz - off > chunk) task[++ntask] = "=end " job " " att " " wk " 0 0" alt
      if (wk == 0 && ex != "null" && sz - off <= chunk && type[b ".result"] == "f")
        task[++ntask] = "=result " job " " att " " wk " 0 " size[b ".result"] alt
    }
    END {
      for (i = 1; i <= ntask; i++) print task[i]
      for (i = 1; i <= nlost; i++) print "=lost " lost[i]
    }' <(printf '%s\n' "$slurm") \
      <(jobtpu_list_entries "${dirs[@]}") <(printf '%s %s %s %s %s\n' "$@")
}

# jobtpu_slurm_kill ROOT GRACE STEPS -- [JOB ATTEMPT WORKER ID]... : stop each worker's Slurm job (its
# STEM.slurm record, else ID, the home's, - for none: an array member Slurm still holds pending
# recorded none yet, and is cancelled all the same): TERM to
# every process of a running one (scancel --full --signal), then, GRACE tenths of a second later if
# it still runs, scancel (Slurm's KILL after its KillWait); then up to STEPS tenths for Slurm to say
# it ended. One `kill` report per worker: gone, or not yet (stuck). A worker never handed to Slurm
# (no id, no claim) is gone.
jobtpu_slurm_kill() {
  local r=${1/#-/./-} grace=$2 steps=$3 b id s i
  shift 4
  while [ $# -ge 4 ]; do
    b=$r/meta/$1/$2.$3 id=""
    [[ $4 =~ ^[0-9]+(_[0-9]+)?$ ]] && id=$4
    [ -s "$b.slurm" ] && read -r id _ < "$b.slurm"
    if [ -z "$id" ]; then
      if [ -e "$b.claim" ]; then s=claimed; else s=""; fi
    else
      s=$(jobtpu_slurm_state "$id")
      if [ "$s" = RUNNING ]; then
        scancel --full --signal=TERM "$id" 2> /dev/null
        for ((i = 0; i < grace; i++)); do s=$(jobtpu_slurm_state "$id"); [ "$s" = RUNNING ] || break; sleep 0.1; done
      fi
      if [ -n "$s" ] && [[ $jobtpu_slurm_ended != *" $s "* ]]; then
        scancel "$id" 2> /dev/null
        for ((i = 0; i < steps; i++)); do
          s=$(jobtpu_slurm_state "$id")
          # Ended; or Slurm does not answer: not gone, and the next stop asks again.
          { [ -z "$s" ] || [ "$s" = UNKNOWN ] || [[ $jobtpu_slurm_ended == *" $s "* ]]; } && break
          sleep 0.1
        done
      fi
    fi
    if [ -z "$s" ] || [[ $jobtpu_slurm_ended == *" $s "* ]]; then
      jobtpu_say kill n:job "$1" n:attempt "$2" n:worker "$3" b:gone 1
    else
      jobtpu_say kill n:job "$1" n:attempt "$2" n:worker "$3" b:gone 0
    fi
    shift 4
  done
}

# jobtpu_slurm_state ID : the Slurm job's state word; nothing when Slurm no longer knows the job;
# UNKNOWN when Slurm does not answer (never taken for an ended job).
jobtpu_slurm_state() {
  local out
  # --array: a member Slurm holds pending is one line of its own, not its array's folded line.
  if out=$(squeue --noheader --states=all --array --jobs="$1" --format=%T 2>&1); then
    echo "${out%%$'\n'*}"
  elif [[ $out != *"Invalid job id"* ]]; then
    echo UNKNOWN
  fi
}

# jobtpu_slurm_doctor : a `tool` report for each Slurm command jobtpu runs at the login host, then a
# `slurm` report: whether the controller answers (sinfo), with its partitions, or its error.
jobtpu_slurm_doctor() {
  local tool out p parts=()
  for tool in sbatch squeue scancel sinfo; do jobtpu_say tool s:name "$tool" s:path "$(command -v "$tool")"; done
  if out=$(sinfo --noheader --format=%R 2>&1); then
    while IFS= read -r p; do [ -n "$p" ] && parts+=("$p"); done <<< "$out"
    printf '{"kind":"slurm","answers":true,"partitions":['
    p=""
    # shellcheck disable=SC2154 # set by jobtpu_json_string (common.sh)
    for tool in ${parts[@]+"${parts[@]}"}; do jobtpu_json_string "$tool"; printf '%s%s' "$p" "$jobtpu_json"; p=,; done
    printf ']}\n'
  else
    jobtpu_say slurm b:answers 0 s:said "${out:0:300}"
  fi
}
