# A sweep's members on a Slurm cluster as ONE job array (needs common.sh, wrapper.sh, launch.sh and
# slurm.sh; docs/reference/machines-json.md §3.3.1). The handover at the login host is a few files
# whatever the array's size, and one sbatch: a member table (one line each: its job, attempt, command,
# environment...), one batch script every member shares and one record of the array's Slurm id. Each
# member makes its own meta folder, env file, id record, claim and job folder (a copy of the
# snapshot's checked tree) when Slurm starts it, on its node, by its SLURM_ARRAY_TASK_ID: a thousand
# members cost the handover no thousand files. Only a member with secret values keeps an env file
# written here, so a secret never lies in a table. The snapshot is checked (and its tree made) once
# here, so a missing or damaged copy is still the launch's need-archive or bad-archive.

# jobtpu_array root=ROOT home_id=ID token=TOKEN throttle=M -- JOB... : start a handover of members of
# the given jobs, at most M running at once (empty: no cap). The lease's fence is checked once for all.
# An earlier table in meta/arrays means a handover may have been cut short after sbatch answered: its
# members are then looked for in Slurm (jobtpu_array_seek), once, before any is submitted again.
jobtpu_array() {
  local root="" home_id="" token="" throttle="" r old
  jobtpu_named "root home_id token throttle" "$@" || return 1
  # shellcheck disable=SC2154 # set by jobtpu_named (common.sh)
  shift "$jobtpu_named_n"
  r=${root/#-/./-}
  jobtpu_array_home=$home_id jobtpu_array_throttle=$throttle jobtpu_array_problem="" jobtpu_array_list=""
  jobtpu_array_table="" jobtpu_array_stems=() jobtpu_array_refs=() jobtpu_array_asked="" jobtpu_array_secret=()
  declare -gA jobtpu_array_trees=() jobtpu_array_handed=()
  # The job's umask is the login's (jobtpu_job_umask), kept before this handover's files go private.
  jobtpu_array_umask=$(jobtpu_job_umask)
  umask 077
  mkdir -p "$r/meta/arrays" "$r/jobs" "$r/archives" 2>/dev/null
  jobtpu_private_root "$r"
  old=("$r/meta/arrays/"*)
  jobtpu_array_earlier=""
  [ -e "${old[0]}" ] && jobtpu_array_earlier=1
  if ! { jobtpu_array_root=$(cd "$r" && pwd -P) && jobtpu_own_folder "$r/meta/arrays" &&
    jobtpu_array_list=$(mktemp "$jobtpu_array_root/meta/arrays/XXXXXXXX"); }; then
    jobtpu_array_problem="fail cannot create the array's files in $r/meta/arrays"; return 0
  fi
  jobtpu_array_name="jobtpu-$home_id.array.${jobtpu_array_list##*/}"
  jobtpu_fence "$r" "$home_id" "$token" ||
    { jobtpu_array_problem="fail fenced: a runner with a newer lease token launches here"; return 0; }
  return 0
}

# jobtpu_array_ok JOB ATTEMPT WORKER ID : a member's `launch` report, ok with its Slurm id: one printf when
# ID is an array member's <array id>_<index> (a handover run again says it of a thousand), else jobtpu_batch_ok's.
jobtpu_array_ok() {
  if [[ $4 =~ ^[0-9]+_[0-9]+$ ]]; then
    printf '{"kind":"launch","job":%d,"attempt":%d,"worker":%d,"outcome":"ok","slurm":"%s"}\n' "$1" "$2" "$3" "$4"
  else jobtpu_batch_ok "jobtpu-$jobtpu_array_home.$1.$2.$3" "$4"; fi
}

# jobtpu_array_said JOB ATTEMPT WORKER "OUTCOME [WHY]" : a member's `launch` report, not ok.
jobtpu_array_said() {
  if [[ $4 == *" "* ]]; then
    jobtpu_say launch n:job "$1" n:attempt "$2" n:worker "$3" s:outcome "${4%% *}" s:detail "${4#* }"
  else jobtpu_say launch n:job "$1" n:attempt "$2" n:worker "$3" s:outcome "$4"; fi
}

# jobtpu_array_member JOB ATTEMPT WORKER ARCHIVE FRESH COMMAND SIGNAL DELAY LIMIT GRACE SECRET [NAME MODE VALUE]... :
# one member (jobtpu_launch's arguments, by position; SECRET 1 when a value of its environment, after
# them, is a secret). Handed to Slurm already: its `launch` report, ok, at once (a launch is never
# submitted twice, even when the handover that submitted it was cut short before its reports were
# said: the table, written before sbatch, is the trace jobtpu_array_seek follows). Otherwise it joins
# the table, its environment with it, or, SECRET, in its own env file (as jobtpu_launch's: only the
# wrapper reads it, and deletes it); jobtpu_array_submit reports it.
jobtpu_array_member() {
  local b="$jobtpu_array_root/meta/$1/$2.$3" row x id
  if [ -n "$jobtpu_array_problem" ]; then jobtpu_array_said "$1" "$2" "$3" "$jobtpu_array_problem"; return 0; fi
  # An id recorded by the member itself (it started): no Slurm question.
  if [ -s "$b.slurm" ]; then read -r id _ < "$b.slurm"; jobtpu_array_ok "$1" "$2" "$3" "$id"; return 0; fi
  if [ -n "$jobtpu_array_earlier" ]; then
    jobtpu_array_seek || { jobtpu_array_said "$1" "$2" "$3" pending; return 0; }
    id=${jobtpu_array_handed["$1 $2 $3"]:-}
    if [ -n "$id" ]; then jobtpu_array_ok "$1" "$2" "$3" "$id"; return 0; fi
  fi
  # The snapshot, checked once per archive for the whole array.
  x=${jobtpu_array_trees[$4]-unset}
  if [ "$x" = unset ]; then jobtpu_array_tree "$4"; x=$jobtpu_array_got; jobtpu_array_trees[$4]=$x; fi
  if [ -n "$x" ]; then jobtpu_array_said "$1" "$2" "$3" "$x"; return 0; fi
  if [ "${11}" = 1 ]; then
    # Its meta folder made and checked here (jobtpu_own_folder), for its env file.
    if ! { mkdir -p "$jobtpu_array_root/meta/$1" 2>/dev/null && jobtpu_own_folder "$jobtpu_array_root/meta/$1"; }; then
      jobtpu_array_said "$1" "$2" "$3" "fail $jobtpu_array_root/meta/$1 is not a folder of this account's alone (a link, another account's, or writable by others)"
      return 0
    fi
    printf '%s\0' "${@:12}" > "$b.env" 2>/dev/null ||
      { rm -f "$b.env"; jobtpu_array_said "$1" "$2" "$3" "fail cannot write the env file $b.env"; return 0; }
    jobtpu_array_secret+=("$b.env")
    set -- "${@:1:11}"
  fi
  # The table's line starts with the member's job, attempt and worker: jobtpu_array_seek finds it there.
  # Its line number is its index, so the member needs no file of its own saying which array it is in.
  printf -v row '%q ' "$@"
  jobtpu_array_refs+=("$1" "$2" "$3")
  jobtpu_array_stems+=("$b")
  jobtpu_array_table+=$row$'\n'
}

# jobtpu_array_seek : (once per handover) into jobtpu_array_handed, "JOB ATTEMPT WORKER" -> the Slurm id
# <array id>_<line> of every member of this home's job arrays Slurm knows: one squeue for the account's
# arrays named jobtpu-<home id>.array.<table>, then each such table read once. Asked when an earlier
# table is there (a handover cut short after sbatch answered, or one sbatch got no answer from);
# fails when Slurm cannot be asked. The old files of arrays Slurm forgot go with it.
jobtpu_array_seek() {
  local out name id n j a w f base known=" "
  [ -n "$jobtpu_array_asked" ] && return 0
  out=$(squeue --noheader --user="$(id -un)" --states=all --format='%F %j' 2>/dev/null) || return 1
  jobtpu_array_asked=1
  declare -A seen=()
  while read -r id name; do
    [[ $name == jobtpu-*.array.* ]] && known+="${name##*.array.} "  # any home's: roots may be shared
    [[ $id =~ ^[0-9]+$ && $name == "jobtpu-$jobtpu_array_home.array."* && -z ${seen[$name]:-} ]] || continue
    seen[$name]=1 n=0
    # A table's first three words are numbers (printf %q leaves them as they are).
    while read -r j a w _; do
      jobtpu_array_handed["$j $a $w"]=${id}_$n
      n=$((n + 1))
    done < "$jobtpu_array_root/meta/arrays/${name##*.array.}" 2>/dev/null
  done <<< "$out"
  # The files of arrays Slurm no longer knows (every member ended, and MinJobAge past), two days old
  # and more, are taken away: a member reads its line only as it starts, and a pass reads a refusal
  # within minutes. Tables would otherwise pile up, each holding its members' environment.
  while IFS= read -r -d '' f; do
    base=${f##*/}; base=${base%%.*}
    [[ $known == *" $base "* ]] || rm -f -- "$f"
  done < <(find "$jobtpu_array_root/meta/arrays" -maxdepth 1 -type f -mtime +1 -print0 2>/dev/null)
  return 0
}

# jobtpu_array_tree ARCHIVE : into jobtpu_array_got, empty when the checked tree of ARCHIVE (jobtpu_tree)
# is there for the members to copy (made now, by one check and unpack, when it is not); else the
# members' outcome: need-archive, bad-archive WHY or fail WHY (jobtpu_launch's).
jobtpu_array_tree() {
  local r=$jobtpu_array_root t e c
  jobtpu_array_got=""
  jobtpu_tree "$r" "$1"
  # shellcheck disable=SC2154 # set by jobtpu_tree (launch.sh)
  if [ -z "$jobtpu_tree_path" ] || [ ! -f "$r/archives/$1" ]; then jobtpu_array_got=need-archive; return 0; fi
  jobtpu_own_folder "$jobtpu_tree_path" && return 0
  command -v python3 > /dev/null || { jobtpu_array_got="fail python3 is needed on the worker to unpack the snapshot"; return 0; }
  t=$(mktemp -d "$r/archives/.treetmp.${1%.tar.gz}.XXXXXX") || { jobtpu_array_got="fail cannot create a folder in $r/archives"; return 0; }
  chmod "$(umask -S)" "$t"
  # shellcheck disable=SC2154 # set by jobtpu_launch_init (launch.sh)
  e=$(python3 -I -S -c "$jobtpu_unpack_source" "$r/archives/$1" "$t" 2>&1 > /dev/null); c=$?
  e=${e//$'\n'/ }
  [ "$c" = 0 ] && mv -T "$t" "$jobtpu_tree_path" 2>/dev/null && return 0
  rm -rf "$t"
  # shellcheck disable=SC2154 # set by jobtpu_launch_init (launch.sh)
  if [ "$c" = "$jobtpu_unpack_bad_exit" ]; then jobtpu_array_got="bad-archive ${e:0:300}"
  elif [ "$c" != 0 ]; then jobtpu_array_got="fail unpack: ${e:0:300}"
  elif ! jobtpu_own_folder "$jobtpu_tree_path"; then jobtpu_array_got="fail cannot keep the snapshot's tree $jobtpu_tree_path"
  fi
}

# jobtpu_array_submit : the table, the shared batch script and one sbatch --array of every member that
# joined, then the array's id in one record beside the table (TABLE.slurm). One `launch` report per
# member: ok with its id <array id>_<i>, or, when sbatch refuses, fail with sbatch's own words, the
# table and every env file written taken back (nothing is left half-made).
jobtpu_array_submit() {
  local list=$jobtpu_array_list n=${#jobtpu_array_stems[@]} out rc id i t="" said="" f=("${jobtpu_array_refs[@]}")
  [ "$n" -gt 0 ] || { [ -z "$list" ] || rm -f "$list"; return 0; }
  [ -n "$jobtpu_array_throttle" ] && t="%$jobtpu_array_throttle"
  if printf '%s' "$jobtpu_array_table" > "$list" && jobtpu_array_script > "$list.sbatch"; then
    # shellcheck disable=SC2154 # set by jobtpu_batch (slurm.sh)
    out=$(sbatch --parsable --requeue --job-name="$jobtpu_array_name" --output=/dev/null \
      --array="0-$((n - 1))$t" ${jobtpu_batch_opts[@]+"${jobtpu_batch_opts[@]}"} "$list.sbatch" 2>&1)
    rc=$?
  else out="cannot write the array's files $list and $list.sbatch" rc=1; fi
  id=${out%%;*}
  if [ "$rc" != 0 ] || [[ ! $id =~ ^[0-9]+$ ]]; then
    out=${out//$'\n'/ }
    if [ "$rc" != 0 ] && jobtpu_slurm_away "$out"; then
      # No answer from Slurm's controller: it may have taken the array all the same. Nothing fails:
      # every member is `pending`, the table stays, and the next handover finds the array by its name
      # (jobtpu_array_seek) before it submits any member again, never twice.
      for i in "${!jobtpu_array_stems[@]}"; do
        jobtpu_array_said "${f[3 * i]}" "${f[3 * i + 1]}" "${f[3 * i + 2]}" "pending ${out:0:400}"
      done
      return 0
    fi
    rm -f ${jobtpu_array_secret[@]+"${jobtpu_array_secret[@]}"} "$list" "$list.sbatch"
    for i in "${!jobtpu_array_stems[@]}"; do
      jobtpu_array_said "${f[3 * i]}" "${f[3 * i + 1]}" "${f[3 * i + 2]}" "fail ${out:0:400}"
    done
    return 0
  fi
  # The array's id, for people and tools; each member records its own when it starts, and the home
  # keeps every member's from these reports. Slurm has them all: a failed write is no failed launch.
  jobtpu_batch_record "$list" "$id" 2>/dev/null
  # The ok reports gathered and printed at once, not by jobtpu_say: a thousand members say this together.
  for i in "${!jobtpu_array_stems[@]}"; do
    printf -v out '{"kind":"launch","job":%d,"attempt":%d,"worker":%d,"outcome":"ok","slurm":"%s"}\n' \
      "${f[3 * i]}" "${f[3 * i + 1]}" "${f[3 * i + 2]}" "${id}_$i"
    said+=$out
  done
  printf '%s' "$said"
}

# jobtpu_array_script : the batch script every member runs, for its own line of the table
# (jobtpu_array_run). The wrapper's program is jobtpu_batch_program's: the batch step becomes the wrapper.
jobtpu_array_script() {
  local program
  program=$(jobtpu_batch_program)
  echo '#!/bin/bash'
  # A run Slurm requeued never runs the command again under this attempt, and ends failed, never
  # COMPLETED: a dependent's afterok must not start on it (jobtpu_batch_submit).
  # shellcheck disable=SC2016 # written for the batch script, expanded there
  echo '[ "${SLURM_RESTART_COUNT:-0}" = 0 ] || exit 75'
  declare -p jobtpu_unpack_source
  declare -f jobtpu_own_folder jobtpu_tree jobtpu_keep_tree jobtpu_array_folder jobtpu_array_run jobtpu_array_refuse
  printf 'p=%q\n' "$program"
  # shellcheck disable=SC2016 # written for the batch script, expanded there
  printf 'jobtpu_array_run %q %q %q %q "$SLURM_ARRAY_JOB_ID" "$SLURM_ARRAY_TASK_ID" "$p"\n' \
    "$jobtpu_array_list" "$jobtpu_array_root" "$jobtpu_array_home" "$jobtpu_array_umask"
}

# jobtpu_array_run TABLE ROOT HOME_ID UMASK ARRAY INDEX PROGRAM : (on the node, the batch step) member
# INDEX of the array: its line of TABLE; its meta folder made and checked (jobtpu_own_folder), else it
# refuses to run (jobtpu_array_refuse); its output appended to its own log, its Slurm id recorded, its
# env file written from its line (unless the handover wrote it: a secret's), its claim and job folder
# made (jobtpu_array_folder), then the wrapper PROGRAM in its place: the wrapper reads and deletes
# the env file as on every machine. A member that cannot get its job folder writes why in its log and
# exit code 1 in its exit record: the attempt ends failed with that line in jobtpu, never as a silent
# Slurm FAILED.
jobtpu_array_run() {
  local row m b d
  mapfile -t -s "$6" -n 1 row < "$1"
  [ -n "${row[0]:-}" ] || { echo "jobtpu: no line $6 in $1" >&2; exit 1; }
  # The line was written with printf %q (jobtpu_array_member): its words come back as they were.
  eval "row=(${row[0]})"
  m=$2/meta/${row[0]} d=$2/jobs/${row[0]}
  b=$m/${row[1]}.${row[2]}
  umask 077
  mkdir "$m" 2> /dev/null
  jobtpu_own_folder "$m" ||
    jobtpu_array_refuse "$2" "$5_$6" "$m is not a folder of this account's alone (a link, another account's, or writable by others)"
  exec >> "$b.log" 2>&1
  [ -s "$b.slurm" ] || { echo "$5_$6" > "$b.slurm.tmp" && mv "$b.slurm.tmp" "$b.slurm"; }
  if [ "${row[10]}" != 1 ]; then
    { if [ ${#row[@]} -gt 11 ]; then printf '%s\0' "${row[@]:11}"; fi; } > "$b.env" ||
      { echo "jobtpu: the job's environment file $b.env could not be written on $(hostname); the command was not started"
        rm -f "$b.env"; echo 1 > "$b.exit.tmp" && mv "$b.exit.tmp" "$b.exit"; exit 1; }
  fi
  mkdir "$b.claim" 2> /dev/null
  jobtpu_array_why=""
  if ! jobtpu_array_folder "$2" "${row[3]}" "${row[4]}" "$m/${row[1]}.reset" "$d" "${row[0]}.${row[2]}" || ! cd "$d"; then
    echo "jobtpu: the job's folder $d could not be made on $(hostname): ${jobtpu_array_why:-cd failed}; the command was not started" >&2
    rm -f "$b.env"
    echo 1 > "$b.exit.tmp" && mv "$b.exit.tmp" "$b.exit"
    exit 1
  fi
  export JOBTPU_MARK="$3.${row[0]}.${row[1]}.${row[2]}"
  exec bash -c "$7" "jobtpu-${row[0]}" "$b" "${row[5]}" "${row[6]}" "${row[7]}" "$4" "${row[8]}" "${row[9]}" 3>&-
}

# jobtpu_array_refuse ROOT ID WHY : (on the node) a member whose meta folder is unsafe runs nothing and
# writes nothing there: WHY goes to ROOT/meta/arrays/ID.log and exit code 1 to ID.exit (ID: its Slurm
# id), where the probe reads a worker that recorded no id of its own (jobtpu_slurm_report).
jobtpu_array_refuse() {
  local s=$1/meta/arrays/$2
  echo "jobtpu: $3 on $(hostname); the command was not started" >> "$s.log"
  echo 1 > "$s.exit.tmp" && mv "$s.exit.tmp" "$s.exit"
  exit 1
}

# jobtpu_array_folder ROOT ARCHIVE FRESH RESET FOLDER TAG : (on the node) the job's FOLDER from the
# snapshot, as jobtpu_launch makes it: a copy of the archive's checked tree, or, the tree gone, an
# unpack of the archive (kept as the tree). FRESH: a folder an earlier attempt left is replaced, once
# (RESET/done). Fails with why in jobtpu_array_why.
jobtpu_array_folder() {
  local t tree e c
  if [ "$3" = 1 ] && [ ! -e "$4/done" ]; then
    if ! { mkdir -p "$4" && { { [ ! -e "$5" ] && [ ! -L "$5" ]; } || { mv -T "$5" "$4/old" && rm -rf "$4/old"; }; } &&
      touch "$4/done"; }; then
      jobtpu_array_why="the folder of an earlier attempt could not be moved aside"; return 1
    fi
  fi
  if [ ! -d "$5" ]; then
    t=$(mktemp -d "$1/jobs/.unpack.$6.XXXXXX") || { jobtpu_array_why="cannot create a folder in $1/jobs"; return 1; }
    jobtpu_tree "$1" "$2"; tree=$jobtpu_tree_path
    if [ -n "$tree" ] && jobtpu_own_folder "$tree" && cp -R -p --reflink=auto -- "$tree/." "$t" 2> /dev/null; then :
    else
      rm -rf "$t"
      if [ ! -f "$1/archives/$2" ]; then jobtpu_array_why="the snapshot $2 is missing on the cluster"; return 1; fi
      command -v python3 > /dev/null || { jobtpu_array_why="python3 is needed on the node to unpack the snapshot"; return 1; }
      if ! { mkdir "$t" && chmod "$(umask -S)" "$t"; }; then jobtpu_array_why="cannot create $t"; return 1; fi
      e=$(python3 -I -S -c "$jobtpu_unpack_source" "$1/archives/$2" "$t" 2>&1 > /dev/null); c=$?
      if [ "$c" != 0 ]; then rm -rf "$t"; jobtpu_array_why="the snapshot $2 could not be unpacked: ${e//$'\n'/ }"; return 1; fi
      [ -n "$tree" ] && jobtpu_keep_tree "$1" "$2" "$t" "$tree"
    fi
    mv -T "$t" "$5" 2> /dev/null || rm -rf "$t"
  fi
  jobtpu_own_folder "$5" || { jobtpu_array_why="$5 is not a folder of this account's alone"; return 1; }
}
