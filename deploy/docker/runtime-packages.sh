#!/bin/sh
# Prints, one per line, the Debian/Ubuntu packages that own the shared
# libraries the given executables load (per ldd), so that an image's runtime
# stage installs exactly the libraries the build stage linked against.
# Names only: the runtime stage resolves versions from the same distribution
# release (pinned base tags), and an exact build-stage version may already
# have left the archive.
# The C library and the GPU driver stacks are left out: the runtime base image
# (or the host, through the container runtime) provides them.
#   usage: runtime-packages.sh [-x PATH_REGEX] BINARY...
#   -x PATH_REGEX  also leave out libraries whose path matches (e.g. '^/opt/rocm'
#                  when a runtime meta-package brings that stack)
set -eu

skip_path_re='^$'
if [ "${1:-}" = "-x" ]; then
  skip_path_re=$2
  shift 2
fi
[ $# -gt 0 ] || { echo "usage: $0 [-x PATH_REGEX] BINARY..." >&2; exit 2; }

# Libraries that come with the base image or from the host driver.
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libmvec|libpthread|libdl\.so|librt\.so|libresolv|libutil|libanl|libcuda\.so|libnvidia-)'

libs=$(mktemp)
deps=$(mktemp)
owners=$(mktemp)
trap 'rm -f "$libs" "$deps" "$owners"' EXIT
for bin in "$@"; do
  ldd "$bin" >"$deps"
  awk '/=>/ { print $1, $3 }' "$deps" | while read -r name path; do
    if printf '%s\n' "$name" | grep -Eq "$skip_re"; then
      continue
    fi
    if printf '%s\n' "$path" | grep -Eq "$skip_path_re"; then
      continue
    fi
    if [ "$path" = "not" ]; then
      echo "runtime-packages.sh: $bin needs $name, which is not found" >&2
      exit 1
    fi
    echo "$path"
  done >>"$libs"
done
sort -u -o "$libs" "$libs"
[ -s "$libs" ] || exit 0

# One dpkg-query for all candidates (each call reads the whole file database):
# usrmerged systems register a file under /usr/lib or /lib, whichever its
# package ships, while ldd prints either; the resolved file is a third name.
while read -r path; do
  printf '%s\n%s\n%s\n' "$path" "/usr$path" "$(readlink -f "$path")"
done <"$libs" | sort -u | xargs dpkg-query -S 2>/dev/null >"$owners" || true
while read -r path; do
  real=$(readlink -f "$path")
  pkg=$(awk -v a="$path" -v b="/usr$path" -v c="$real" '
    { p = $0; sub(/: .*/, "", p); f = $0; sub(/^[^:]*(:[^:]*)?: /, "", f) }
    f == a || f == b || f == c { sub(/:.*/, "", p); print p; exit }' "$owners")
  if [ -z "$pkg" ]; then
    echo "runtime-packages.sh: no package owns $path" >&2
    exit 1
  fi
  echo "$pkg"
done <"$libs" >"$deps"
sort -u "$deps"
