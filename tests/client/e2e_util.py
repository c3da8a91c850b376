"""Starting and stopping a conv1d_server for the client end-to-end tests."""
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request


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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A conv1d_server on free loopback ports, ready (SERVING) on entry."""

    def __init__(self, binary, client_binary, *args):
        self.port = free_port()
        self.metrics_port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        cmd = [binary, f"--listen={self.target}",
               f"--metrics_listen=127.0.0.1:{self.metrics_port}", "--log_level=warn",
               *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode()}")
            r = subprocess.run([client_binary, f"--target={self.target}", "--timeout_s=1",
                                "health"], capture_output=True)
            if r.returncode == 0:
                return
            if time.time() > deadline:
                self.stop()
                raise RuntimeError("server did not become SERVING")
            time.sleep(0.1)

    def metric(self, name, label_filter=""):
        body = urllib.request.urlopen(self.metrics_url, timeout=5).read().decode()
        total = 0.0
        for line in body.splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            rest = line[len(name):]
            labels = ""
            if rest.startswith("{"):
                labels, rest = rest[1:rest.rindex("}")], rest[rest.rindex("}") + 1:]
            elif not rest.startswith(" "):
                continue
            if label_filter in labels:
                total += float(rest.split()[0])
        return total

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


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
