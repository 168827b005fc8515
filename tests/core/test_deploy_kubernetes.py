"""deploy/kubernetes/fleetwatch.yaml and deploy/Containerfile, checked offline: every object
against Kubernetes's own schemas (strict: a misspelt field is an error), every container's
command line and environment against fleetwatch's CLI and configuration, and every path the
configuration reads or writes against the container's mounts. (No cluster and no container
engine here: applying them is not tested.)"""

from __future__ import annotations

import posixpath
from pathlib import Path, PurePosixPath

import kubernetes_validate
import pytest
import yaml

from fleetwatch.cli_args import parser
from fleetwatch.config import Config, load, tomllib

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "kubernetes" / "fleetwatch.yaml"
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
DOCS = list(yaml.safe_load_all(MANIFEST.read_text("utf-8")))
# The oldest Kubernetes still widely run, and the newest the schemas know.
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())


def objects(kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in DOCS if d["kind"] == kind}


def pod_spec(name: str) -> dict:
    for kind in ("DaemonSet", "Deployment"):
        if name in objects(kind):
            return objects(kind)[name]["spec"]["template"]["spec"]
    return objects("CronJob")[name]["spec"]["jobTemplate"]["spec"]["template"]["spec"]


WORKLOADS = ["fleetwatch-agent", "fleetwatch-processor", "fleetwatch-dashboard",
             "fleetwatch-train", "fleetwatch-report"]


def config_of(container: dict, tmp_path: Path) -> Config:
    """The configuration the container's fleetwatch reads: the ConfigMap's file where
    FLEETWATCH_CONFIG points, and its environment (a field reference: a node's name)."""
    env = {}
    for e in container.get("env", []):
        env[e["name"]] = e.get("value", "gpu-node-17")
    mounted = env.pop("FLEETWATCH_CONFIG")
    assert mounted == "/etc/fleetwatch/fleetwatch.toml"
    path = tmp_path / "fleetwatch.toml"
    # With its cluster set, as the manifest's header asks (load refuses the CHANGE-ME).
    path.write_text(objects("ConfigMap")["fleetwatch"]["data"]["fleetwatch.toml"]
                    .replace("CHANGE-ME", "dc1"), "utf-8")
    return load(path, env={k: v for k, v in env.items() if k.startswith("FLEETWATCH_")})


def mount_of(container: dict, path: str) -> dict | None:
    """The mount that holds ``path`` in the container (the deepest one)."""
    best = None
    for m in container.get("volumeMounts", []):
        if PurePosixPath(path).is_relative_to(m["mountPath"]) and (
                best is None or len(m["mountPath"]) > len(best["mountPath"])):
            best = m
    return best


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_is_valid_kubernetes(version: str) -> None:
    assert [d["kind"] for d in DOCS] == ["Namespace", "ConfigMap", "ServiceAccount",
                                         "ClusterRole", "ClusterRoleBinding", "DaemonSet",
                                         "PersistentVolumeClaim", "Deployment", "Deployment",
                                         "CronJob", "CronJob"]
    for d in DOCS:
        kubernetes_validate.validate(d, version, strict=True)


def test_the_check_above_would_see_a_misspelt_field() -> None:
    agent = yaml.safe_load_all(MANIFEST.read_text("utf-8").replace("hostNetwork:", "hostNetwrk:"))
    daemonset = next(d for d in agent if d["kind"] == "DaemonSet")
    with pytest.raises(kubernetes_validate.ValidationError, match="hostNetwrk"):
        kubernetes_validate.validate(daemonset, VERSIONS[0], strict=True)


