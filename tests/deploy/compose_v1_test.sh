#!/usr/bin/env bash
# Parses, validates and merges every compose combination the docs give with
# docker-compose 1.29 (the version Debian 12 packages, the oldest supported).
#   compose_v1_test.sh DOCKER_COMPOSE DEPLOY_DIR
set -euo pipefail
dc=$1
cd "$2"
"$dc" --version
status=0
for override in "" compose.rocm.yaml compose.cuda.yaml; do
  args=(-f compose.yaml)
  [[ -n $override ]] && args+=(-f "$override")
  for profile in "" amd nvidia; do
    p=()
    [[ -n $profile ]] && p=(--profile "$profile")
    if "$dc" "${args[@]}" "${p[@]}" config -q; then
      echo "ok: ${args[*]} ${p[*]}"
    else
      echo "FAIL: ${args[*]} ${p[*]}" >&2
      status=1
    fi
  done
done
exit "$status"
