#!/usr/bin/env bash
# Runs on the GPU machine: the GPU kernel tests, then the kernel benchmark.
# Binaries come prebuilt in $DIST (default dist/kern: conv1d_gpu_test,
# conv1d_kernel_bench); logs and the CSV go to $OUT (default /tmp/kern-out).
# Prints the test summary and the benchmark table last.
#   bench/kernels/run_on_device.sh [--no-tests] [--no-bench] [gtest filter]
set -uo pipefail
cd "$(dirname "$0")/../.."
dist=${DIST:-dist/kern}
out=${OUT:-/tmp/kern-out}
mkdir -p "$out"
tests=1 bench=1 filter='*'
for a in "$@"; do
  case "$a" in
    --no-tests) tests=0 ;;
    --no-bench) bench=0 ;;
    *) filter=$a ;;
  esac
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu \
  --format=csv > "$out/gpu.txt" 2>&1 || true
date -u +%FT%TZ >> "$out/gpu.txt"
rc=0
if [[ $tests == 1 ]]; then
  timeout 400 "$dist/conv1d_gpu_test" --gtest_filter="$filter" > "$out/test.log" 2>&1
  rc=$?
  grep -E "^\[ *(OK|FAILED|PASSED|SKIPPED) *\]|Failure|segment|y\[|reference" "$out/test.log" | head -60
  echo "gpu tests rc=$rc"
fi
if [[ $bench == 1 ]]; then
  "$dist/conv1d_kernel_bench" "$out/kernels.csv" > "$out/bench.log" 2>&1 || rc=$?
  cat "$out/gpu.txt"
  cat "$out/bench.log"
fi
exit $rc
