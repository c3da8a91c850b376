#!/usr/bin/env bash
# Runs the GPU checks and benchmarks of conv1d-serve on a GPU host from a
# relocatable directory (bin/ + lib/, as made by bench/gpu/pack_device_dir.sh):
#   1. gpu backend tests against the CPU implementation (+ e2e suite on gpu,
#      + shared-memory regions: pinned system and IPC device regions)
#   2. in-process runtime benchmark (fused vs unfused vs pinned copy ceiling)
#   3. end-to-end benchmark: conv1d_server gpu vs echo, conv1d_load c=1,8,64
#   4. soak: 2 minutes (SOAK_S seconds) at c=64, mixed shapes and ops, answers verified
#   5. sessions (not in the default set): decode sessions against unary
#      decode-fwd steps, c=1 and 64, a seeded 1/16 of every chain's steps
#      verified (SESSIONS_VERIFY_FRACTION; every step advances the
#      generator's chain, and a checked step costs it about as much CPU as
#      the gRPC step itself), written to
#      sessions-<device>-<date>.csv, with a per-thread CPU snapshot of the
#      server and the load generator during the c=64 session run; then
#      (SESSIONS_CEILING=echo, the default; none skips it) the same runs
#      against the echo backend, the generator's and transport's ceiling,
#      to sessions-echo-<device>-<date>.csv
#   6. session-soak (not in the default set): SESSION_SOAK_S seconds (600)
#      of SESSION_SOAK_C (1000) concurrent decode sessions, each a chain of
#      1..200 steps of 1..8 tokens, every step verified; open sessions and
#      slot bytes back to zero after the run, RSS flat
#   7. oip (not in the default set): the inference protocol against
#      conv1d.v1 over gRPC bytes at c=64 (decode-fwd, small-fwd, large-fwd),
#      and large-fwd at c=8 with tensors in gRPC bytes, system shared memory
#      and (OIP_MEMORY) device memory, written to oip-<device>-<date>.csv
#   (STAGES, default "tests runtime e2e soak", picks a subset)
# The end-to-end stage runs one server per entry of E2E_SERVERS (default
# "gpu echo echo-strings"): a backend name, optionally with "-strings" for
# --host_tensor_min_bytes=-1 (tensors in protobuf strings, the path before
# host buffers); the transport ceiling is the faster echo. E2E_WORKLOADS and
# E2E_CONCURRENCY (default all four presets, "1,8,64") narrow it.
# usage: [STAGES="..."] bench/gpu/run_device_suite.sh DIST_DIR OUT_DIR [--quick]
set -uo pipefail
dist=$(cd "$1" && pwd)
out=$2
quick=${3:-}
stages=" ${STAGES:-tests runtime e2e soak} "
want() { [[ $stages == *" $1 "* ]]; }
mkdir -p "$out"
export LD_LIBRARY_PATH="$dist/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=$dist/bin
here=$(cd "$(dirname "$0")" && pwd)
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 | tr '[:upper:]' '[:lower:]' | grep -oE 'h100|h200|mi300x?' | head -n1)
device=${device:-gpu}
day=$(date -u +%F)
status=0
step() { echo; echo "=== $* ($(date -u +%T))"; }

step "device"
nvidia-smi -L || true

if want tests; then
step "gpu backend tests"
"$bin/gpu_backend_test" --gtest_brief=1 2>&1 | tee "$out/gpu_backend_test.log" | tail -n 5 || status=1
if [[ -x $bin/conv1d_e2e_tests ]]; then
  step "end-to-end suite on the gpu backend"
  CONV1D_E2E_BACKEND=gpu "$bin/conv1d_e2e_tests" --gtest_brief=1 2>&1 | tee "$out/e2e_gpu.log" | tail -n 5 || status=1
fi
if [[ -x $bin/shared_regions_test && -x $bin/conv1d_device_region_e2e_test ]]; then
  step "shared memory: pinned system regions and device regions (IPC) against the real server"
  "$bin/shared_regions_test" --gtest_brief=1 2>&1 | tee "$out/shared_regions_test.log" | tail -n 5 || status=1
  CONV1D_SERVER_BINARY="$bin/conv1d_server" "$bin/conv1d_device_region_e2e_test" --gtest_brief=1 \
    2>&1 | tee "$out/shared_memory_e2e.log" | grep -E "large-fwd|PASSED|FAILED|Failure" || status=1
fi
fi

