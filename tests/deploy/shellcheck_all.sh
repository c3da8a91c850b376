#!/usr/bin/env bash
# Runs shellcheck on every shell script the project ships: scripts/, .ci/run,
# deploy/ and the test scripts in tests/. Found at run time, so a new script
# is checked without registering it.
#   usage: shellcheck_all.sh SHELLCHECK SOURCE_DIR
set -euo pipefail
shellcheck=$1
cd "$2"
files=()
while IFS= read -r -d '' f; do
  case $f in
    *.sh) files+=("$f") ;;
    *) if head -n 1 "$f" | grep -qE '^#!.*\b(ba|da)?sh\b'; then files+=("$f"); fi ;;
  esac
done < <(find scripts .ci deploy tests -type f \( -name '*.sh' -o -perm -u+x \) \
           -not -name '*.py' -print0 2>/dev/null)
[[ ${#files[@]} -gt 0 ]] || { echo "shellcheck_all.sh: no scripts found" >&2; exit 1; }
printf 'shellcheck: %s\n' "${files[@]}"
"$shellcheck" -x "${files[@]}"
