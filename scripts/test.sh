#!/usr/bin/env bash
# Installs missing Debian packages, builds everything and runs every test
# (unit, end to end, metrics with a real Prometheus, build checks of the CUDA
# and HIP kernels), then each fuzz target for a short smoke. GPU tests skip
# themselves without a device; suites labelled `slow` run only with --slow.
#   --fuzz[=SECONDS]  only the fuzz targets (tests/fuzz), each for SECONDS
#                     (default 300), with ASan + UBSan (the fuzz preset)
#   --sanitize        only the unit and e2e suites of the CPU build under
#                     ASan + UBSan (the sanitize preset)
set -euo pipefail
cd "$(dirname "$0")/.."
slow=0
mode=all
fuzz_s=300
# Seconds per fuzz target in the default run.
smoke_s=12
for arg in "$@"; do
  case "$arg" in
    --slow) slow=1; export CONV1D_RUN_SLOW=1 ;;
    --fuzz) mode=fuzz ;;
    --fuzz=*)
      mode=fuzz
      fuzz_s=${arg#--fuzz=}
      [[ $fuzz_s =~ ^[1-9][0-9]*$ ]] || { echo "test.sh: --fuzz wants whole seconds, not '$fuzz_s'" >&2; exit 2; }
      ;;
    --sanitize) mode=sanitize ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "test.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done
scripts/install_deps.sh --test
jobs=$(nproc)

# Builds the fuzz targets and runs each for $1 seconds from the committed
# seeds, keeping what it finds under build-fuzz/corpus; a finding fails the
# run and leaves its input in build-fuzz/.
run_fuzz() {
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j "$jobs"
  for t in request_fuzzer split_parser_fuzzer; do
    mkdir -p "build-fuzz/corpus/$t"
    echo "fuzz: $t for $1 s"
    build-fuzz/tests/fuzz/$t -max_total_time="$1" -print_final_stats=1 \
      -artifact_prefix="build-fuzz/$t-" "build-fuzz/corpus/$t" tests/fuzz/corpus \
      > "build-fuzz/$t.log" 2>&1 || { tail -n 40 "build-fuzz/$t.log" >&2; exit 1; }
    grep -E 'number_of_executed_units|average_exec_per_sec' "build-fuzz/$t.log"
  done
}

if [[ $mode == fuzz ]]; then
  run_fuzz "$fuzz_s"
  exit 0
fi
if [[ $mode == sanitize ]]; then
  cmake --preset sanitize
  cmake --build --preset sanitize -j "$jobs"
  ctest --preset sanitize -j "$jobs" -L 'unit|e2e'
  exit 0
fi
# nvcc lives outside PATH in the CUDA toolkit's default location.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
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
if [[ $status == 0 ]]; then
  run_fuzz "$smoke_s" || status=$?
fi
echo "test.sh: finished in ${SECONDS} s (exit status $status)" >&2
exit "$status"
