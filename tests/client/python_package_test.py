#!/usr/bin/env python3
"""The Python package as a user installs it: for each Python 3.9-3.12 found
(python3 and python3.N on PATH), a fresh virtual environment, `pip install
client/python` (dependencies from PyPI), then the package's examples against a
live conv1d_server --backend=cpu; each must exit 0 and report `ok`.

usage: python_package_test.py SERVER CLIENT SOURCE_DIR

PyPI unreachable: exits 77 (ctest: skipped) unless CONV1D_TEST_REQUIRE_PYPI=1,
which CI sets.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request

from e2e_util import run
from server_launcher import Server

SERVER, CLIENT, SOURCE = sys.argv[1:4]
PACKAGE = os.path.join(SOURCE, "client", "python")


def interpreters():
    """(version, path) of each distinct Python 3.9-3.12 on PATH."""
    found = {}
    for name in ["python3"] + [f"python3.{m}" for m in range(9, 13)]:
        path = shutil.which(name)
        if not path:
            continue
        r = subprocess.run([path, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True)
        ver = r.stdout.strip()
        if r.returncode == 0 and ver in ("3.9", "3.10", "3.11", "3.12"):
            found.setdefault(ver, path)
    return sorted(found.items())


def pypi_reachable():
    try:
        urllib.request.urlopen("https://pypi.org/simple/grpcio/", timeout=10).close()
        return True
    except OSError as e:
        print(f"PyPI not reachable: {e}")
        return False


def main():
    if not pypi_reachable():
        if os.environ.get("CONV1D_TEST_REQUIRE_PYPI") == "1":
            print("FAIL: CONV1D_TEST_REQUIRE_PYPI=1 and PyPI is not reachable")
            return 1
        print("SKIP: the package's dependencies come from PyPI")
        return 77
    pythons = interpreters()
    print("interpreters:", pythons, flush=True)
    if not pythons:
        print("FAIL: no Python 3.9-3.12 with the venv module on PATH")
        return 1
    failures = []
    with tempfile.TemporaryDirectory() as tmp, Server(SERVER, CLIENT, "--backend=cpu") as srv:
        # A copy, so that pip's in-tree build leaves nothing in the source tree.
        src = os.path.join(tmp, "src")
        shutil.copytree(PACKAGE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        for ver, python in pythons:
            venv = os.path.join(tmp, f"venv{ver}")
            py = os.path.join(venv, "bin", "python")
            # (command, whether its output must end in "ok")
            steps = [
                ([python, "-m", "venv", venv], False),
                ([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", src], False),
                ([py, "-c", "import conv1d_client, grpc, google.protobuf, numpy; "
                            "print('conv1d_client', conv1d_client.__version__, 'grpcio', grpc.__version__, "
                            "'protobuf', google.protobuf.__version__, 'numpy', numpy.__version__)"], False),
            ]
            for ex in ("forward_example.py", "async_example.py"):
                steps.append(([py, os.path.join(PACKAGE, "examples", ex), "--target", srv.target], True))
            for cmd, want_ok in steps:
                # Run from tmp, so that the source tree's package cannot be imported by accident.
                r = run(cmd, cwd=tmp)
                ok = r.returncode == 0 and (not want_ok or r.stdout.rstrip().endswith("ok"))
                if not ok:
                    failures.append(f"Python {ver}: {' '.join(cmd[:3])}... exit {r.returncode}")
                    break
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
