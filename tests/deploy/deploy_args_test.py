#!/usr/bin/env python3
"""The server flags the deployment files pass are flags the built server takes
(ctest label `e2e`).

The structural checks (check_deploy.py) only read the files; a flag the
binary does not know would still pass them and then stop every pod at start
(exit 2). This runs the real conv1d_server with the arguments of:

  - the Kubernetes Deployment, as `kubectl kustomize` renders the base and
    each overlay (without kubectl: base/deployment.yaml as written),
  - the CMD of every Dockerfile (ENTRYPOINT conv1d_server),
  - the compose stack's `command` (${VAR:-default} taken at its default),
  - the KServe InferenceService's predictor container (deploy/kserve),

with only what cannot work on a test host changed: --listen and
--metrics_listen become 127.0.0.1:0, and --backend=auto|gpu becomes cpu (a
GPU may be absent). Each server must start, report SERVING to
`conv1d_client health`, and exit 0 on SIGTERM.

  deploy_args_test.py --server BIN --client BIN --source DIR [--kubectl BIN]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_deploy import dockerfile_instructions, load_yaml_docs  # noqa: E402

DOCKERFILES = ("Dockerfile", "deploy/docker/Dockerfile.cpu", "deploy/docker/Dockerfile.cuda")
K8S_DIRS = ("deploy/k8s/base", "deploy/k8s/overlays/rocm", "deploy/k8s/overlays/cuda")
COMPOSE = "deploy/compose.yaml"
KSERVE = "deploy/kserve/inferenceservice.yaml"
START_TIMEOUT_S = 30
PORT_RE = re.compile(r"grpc=\S+ \(port (\d+)\)")


# ----------------------------------------------------------------- sources
def k8s_args(src, kubectl):
    """{source: args} of the server container of each rendered kustomization."""
    import yaml
    out = {}
    for d in K8S_DIRS:
        path = os.path.join(src, d)
        if kubectl:
            p = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"kubectl kustomize {d} failed:\n{p.stderr}")
            docs = load_yaml_docs(p.stdout)
        elif d.endswith("/base"):
            docs = [yaml.safe_load(open(os.path.join(path, "deployment.yaml")))]
        else:
            continue  # overlays need kustomize to be merged
        for doc in docs:
            if doc.get("kind") != "Deployment":
                continue
            for c in doc["spec"]["template"]["spec"]["containers"]:
                out[f"{d} ({doc['metadata']['name']}/{c['name']})"] = list(c.get("args", []))
    if not out:
        raise RuntimeError("no Deployment container found in deploy/k8s")
    return out


def dockerfile_args(src):
    """{source: args} from the runtime stage's ENTRYPOINT + CMD of each Dockerfile."""
    out = {}
    for name in DOCKERFILES:
        instr = dockerfile_instructions(os.path.join(src, name))
        last_from = max(i for i, (w, _) in enumerate(instr) if w == "FROM")
        final = instr[last_from:]
        entry = [json.loads(r) for w, r in final if w == "ENTRYPOINT"]
        cmd = [json.loads(r) for w, r in final if w == "CMD"]
        if not entry or entry[-1][:1] != ["conv1d_server"]:
            raise RuntimeError(f"{name}: ENTRYPOINT is not [\"conv1d_server\", ...] (exec form)")
        out[f"{name} ENTRYPOINT+CMD"] = entry[-1][1:] + (cmd[-1] if cmd else [])
    return out


def compose_args(src):
    import yaml
    doc = yaml.safe_load(open(os.path.join(src, COMPOSE)))
    cmd = doc["services"]["conv1d"].get("command", [])
    if isinstance(cmd, str):
        import shlex
        cmd = shlex.split(cmd)

    def interpolate(s):
        # ${VAR:-default} / ${VAR-default} at their defaults; a bare ${VAR} is
        # left in place and fails below, as a test host cannot know its value.
        return re.sub(r"\$\{\w+:?-([^}]*)\}", r"\1", s)

    return {f"{COMPOSE} services.conv1d.command": [interpolate(a) for a in cmd]}


