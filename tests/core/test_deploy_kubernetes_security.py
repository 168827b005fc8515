"""deploy/kubernetes/fleetwatch.yaml and deploy/Containerfile against the security review
(defect 10 and its Kubernetes gaps): the shared models volume keeps model files as the
processors' trust check wants them, the agent has only the capabilities it reads with, every
pod runs under the runtime's seccomp profile, and the image runs as a non-root user."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from fleetwatch.models.artifact import ModelFileError, check_trusted
from tests.core.test_deploy_kubernetes import (
    CONTAINERFILE,
    DOCS,
    WORKLOADS,
    config_of,
    mount_of,
    pod_spec,
)

SHARED = "/var/lib/fleetwatch/shared"


def mounts_the_shared_volume(name: str) -> bool:
    return any(v.get("persistentVolumeClaim", {}).get("claimName") == "fleetwatch-shared"
               for v in pod_spec(name)["volumes"])


def test_no_pod_on_the_models_volume_sets_an_fs_group() -> None:
    # Kubernetes applies fsGroup by making the volume's files group-writable (rw-rw----) and
    # its directories setgid rwxrwx---: the processors' trust check then refuses every model.
    on_it = [n for n in WORKLOADS if mounts_the_shared_volume(n)]
    assert on_it == ["fleetwatch-processor", "fleetwatch-train", "fleetwatch-report"]
    for name in on_it:
        context = pod_spec(name)["securityContext"]
        assert "fsGroup" not in context, name
        assert context["runAsNonRoot"] is True, name
        assert (context["runAsUser"], context["runAsGroup"]) == (65532, 65532), name


def shared_dirs(name: str) -> dict:
    (init,) = pod_spec(name)["initContainers"]
    assert init["name"] == "shared-dirs"
    return init


@pytest.mark.parametrize("name", ["fleetwatch-train", "fleetwatch-report"])
def test_the_writers_make_their_folders_their_users_before_they_start(name: str) -> None:
    # Without fsGroup the volume's root is whatever the provisioner made it (root's 0755,
    # or 0777): a root init container gives the folders to the pod's user, 0755.
    init = shared_dirs(name)
    spec = pod_spec(name)
    assert init["image"] == spec["containers"][0]["image"]
    context = init["securityContext"]
    assert context["runAsUser"] == 0 and context["runAsNonRoot"] is False
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "DAC_OVERRIDE",
                                                                 "FOWNER"]}
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert mount_of(init, SHARED + "/models")["name"] == "shared"
    assert not mount_of(init, SHARED + "/models").get("readOnly")


def run_shared_dirs(root: Path) -> None:
    """The init container's command, on ``root`` in place of the volume and with this
    process's user in place of 65532 (no root needed to run it here)."""
    (command,) = {tuple(shared_dirs(n)["command"]) for n in ("fleetwatch-train",
                                                             "fleetwatch-report")}
    assert command[:2] == ("sh", "-c")
    script = (command[2].replace(SHARED, str(root))
              .replace("65532:65532", f"{os.getuid()}:{os.getgid()}")
              .replace("65532", str(os.getuid())))
    subprocess.run(["sh", "-c", script], check=True, timeout=60)


def fs_grouped_model(root: Path) -> Path:
    """A models folder as an fsGroup mount left it: setgid, group-writable, files 0664."""
    models = root / "models"
    models.mkdir()
    models.chmod(0o2775)
    model = models / "fleetwatch-model-20261126T000000.fwm"
    model.write_bytes(b"{}\n")
    model.chmod(0o664)
    return model


def test_the_trust_check_refuses_what_fs_group_made_and_says_so(tmp_path: Path) -> None:
    model = fs_grouped_model(tmp_path)
    with pytest.raises(ModelFileError) as caught:
        check_trusted(model)
    assert str(caught.value) == (
        f"{model}: the model file {model} is writable by group or others (mode 664); a "
        "model file is a pickle and loading it runs its code, so it is refused: make it "
        f"writable only by its owner (chmod go-w {model}). Its directory is setgid and "
        "group-writable, as a Kubernetes fsGroup leaves a volume: remove fsGroup from the "
        "pods that mount models.dir (deploy/kubernetes/fleetwatch.yaml runs them without "
        "one)")