def test_every_container_runs_a_fleetwatch_command_with_a_config_it_accepts(
        tmp_path: Path) -> None:
    for name in WORKLOADS:
        (container,) = pod_spec(name)["containers"]
        assert container["image"] == "fleetwatch:latest", name
        args = parser().parse_args(container["args"])
        assert args.command == name.removeprefix("fleetwatch-").replace("processor", "process")
        config = config_of(container, tmp_path)
        assert config.bus.kind == "kafka" and config.store.kind == "victoriametrics", name
    agent = config_of(pod_spec("fleetwatch-agent")["containers"][0], tmp_path)
    assert agent.node.node == "gpu-node-17"  # the pod's spec.nodeName, not the pod's name
    env = pod_spec("fleetwatch-agent")["containers"][0]["env"]
    assert {"name": "FLEETWATCH_NODE_NODE",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in env


def test_the_agent_may_read_its_nodes_rack_label_and_nothing_more(tmp_path: Path) -> None:
    spec = pod_spec("fleetwatch-agent")
    account = spec["serviceAccountName"]
    (sa,) = [d for d in DOCS if d["kind"] == "ServiceAccount"]
    assert sa["metadata"] == {"name": account, "namespace": "fleetwatch"}
    (binding,) = [d for d in DOCS if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account,
                                    "namespace": "fleetwatch"}]
    (role,) = [d for d in DOCS if d["kind"] == "ClusterRole"
               and d["metadata"]["name"] == binding["roleRef"]["name"]]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    assert spec.get("automountServiceAccountToken", True)  # the token it reads them with
    config = config_of(spec["containers"][0], tmp_path)
    assert config.node.rack_label == "fleetwatch.io/rack"


def test_the_agent_sees_the_host_and_keeps_its_spool(tmp_path: Path) -> None:
    spec = pod_spec("fleetwatch-agent")
    (c,) = spec["containers"]
    config = config_of(c, tmp_path)
    volumes = {v["name"]: v for v in spec["volumes"]}

    def host_path(path: str) -> str:
        m = mount_of(c, path)
        assert m is not None, f"{path} is not mounted in the agent's container"
        base = volumes[m["name"]]["hostPath"]["path"]
        return posixpath.normpath(posixpath.join(base, posixpath.relpath(path, m["mountPath"])))

    # Host-wide readings come from the host's own /proc and /sys; XIDs from its kernel log;
    # pod labels from the kubelet's socket; NICs and InfiniBand from its network.
    assert host_path(config.agent.proc_root) == "/proc"
    assert host_path(config.agent.sys_root) == "/sys"
    assert host_path(config.agent.kernel_log) == "/dev/kmsg"
    assert host_path(config.agent.pod_resources_socket) == config.agent.pod_resources_socket
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    # The spool is on the host, writable, so frames spooled outlive the pod.
    spool = mount_of(c, config.agent.spool_dir)
    assert "hostPath" in volumes[spool["name"]] and not spool.get("readOnly")
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"SYS_ADMIN", "SYSLOG"} <= set(c["securityContext"]["capabilities"]["add"])
    # Prometheus finds /metrics where the agent serves it.
    annotations = objects("DaemonSet")["fleetwatch-agent"]["spec"]["template"]["metadata"][
        "annotations"]
    assert int(annotations["prometheus.io/port"]) == config.agent.metrics_port
    assert c["ports"][0]["containerPort"] == config.agent.metrics_port
    assert c["livenessProbe"]["httpGet"]["port"] == config.agent.metrics_port
    assert config.agent.metrics_host == "0.0.0.0"


def test_models_and_reports_live_on_the_shared_volume(tmp_path: Path) -> None:
    def shared(name: str, path: str) -> dict:
        (c,) = pod_spec(name)["containers"]
        m = mount_of(c, path)
        assert m is not None, f"{name}: {path} is on the container's own (read-only) disk"
        volume = {v["name"]: v for v in pod_spec(name)["volumes"]}[m["name"]]
        assert volume["persistentVolumeClaim"]["claimName"] == "fleetwatch-shared", name
        return m

    models = config_of(pod_spec("fleetwatch-train")["containers"][0], tmp_path).models.dir
    assert not shared("fleetwatch-train", models).get("readOnly")  # training writes them
    assert shared("fleetwatch-processor", models).get("readOnly")  # processors read them
    report_args = pod_spec("fleetwatch-report")["containers"][0]["args"]
    out = report_args[report_args.index("--out") + 1]
    assert not shared("fleetwatch-report", out).get("readOnly")
    assert report_args[report_args.index("--month") + 1] == "previous"
    claim = objects("PersistentVolumeClaim")["fleetwatch-shared"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


def test_only_the_agent_runs_as_root_and_the_dashboard_stays_on_loopback(
        tmp_path: Path) -> None:
    for name in WORKLOADS:
        spec = pod_spec(name)
        (c,) = spec["containers"]
        assert c["securityContext"]["readOnlyRootFilesystem"] is True, name
        assert mount_of(c, "/tmp") is not None, name  # somewhere to write a temporary file
        if name == "fleetwatch-agent":
            continue
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], name
        assert c["securityContext"]["allowPrivilegeEscalation"] is False, name
    dashboard = pod_spec("fleetwatch-dashboard")["containers"][0]
    assert config_of(dashboard, tmp_path).dashboard.host == "127.0.0.1"
    assert "ports" not in dashboard and "--host" not in dashboard["args"]


