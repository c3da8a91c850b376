#!/usr/bin/env python3
"""Structural checks of the deployment files (ctest label `lint`).

  check_deploy.py dockerfiles [--context DIR] FILE...
                                              images: pinned bases, non-root, health;
                                              with DIR, DIR/.dockerignore (the legacy
                                              builder's) equals each FILE.dockerignore
  check_deploy.py k8s KUBECTL K8S_DIR [PROMTOOL]  rendered overlays: GPU, probes, drain
  check_deploy.py compose COMPOSE_FILE ROCM_OVERRIDE CUDA_OVERRIDE
                                              stack: services, devices, mounted paths

Each prints what it checked and exits 1 with every problem it found.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

PORT_GRPC = 50051
PORT_METRICS = 8002
errors = []


def fail(where, msg):
    errors.append(f"{where}: {msg}")


# ----------------------------------------------------------------- Dockerfiles
def dockerfile_instructions(path):
    """(INSTRUCTION, argument) pairs with continuations joined, comments dropped."""
    out, cur = [], ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not cur and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if cur and line.lstrip().startswith("#"):
                continue
            if line.endswith("\\"):
                cur += line[:-1] + " "
                continue
            cur += line
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def check_dockerfile(path):
    instr = dockerfile_instructions(path)
    args = {}
    stages = []  # list of (image, [instructions of the stage])
    for word, rest in instr:
        if word == "ARG":
            name, _, default = rest.partition("=")
            if default and not stages:
                args[name] = default.strip('"')
        elif word == "FROM":
            stages.append((rest.split()[0], []))
        elif stages:
            stages[-1][1].append((word, rest))
    if len(stages) < 2:
        fail(path, "expected a multi-stage build (build stage + runtime stage)")
    stage_names = {m.group(1) for _, r in instr if (m := re.search(r"\bAS\s+(\S+)", r, re.I))}
    for image, _ in stages:
        resolved = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), "<unset>"), image)
        if resolved in stage_names:
            continue
        if "<unset>" in resolved:
            fail(path, f"FROM {image}: a build arg in the tag has no default")
        elif "@sha256:" not in resolved and (":" not in resolved or resolved.endswith(":latest")):
            fail(path, f"FROM {resolved}: base image tag is not pinned")
    if not stages:
        return
    final = stages[-1][1]
    users = [r for w, r in final if w == "USER"]
    if not users:
        fail(path, "runtime stage has no USER (runs as root)")
    elif users[-1].split(":")[0] in ("root", "0"):
        fail(path, f"runtime stage runs as {users[-1]}")
    exposed = {int(p.split("/")[0]) for w, r in final if w == "EXPOSE" for p in r.split()}
    for port in (PORT_GRPC, PORT_METRICS):
        if port not in exposed:
            fail(path, f"runtime stage does not EXPOSE {port}")
    health = [r for w, r in final if w == "HEALTHCHECK"]
    if not health or "conv1d_client" not in health[-1] or "health" not in health[-1]:
        fail(path, "runtime stage has no HEALTHCHECK running `conv1d_client health`")
    elif "--listen_of_pid=1" not in health[-1]:
        fail(path, "HEALTHCHECK does not follow the server's --listen (--listen_of_pid=1)")
    if ("STOPSIGNAL", "SIGTERM") not in final:
        fail(path, "runtime stage has no STOPSIGNAL SIGTERM")
    if not any(w == "ENTRYPOINT" and "conv1d_server" in r for w, r in final):
        fail(path, "ENTRYPOINT does not start conv1d_server")
    text = open(path).read()
    if "rocm" in text.lower() and "FROM rocm/" in text:
        for needle in ("-DCONV1D_GPU=HIP", "CMAKE_HIP_ARCHITECTURES", "hip-runtime-amd",
                       "GPU_ARCH=gfx942"):
            if needle not in text:
                fail(path, f"ROCm image lacks {needle}")
    if "FROM nvidia/cuda" in text:
        for needle in ("-DCONV1D_GPU=CUDA", "CMAKE_CUDA_ARCHITECTURES", "-runtime-"):
            if needle not in text:
                fail(path, f"CUDA image lacks {needle}")
    print(f"checked {path}: {len(stages)} stages, final FROM {stages[-1][0]}")


def ignore_patterns(path):
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]


def check_dockerignore(context, dockerfile):
    """BuildKit filters the context with <Dockerfile>.dockerignore, the legacy
    builder only with <context>/.dockerignore: both must say the same."""
    own, root = f"{dockerfile}.dockerignore", os.path.join(context, ".dockerignore")
    for p in (own, root):
        if not os.path.isfile(p):
            fail(dockerfile, f"no {p}")
            return
    if ignore_patterns(own) != ignore_patterns(root):
        fail(dockerfile, f"{own} and {root} filter the build context differently")


# ----------------------------------------------------------------- Kubernetes
def load_yaml_docs(text):
    import yaml
    return [d for d in yaml.safe_load_all(text) if d]


def flag_value(args, name):
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def check_rendered(where, docs, gpu_key, promtool):
    import yaml
    n_before = len(errors)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    for kind in ("Deployment", "Service", "ServiceMonitor", "PodDisruptionBudget",
                 "HorizontalPodAutoscaler", "ConfigMap"):
        if kind not in by_kind:
            fail(where, f"no {kind} rendered")
    if len(errors) > n_before:
        return
    dep = by_kind["Deployment"][0]
    pod = dep["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    spec = pod["spec"]
    c = spec["containers"][0]
    args = c.get("args", [])
    res = c.get("resources", {})
    for part in ("requests", "limits"):
        for key in ("cpu", "memory"):
            if key not in res.get(part, {}):
                fail(where, f"container has no {part}.{key}")
        if gpu_key and str(res.get(part, {}).get(gpu_key)) != "1":
            fail(where, f"container {part} lacks {gpu_key}: 1")
    for other in ("amd.com/gpu", "nvidia.com/gpu"):
        if other != gpu_key and (other in res.get("requests", {}) or other in res.get("limits", {})):
            fail(where, f"container requests {other} too")
    for probe in ("readinessProbe", "livenessProbe"):
        port = c.get(probe, {}).get("grpc", {}).get("port")
        if port != PORT_GRPC:
            fail(where, f"{probe} is not a native gRPC probe on {PORT_GRPC}")
    pre = c.get("lifecycle", {}).get("preStop", {})
    cmd = pre.get("exec", {}).get("command", [])
    pre_s = int(cmd[1]) if len(cmd) == 2 and cmd[0] == "sleep" else pre.get("sleep", {}).get("seconds")
    if pre_s is None:
        fail(where, "no preStop delay")
        pre_s = 0
    drain = flag_value(args, "drain_timeout_s")
    if drain is None:
        fail(where, "server args lack --drain_timeout_s")
        drain = 0
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace < pre_s + float(drain) + 5:
        fail(where, f"terminationGracePeriodSeconds {grace} < preStop {pre_s} s + drain "
                    f"{drain} s + 5 s margin")
    if flag_value(args, "max_connection_age_s") is None:
        fail(where, "server args lack --max_connection_age_s")
    if flag_value(args, "listen") != f"0.0.0.0:{PORT_GRPC}":
        fail(where, f"server does not listen on 0.0.0.0:{PORT_GRPC}")
    psc, csc = spec.get("securityContext", {}), c.get("securityContext", {})
    if not psc.get("runAsNonRoot") or psc.get("runAsUser", 0) == 0:
        fail(where, "pod securityContext is not runAsNonRoot with a non-zero runAsUser")
    if csc.get("allowPrivilegeEscalation", True):
        fail(where, "container allows privilege escalation")

    def selects(selector):
        return selector and all(pod_labels.get(k) == v for k, v in selector.items())

    if not selects(dep["spec"]["selector"]["matchLabels"]):
        fail(where, "Deployment selector does not match its pod labels")
    headless = [s for s in by_kind["Service"] if s["spec"].get("clusterIP") == "None"]
    if not headless or not any(p["port"] == PORT_GRPC for p in headless[0]["spec"]["ports"]):
        fail(where, f"no headless Service on {PORT_GRPC} for client-side balancing")
    elif not selects(headless[0]["spec"]["selector"]):
        fail(where, "headless Service does not select the pods")
    metrics_svcs = [s for s in by_kind["Service"]
                    if any(p["port"] == PORT_METRICS for p in s["spec"]["ports"])]
    if not metrics_svcs:
        fail(where, f"no Service exposes metrics port {PORT_METRICS}")
    else:
        msvc = metrics_svcs[0]
        sm = by_kind["ServiceMonitor"][0]["spec"]
        sm_sel = sm["selector"]["matchLabels"]
        if not all(msvc["metadata"].get("labels", {}).get(k) == v for k, v in sm_sel.items()):
            fail(where, "ServiceMonitor does not select the metrics Service")
        if any(s is not msvc and all(s["metadata"].get("labels", {}).get(k) == v
                                     for k, v in sm_sel.items()) for s in by_kind["Service"]):
            fail(where, "ServiceMonitor selects more than the metrics Service")
        port_names = {p.get("name") for p in msvc["spec"]["ports"]}
        if not all(e.get("port") in port_names for e in sm["endpoints"]):
            fail(where, "ServiceMonitor endpoint port is not a named port of the metrics Service")
    if not selects(by_kind["PodDisruptionBudget"][0]["spec"]["selector"]["matchLabels"]):
        fail(where, "PodDisruptionBudget does not select the pods")
    hpa = by_kind["HorizontalPodAutoscaler"][0]["spec"]
    if hpa["scaleTargetRef"]["name"] != dep["metadata"]["name"]:
        fail(where, "HPA does not target the Deployment")
    hpa_metrics = {m["pods"]["metric"]["name"] for m in hpa["metrics"] if m["type"] == "Pods"}
    rules = []
    for cm in by_kind["ConfigMap"]:
        for value in cm.get("data", {}).values():
            cfg = yaml.safe_load(value)
            if isinstance(cfg, dict):
                rules += cfg.get("rules", [])
    served = {r.get("name", {}).get("as") for r in rules}
    if not hpa_metrics or not hpa_metrics <= served:
        fail(where, f"HPA metrics {sorted(hpa_metrics)} are not served by an adapter rule "
                    f"(rules serve {sorted(x for x in served if x)})")
    if promtool:
        check_adapter_queries(where, rules, promtool)
    print(f"checked {where}: {sum(len(v) for v in by_kind.values())} objects, "
          f"gpu={gpu_key or 'none'}, grace={grace}s, preStop={pre_s}s, drain={drain}s")


def check_adapter_queries(where, rules, promtool):
    """promtool parses each adapter query once its template fields are filled in."""
    recs = []
    for i, r in enumerate(rules):
        q = r["metricsQuery"].replace("<<.LabelMatchers>>", 'namespace="ns",pod="p"')
        q = q.replace("<<.GroupBy>>", "pod").replace("<<.Series>>", "up")
        recs.append({"record": f"adapter:rule{i}", "expr": q})
        m = re.match(r"\s*(\w+)\{", r["seriesQuery"])
        if not m or not m.group(1).startswith("conv1d_"):
            fail(where, f"adapter rule {i} does not select a conv1d_ series")
    import yaml
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        yaml.safe_dump({"groups": [{"name": "adapter", "rules": recs}]}, f)
    try:
        p = subprocess.run([promtool, "check", "rules", f.name], capture_output=True, text=True)
        if p.returncode != 0:
            fail(where, f"adapter queries do not parse: {p.stdout}{p.stderr}")
    finally:
        os.unlink(f.name)


def check_k8s(kubectl, k8s_dir, promtool):
    for overlay, gpu_key in (("base", None), ("overlays/rocm", "amd.com/gpu"),
                             ("overlays/cuda", "nvidia.com/gpu")):
        path = os.path.join(k8s_dir, overlay)
        p = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True)
        if p.returncode != 0:
            fail(path, f"kubectl kustomize failed:\n{p.stderr}")
            continue
        check_rendered(path, load_yaml_docs(p.stdout), gpu_key, promtool)


# ----------------------------------------------------------------- compose
def check_compose(path, rocm_path, cuda_path):
    import yaml
    base = os.path.dirname(os.path.abspath(path))
    doc = yaml.safe_load(open(path))
    svcs = doc.get("services", {})
    missing = [n for n in ("conv1d", "prometheus", "grafana", "device-metrics-exporter")
               if n not in svcs]
    for name in missing:
        fail(path, f"no service {name}")
    if missing:
        return
    if svcs["device-metrics-exporter"].get("profiles") != ["amd"]:
        fail(path, "device-metrics-exporter is not in profile `amd`")
    for name, s in svcs.items():
        if name in ("conv1d", "prometheus", "grafana") and s.get("profiles"):
            fail(path, f"core service {name} is behind a profile")
        image = s.get("image", "")
        if name != "conv1d" and (":" not in image or image.endswith(":latest")):
            fail(path, f"service {name} image {image!r} is not pinned")
        for v in s.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                if not os.path.exists(os.path.join(base, src)):
                    fail(path, f"service {name} mounts {src}, which does not exist")
    srv = svcs["conv1d"]
    build = srv.get("build", {})
    context = os.path.join(base, build.get("context", "."))
    dockerfile = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", build.get("dockerfile", "Dockerfile"))
    if not os.path.isfile(os.path.join(context, dockerfile)):
        fail(path, f"conv1d builds from {dockerfile}, which does not exist in {context}")
    # The base runs anywhere (CPU image, no devices); the overrides add the GPU.
    if srv.get("devices") or srv.get("deploy"):
        fail(path, "the base conv1d service maps devices: it would not start without a GPU")
    rocm = yaml.safe_load(open(rocm_path))["services"]["conv1d"]
    if not {"/dev/kfd", "/dev/dri"} <= set(rocm.get("devices", [])):
        fail(rocm_path, "conv1d does not map /dev/kfd and /dev/dri")
    if "video" not in rocm.get("group_add", []):
        fail(rocm_path, "conv1d is not in group video")
    cuda = yaml.safe_load(open(cuda_path))["services"]["conv1d"]
    reservations = cuda.get("deploy", {}).get("resources", {}).get("reservations", {})
    if not any(d.get("driver") == "nvidia" for d in reservations.get("devices", [])):
        fail(cuda_path, "conv1d reserves no nvidia device")
    for override in (rocm, cuda):
        dockerfile = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", override["build"]["dockerfile"])
        if not os.path.isfile(os.path.join(context, dockerfile)):
            fail(path, f"an override builds from {dockerfile}, which does not exist")
    ports = " ".join(srv.get("ports", []))
    for port in (PORT_GRPC, PORT_METRICS):
        if f":{port}" not in ports:
            fail(path, f"conv1d does not publish {port}")
    if "stop_grace_period" not in srv:
        fail(path, "conv1d has no stop_grace_period for the drain")
    # Every scrape target of the mounted Prometheus config is a service here.
    prom_dir = next((v.split(":")[0] for v in svcs["prometheus"].get("volumes", [])
                     if v.split(":")[1].startswith("/etc/prometheus")), None)
    if prom_dir is None:
        fail(path, "prometheus mounts no /etc/prometheus config")
        return
    cfg = yaml.safe_load(open(os.path.join(base, prom_dir, "prometheus.yml")))
    targets = [t for job in cfg.get("scrape_configs", [])
               for sc in job.get("static_configs", []) for t in sc.get("targets", [])]
    for t in targets:
        host, _, port = t.rpartition(":")
        if host != "localhost" and host not in svcs:
            fail(path, f"scrape target {t} is not a compose service")
    if f"conv1d:{PORT_METRICS}" not in targets:
        fail(path, f"prometheus does not scrape conv1d:{PORT_METRICS}")
    print(f"checked {path}: {len(svcs)} services, {len(targets)} scrape targets")


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    mode, rest = sys.argv[1], sys.argv[2:]
    if mode == "dockerfiles":
        context = None
        if rest[:1] == ["--context"]:
            context, rest = rest[1], rest[2:]
        for p in rest:
            check_dockerfile(p)
            if context:
                check_dockerignore(context, p)
    elif mode == "k8s":
        check_k8s(rest[0], rest[1], rest[2] if len(rest) > 2 else None)
    elif mode == "compose":
        check_compose(*rest[:3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for e in errors:
        print("FAIL", e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