def kserve_args(src):
    """{source: args} of the predictor container of the KServe manifest."""
    import yaml
    doc = yaml.safe_load(open(os.path.join(src, KSERVE)))
    c = doc["spec"]["predictor"]["containers"][0]
    return {f"{KSERVE} ({c['name']})": list(c.get("args", []))}


# ----------------------------------------------------------------- running
def localize(args):
    """The same flags, made startable on a test host."""
    out = []
    for a in args:
        name, eq, value = a.partition("=")
        if name == "--listen":
            a = "--listen=127.0.0.1:0"
        elif name == "--metrics_listen" and value:
            a = "--metrics_listen=127.0.0.1:0"
        elif name == "--backend" and value in ("auto", "gpu"):
            a = "--backend=cpu"
        out.append(a)
    # The startup line, which names the bound port, is logged at info.
    return out + ["--log_level=info"]


def start_and_stop(server, client, args, workdir, label):
    """None when the server started, served and drained to exit 0; else why not."""
    if any("${" in a for a in args):
        return f"unresolved variable in {args}"
    log_path = os.path.join(workdir, re.sub(r"\W+", "_", label) + ".log")
    with open(log_path, "w+") as log:
        proc = subprocess.Popen([server, *args], stdout=log, stderr=subprocess.STDOUT)
        try:
            return drive(proc, client, log)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def drive(proc, client, log):
    def log_text():
        log.flush()
        log.seek(0)
        return log.read()

    end = time.monotonic() + START_TIMEOUT_S
    port = None
    while port is None:
        if proc.poll() is not None:
            return f"exited {proc.returncode} at start:\n{log_text()[-2000:]}"
        if time.monotonic() > end:
            return f"no startup line after {START_TIMEOUT_S} s:\n{log_text()[-2000:]}"
        m = PORT_RE.search(log_text())
        if m:
            port = int(m.group(1))
        else:
            time.sleep(0.05)
    target = f"127.0.0.1:{port}"
    while True:
        h = subprocess.run([client, "health", f"--target={target}", "--attempts=1",
                            "--timeout_s=2"], capture_output=True, text=True)
        if h.returncode == 0:
            break
        if proc.poll() is not None or time.monotonic() > end:
            return f"never SERVING on {target} ({h.stdout.strip()}):\n{log_text()[-2000:]}"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        return f"still running 60 s after SIGTERM:\n{log_text()[-2000:]}"
    if rc != 0:
        return f"exited {rc} after SIGTERM (want 0):\n{log_text()[-2000:]}"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--kubectl")
    a = ap.parse_args()

    failures = []
    sources = {}
    for collect in (lambda: k8s_args(a.source, a.kubectl), lambda: dockerfile_args(a.source),
                    lambda: compose_args(a.source), lambda: kserve_args(a.source)):
        try:
            sources.update(collect())
        except Exception as e:  # a file that cannot be read is a failure too
            failures.append(f"{type(e).__name__}: {e}")
    if not a.kubectl:
        print("kubectl not found: checking deploy/k8s/base/deployment.yaml as written")

    # Identical argument lists (the overlays do not change them) run once.
    by_args = {}
    for label, args in sources.items():
        by_args.setdefault(tuple(localize(args)), []).append((label, args))
    workdir = tempfile.mkdtemp(prefix="conv1d-deploy-args-")
    for args, users in by_args.items():
        labels = ", ".join(label for label, _ in users)
        t0 = time.monotonic()
        why = start_and_stop(a.server, a.client, list(args), workdir, users[0][0])
        took = time.monotonic() - t0
        if why:
            failures.append(f"{labels}\n  args {users[0][1]}\n  {why}")
        else:
            print(f"ok ({took:.1f} s): {labels}\n  args {users[0][1]}")

    for f in failures:
        print("FAIL:", f, file=sys.stderr)
    if not failures:
        print(f"PASS: {len(sources)} argument lists ({len(by_args)} distinct) start and drain")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
