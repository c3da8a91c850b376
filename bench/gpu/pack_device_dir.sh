#!/usr/bin/env bash
# Gathers the GPU test and benchmark programs of a CUDA build, with the
# shared libraries they load (not glibc, libstdc++/libgcc_s or the driver),
# into one directory that runs on a GPU host through LD_LIBRARY_PATH.
# usage: bench/gpu/pack_device_dir.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
out=$2
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
progs=(conv1d_server conv1d_client conv1d_load conv1d_runtime_bench conv1d_cpu_bench gpu_backend_test
       conv1d_e2e_tests conv1d_gpu_test conv1d_kernel_bench conv1d_device_region_e2e_test
       shared_regions_test)
host_re='^(linux-vdso|ld-linux|libnvidia-|(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda)\.so)'
for p in "${progs[@]}"; do
  f=$(find "$build" -name CMakeFiles -prune -o -type f -name "$p" -perm -u+x -print | head -n1)
  [[ -n $f ]] || { echo "pack_device_dir.sh: $p not built, skipped" >&2; continue; }
  cp "$f" "$out/bin/"
  ldd "$f" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $host_re ]] && continue
    [[ -e $out/lib/$name ]] || cp -L "$path" "$out/lib/$name"
  done
done
strip --strip-debug "$out"/bin/* "$out"/lib/* 2>/dev/null || true
du -sh "$out"
