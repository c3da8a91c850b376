"""Helpers of the client end-to-end tests: seeds, running the binaries,
scratch directories. The server they test is started by
tests/common/server_launcher.py."""
import os
import secrets
import subprocess
import sys


def seed_for_test(default):
    """The seed of a randomized test: $CONV1D_TEST_SEED (an unsigned integer,
    or "random" for a fresh one) when set, else `default`. Printed to stderr,
    so that the output of a failing run names it (tests/README.md)."""
    value = os.environ.get("CONV1D_TEST_SEED", "")
    if value == "random":
        seed = secrets.randbits(63)
    elif value:
        try:
            seed = int(value, 0)
        except ValueError:
            raise ValueError(f"CONV1D_TEST_SEED='{value}' is not a seed "
                             "(expected an unsigned integer or 'random')") from None
    else:
        seed = default
    print(f"seed {seed} (replay: CONV1D_TEST_SEED={seed})", file=sys.stderr)
    return seed


def run(cmd, **kw):
    """Runs cmd, returning the CompletedProcess (text output)."""
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    print(r.stdout, r.stderr, sep="", flush=True)
    return r


def tmpdir():
    import tempfile
    return tempfile.mkdtemp(prefix="conv1d_client_test_")


def environ_with(**kv):
    env = dict(os.environ)
    env.update(kv)
    return env