def test_the_init_container_leaves_models_the_trust_check_accepts(tmp_path: Path) -> None:
    # What an earlier fsGroup mount left is mended; a fresh volume gets both folders.
    model = fs_grouped_model(tmp_path)
    run_shared_dirs(tmp_path)
    for folder in (tmp_path / "models", tmp_path / "reports"):
        st = folder.stat()
        assert stat.S_IMODE(st.st_mode) == 0o755, folder
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), folder
    assert stat.S_IMODE(model.stat().st_mode) == 0o644
    check_trusted(model)  # no error
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    run_shared_dirs(fresh)
    assert stat.S_IMODE((fresh / "models").stat().st_mode) == 0o755


def test_the_models_folder_is_where_the_config_reads_it(tmp_path: Path) -> None:
    config = config_of(pod_spec("fleetwatch-train")["containers"][0], tmp_path)
    assert config.models.dir == SHARED + "/models"
    args = pod_spec("fleetwatch-report")["containers"][0]["args"]
    assert args[args.index("--out") + 1] == SHARED + "/reports"
    (command,) = {shared_dirs(n)["command"][2] for n in ("fleetwatch-train",
                                                        "fleetwatch-report")}
    assert f"{SHARED}/models" in command and f"{SHARED}/reports" in command


def test_the_agent_has_only_the_capabilities_it_reads_with() -> None:
    (agent,) = pod_spec("fleetwatch-agent")["containers"]
    context = agent["securityContext"]
    # GPM (SYS_ADMIN) and /dev/kmsg (SYSLOG); root reads root's RAPL files as their owner.
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN", "SYSLOG"]}
    assert context["runAsUser"] == 0 and context["readOnlyRootFilesystem"] is True
    # Kubernetes refuses allowPrivilegeEscalation: false beside an added SYS_ADMIN.
    assert "allowPrivilegeEscalation" not in context


def test_every_pod_runs_under_the_runtimes_seccomp_profile() -> None:
    for name in WORKLOADS:
        assert pod_spec(name)["securityContext"]["seccompProfile"] == {
            "type": "RuntimeDefault"}, name


def test_the_agents_spool_on_the_node_is_its_own() -> None:
    spec = pod_spec("fleetwatch-agent")
    volumes = {v["name"]: v for v in spec["volumes"]}
    (agent,) = spec["containers"]
    spool = mount_of(agent, "/var/lib/fleetwatch-agent/spool")
    assert volumes[spool["name"]]["hostPath"]["path"] == "/var/lib/fleetwatch-agent"


def test_the_image_runs_as_a_user_that_is_not_root() -> None:
    lines = [line for line in CONTAINERFILE.read_text("utf-8").splitlines()
             if line and not line.startswith("#")]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users == ["65532:65532"]
    # `docker run IMAGE up` (or simulate) writes its relative store where it starts: a
    # folder that user owns, not / (which it cannot write: a refusal at start).
    workdirs = [line.split()[1] for line in lines if line.startswith("WORKDIR ")]
    assert workdirs == ["/var/lib/fleetwatch"]
    assert "chown 65532:65532 /var/lib/fleetwatch" in "\n".join(lines)
    assert lines.index("USER 65532:65532") > max(i for i, line in enumerate(lines)
                                                  if line.startswith("RUN "))
    # The manifest's non-root pods name the same user; the agent's names root itself.
    for name in WORKLOADS:
        context = pod_spec(name)["securityContext"]
        if name != "fleetwatch-agent":
            assert context["runAsUser"] == 65532, name
    assert pod_spec("fleetwatch-agent")["containers"][0]["securityContext"]["runAsUser"] == 0
    assert len(DOCS) == 11
