#!/usr/bin/env bash
# End-to-end check of the relocatable bundle: packs BUILD_DIR with
# scripts/bundle.sh, unpacks it into an empty directory, proves that nothing
# resolves into the build tree, then starts the server from the bundle with an
# empty environment (env -i), waits for SERVING through the bundled client and
# expects a clean exit 0 after SIGTERM.
#   usage: bundle_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src_dir=$1
build_dir=$(cd "$2" && pwd)

work=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
die() { echo "FAIL: $*" >&2; [[ -f $work/server.log ]] && tail -n 30 "$work/server.log" >&2; exit 1; }

tarball=$("$src_dir/scripts/bundle.sh" "$build_dir" "$work/out" | tail -n 1)
[[ -f $tarball ]] || die "bundle.sh produced no tarball"
[[ $(basename "$tarball") =~ ^conv1d-serve-[0-9.]+-[a-z0-9_]+(-cuda|-hip)?\.tar\.gz$ ]] ||
  die "unexpected tarball name $(basename "$tarball")"
mkdir "$work/unpacked"
tar -C "$work/unpacked" -xzf "$tarball"
root=$(find "$work/unpacked" -mindepth 1 -maxdepth 1 -type d)
echo "bundle: $(basename "$tarball"), $(find "$root/lib" -type f | wc -l) libraries"
for f in bin/conv1d-serve bin/conv1d_server bin/conv1d_client MANIFEST; do
  [[ -e $root/$f ]] || die "bundle lacks $f"
done
grep -qE '^requires-glibc: [0-9]+\.[0-9]+' "$root/MANIFEST" || die "MANIFEST has no glibc floor"

# Every library must come from the bundle or the host's system directories,
# never from the build tree (which a build RUNPATH could silently reach).
for exe in "$root"/bin/conv1d_*; do
  deps=$(env -i LD_LIBRARY_PATH="$root/lib" ldd "$exe")
  if grep -q "not found" <<<"$deps"; then die "$(basename "$exe"): $(grep 'not found' <<<"$deps")"; fi
  while read -r lib _ path _; do
    case $path in
      "$root"/lib/*|/lib/*|/lib64/*|/usr/lib/*|/usr/lib64/*|/usr/local/cuda*/*|/opt/rocm*/*) ;;
      *) die "$(basename "$exe") loads $lib from $path, outside the bundle and the system" ;;
    esac
  done < <(grep '=>' <<<"$deps")
  for core in libc.so libstdc++.so libcuda.so libamdhip64.so; do
    if compgen -G "$root/lib/$core*" >/dev/null; then die "bundle carries host library $core"; fi
  done
done

port_pair=$(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
read -r grpc_port metrics_port <<<"$port_pair"
target=127.0.0.1:$grpc_port

cd "$work"
env -i "$root/bin/conv1d-serve" server --listen="$target" \
  --metrics_listen="127.0.0.1:$metrics_port" --backend=cpu --drain_timeout_s=5 \
  >"$work/server.log" 2>&1 &
server_pid=$!

serving=0
for _ in $(seq 1 150); do
  kill -0 "$server_pid" 2>/dev/null || die "server exited before serving"
  if env -i "$root/bin/conv1d-serve" client health --target="$target" --attempts=1 --timeout_s=2 >/dev/null 2>&1; then
    serving=1
    break
  fi
  sleep 0.2
done
[[ $serving == 1 ]] || die "server did not report SERVING within 30 s"
echo "serving on $target from the bundle"

kill -TERM "$server_pid"
rc=0
wait "$server_pid" || rc=$?
server_pid=""
[[ $rc == 0 ]] || die "server exited $rc after SIGTERM (want 0)"
echo "PASS: bundled server served and drained cleanly"
