"""Shared pieces of the inference-protocol suites: a conv1d_server on a free
loopback port (tests/common/server_launcher.py, ready by the protocol's own
readiness call), float64 reference implementations of the three ops, and
the skip convention (exit 77 when a tool is missing)."""
import importlib
import os
import sys

import server_launcher

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


class Server(server_launcher.Server):
    """conv1d_server (CPU backend, no /metrics listener) on a free port
    (`url`), ready for inference-protocol calls on entry, with `args` and
    those in $OIP_SERVER_ARGS (space-separated); `headers` go with the
    readiness calls (a bearer token when the server wants one)."""

    def __init__(self, binary, *args, headers=None):
        args = (*args, *os.environ.get("OIP_SERVER_ARGS", "").split())
        import tritonclient.grpc as grpcclient
        clients = []

        def ready(target):
            if not clients:
                clients.append(grpcclient.InferenceServerClient(target))
            try:
                return clients[0].is_server_ready(headers=headers)
            except Exception:  # not listening yet
                return False

        try:
            super().__init__(binary, None, "--backend=cpu", *args, ready=ready, metrics=False)
        finally:
            for c in clients:
                c.close()
        self.url = self.target


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