def test_the_image_installs_the_kubernetes_extra_and_runs_fleetwatch() -> None:
    lines = [line for line in CONTAINERFILE.read_text("utf-8").splitlines()
             if line and not line.startswith("#")]
    assert lines[0].startswith("FROM python:3.1")
    assert 'pip install --no-cache-dir "/src[kubernetes]"' in "\n".join(lines)
    assert lines[-2:] == ['ENTRYPOINT ["fleetwatch"]', 'CMD ["--help"]']
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"][
        "optional-dependencies"]
    assert any(req.startswith("grpcio") for req in extras["kubernetes"])
    # What the build copies leaves out the checkout's virtualenv and tests.
    ignored = (ROOT / ".dockerignore").read_text("utf-8").split()
    assert {".venv", ".git", "tests"} <= set(ignored)


def test_no_pod_gets_the_namespaces_service_links() -> None:
    """Deploy finding 3 (r22): kubelet's FLEETWATCH_* variables for a Service named
    fleetwatch-processor stopped every pod at its next start."""
    for name in WORKLOADS:
        assert pod_spec(name).get("enableServiceLinks") is False, name


def test_the_probes_ask_the_health_endpoints_fleetwatch_serves(tmp_path: Path) -> None:
    """Deploy finding 4 (r22): no readiness probe, and the processor's port answered 200 on
    every path. The probes' paths and ports are the ones the configuration serves."""
    (processor,) = pod_spec("fleetwatch-processor")["containers"]
    port = config_of(processor, tmp_path).processor.metrics_port
    assert processor["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert processor["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
    (dashboard,) = pod_spec("fleetwatch-dashboard")["containers"]
    config = config_of(dashboard, tmp_path).dashboard
    command = dashboard["livenessProbe"]["exec"]["command"]
    assert command[:2] == ["python", "-c"]
    assert f"'http://127.0.0.1:{config.port}/healthz'" in command[2]
    assert config.host in ("127.0.0.1", "localhost")


# Pod Security Standards (Kubernetes' documentation, "Pod Security Standards"): what
# "baseline" forbids, checked on each pod spec.
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                 "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}


def baseline_breaches(spec: dict) -> list[str]:
    said = [f"host namespace {k}" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    said += [f"hostPath volume {v['name']}" for v in spec.get("volumes", []) if "hostPath" in v]
    for c in spec.get("initContainers", []) + spec["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            said.append(f"{c['name']} privileged")
        added = set(sc.get("capabilities", {}).get("add", [])) - BASELINE_CAPS
        if added:
            said.append(f"{c['name']} adds {sorted(added)}")
    return said


def restricted_breaches(spec: dict) -> list[str]:
    said = baseline_breaches(spec)
    pod = spec.get("securityContext", {})
    for c in spec.get("initContainers", []) + spec["containers"]:
        sc = {**pod, **c.get("securityContext", {})}
        if not sc.get("runAsNonRoot") or sc.get("runAsUser") == 0:
            said.append(f"{c['name']} may run as root")
        if sc.get("allowPrivilegeEscalation") is not False:
            said.append(f"{c['name']} allows privilege escalation")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            said.append(f"{c['name']} keeps capabilities")
        if sc.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            said.append(f"{c['name']} has no seccomp profile")
    return said


def test_the_namespace_lets_the_agent_run_and_says_what_the_others_meet() -> None:
    """Deploy finding 7 (r22): no Pod Security labels, so a cluster defaulting to baseline
    would create no agent pod. The agent needs privileged; the others meet baseline, the
    processors and the dashboard restricted, as the namespace's comment says."""
    labels = objects("Namespace")["fleetwatch"]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/audit"] == "baseline"
    assert baseline_breaches(pod_spec("fleetwatch-agent"))  # why it needs privileged
    for name in ("fleetwatch-train", "fleetwatch-report"):
        assert baseline_breaches(pod_spec(name)) == [], name
    for name in ("fleetwatch-processor", "fleetwatch-dashboard"):
        assert restricted_breaches(pod_spec(name)) == [], name
