#!/usr/bin/env bash
# Runs on the GPU machine: an interleaved comparison of kernel builds. Each
# BUILD is a folder holding conv1d_kernel_bench (and, for --test,
# conv1d_gpu_test), plain or xz-compressed (NAME.xz, unpacked to /tmp).
# Round r runs every build's benchmark once, in the order given, so that
# drift of the shared machine falls on all builds alike; the table printed
# last holds each case's median over the rounds of % of the same-size copy,
# the median time, and every round's value. CSVs and logs go to $OUT
# (default /tmp/ab-out): csv/BUILD-ROUND.csv, bench-BUILD-ROUND.log.
#
#   bench/kernels/ab_on_device.sh [--rounds N] [--only CASE/DTYPE/OP,...]
#       [--test BUILD] [--filter GTEST_FILTER] BUILD...
#
#   --rounds N   rounds (default 3)
#   --only LIST  the bench's --only list (default: every case)
#   --test B     first run B's conv1d_gpu_test (with --filter, default all)
set -uo pipefail
rounds=3 only='' test_build='' filter='*'
builds=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --test) test_build=$2; shift 2 ;;
    --filter) filter=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "ab_on_device.sh: unknown option '$1'" >&2; exit 2 ;;
    *) builds+=("$1"); shift ;;
  esac
done
[[ ${#builds[@]} -gt 0 ]] || { echo "ab_on_device.sh: name at least one build folder" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "ab_on_device.sh: --rounds wants a positive count, not '$rounds'" >&2; exit 2; }
out=${OUT:-/tmp/ab-out}
mkdir -p "$out/csv"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The binaries of build $1 in $work/NAME/, unpacked where compressed.
declare -A bin
for b in "${builds[@]}"; do
  name=$(basename "$b")
  mkdir -p "$work/$name"
  for f in conv1d_kernel_bench conv1d_gpu_test; do
    if [[ -f $b/$f.xz ]]; then
      xz -dc "$b/$f.xz" > "$work/$name/$f" && chmod +x "$work/$name/$f"
    elif [[ -f $b/$f ]]; then
      cp "$b/$f" "$work/$name/$f"
    fi
  done
  [[ -x $work/$name/conv1d_kernel_bench ]] || { echo "ab_on_device.sh: no conv1d_kernel_bench in $b" >&2; exit 2; }
  bin[$b]=$work/$name
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1 || true
date -u +%FT%TZ >> "$out/gpu.txt"

rc=0
if [[ -n $test_build ]]; then
  t=${bin[$test_build]:-}
  [[ -x $t/conv1d_gpu_test ]] || { echo "ab_on_device.sh: no conv1d_gpu_test for $test_build" >&2; exit 2; }
  name=$(basename "$test_build")
  timeout 500 "$t/conv1d_gpu_test" --gtest_filter="$filter" > "$out/test-$name.log" 2>&1 || rc=$?
  echo "gpu tests of $name: exit status $rc"
  grep -E '^\[  (PASSED|FAILED) ' "$out/test-$name.log"
fi
for r in $(seq 1 "$rounds"); do
  for b in "${builds[@]}"; do
    name=$(basename "$b")
    echo "round $r/$rounds: $name" >&2
    "${bin[$b]}/conv1d_kernel_bench" "$out/csv/$name-$r.csv" ${only:+--only=$only} \
      > "$out/bench-$name-$r.log" 2>&1 || { echo "bench of $name, round $r: exit status $?" >&2; rc=1; }
  done
done

names=()
for b in "${builds[@]}"; do names+=("$(basename "$b")"); done
python3 - "$out/csv" "${names[@]}" <<'PY' || rc=1
import collections, csv, glob, statistics, sys
folder, names = sys.argv[1], sys.argv[2:]
pct = collections.defaultdict(lambda: collections.defaultdict(list))
us = collections.defaultdict(lambda: collections.defaultdict(list))
for n in names:
    for f in sorted(glob.glob(f"{folder}/{n}-*.csv")):
        for row in csv.DictReader(open(f)):
            k = (row["case"], row["dtype"], row["op"])
            pct[k][n].append(float(row["pct_of_size_copy"]))
            us[k][n].append(float(row["median_us"]))
print("% of the same-size copy, median over rounds (median us) [each round]")
print("case dtype op | " + " | ".join(names))
for k in pct:
    cells = []
    for n in names:
        v = pct[k][n]
        cells.append(f"{statistics.median(v):.1f} ({statistics.median(us[k][n]):.2f}) "
                     f"[{' '.join(f'{x:.1f}' for x in v)}]" if v else "-")
    print(" ".join(k), "|", " | ".join(cells))
PY
exit $rc
