#!/usr/bin/env bash
# Installs what the inference-protocol tests (tests/oip) drive the server
# with, into build/venv-oip: Triton's Python client (tritonclient[grpc]) and
# Triton's load generator perf_analyzer, both from PyPI. Idempotent.
#
# perf_analyzer's wheels (perf-analyzer 2.58 and later) are built for glibc
# 2.38 and GCC 13's libstdc++: the binary needs GLIBC_2.38 (__isoc23_strtol
# and friends) and GLIBCXX_3.4.32, which Debian 12 (glibc 2.36, GCC 12) lacks,
# so pip there only finds the 0.1.0 placeholder. On such a system the wheel
# is unpacked by hand and bin/perf_analyzer runs it through the dynamic
# loader of Debian 13's libc6, libstdc++6 and libgcc-s1 (fetched with
# apt-get download into the venv, never installed system-wide). Best effort:
# without it tests/oip's perf_analyzer test reports itself skipped.
#   scripts/install_oip_tools.sh [VENV_DIR]     default: build/venv-oip
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-build/venv-oip}
tritonclient_version=2.73.0
perf_analyzer_version=2.60.0
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3)

if [[ ! -x $venv/bin/python ]]; then
  "$py" -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; \
sys.exit(m.version('tritonclient') != '$tritonclient_version')" 2>/dev/null; then
  echo "install_oip_tools.sh: installing tritonclient[grpc]==$tritonclient_version into $venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "tritonclient[grpc]==$tritonclient_version"
fi

pa_runs() { "$venv/bin/perf_analyzer" --version >/dev/null 2>&1; }
pa_runs && exit 0

glibc_minor=$(ldd --version | sed -n '1s/.* 2\.\([0-9]*\)$/\1/p')
if [[ ${glibc_minor:-0} -ge 38 ]]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "perf-analyzer==$perf_analyzer_version" ||
    echo "install_oip_tools.sh: perf-analyzer not installed (optional)" >&2
  pa_runs || echo "install_oip_tools.sh: perf_analyzer does not run here (optional)" >&2
  exit 0
fi

# glibc older than 2.38: unpack the wheel, and run it with Debian 13's loader.
echo "install_oip_tools.sh: glibc 2.$glibc_minor < 2.38: perf_analyzer runs with" \
  "Debian 13's libc6/libstdc++6 from $venv/runtime" >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --platform manylinux_2_38_x86_64 --python-version 3.11 \
    -d "$tmp/wheel" "perf-analyzer==$perf_analyzer_version"; then
  echo "install_oip_tools.sh: cannot download perf-analyzer (optional)" >&2
  exit 0
fi
mkdir -p "$venv/runtime"
"$venv/bin/python" -m zipfile -e "$tmp"/wheel/*.whl "$venv/runtime/wheel"
chmod +x "$venv/runtime/wheel/perf_analyzer/bin/perf_analyzer"

mkdir -p "$tmp/lists/partial" "$tmp/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]" \
  "http://deb.debian.org/debian trixie main" > "$tmp/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
          -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache::pkgcache="
          -o "Dir::Cache::srcpkgcache=" -o "Debug::NoLocking=1")
if ! apt-get "${apt_opts[@]}" update -qq >/dev/null 2>&1 ||
   ! (cd "$tmp/debs" && apt-get "${apt_opts[@]}" download -qq \
        libc6 libstdc++6 libgcc-s1 >/dev/null 2>&1); then
  echo "install_oip_tools.sh: cannot fetch Debian 13's libc6 (optional perf_analyzer)" >&2
  exit 0
fi
rm -rf "$venv/runtime/root"
for deb in "$tmp"/debs/*.deb; do dpkg-deb -x "$deb" "$venv/runtime/root"; done
cat > "$venv/bin/perf_analyzer" <<'WRAP'
#!/usr/bin/env bash
# perf_analyzer from its PyPI wheel, run by Debian 13's dynamic loader and
# libc (the wheel needs glibc 2.38); other libraries come from the system.
here=$(cd "$(dirname "$0")/.." && pwd)
lib=$here/runtime/root/usr/lib/x86_64-linux-gnu
exec "$lib/ld-linux-x86-64.so.2" --library-path "$lib:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu" \
  "$here/runtime/wheel/perf_analyzer/bin/perf_analyzer" "$@"
WRAP
chmod +x "$venv/bin/perf_analyzer"
pa_runs || echo "install_oip_tools.sh: perf_analyzer does not run here (optional)" >&2