dur=3; [[ $quick == --quick ]] && dur=1
if want runtime; then
step "runtime benchmark (in process)"
"$bin/conv1d_runtime_bench" --duration_s=$dur --warmup_s=1 \
  --out="$out/runtime-$device-$day.csv" 2>&1 | tee "$out/runtime_bench.log" || status=1
fi

if want e2e; then
step "end-to-end benchmark (gpu vs echo)"
specs=()
for server in ${E2E_SERVERS:-gpu echo echo-strings}; do
  backend=$server
  extra=()
  if [[ $server == *-strings ]]; then
    backend=${server%-strings}
    extra=(--host_tensor_min_bytes=-1)
  fi
  "$bin/conv1d_server" --backend=$backend --listen=127.0.0.1:50151 "${extra[@]}" \
    --metrics_listen=127.0.0.1:50152 --log_level=warn >"$out/server-$server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do "$bin/conv1d_client" health --target=127.0.0.1:50151 >/dev/null 2>&1 && break; sleep 0.2; done
  for w in ${E2E_WORKLOADS:-decode-fwd small-fwd large-fwd large-bwd}; do
    "$bin/conv1d_load" --target=127.0.0.1:50151 --preset=$w --concurrency=${E2E_CONCURRENCY:-1,8,64} \
      --warmup_s=1 --window_s=$dur --duration_s=$((3 * dur)) --max_trials=3 --progress=false \
      --json="$out/load-$server-$w.json" >"$out/load-$server-$w.log" 2>&1 || status=1
    specs+=("$server:$w:$out/load-$server-$w.json")
  done
  kill -TERM $pid; wait $pid || status=1
done
python3 "$here/e2e_to_csv.py" "$out/e2e-$device-$day.csv" "${specs[@]}" | tee "$out/e2e_summary.txt" || status=1
fi

if want soak; then
soak=${SOAK_S:-120}; [[ $quick == --quick ]] && soak=20
step "soak: ${soak}s at c=64, mixed, verified"
"$bin/conv1d_server" --backend=gpu --listen=127.0.0.1:50161 \
  --metrics_listen=127.0.0.1:50162 --log_level=warn >"$out/server-soak.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$bin/conv1d_client" health --target=127.0.0.1:50161 >/dev/null 2>&1 && break; sleep 0.2; done
