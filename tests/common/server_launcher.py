"""A conv1d_server on free loopback ports for the Python end-to-end suites
(tests/client, tests/oip, tests/deploy): started with the suite's flags,
ready on entry, stopped with SIGTERM on exit. The suites find this module
through PYTHONPATH (set by ctest). One Server per test at a time; not
thread-safe."""
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request


_handed_out = set()


def free_port():
    """A loopback TCP port that was free a moment ago, and that this process
    has not handed out before (the kernel may offer a port again once its
    probe socket is closed: a server's gRPC and metrics ports, or two
    servers' ports, must not be the same one)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            break
    _handed_out.add(port)
    return port


def sum_metric(body, name, label_filter=""):
    """The sum of the samples of metric `name` in the Prometheus text `body`
    whose labels contain `label_filter`."""
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


class Server:
    """conv1d_server `binary` on a free loopback port (`port`, `target`) and,
    with `metrics`, its /metrics on another (`metrics_port`, `metrics_url`),
    at --log_level=warn; `args` come last, so they override all of these.

    Ready on entry: health SERVING through the CLI `client_binary` (with
    `client_args`, e.g. TLS files or a token) or, when `ready` is given, once
    ready(target) is true; a server that exits or is not ready within
    `start_timeout_s` raises RuntimeError. Its stderr goes to `output` (an
    open file) or, by default, to a temporary file (not a pipe, which a
    server that logs much while nobody reads would fill and block on), whose
    tail that error quotes.

    A free port can be taken by another process (suites run side by side)
    before the server binds it: a server that exits 2 saying that one of the
    ports picked for it is in use is started again on new ones (with its own
    log only, which can be read here)."""

    _PORT_ATTEMPTS = 5

    def __init__(self, binary, client_binary, *args, client_args=(), ready=None,
                 metrics=True, output=None, start_timeout_s=20):
        self._own_log = output is None
        self._client = (client_binary, tuple(client_args))
        self._not_ready = ""
        ready = ready or self._serving
        attempts = 1
        self._start(binary, args, metrics, output)
        deadline = time.time() + start_timeout_s
        while True:
            if self.proc.poll() is not None:
                if self._lost_a_port_race() and attempts < self._PORT_ATTEMPTS:
                    print(f"server_launcher: port {self.port} or {self.metrics_port} was "
                          "taken before the server bound it; again on other ports", flush=True)
                    self._log.close()
                    attempts += 1
                    self._start(binary, args, metrics, output)
                    deadline = time.time() + start_timeout_s
                    continue
                why = self.log_tail() if self._own_log else "see its log"
                raise RuntimeError(f"server exited with {self.proc.returncode}: {why}")
            if ready(self.target):
                return
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"server {self.target} not ready after {start_timeout_s} s"
                                   f"{': ' if self._not_ready else ''}{self._not_ready}")
            time.sleep(0.1)

    def _start(self, binary, args, metrics, output):
        """Starts the server on newly picked free ports."""
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.metrics_port = free_port() if metrics else None
        self.metrics_url = (f"http://127.0.0.1:{self.metrics_port}/metrics" if metrics
                            else None)
        metrics_flag = f"127.0.0.1:{self.metrics_port}" if metrics else ""
        cmd = [binary, f"--listen={self.target}", f"--metrics_listen={metrics_flag}",
               "--log_level=warn", *args]
        self._log = output if output is not None else tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            cmd, stdout=output if output is not None else subprocess.DEVNULL,
            stderr=self._log, text=True)

    def _lost_a_port_race(self):
        """Whether the server, now exited, stopped with status 2 (usage)
        because a port picked for it was in use ("--listen: cannot serve gRPC
        on 127.0.0.1:P: Address already in use", "--metrics_listen: cannot
        listen on '127.0.0.1:P' (address in use ...)")."""
        if not self._own_log or self.proc.returncode != 2:
            return False
        tail = self.log_tail()
        ports = [p for p in (self.port, self.metrics_port) if p is not None]
        return "in use" in tail.lower() and any(f"127.0.0.1:{p}" in tail for p in ports)

    def log_tail(self, chars=4000):
        """The last `chars` characters the server wrote to stderr (its own
        temporary file only; "" when the suite passed `output`)."""
        if not self._own_log:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read()[-chars:]

    def _serving(self, target):
        """Whether the CLI's health command finds `target` SERVING."""
        client_binary, client_args = self._client
        r = subprocess.run([client_binary, f"--target={target}", "--timeout_s=1",
                            *client_args, "health"], capture_output=True, text=True)
        self._not_ready = r.stderr.strip()
        return r.returncode == 0

    def metric(self, name, label_filter=""):
        """The sum of metric `name` over the samples whose labels contain
        `label_filter`, read from /metrics now."""
        body = urllib.request.urlopen(self.metrics_url, timeout=5).read().decode()
        return sum_metric(body, name, label_filter)

    def stop(self, timeout_s=15):
        """SIGTERM, then SIGKILL after `timeout_s`; the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._own_log and not self._log.closed:
            self._log.close()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
