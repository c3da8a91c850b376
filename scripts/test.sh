#!/usr/bin/env bash
# Installs missing Debian packages, builds everything and runs every test
# (unit, end to end, metrics with a real Prometheus, build checks of the CUDA
# and HIP kernels). GPU tests skip themselves without a device; suites
# labelled `slow` run only with --slow.
set -euo pipefail
cd "$(dirname "$0")/.."
slow=0
for arg in "$@"; do
  case "$arg" in
    --slow) slow=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
scripts/install_deps.sh --test
# nvcc lives outside PATH in the CUDA toolkit's default location.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
jobs=$(nproc)
cmake --preset default
cmake --build --preset default -j "$jobs"
# The server and its libraries again with clang 14 and -Wthread-safety
# (errors on a violated lock annotation); the tests run on the build above.
cmake --preset clang
cmake --build --preset clang -j "$jobs"
status=0
if [[ $slow == 1 ]]; then
  ctest --test-dir build --output-on-failure -j "$jobs" || status=$?
else
  ctest --preset default -j "$jobs" || status=$?
fi
echo "test.sh: finished in ${SECONDS} s (exit status $status)" >&2
exit "$status"
