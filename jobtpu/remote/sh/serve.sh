# A kept connection's shell (needs nothing else): runs script after script without an SSH session
# (a fork of sshd, a login shell) per script.

# jobtpu_serve : reads, until its input ends, a line with a script's length in bytes then the script;
# answers each with a `got` report once it has the script whole (the sender's sign, within its connect
# timeout, that the connection still lives), then a `ran` report (exit code, stdout and stderr bytes)
# once it ran, then both outputs as they are, framed by those counts. Each script is
# read whole before it runs (`.` reads the whole file first), in a subshell of its own with stdin at
# its end and the options of a new shell, so nothing it does is left for the next one. `head -c` reads exactly that many bytes from
# a pipe (bash's read counts characters, not bytes, in a UTF-8 locale).
jobtpu_serve() {
  local d n c out err out_bytes err_bytes locale=${LC_ALL-} had_locale=${LC_ALL+x}
  d=$(mktemp -d) || exit 1
  # shellcheck disable=SC2064 # $d is fixed now, and must be what the trap removes
  trap "rm -rf '$d'" EXIT
  while IFS= read -r n; do
    case $n in '' | *[!0-9]*) exit 2 ;; esac
    head -c "$n" > "$d/s" || exit 3
    printf '{"kind":"got"}\n'
    # shellcheck source=/dev/null
    (set +u && . "$d/s") < /dev/null > "$d/o" 2> "$d/e"
    c=$?
    : > "$d/s"  # its text (a job's secret values, a peer copy's token) is kept on disk no longer than it runs
    # Read and written by builtins, not stat and cat: a kept connection runs a script per busy worker
    # per round. (Script output is text: a NUL byte would end it.) Lengths in bytes: the C locale,
    # for this line only, so the next script still gets the user's.
    IFS= read -r -d '' out < "$d/o"
    IFS= read -r -d '' err < "$d/e"
    LC_ALL=C
    out_bytes=${#out} err_bytes=${#err}
    if [ -n "$had_locale" ]; then LC_ALL=$locale; else unset LC_ALL; fi
    printf '{"kind":"ran","code":%d,"stdout":%d,"stderr":%d}\n%s%s' "$c" "$out_bytes" "$err_bytes" "$out" "$err"
  done
}
