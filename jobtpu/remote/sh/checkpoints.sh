# Checkpoints that follow a job to another region (needs common.sh).

# jobtpu_checkpoint_copy ROOT JOB ATTEMPT FROM TO : run on worker 0 before any worker of attempt ATTEMPT
# of job JOB starts: copy the job's newest checkpoint from FROM to TO (gs:// places) with
# `gcloud storage rsync -r`, once per attempt (ROOT/meta/JOB/ATTEMPT.copied says a launch of this
# attempt did it already). One `copy` report: ok, or fail with gcloud's last words on one line.
jobtpu_checkpoint_copy() {
  local r=${1/#-/./-} m out c
  m="$r/meta/$2"
  say_fail() { jobtpu_say copy s:outcome fail s:detail "$1"; }
  mkdir -p "$m" || { say_fail "cannot create $m"; return 0; }
  jobtpu_own_folder "$m" || { say_fail "$m is not a folder of this account's alone"; return 0; }
  if [ -e "$m/$3.copied" ]; then jobtpu_say copy s:outcome ok s:detail "copied by an earlier launch"; return 0; fi
  command -v gcloud > /dev/null || { say_fail "gcloud is not on the worker's PATH"; return 0; }
  out=$(gcloud storage rsync -r "$4" "$5" 2>&1 < /dev/null); c=$?
  if [ "$c" != 0 ]; then
    say_fail "gcloud storage rsync exited $c: $(printf '%s\n' "$out" | tail -n 3 | tr '\n' ' ' | cut -c -400)"
    return 0
  fi
  : > "$m/$3.copied"
  jobtpu_say copy s:outcome ok
}
