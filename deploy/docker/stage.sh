#!/bin/sh
# Image build helper: copies the service's executables out of a CMake build
# tree into PREFIX/bin (stripped) and records the packages their shared
# libraries come from in PREFIX/runtime-packages.txt, for the runtime stage.
#   usage: stage.sh BUILD_DIR PREFIX [-x PATH_REGEX]
# -x is passed to runtime-packages.sh (libraries provided otherwise).
set -eu

[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR PREFIX [-x PATH_REGEX]" >&2; exit 2; }
build=$1
prefix=$2
shift 2
here=$(dirname "$0")

mkdir -p "$prefix/bin"
for name in conv1d_server conv1d_client conv1d_load; do
  found=$(find "$build" -name CMakeFiles -prune -o -type f -name "$name" -perm -u+x -print | head -n 1)
  if [ -n "$found" ]; then
    install -m 0755 -s "$found" "$prefix/bin/$name"
  fi
done
for required in conv1d_server conv1d_client; do
  [ -x "$prefix/bin/$required" ] || { echo "stage.sh: $required was not built" >&2; exit 1; }
done
"$here/runtime-packages.sh" "$@" "$prefix"/bin/* >"$prefix/runtime-packages.txt"
ls -l "$prefix/bin" >&2
