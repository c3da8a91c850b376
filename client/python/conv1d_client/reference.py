"""float64 NumPy references of the forward and backward passes, to check
answers against (channel-first [B, D, L])."""

import numpy as np


def reference_forward(x, weight, bias=None, initial_states=None, silu=True):
    """float64 NumPy reference of the forward pass, channel-first [B, D, L].

    Returns (y, final_states) as float64.
    """
    xt, w, z = _pre_activation(x, weight, bias, initial_states)
    width = w.shape[1]
    y = z / (1.0 + np.exp(-z)) if silu else z
    return y, xt[:, :, xt.shape[2] - (width - 1):]


def _pre_activation(x, weight, bias, initial_states):
    """float64 (x̃ = [initial_states, x], weight, z = bias + Σ_k w_k x̃)."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    bsz, dim, seqlen = x.shape
    width = w.shape[1]
    if initial_states is None:
        pre = np.zeros((bsz, dim, width - 1))
    else:
        pre = np.asarray(initial_states, dtype=np.float64)
    xt = np.concatenate([pre, x], axis=2)
    z = np.zeros((bsz, dim, seqlen))
    for k in range(width):
        z += w[None, :, k:k + 1] * xt[:, :, k:k + seqlen]
    if bias is not None:
        z += np.asarray(bias, dtype=np.float64)[None, :, None]
    return xt, w, z


def reference_backward(x, weight, dout, bias=None, initial_states=None,
                       dfinal_states=None, silu=True):
    """float64 NumPy reference of the backward pass, channel-first [B, D, L].

    ``dfinal_states`` is the gradient of the forward's final_states (the last
    W-1 columns of [initial_states, x]). Returns (dx, dweight, dbias,
    dinitial_states) as float64; dbias is None without a bias.
    """
    xt, w, z = _pre_activation(x, weight, bias, initial_states)
    g = np.asarray(dout, dtype=np.float64)
    _, dim, seqlen = z.shape
    width = w.shape[1]
    if silu:
        s = 1.0 / (1.0 + np.exp(-z))
        g = g * s * (1.0 + z * (1.0 - s))
    dxt = np.zeros_like(xt)
    dw = np.zeros((dim, width))
    for k in range(width):
        dxt[:, :, k:k + seqlen] += w[None, :, k:k + 1] * g
        dw[:, k] = (g * xt[:, :, k:k + seqlen]).sum(axis=(0, 2))
    if dfinal_states is not None and width > 1:
        dxt[:, :, xt.shape[2] - (width - 1):] += np.asarray(dfinal_states, dtype=np.float64)
    dbias = g.sum(axis=(0, 2)) if bias is not None else None
    return dxt[:, :, width - 1:], dw, dbias, dxt[:, :, :width - 1]
