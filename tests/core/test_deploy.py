"""What a cluster admin installs: the systemd units and the cluster configuration of
``deploy/``, checked as systemd and fleetwatch read them (running them: tests/integration/
test_deploy_cluster.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from fleetwatch.cli_args import parser
from fleetwatch.cli_history import EXIT_USAGE
from fleetwatch.config import load
from tests.units import (
    CLUSTER_CONFIG,
    INSTALLED_BINARY,
    INSTALLED_CONFIG,
    UNITS,
    Unit,
    units,
)

SERVICES = {u.path.stem: u for u in units(".service")}


def state_of(unit: Unit) -> str:
    return "/var/lib/" + unit.get("Service", "StateDirectory")


def systemd_analyze() -> str:
    binary = shutil.which("systemd-analyze")
    assert binary, "no systemd-analyze: `apt-get install systemd` (scripts/test does this)"
    return binary


def verify(folder: Path) -> subprocess.CompletedProcess[str]:
    names = sorted(p.name for p in folder.iterdir())
    return subprocess.run([systemd_analyze(), "verify", "--man=no", *names], cwd=folder,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SYSTEMD_LOG_COLOR": "0"})


def installed_copy(tmp_path: Path, edit: dict[str, str] | None = None) -> Path:
    """The units with the program where this checkout has it (systemd checks that it is
    executable) and, per file name, one line replaced."""
    folder = tmp_path / "units"
    folder.mkdir()
    fleetwatch = shutil.which("fleetwatch", path=str(Path(sys.executable).parent))
    assert fleetwatch, "fleetwatch's script is not installed beside this Python"
    for p in UNITS.iterdir():
        if p.suffix not in (".service", ".timer"):
            continue
        text = p.read_text("utf-8").replace(INSTALLED_BINARY, fleetwatch)
        for old, new in (edit or {}).items():
            if old.startswith(p.name + ":"):
                text = text.replace(old.split(":", 1)[1], new)
        (folder / p.name).write_text(text, "utf-8")
    return folder


def test_systemd_accepts_every_unit_without_a_warning(tmp_path: Path) -> None:
    result = verify(installed_copy(tmp_path))
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), (
        result.stdout + result.stderr)


def test_the_check_above_would_see_a_mistake(tmp_path: Path) -> None:
    # A misspelt key, a timer with an impossible date: systemd says so, and the test above
    # reads what it says, not only its exit status (0 for the first).
    result = verify(installed_copy(tmp_path, {
        "fleetwatch-agent.service:KillSignal=": "KillSignl=",
        "fleetwatch-report.timer:*-*-01": "*-*-32"}))
    said = result.stdout + result.stderr
    assert "Unknown key 'KillSignl'" in said and "calendar" in said, said


def test_every_command_line_is_one_fleetwatch_accepts_with_the_cluster_config() -> None:
    assert set(SERVICES) == {"fleetwatch-agent", "fleetwatch-process", "fleetwatch-dashboard",
                             "fleetwatch-train", "fleetwatch-report"}
    for name, unit in SERVICES.items():
        argv = unit.exec_start
        assert argv[:3] == [INSTALLED_BINARY, "--config", INSTALLED_CONFIG], name
        args = parser().parse_args(argv[1:])
        assert args.command == name.removeprefix("fleetwatch-"), name
    for timer in units(".timer"):
        assert timer.path.with_suffix(".service").stem in SERVICES, timer.path.name


def test_the_cluster_config_loads_and_only_the_agent_runs_as_root() -> None:
    # The cluster's name is the sample's CHANGE-ME, which load refuses: set as an admin would.
    config = load(CLUSTER_CONFIG, env={"FLEETWATCH_NODE_CLUSTER": "dc1"})
    assert config.bus.kind == "kafka" and config.store.kind == "victoriametrics"
    # The spool lives in the agent unit's state directory, and the relative models.dir in
    # the working directory of the units that train and read it.
    agent = SERVICES["fleetwatch-agent"]
    assert config.agent.spool_dir.startswith(state_of(agent) + "/")
    assert not Path(config.models.dir).is_absolute()
    for name, unit in SERVICES.items():
        user = unit.get("Service", "User")
        assert (user == "root") == (name == "fleetwatch-agent"), name
        assert unit.get("Service", "WorkingDirectory") == state_of(unit), name
        assert unit.get("Service", "ProtectSystem") == "strict", name
    # Long-running services stop as Ctrl-C stops them: SIGTERM, with time to flush; they
    # come back when they die, but not to repeat a configuration error.
    for name in ("fleetwatch-agent", "fleetwatch-process", "fleetwatch-dashboard"):
        unit = SERVICES[name]
        assert unit.get("Service", "KillSignal") == "SIGTERM"
        assert unit.get("Service", "Restart") == "always"
        assert unit.get("Service", "RestartPreventExitStatus") == str(EXIT_USAGE)
    # The dashboard has no authentication, so nothing in the deployment moves it off loopback.
    assert config.dashboard.host == "127.0.0.1"
    assert "--host" not in SERVICES["fleetwatch-dashboard"].exec_start


def test_the_sysusers_file_makes_the_units_user() -> None:
    lines = [line.split() for line in (UNITS / "fleetwatch.sysusers").read_text("utf-8")
             .splitlines() if line.strip() and not line.startswith("#")]
    users = {unit.get("Service", "User") for unit in SERVICES.values()} - {"root"}
    assert [(kind, name) for kind, name, *_ in lines] == [("u", u) for u in sorted(users)]


def test_a_configuration_error_exits_with_the_status_that_stops_the_restarts(
        tmp_path: Path) -> None:
    bad = tmp_path / "fleetwatch.toml"
    # The admin's copy (its cluster named), with one mistake.
    bad.write_text(CLUSTER_CONFIG.read_text("utf-8").replace("CHANGE-ME", "dc1")
                   .replace('kind = "kafka"', 'kind = "kafkaa"'))
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETWATCH_")}
    for name in ("fleetwatch-agent", "fleetwatch-process", "fleetwatch-dashboard"):
        argv = [str(bad) if a == str(CLUSTER_CONFIG) else a
                for a in SERVICES[name].local_argv()]
        result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                                cwd=tmp_path)
        assert result.returncode == EXIT_USAGE, (name, result.stderr)
        assert "bus.kind" in result.stderr, (name, result.stderr)


# The agent's capabilities, each for a reading it takes (checked with setpriv's bounding set
# on an H100 node): GPM while the driver restricts profiling to administrators, /dev/kmsg
# under kernel.dmesg_restrict, and /proc/PID/environ of another user's job (the kernel asks
# for both of the last two).
AGENT_CAPABILITIES = {"CAP_SYS_ADMIN", "CAP_SYSLOG", "CAP_DAC_READ_SEARCH", "CAP_SYS_PTRACE"}
# Every unit: no new privileges, no kernel modules, tunables or cgroups to change, no
# namespaces, realtime, set-uid files or personality, native system calls of a service.
EVERY_UNIT = {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
              "PrivateTmp": "yes", "PrivateMounts": "yes", "ProtectKernelModules": "yes",
              "ProtectKernelTunables": "yes", "ProtectControlGroups": "yes",
              "ProtectHostname": "yes", "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
              "RestrictNamespaces": "yes", "RestrictRealtime": "yes",
              "RestrictSUIDSGID": "yes", "LockPersonality": "yes",
              "SystemCallArchitectures": "native", "SystemCallErrorNumber": "EPERM",
              "AmbientCapabilities": ""}
# What would hide the agent's readings: /dev/kmsg, /dev/nvidia*, the jobs' processes, and
# (ProtectClock, on systemd before 253) every device.
HIDES_THE_AGENTS_READINGS = ("ProtectKernelLogs", "PrivateDevices", "ProtectProc",
                             "ProcSubset", "ProtectClock", "DevicePolicy", "DeviceAllow",
                             "PrivateUsers", "PrivateNetwork")


def system_calls(group: str) -> set[str]:
    """The system calls of a SystemCallFilter group, as this systemd defines it."""
    said = subprocess.run([systemd_analyze(), "syscall-filter", group], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    names = {w for line in said.splitlines()[1:] if not line.lstrip().startswith("#")
             for w in line.split()}
    calls = {n for n in names if not n.startswith("@")}
    for nested in names - calls:
        calls |= system_calls(nested)
    return calls


def filtered(setting: str) -> set[str]:
    """The system calls a unit's SystemCallFilter= lines leave: the first line's allow
    list less each deny list (~) after it."""
    first, *denied = setting.splitlines()
    assert first == "@system-service", setting
    allowed = system_calls(first)
    for line in denied:
        assert line.startswith("~"), setting
        for name in line[1:].split():
            allowed -= system_calls(name) if name.startswith("@") else {name}
    return allowed


def test_the_agent_keeps_only_the_capabilities_it_reads_with() -> None:
    service = SERVICES["fleetwatch-agent"].sections["Service"]
    assert set(service["CapabilityBoundingSet"].split()) == AGENT_CAPABILITIES
    for key, value in EVERY_UNIT.items():
        assert service.get(key) == value, key
    assert not set(HIDES_THE_AGENTS_READINGS) & set(service), service
    # CAP_SYS_PTRACE opens /proc/PID/environ and nothing more: the filter has no ptrace(2)
    # and no process_vm_readv(2) to use it with.
    allowed = filtered(service["SystemCallFilter"])
    assert {"ioctl", "openat", "read", "connect"} <= allowed  # NVML, /dev/kmsg, Kafka
    assert not {"ptrace", "process_vm_readv", "process_vm_writev"} & allowed


def test_the_other_units_have_no_capability_and_no_device() -> None:
    for name, unit in SERVICES.items():
        if name == "fleetwatch-agent":
            continue
        service = unit.sections["Service"]
        assert service.get("CapabilityBoundingSet") == "", name  # present and empty: none
        assert {"openat", "connect", "accept4"} <= filtered(service["SystemCallFilter"])
        for key, value in {**EVERY_UNIT, "PrivateDevices": "yes", "ProtectKernelLogs": "yes",
                           "ProtectClock": "yes", "ProtectProc": "invisible",
                           "UMask": "0022"}.items():
            assert service.get(key) == value, (name, key)


def test_the_agents_state_directory_is_its_own() -> None:
    # systemd gives a StateDirectory to the unit's user (recursively): one shared with the
    # fleetwatch user's units would hand the root agent's spool to that user.
    agent = SERVICES["fleetwatch-agent"]
    assert agent.get("Service", "StateDirectory") == "fleetwatch-agent"
    assert agent.get("Service", "StateDirectoryMode") == "0700"
    assert agent.get("Service", "UMask") == "0077"
    for name, unit in SERVICES.items():
        if name != "fleetwatch-agent":
            assert unit.get("Service", "StateDirectory") == "fleetwatch", name
            assert not state_of(agent).startswith(state_of(unit) + "/"), name


def exposure(folder: Path, name: str) -> float:
    result = subprocess.run([systemd_analyze(), "security", "--offline=yes", "--no-pager",
                             name], cwd=folder, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "SYSTEMD_LOG_COLOR": "0"})
    said = result.stdout + result.stderr
    marker = f"Overall exposure level for {name}: "
    assert marker in said, said
    return float(said.split(marker, 1)[1].split()[0])


def test_systemd_rates_the_units_exposure(tmp_path: Path) -> None:
    # systemd-analyze's 0-10 exposure score (10: a unit with no sandbox at all). Before the
    # hardening: agent 8.9, the others 7.9.
    folder = installed_copy(tmp_path)
    assert exposure(folder, "fleetwatch-agent.service") <= 3.5
    for name in ("process", "dashboard", "train", "report"):
        assert exposure(folder, f"fleetwatch-{name}.service") <= 1.5, name


def test_every_unit_works_in_its_own_state_directory() -> None:
    # The relative defaults (store.path, models.dir) land in a folder the unit's user owns:
    # without WorkingDirectory= they would be tried in / and the unit refused at start.
    for name, unit in SERVICES.items():
        assert unit.get("Service", "WorkingDirectory") == state_of(unit), name


def test_the_agent_starts_after_the_kubelet_where_there_is_one_without_needing_it() -> None:
    # After= orders against a unit only if it is started anyway: a Slurm node without a
    # kubelet starts the agent all the same; a Kubernetes node has its socket sooner.
    agent = SERVICES["fleetwatch-agent"]
    assert "kubelet.service" in agent.get("Unit", "After").split()
    for key in ("Wants", "Requires", "BindsTo", "Requisite"):
        assert "kubelet" not in agent.get("Unit", key), key
