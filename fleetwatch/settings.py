"""What can be set: every section of fleetwatch's configuration as a frozen dataclass,
with its defaults and ranges (declared with ``fleetwatch.config_fields``); the
[bus] and [store] sections are in ``fleetwatch.settings_backends``, [energy] and [carbon]
in ``fleetwatch.settings_energy``.

``fleetwatch.config`` reads them (a TOML file plus environment overrides) and
checks them; the rest of fleetwatch imports both from there.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from fleetwatch.config_fields import (
    ConfigError,
    http_url,
    ranged,
    required,
)
from fleetwatch.settings_backends import BusConfig, StoreConfig
from fleetwatch.settings_energy import CarbonConfig, EnergyConfig

ENV_PREFIX = "FLEETWATCH_"
# alerts.instance: it names a deployment in Alertmanager's createdBy of its silences.
INSTANCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
T = TypeVar("T")


@dataclass(frozen=True)
class NodeConfig:
    cluster: str = required("default")
    rack: str = required("rack0")
    node: str = required(factory=socket.gethostname)
    # A Kubernetes node label holding the rack (fleetwatch.io/rack): read at agent start.
    rack_label: str = ""


@dataclass(frozen=True)
class AgentConfig:
    interval_s: float = ranged(5.0, 0.05, 3600.0)
    # What to do when NVML is missing or fails at start: error (exit 1),
    # ignore (run host-only), retry (host-only, try NVML again each minute).
    nvml_policy: Literal["error", "ignore", "retry"] = "retry"
    spool_dir: str = required("/var/lib/fleetwatch-agent/spool")
    spool_max_mb: float = ranged(512.0, 1.0, 1_000_000.0)
    # An address to listen on: 0.0.0.0 for all of them ("" would mean the same, unsaid).
    metrics_host: str = required("127.0.0.1")
    # 0: no /metrics (as processor.metrics_port = 0), e.g. where nothing scrapes agents.
    metrics_port: int = ranged(9400, 0, 65535)
    kernel_log: str = "/dev/kmsg"   # "": no XIDs from the kernel log
    proc_root: str = required("/proc")
    sys_root: str = required("/sys")
    # Read SM/tensor/DRAM activity through DCGM (where installed) on GPUs without GPM.
    dcgm: bool = True
    # The kubelet's pod-resources socket: pod/namespace/container labels where it exists
    # ("": none).
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass(frozen=True)
class ProcessorConfig:
    metrics_host: str = required("127.0.0.1")
    metrics_port: int = ranged(9401, 0, 65535)   # 0: no /metrics
    max_batch: int = ranged(2000, 1, 100_000)    # messages per poll, and so per store write
    maintain_every_s: float = ranged(30.0, 1.0, 86_400.0)
    workers: int = ranged(1, 1, 256)             # consumer-group members as child processes
    # Frames stamped further ahead of the processor's clock are dead-lettered (a wrong
    # clock on the node; NTP fixes it); 0 takes frames of any time.
    max_clock_ahead_s: float = ranged(300.0, 0.0, 3.2e9)
    # On SIGTERM, the whole stop (batches in hand, open alerts' last updates, alert sinks)
    # within this; below systemd's TimeoutStopSec and the pod's grace period (60 s).
    stop_timeout_s: float = ranged(45.0, 5.0, 3600.0)


@dataclass(frozen=True)
class AlertsConfig:
    # A firing alert resolves once its subject has been judged clear this long (0: on the
    # first clear sample), so a GPU hovering at a limit pages once, not at every crossing.
    keep_firing_s: float = ranged(300.0, 0.0, 86_400.0)
    # Alert sinks; "" turns one off. The Kafka alert topic is bus.alert_topic (kafka bus only).
    webhook_url: str = http_url("", optional=True)
    # Seconds (0 to 300): webhook changes that come within this of a post are held and
    # posted together when it ends (the first after a quiet spell goes at once). 0: a post
    # per processor batch.
    webhook_group_interval_s: float = ranged(5.0, 0.0, 300.0)
    alertmanager_url: str = http_url("", optional=True)
    # Firing alerts are re-sent to Alertmanager this often (it expires those not re-sent).
    alertmanager_resend_s: float = ranged(60.0, 1.0, 3600.0)
    # This deployment's name in Alertmanager: its silences there are made by
    # "fleetwatch/<instance>" and it changes or expires only those, so deployments sharing
    # one Alertmanager leave each other's alone. "": derived from the store (its kind and
    # location), stable while the store stays where it is. Up to 64 of A-Z a-z 0-9 . _ -.
    instance: str = ""
    # The clusters whose alerts this deployment posts: a silence naming no cluster mutes
    # only these there. Empty: any cluster (set it when other clusters share Alertmanager).
    clusters: tuple[str, ...] = ()
    # XID alerts carry the label remedy (their action's class) in Alertmanager. false: posted
    # without it, as releases before it did, so a rollback or a consumer group mixing old
    # and new processors notifies no XID alert twice; set it before the first new processor.
    xid_remedy_label: bool = True
    # Base URL of the dashboard, for each alert's generatorURL / link; "" for none.
    dashboard_url: str = http_url("", optional=True)
    # Tries per delivery to a sink before the change is counted as not delivered there.
    sink_attempts: int = ranged(4, 1, 100)
    sink_timeout_s: float = ranged(10.0, 0.1, 300.0)
    # Seconds (0 to 86400) the webhook's and Alertmanager's changes are held once
    # sink_attempts tries failed, and tried again (at most 8 s apart) until it answers:
    # the latest change of each alert, delivered once. 0: counted as failed at once.
    # The Kafka topic is not held.
    sink_retry_s: float = ranged(600.0, 0.0, 86_400.0)
    # Processors read silences and acknowledgements from the store this often (one read of
    # each); a silence added less than this before an alert fires may not mute its first
    # notification.
    silence_reload_s: float = ranged(5.0, 1.0, 300.0)


@dataclass(frozen=True)
class ModelsConfig:
    # Learned detectors (thermal health, fleet anomaly, lemon nodes): model files
    # from `fleetwatch train` land here; processors load the newest, and reload on change.
    dir: str = required("fleetwatch-models")
    enabled: bool = True
    thermal_min_excess_c: float = ranged(5.0, 0.5, 50.0)
    thermal_min_score: float = ranged(4.0, 1.0, 100.0)
    thermal_half_life_s: float = ranged(900.0, 30.0, 86_400.0)
    thermal_for_s: float = ranged(600.0, 0.0, 86_400.0)
    # The thermal health score is stored once per this many seconds per GPU (0: every sample).
    thermal_store_every_s: float = ranged(60.0, 0.0, 3600.0)
    anomaly_consecutive: int = ranged(2, 1, 100)
    lemon_half_life_d: float = ranged(7.0, 0.1, 365.0)
    lemon_threshold: float = ranged(10.0, 0.1, 1e6)


DETECTORS = ("thermal_limits", "throttle", "thermal_peers", "rack_cooling", "room_inlet", "xid",
             "gpu_errors", "node_silent", "job_peers", "job_hang")


@dataclass(frozen=True)
class DetectorsConfig:
    """Which detectors run (by registry name) and the numbers that tune them."""

    enabled: tuple[str, ...] = DETECTORS
    # Limits: NVML's slowdown/shutdown temperatures from the frame; these where NVML has none
    # and the GPU model is not in fleetwatch.models.limits' table.
    fallback_slowdown_c: float = ranged(87.0, 30.0, 150.0)
    fallback_shutdown_c: float = ranged(92.0, 30.0, 150.0)
    high_margin_c: float = ranged(4.0, 0.0, 30.0)
    high_for_s: float = ranged(30.0, 0.0, 3600.0)
    # The site's own die-temperature limit, below NVIDIA's: gpu_temp_high also fires at or
    # above it for site_temp_for_s. 0: none (NVML's limits only).
    site_temp_limit_c: float = ranged(0.0, 0.0, 200.0)
    site_temp_for_s: float = ranged(60.0, 0.0, 86_400.0)
    mem_max_c: float = ranged(95.0, 30.0, 150.0)
    mem_margin_c: float = ranged(5.0, 0.0, 30.0)
    mem_high_for_s: float = ranged(120.0, 0.0, 3600.0)
    rise_band_c: float = ranged(15.0, 0.0, 60.0)
    rise_c_per_min: float = ranged(20.0, 1.0, 600.0)
    rise_window_s: float = ranged(10.0, 1.0, 600.0)
    rise_margin_c: float = ranged(3.0, 0.0, 30.0)
    sensor_min_c: float = ranged(5.0, -40.0, 40.0)
    sensor_over_shutdown_c: float = ranged(10.0, 0.0, 100.0)
    power_over_limit_frac: float = ranged(1.1, 1.0, 2.0)
    power_over_for_s: float = ranged(60.0, 0.0, 3600.0)
    # Throttle reasons.
    hw_slowdown_for_s: float = ranged(10.0, 0.0, 3600.0)
    sw_thermal_for_s: float = ranged(60.0, 0.0, 3600.0)
    # The thermal rules' alerts (limits, peers, throttle) keep firing this long once judged
    # clear, instead of alerts.keep_firing_s: a job's phases cool a hot GPU for minutes and
    # heat it again, one alert while that goes on. 0: alerts.keep_firing_s.
    thermal_keep_firing_s: float = ranged(1800.0, 0.0, 86_400.0)
    # Peers: a GPU against the other GPUs of its node in the same job at similar power.
    thermal_tau_s: float = ranged(30.0, 1.0, 600.0)
    # The die's rise over its heat sink per W: the part of a power change its temperature
    # shows within a second (a real H100 SXM: 0.024 °C/W; the simulated A100: 0.047).
    die_c_per_w: float = ranged(0.035, 0.0, 1.0)
    peer_margin_c: float = ranged(5.0, 1.0, 50.0)
    peer_k: float = ranged(4.0, 1.0, 20.0)
    peer_critical_c: float = ranged(12.0, 1.0, 80.0)
    peer_rise_c_per_min: float = ranged(15.0, 1.0, 600.0)
    peer_rise_window_s: float = ranged(5.0, 1.0, 600.0)
    peer_for_s: float = ranged(30.0, 0.0, 3600.0)
    # A sequential test (CUSUM) on the same excess: what is held over peer_drift_allow_c
    # adds up (°C x minutes); past peer_drift_sum_c_min it is gpu_hot_vs_peers. 0: off.
    # Healthy simulated GPUs hold +3 to +4.6 °C against their peers for ten minutes at
    # times (2 °C allowed: false alarms on a healthy H100 fleet), hence 3.5.
    peer_drift_allow_c: float = ranged(3.5, 0.0, 50.0)
    peer_drift_sum_c_min: float = ranged(2.0, 0.0, 10_000.0)
    # How long a GPU's learned offset from its peers (how warm it always runs) takes to
    # forget once its warm-up has learned it: at model_forget_s (4 h) a heat path that
    # degrades over hours was learned away as the GPU's own warmth.
    peer_offset_forget_s: float = ranged(86_400.0, 600.0, 30 * 86_400.0)
    peer_power_tol_w: float = ranged(60.0, 0.0, 2000.0)
    peer_power_tol_frac: float = ranged(0.25, 0.0, 1.0)
    peer_c_per_w: float = ranged(0.06, 0.0, 1.0)
    min_peers: int = ranged(3, 1, 64)
    max_offset_c: float = ranged(8.0, 0.0, 30.0)
    warmup_s: float = ranged(600.0, 0.0, 86_400.0)
    sensor_low_c: float = ranged(12.0, 1.0, 100.0)
    sensor_for_s: float = ranged(10.0, 0.0, 3600.0)
    # Rack cooling: many GPUs of one rack above their own thermal model at once.
    rack_margin_c: float = ranged(4.0, 0.5, 50.0)
    rack_fraction: float = ranged(0.5, 0.0, 1.0, above=True)
    rack_min_gpus: int = ranged(8, 1, 100_000)
    rack_for_s: float = ranged(0.0, 0.0, 3600.0)
    rack_inlet_rise_c: float = ranged(1.5, 0.1, 50.0)
    rack_inlet_peer_c: float = ranged(8.0, 1.0, 50.0)
    model_forget_s: float = ranged(4 * 3600.0, 600.0, 30 * 86_400.0)
    # The room: the median of a cluster's nodes' inlet air (°C) above ASHRAE TC 9.9's
    # recommended envelope (27 °C) warns, above class A1's allowable limit (32 °C) is
    # critical, once it has held room_inlet_for_s.
    room_inlet_warn_c: float = ranged(27.0, 10.0, 60.0)
    room_inlet_critical_c: float = ranged(32.0, 10.0, 60.0)
    room_inlet_for_s: float = ranged(300.0, 0.0, 86_400.0)
    # Events: how long an XID or an error-counter jump keeps its alert open.
    xid_hold_s: float = ranged(3600.0, 0.0, 30 * 86_400.0)
    xid_info_hold_s: float = ranged(600.0, 0.0, 30 * 86_400.0)
    event_hold_s: float = ranged(3600.0, 0.0, 30 * 86_400.0)
    pcie_replay_per_min: float = ranged(8.0, 0.0, 1e9, above=True)
    nvlink_errors_per_min: float = ranged(60.0, 0.0, 1e9, above=True)
    # A node with no frame for silent_intervals of its own interval (and silent_min_s).
    silent_intervals: float = ranged(6.0, 2.0, 1000.0)
    silent_min_s: float = ranged(60.0, 1.0, 86_400.0)
    # A node whose agent stopped cleanly (SIGTERM: a drain, a rollout whose new pod never
    # starts) and sent nothing since for this long: agent_stopped (warning). 0: never (an
    # autoscaled pool, whose nodes leave on purpose).
    agent_stopped_grace_s: float = ranged(900.0, 0.0, 6 * 86_400.0)
    # A rack whose nodes went silent together (a PDU trip, its switch lost): one alert.
    rack_silent_min_nodes: int = ranged(2, 2, 10_000)
    rack_silent_fraction: float = ranged(0.5, 0.0, 1.0, above=True)
    rack_silent_window_s: float = ranged(20.0, 1.0, 3600.0)
    # Replay: a GPU whose samples stop while its node's go on is lost after this long.
    gpu_lost_silent_s: float = ranged(300.0, 0.0, 86_400.0)
    # Job peers: SM activity (or utilization), clocks and power against the job's other GPUs.
    stuck_activity: float = ranged(0.02, 0.0, 1.0)
    busy_activity: float = ranged(0.3, 0.0, 1.0)
    stuck_peers_activity: float = ranged(0.1, 0.0, 1.0)
    stuck_for_s: float = ranged(60.0, 0.0, 3600.0)
    straggler_clock_frac: float = ranged(0.85, 0.0, 1.0, above=True)
    straggler_for_s: float = ranged(120.0, 0.0, 3600.0)
    power_low_frac: float = ranged(0.6, 0.0, 1.0, above=True)
    power_low_for_s: float = ranged(120.0, 0.0, 3600.0)
    # A whole job hung (every GPU of the job on a node blocked in a collective, moving no
    # bytes) for this long: job_hung. Under NCCL's default 10-minute timeout, far over a step.
    job_hang_s: float = ranged(300.0, 30.0, 86_400.0)
    # The same wait while a rank of the job on another node is not in a collective (a long
    # checkpoint written from the host, a debugger, an input stall, a host-side deadlock):
    # job_waiting (warning) after this long.
    job_wait_s: float = ranged(1800.0, 30.0, 86_400.0)


# A host as a Host header carries it: a DNS name or an IPv4 address, or an IPv6 one in
# brackets, and an optional port.
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9.])?)"
                   r"(:[0-9]{1,5})?")

@dataclass(frozen=True)
class DashboardConfig:
    host: str = required("127.0.0.1")
    port: int = ranged(8050, 1, 65535)
    refresh_s: float = ranged(5.0, 0.5, 3600.0)
    # Host names (name or name:port) a reverse proxy forwards in the Host header, besides
    # localhost, 127.0.0.1 and [::1], which are always served: any other Host is refused
    # (421), so a web page cannot reach the dashboard by DNS rebinding.
    allowed_hosts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in self.allowed_hosts:
            if "*" in name:
                raise ConfigError(
                    f"dashboard.allowed_hosts: {name!r}: no wildcards (a name that matches any "
                    "host lets any web page reach the dashboard by DNS rebinding): list each "
                    "name your proxy forwards, e.g. \"fleet.example.com\"")
            port = _HOST.fullmatch(name)
            if port is not None and port.group(2) and not 0 < int(port.group(2)[1:]) < 65536:
                raise ConfigError(
                    f"dashboard.allowed_hosts: {name!r}: port {port.group(2)[1:]} is not a "
                    "TCP port (1 to 65535), so no browser's Host can match it")
            if not _HOST.fullmatch(name):
                raise ConfigError(
                    f"dashboard.allowed_hosts: {name!r} is not a host name: give it as the "
                    "browser's address bar shows the host, e.g. \"fleet.example.com\" or "
                    "\"fleet.example.com:8443\" (in FLEETWATCH_DASHBOARD_ALLOWED_HOSTS, names "
                    "separated by commas, with no brackets or quotes)")


@dataclass(frozen=True)
class SimConfig:
    # The simulated GPU: a100 (A100-SXM4-80GB, 500 W) or h100 (H100 80GB HBM3, 700 W).
    part: Literal["a100", "h100"] = "a100"
    # The cluster the simulated fleet reports as (not node.cluster, which is the agent's):
    # two clusters' histories of the same hours can share one store.
    cluster: str = required("sim")
    nodes: int = ranged(4, 1, 100_000)
    gpus: int = ranged(8, 1, 64)
    nodes_per_rack: int = ranged(2, 1, 10_000)
    seed: int = ranged(0, 0, 2**63 - 1)
    job_mean_s: float = ranged(3 * 3600.0, 60.0, 1e10)
    idle_mean_s: float = ranged(20 * 60.0, 0.0, 1e10)
    # The room's mean inlet air, °C (ASHRAE's recommended envelope is 18-27 °C, class A1
    # allows 15-32 °C): the dies follow it degree for degree at the same power. A warm
    # spell: warm_spell_c °C more, every rack alike, reached over warm_spell_h hours from
    # the start (0: at once).
    inlet_c: float = ranged(22.0, 5.0, 45.0)
    warm_spell_c: float = ranged(0.0, -20.0, 20.0)
    warm_spell_h: float = ranged(0.0, 0.0, 1000.0)


@dataclass(frozen=True)
class Config:
    node: NodeConfig = field(default_factory=NodeConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    bus: BusConfig = field(default_factory=BusConfig)
    processor: ProcessorConfig = field(default_factory=ProcessorConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    detectors: DetectorsConfig = field(default_factory=DetectorsConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    dashboard: DashboardConfig = field(default_factory=DashboardConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    energy: EnergyConfig = field(default_factory=EnergyConfig)
    carbon: CarbonConfig = field(default_factory=CarbonConfig)
