#!/usr/bin/env bash
# Installs missing Debian packages, builds what serving needs (conv1d_server,
# conv1d_client, conv1d_load) and starts the server in the foreground.
#
#   scripts/serve.sh [--gpu | --cpu] [server flags ...]
#
# The GPU backend is built only when a GPU is visible (nvidia-smi, rocm-smi or
# /dev/kfd: CUDA or HIP to match) or --gpu asks for it; otherwise the CPU-only
# preset is built and the server runs on its CPU backend. --cpu builds
# CPU-only even with a GPU.
# Every other argument goes to conv1d_server, e.g.
#   scripts/serve.sh --backend=cpu --listen=0.0.0.0:50051   (serve other hosts;
#   the default listens on loopback only)
# (`conv1d_server --help` lists them). ccache is used when
# installed (CCACHE_DISABLE=1 turns it off).
set -euo pipefail
cd "$(dirname "$0")/.."

gpu=auto
server_args=()
for arg in "$@"; do
  case "$arg" in
    --gpu) gpu=on ;;
    --cpu) gpu=off ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) server_args+=("$arg") ;;
  esac
done

nvidia_visible() { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }
amd_visible() {
  { command -v rocm-smi >/dev/null && rocm-smi >/dev/null 2>&1; } || [[ -e /dev/kfd ]]
}
if [[ $gpu == auto ]]; then
  if nvidia_visible || amd_visible; then gpu=on; else gpu=off; fi
fi

scripts/install_deps.sh
preset=cpu; build_dir=build-cpu; gpu_args=()
if [[ $gpu == on ]]; then
  # nvcc lives outside PATH in the CUDA toolkit's default location.
  if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
  # The toolchain of the GPU that is visible; with --gpu and none visible,
  # whichever is installed.
  if nvidia_visible || { ! amd_visible && command -v nvcc >/dev/null; }; then
    command -v nvcc >/dev/null || {
      echo "serve.sh: an NVIDIA GPU is visible but nvcc (the CUDA toolkit) is not installed;" \
           "install it, or run with --cpu" >&2
      exit 1
    }
    gpu_args=(-DCONV1D_GPU=CUDA)
  else
    command -v hipcc >/dev/null || {
      echo "serve.sh: no GPU toolchain found (nvcc or ROCm's hipcc); install one, or run with --cpu" >&2
      exit 1
    }
    gpu_args=(-DCONV1D_GPU=HIP)
  fi
  preset=default; build_dir=build
  echo "serve.sh: building with the GPU backend (${gpu_args[*]}, preset $preset)" >&2
else
  echo "serve.sh: no GPU visible (or --cpu): CPU-only build (preset $preset; --gpu to override)" >&2
fi

if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
fi
jobs=$(nproc)
cmake --preset "$preset" "${gpu_args[@]}"
cmake --build "$build_dir" -j "$jobs" --target conv1d_server conv1d_client conv1d_load
echo "serve.sh: installed and built in ${SECONDS} s; starting $build_dir/server/conv1d_server ${server_args[*]}" >&2
exec "$build_dir/server/conv1d_server" "${server_args[@]}"
