#!/usr/bin/env bash
# The stubs shipped in client/python/conv1d_client/_gen equal a fresh
# client/python/generate_stubs.sh run (so a .proto change cannot leave them behind).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$root/client/python/generate_stubs.sh" "$tmp"
if ! diff -r -x __pycache__ "$root/client/python/conv1d_client/_gen" "$tmp"; then
  echo "FAIL: client/python/conv1d_client/_gen is stale; run client/python/generate_stubs.sh" >&2
  exit 1
fi
echo "shipped stubs are current"
