# One upload per machine: a worker serves the snapshot to the machine's other workers (needs
# common.sh). The serving and fetching are jobtpu/remote/peerfile.py's, run by python3 on the workers.

# jobtpu_peer_serve ROOT ARCHIVE BIND ID TOKEN PEERS WAIT SOURCE : serve ROOT/archives/ARCHIVE, detached,
# at /ARCHIVE to PEERS fetches that give TOKEN, on BIND only (where the other workers reach this one),
# for at most WAIT seconds, or until jobtpu_peer_stop ROOT ID. SOURCE is peerfile.py's text. The token
# reaches the server on its stdin from a builtin (printf): no argument and no file name holds it, so
# `ps` and `ls` on the worker never show it. Says a `serve` report (schema/worker_protocol.py): ok with its port, or fail and why.
jobtpu_peer_serve() {
  local r=${1/#-/./-} archive=$2 bind=$3 id=$4 token=$5 peers=$6 wait=$7 source=$8 a d w port
  a="$r/archives/$archive"
  [ -f "$a" ] || { jobtpu_say serve s:outcome fail s:detail "it has no copy of the snapshot"; return 0; }
  command -v python3 > /dev/null || { jobtpu_say serve s:outcome fail s:detail "python3 is needed on the worker"; return 0; }
  jobtpu_peer_leftovers "$r" "$wait"
  d="$r/archives/.serve.$id"
  mkdir "$d" || { jobtpu_say serve s:outcome fail s:detail "cannot create $d"; return 0; }
  printf '%s\n' "$token" | setsid nohup python3 -c "$source" serve "$a" "$bind" "$peers" "$wait" "$d/port" \
    > "$d/log" 2>&1 &
  w=$!
  for _ in $(seq 250); do [ -s "$d/port" ] && break; jobtpu_ended "$w" && break; sleep 0.02; done
  if [ -s "$d/port" ]; then
    read -r port < "$d/port"
    jobtpu_say serve s:outcome ok n:port "$port"  # the server removes its folder when it ends
  else
    jobtpu_say serve s:outcome fail s:detail "the server did not start: $(head -c 200 "$d/log" | tr '\n' ' ')"
    kill "$w" 2> /dev/null; rm -rf "$d"
  fi
  return 0
}

# jobtpu_peer_stop ROOT ID : the server jobtpu_peer_serve started as ID ends now (some peers will never fetch).
jobtpu_peer_stop() {
  local d="${1/#-/./-}/archives/.serve.$2"
  if [ -d "$d" ]; then touch "$d/stop"; fi
  return 0
}

# jobtpu_peer_leftovers ROOT WAIT : the folders of servers and fetches cut short (the worker rebooted,
# the connection dropped) older than any can live (WAIT whole seconds, and a minute) are nobody's.
jobtpu_peer_leftovers() {
  find "${1/#-/./-}/archives" -mindepth 1 -maxdepth 1 \( -name '.serve.*' -o -name '.fetch.*' \) \
    -mmin "+$(($2 / 60 + 1))" -exec rm -rf {} + 2> /dev/null
  return 0
}

# jobtpu_peer_fetch ROOT ARCHIVE URL TOKEN WAIT SOURCE UNPACK_SOURCE : fetch the snapshot from URL, with
# TOKEN (on the fetcher's stdin, as for the server), into ROOT/archives/ARCHIVE. The copy lands under
# a temporary folder, is checked against its name by UNPACK_SOURCE (unpack.py, which exits nonzero
# for a copy that is not what its name says) and only then takes the archive's place: a bad copy is
# never unpacked. SOURCE is peerfile.py's text. Says a `fetch` report: ok | held (it needed none) |
# fail and why | bad and why (the copy arrived, and is not the snapshot).
jobtpu_peer_fetch() {
  local r=${1/#-/./-} archive=$2 url=$3 token=$4 wait=$5 source=$6 unpack=$7 t e
  mkdir -p "$r/archives" || { jobtpu_say fetch s:outcome fail s:detail "cannot create $r/archives"; return 0; }
  jobtpu_private_root "$r"
  command -v python3 > /dev/null || { jobtpu_say fetch s:outcome fail s:detail "python3 is needed on the worker"; return 0; }
  # Workers that share a disk (an NFS home) may hold the copy the home just sent to the serving one.
  if [ -f "$r/archives/$archive" ] && python3 -c "$unpack" "$r/archives/$archive" 2> /dev/null < /dev/null; then
    jobtpu_say fetch s:outcome held; return 0
  fi
  jobtpu_peer_leftovers "$r" "$wait"
  t=$(mktemp -d "$r/archives/.fetch.XXXXXX") || { jobtpu_say fetch s:outcome fail s:detail "cannot create a folder in $r/archives"; return 0; }
  if ! printf '%s\n' "$token" | python3 -c "$source" fetch "$url" "$t/$archive" "$wait" 2> "$t/err"; then
    e=$(head -c 200 "$t/err" | tr '\n' ' '); rm -rf "$t"; jobtpu_say fetch s:outcome fail s:detail "${e:-no answer}"; return 0
  fi
  if ! python3 -c "$unpack" "$t/$archive" 2> "$t/err" < /dev/null; then
    e=$(head -c 300 "$t/err" | tr '\n' ' '); rm -rf "$t"; jobtpu_say fetch s:outcome bad s:detail "$e"; return 0
  fi
  if mv -f "$t/$archive" "$r/archives/$archive"; then jobtpu_say fetch s:outcome ok; else jobtpu_say fetch s:outcome fail s:detail "cannot move the copy in place"; fi
  rm -rf "$t"
  return 0
}
