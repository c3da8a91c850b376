"""Helpers of the client end-to-end tests: seeds, running the binaries,
scratch directories, certificates made with the openssl command. The server
they test is started by tests/common/server_launcher.py."""
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


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d, name):
    """A self-signed CA in directory `d`: `name`.pem and `name`.key."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
            "-subj", f"/CN={name}", cwd=d)


def make_leaf(d, name, ca, san="DNS:localhost,IP:127.0.0.1"):
    """A certificate `name`.pem (key `name`.key) for the subject alternative
    names `san` (by default 127.0.0.1/localhost), signed by `ca`."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(f"subjectAltName={san}\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
            cwd=d)