sample() {  # RSS, device pool in use, host pool in use and its misses so far
  local rss metrics pool host misses
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  metrics=$(curl -s http://127.0.0.1:50162/metrics 2>/dev/null)
  pool=$(awk '/^conv1d_pool_bytes\{.*device_in_use/ {s+=$2} END {print s+0}' <<<"$metrics")
  host=$(awk '/^conv1d_pool_bytes\{.*host_in_use/ {s+=$2} END {print s+0}' <<<"$metrics")
  misses=$(awk '/^conv1d_host_pool_misses_total/ {s+=$2} END {print s+0}' <<<"$metrics")
  echo "$1 rss_kib=$rss device_in_use_bytes=$pool host_in_use_bytes=$host host_pool_misses=$misses"
}
"$bin/conv1d_load" --target=127.0.0.1:50161 --mix="$here/soak_mix.txt" --concurrency=64 \
  --warmup_s=5 --duration_s=$soak --max_trials=1 --stable_windows=1 --progress=false \
  --verify_fraction=0.05 --json="$out/soak.json" >"$out/soak.log" 2>&1 &
lp=$!
# Samples every 5 s after the warm-up; memory is flat when the largest RSS of
# the last third of the run is within 10 % of the largest of the first third
# (in-flight large requests make single samples swing) and the device pool
# never changes.
sleep 8
: >"$out/soak_memory.txt"  # a reused OUT_DIR must not mix in an earlier soak
while kill -0 $lp 2>/dev/null; do sample "t=$(date +%s)" >>"$out/soak_memory.txt"; sleep 5; done
wait $lp || status=1
tail -n 15 "$out/soak.log"
kill -TERM $pid; wait $pid || status=1
awk -F'[ =]' '{ rss[NR] = $4; pool[NR] = $6 }
  END {
    n = NR; third = int(n / 3); if (third < 1) { print "too few memory samples"; exit 1 }
    for (i = 1; i <= third; ++i) if (rss[i] > a) a = rss[i]
    for (i = n - third + 1; i <= n; ++i) if (rss[i] > b) b = rss[i]
    for (i = 2; i <= n; ++i) if (pool[i] != pool[1]) moved = 1
    printf "memory: %d samples; max RSS first third %.0f MiB, last third %.0f MiB; device pool %s\n",
           n, a / 1024, b / 1024, moved ? "changed" : "constant"
    exit (b > 1.1 * a || moved) }' "$out/soak_memory.txt" | tee "$out/soak_verdict.txt" || status=1
fi

if want sessions; then
step "sessions against unary decode-fwd"
"$bin/conv1d_server" --backend=${SESSIONS_BACKEND:-gpu} --listen=127.0.0.1:50171 \
  --metrics_listen=127.0.0.1:50172 --log_level=warn >"$out/server-sessions.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$bin/conv1d_client" health --target=127.0.0.1:50171 >/dev/null 2>&1 && break; sleep 0.2; done
sess=(--target=127.0.0.1:50171 --shape=1x5120x1 --weights=registered --progress=false
  --verify_step_fraction=${SESSIONS_VERIFY_FRACTION:-0.0625} ${SESSIONS_CHANNELS:+--channels=$SESSIONS_CHANNELS})
"$bin/conv1d_load" "${sess[@]}" --mode=session,unary-decode-fwd --concurrency=1,64 \
  --warmup_s=1 --duration_s=${SESSIONS_S:-4} --csv="$out/sessions-$device-$day.csv" \
  2>&1 | tee "$out/sessions.log" || status=1
# Where the time goes at c=64: threads of the server and of the generator
# over 2 s in the middle of a 6 s session run, and the server's own mean
# step latency and steps per launch over the run (metric deltas).
scrape() { curl -s http://127.0.0.1:50172/metrics | awk '/^conv1d_session_(step_duration_seconds|steps_per_launch)_(sum|count)/ {print $1, $2}'; }
scrape >"$out/sessions-metrics-before.txt"
"$bin/conv1d_load" "${sess[@]}" --mode=session --concurrency=64 --warmup_s=1 --duration_s=6 \
  >"$out/sessions-threads-load.log" 2>&1 &
lp=$!
sleep 4
top -H -b -n 2 -d 2 -p "$pid,$lp" 2>&1 | awk '/^top -/ {n++} n == 2' | head -n 100 >"$out/sessions-threads.txt"
wait $lp || status=1
scrape >"$out/sessions-metrics-after.txt"
cat "$out/sessions-threads-load.log" >>"$out/sessions-threads.txt"
awk 'NR == FNR {a[$1] = $2; next} {d[$1] = $2 - a[$1]}
  END {
    printf "server side over the c=64 run: mean step %.1f us, %.1f steps per launch\n",
      1e6 * d["conv1d_session_step_duration_seconds_sum"] / (d["conv1d_session_step_duration_seconds_count"] + 1e-9),
      d["conv1d_session_steps_per_launch_sum"] / (d["conv1d_session_steps_per_launch_count"] + 1e-9) }' \
  "$out/sessions-metrics-before.txt" "$out/sessions-metrics-after.txt" | tee -a "$out/sessions.log"
kill -TERM $pid; wait $pid || status=1
# The ceiling of the same generator and transport: the same runs against
# the echo backend (sessions in host slots, no compute, no device).
if [[ ${SESSIONS_CEILING:-echo} == echo ]]; then
  step "sessions ceiling: the same runs against the echo backend"
  "$bin/conv1d_server" --backend=echo --listen=127.0.0.1:50171 \
    --metrics_listen=127.0.0.1:50172 --log_level=warn >"$out/server-sessions-echo.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do "$bin/conv1d_client" health --target=127.0.0.1:50171 >/dev/null 2>&1 && break; sleep 0.2; done
  # Echo answers y = x, so its steps are not checked (a ceiling that does
  # not pay for the check: the gpu/echo ratio errs low).
  "$bin/conv1d_load" "${sess[@]}" --mode=session,unary-decode-fwd --concurrency=1,64 --verify_steps=false \
    --warmup_s=1 --duration_s=${SESSIONS_S:-4} --csv="$out/sessions-echo-$device-$day.csv" \
    >"$out/sessions-echo.log" 2>&1 || status=1
  kill -TERM $pid; wait $pid || status=1
  # gpu rows beside the echo rows: steps/s and p50 as a share of echo's.
  awk -F, 'NR == FNR {if (FNR > 1) {r[$1 "," $2] = $3; p[$1 "," $2] = $4}; next}
    FNR == 1 {print "mode,concurrency,gpu_steps_per_s,echo_steps_per_s,gpu_over_echo,gpu_p50_us,echo_p50_us"; next}
    {k = $1 "," $2; printf "%s,%.1f,%.1f,%.3f,%.1f,%.1f\n", k, $3, r[k], $3 / (r[k] + 1e-9), $4, p[k]}' \
    "$out/sessions-echo-$device-$day.csv" "$out/sessions-$device-$day.csv" | tee -a "$out/sessions.log"
fi
fi

if want session-soak; then
ssoak=${SESSION_SOAK_S:-600}
step "session soak: ${ssoak}s, ${SESSION_SOAK_C:-1000} sessions, random chains and steps, verified"
"$bin/conv1d_server" --backend=${SESSIONS_BACKEND:-gpu} --listen=127.0.0.1:50181 \
  --metrics_listen=127.0.0.1:50182 --max_sessions=1100 --log_level=warn \
  >"$out/server-session-soak.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$bin/conv1d_client" health --target=127.0.0.1:50181 >/dev/null 2>&1 && break; sleep 0.2; done
ssample() {
  local m
  m=$(curl -s http://127.0.0.1:50182/metrics 2>/dev/null)
  echo "$1 rss_kib=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")" \
    "open=$(awk '/^conv1d_sessions_open / {print $2}' <<<"$m")" \
    "slot_bytes=$(awk '/^conv1d_session_slot_bytes / {print $2}' <<<"$m")"
}
"$bin/conv1d_load" --target=127.0.0.1:50181 --mode=session --concurrency=${SESSION_SOAK_C:-1000} \
  --shape=1x2048x8 --step_tokens_min=1 --chain_steps=200 --chain_steps_min=1 \
  --warmup_s=2 --duration_s=$ssoak --progress=false --csv="$out/session-soak.csv" \
  >"$out/session-soak.log" 2>&1 &
lp=$!
sleep 5
: >"$out/session_soak_memory.txt"
while kill -0 $lp 2>/dev/null; do ssample "t=$(date +%s)" >>"$out/session_soak_memory.txt"; sleep 5; done
wait $lp || status=1
sleep 1
ssample after >>"$out/session_soak_memory.txt"
tail -n 3 "$out/session-soak.log"
kill -TERM $pid; wait $pid || status=1
awk -F"[ =]" '$1 != "after" { rss[++n] = $4 } $1 == "after" { open = $5; slot = $7 }
  END {
    third = int(n / 3); if (third < 1) { print "too few memory samples"; exit 1 }
    for (i = 1; i <= third; ++i) if (rss[i] > a) a = rss[i]
    for (i = n - third + 1; i <= n; ++i) if (rss[i] > b) b = rss[i]
    printf "session soak memory: %d samples; max RSS first third %.0f MiB, last third %.0f MiB; after the run %s sessions open, %s slot bytes\n",
           n, a / 1024, b / 1024, open, slot
    exit (b > 1.1 * a || open != 0 || slot != 0) }' "$out/session_soak_memory.txt" \
  | tee "$out/session_soak_verdict.txt" || status=1
fi

if want oip; then
step "inference protocol against conv1d.v1, and shared memory"
"$bin/conv1d_server" --backend=${OIP_BACKEND:-gpu} --listen=127.0.0.1:50191 \
  --metrics_listen=127.0.0.1:50192 --log_level=warn >"$out/server-oip.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$bin/conv1d_client" health --target=127.0.0.1:50191 >/dev/null 2>&1 && break; sleep 0.2; done
odur=${OIP_S:-3}
common=(--target=127.0.0.1:50191 --warmup_s=1 --window_s=$odur --duration_s=$odur --max_trials=1
        --stable_windows=1 --progress=false --verify_fraction=0.02)
"$bin/conv1d_load" "${common[@]}" --protocol=v1,oip --memory=grpc \
  --preset=decode-fwd,small-fwd,large-fwd --concurrency=64 --csv="$out/oip-c64.csv" \
  >"$out/oip-c64.log" 2>&1 || status=1
"$bin/conv1d_load" "${common[@]}" --protocol=oip --memory=${OIP_MEMORY:-grpc,system,device} \
  --preset=large-fwd --concurrency=8 --csv="$out/oip-c8.csv" >"$out/oip-c8.log" 2>&1 || status=1
kill -TERM $pid; wait $pid || status=1
{ cat "$out/oip-c64.csv"; tail -n +2 "$out/oip-c8.csv"; } >"$out/oip-$device-$day.csv" 2>/dev/null
cut -d, -f1-7 "$out/oip-$device-$day.csv" | column -t -s, | tee "$out/oip_summary.txt"
fi

step "summary"
for f in runtime_bench.log e2e_summary.txt soak_verdict.txt sessions.log session_soak_verdict.txt oip_summary.txt; do
  [[ -f $out/$f ]] && tail -n 12 "$out/$f"
done
echo "suite status: $status"
exit $status
