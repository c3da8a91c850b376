"""DecodeSession: a decode session held on a conv1d.v1 Decode stream.

A session keeps the conv state on the server; each step sends x [B, D, S]
(or [B, S, D]) and gets y back. ``commit(accepted)`` after a step keeps its
first ``accepted`` tokens (the rest roll back, at most max_draft_tokens);
``fork()`` copies the state into a new session (its id; take it over with
``Client.decode(session_id=...)``); ``export()`` returns the state
[B, D, K]. Leaving the ``with`` block (or ``close()``) ends the stream and
the session. A failed call raises grpc.RpcError and ends the stream.

When the server drains, the call in progress raises grpc.RpcError
(UNAVAILABLE) and ``drained_state`` holds the state the server sent: open a
session elsewhere with it as ``conv_state`` to continue; the call that
raised did not happen there.

Not thread-safe: one thread at a time per session.
"""

import queue

from conv1d_client._stubs import pb
from conv1d_client.tensors import from_tensor, to_tensor

_END = object()


class DecodeSession:
    def __init__(self, stub, open_request, timeout_s=None):
        self._requests = queue.Queue()
        self._responses = stub.Decode(iter(self._requests.get, _END), timeout=timeout_s)
        self._dtype = {pb.FP32: "fp32", pb.FP16: "fp16", pb.BF16: "bf16"}.get(
            open_request.dtype)
        self.drained_state = None
        self._closed = False
        r = self._call(pb.DecodeRequest(open=open_request)).open
        self.session_id = r.session_id
        self.state_len = r.state_len
        self.prefill_y = from_tensor(r.y)

    def _call(self, request):
        if self._closed:
            raise ValueError("the session's stream has ended")
        self._requests.put(request)
        try:
            r = next(self._responses)
            if r.draining:
                self.drained_state = from_tensor(r.export_state.conv_state)
                next(self._responses)  # raises the stream's UNAVAILABLE
            return r
        except Exception:
            self._closed = True
            self._requests.put(_END)
            raise

    def step(self, x):
        """x [B, D, S] -> y of the same shape."""
        r = self._call(pb.DecodeRequest(step=pb.DecodeStep(x=to_tensor(x, self._dtype))))
        return from_tensor(r.step.y)

    def commit(self, accepted):
        self._call(pb.DecodeRequest(commit=pb.CommitSessionRequest(accepted=accepted)))

    def fork(self):
        return self._call(pb.DecodeRequest(fork=pb.ForkSessionRequest())).fork.session_id

    def export(self):
        r = self._call(pb.DecodeRequest(export_state=pb.ExportSessionRequest()))
        return from_tensor(r.export_state.conv_state)

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._requests.put(_END)
        for _ in self._responses:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
