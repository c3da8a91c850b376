"""Shared pieces of the inference-protocol suites: a conv1d_server on a free
loopback port, float64 reference implementations of the three ops, and the
skip convention (exit 77 when a tool is missing)."""
import importlib
import os
import signal
import socket
import subprocess
import sys
import time

try:
    import numpy as np
except ImportError:  # reported by require("numpy") in the suites
    np = None

SKIP = 77


def require(module_name):
    """Imports `module_name` or exits with SKIP, saying how to get it."""
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        print(f"SKIP: {e}; run scripts/install_deps.sh --test (build/venv-oip)")
        sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """conv1d_server (CPU backend) on a free port, ready on entry, with
    `args` and those in $OIP_SERVER_ARGS (space-separated); `headers` go
    with the readiness calls (a bearer token when the server wants one)."""

    def __init__(self, binary, *args, headers=None):
        args = (*args, *os.environ.get("OIP_SERVER_ARGS", "").split())
        import tritonclient.grpc as grpcclient
        self.port = free_port()
        self.url = f"127.0.0.1:{self.port}"
        cmd = [binary, f"--listen={self.url}", "--metrics_listen=", "--backend=cpu",
               "--log_level=warn", *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        client = grpcclient.InferenceServerClient(self.url)
        deadline = time.time() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stderr.read().decode()}")
            try:
                if client.is_server_ready(headers=headers):
                    break
            except Exception:  # not listening yet
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError("server did not become ready")
            time.sleep(0.1)
        client.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


# ---- float64 references (DESIGN §1); activations channel-first [B, D, L] ----

def _silu(z):
    return z / (1.0 + np.exp(-z))


def _dsilu(z):
    s = 1.0 / (1.0 + np.exp(-z))
    return s * (1.0 + z * (1.0 - s))


def _padded(x, w, initial_states):
    b, d, _ = x.shape
    k = w.shape[1] - 1
    init = initial_states if initial_states is not None else np.zeros((b, d, k))
    return np.concatenate([init, x], axis=2)


def _pre_activation(xt, w, bias, length):
    width = w.shape[1]
    z = np.zeros((xt.shape[0], xt.shape[1], length))
    for k in range(width):
        z += w[None, :, k, None] * xt[:, :, k:k + length]
    if bias is not None:
        z += bias[None, :, None]
    return z


def forward(x, w, bias=None, initial_states=None, silu=False):
    """(y, final_states)."""
    length = x.shape[2]
    xt = _padded(x, w, initial_states)
    z = _pre_activation(xt, w, bias, length)
    y = _silu(z) if silu else z
    return y, xt[:, :, length:]


def backward(x, w, dout, bias=None, initial_states=None, dfinal_states=None, silu=False):
    """(dx, dweight, dbias, dinitial_states)."""
    length = x.shape[2]
    width = w.shape[1]
    xt = _padded(x, w, initial_states)
    z = _pre_activation(xt, w, bias, length)
    g = dout * _dsilu(z) if silu else dout
    dxt = np.zeros_like(xt)
    for k in range(width):
        dxt[:, :, k:k + length] += w[None, :, k, None] * g
    if dfinal_states is not None:
        dxt[:, :, length:] += dfinal_states
    dweight = np.stack([(g * xt[:, :, k:k + length]).sum(axis=(0, 2))
                        for k in range(width)], axis=1)
    return dxt[:, :, width - 1:], dweight, g.sum(axis=(0, 2)), dxt[:, :, :width - 1]


def update(x, conv_state, w, bias=None, silu=False):
    """(y, conv_state_out): x̂ = concat(state, x), non-circular."""
    steps = x.shape[2]
    state_len = conv_state.shape[2]
    xt = np.concatenate([conv_state, x], axis=2)
    width = w.shape[1]
    start = state_len - (width - 1)
    z = _pre_activation(xt[:, :, start:], w, bias, steps)
    y = _silu(z) if silu else z
    return y, xt[:, :, steps:]
