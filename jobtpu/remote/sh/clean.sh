# Housekeeping of a machine's root.

# jobtpu_make_dirs PATH... : make each folder (relative to the login folder unless absolute).
jobtpu_make_dirs() {
  mkdir -p -- "$@"
}

# jobtpu_remove_jobs ROOT [JOB]... : delete the jobs' folders and meta files.
jobtpu_remove_jobs() {
  local r=${1/#-/./-} job
  shift
  for job; do rm -rf -- "$r/jobs/$job" "$r/meta/$job"; done
}

# jobtpu_keep_archives ROOT [ARCHIVE]... : delete every archive but the named ones, and with each its
# unpacked trees (jobtpu_tree, launch.sh), half-made ones included.
jobtpu_keep_archives() {
  local r=${1/#-/./-} file name keep archive
  shift
  for file in "$r"/archives/*.tar.gz "$r"/archives/.tree.* "$r"/archives/.treetmp.*; do
    [ -e "$file" ] || continue
    name=${file##*/}; name=${name#.tree.}; name=${name#.treetmp.}; name=${name%%.*}.tar.gz; keep=0
    for archive; do if [ "$archive" = "$name" ]; then keep=1; fi; done
    if [ "$keep" = 0 ]; then rm -rf -- "$file"; fi
  done
}
