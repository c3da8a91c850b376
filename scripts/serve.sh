#!/usr/bin/env bash
# Installs missing Debian packages, builds conv1d_server and starts it in the
# foreground (GPU backend when a device is present, CPU otherwise).
# Extra arguments go to the server, e.g. to serve other hosts (the default
# listens on loopback only): scripts/serve.sh --listen=0.0.0.0:50051
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target conv1d_server conv1d_client
exec build/server/conv1d_server "$@"
