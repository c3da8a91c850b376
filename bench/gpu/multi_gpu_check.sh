#!/usr/bin/env bash
# Checks conv1d-serve on a host with several GPUs, from a packed directory
# (bench/gpu/pack_device_dir.sh): the gpu backend tests and the end-to-end
# suite with every device in use, then a served load whose per-lane busy time
# shows that every device computed (lanes interleave over devices: lane i runs
# on device i % devices).
# usage: bench/gpu/multi_gpu_check.sh DIST_DIR OUT_DIR
set -uo pipefail
dist=$(cd "$1" && pwd)
out=$2
mkdir -p "$out"
export LD_LIBRARY_PATH="$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$dist/bin
status=0
nvidia-smi -L
ndev=$(nvidia-smi -L | grep -c '^GPU')
echo "devices: $ndev"
"$bin/gpu_backend_test" --gtest_brief=1 2>&1 | tee "$out/gpu_backend_test.log" | tail -n 3 || status=1
CONV1D_E2E_BACKEND=gpu "$bin/conv1d_e2e_tests" --gtest_brief=1 >"$out/e2e_gpu.log" 2>&1 || status=1
tail -n 2 "$out/e2e_gpu.log"
"$bin/conv1d_server" --backend=gpu --listen=127.0.0.1:50171 --metrics_listen=127.0.0.1:50172 \
  --log_level=info >"$out/server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$bin/conv1d_client" health --target=127.0.0.1:50171 >/dev/null 2>&1 && break; sleep 0.2; done
grep -m1 -o 'devices=[^]]*' "$out/server.log" || head -n 3 "$out/server.log"
"$bin/conv1d_load" --target=127.0.0.1:50171 --preset=small-fwd --concurrency=64 --warmup_s=1 \
  --duration_s=4 --progress=false --verify_fraction=0.05 >"$out/load.log" 2>&1 || status=1
tail -n 3 "$out/load.log"
curl -s http://127.0.0.1:50172/metrics >"$out/metrics.txt"
kill -TERM $pid; wait $pid || status=1
echo "lane busy seconds (lane i on device i % $ndev):"
grep '^conv1d_lane_busy_seconds_total' "$out/metrics.txt"
# Every device must have done work: some lane of each residue class is busy.
for ((d = 0; d < ndev; ++d)); do
  busy=$(awk -v d="$d" -v n="$ndev" -F'[="} ]+' \
    '/^conv1d_lane_busy_seconds_total/ { if ($2 % n == d) s += $NF } END { print s + 0 }' \
    "$out/metrics.txt")
  echo "device $d busy ${busy}s"
  awk -v b="$busy" 'BEGIN { exit !(b > 0) }' || { echo "device $d did no work"; status=1; }
done
echo "multi-gpu status: $status"
exit $status
