"""String settings checked at load: names that must not be empty, Kafka topic names, URLs,
the sample configurations' CHANGE-ME placeholder, and config files that cannot be read.

Each was accepted before and failed much later (a send refused every second, a
processor paused on "unknown url type", a traceback with exit status 1 that systemd
restarts): each is now one ``configuration error`` line naming the key or the file,
exit status 2. The keys under test are read from ``fleetwatch.settings``, so a new
``required``/``kafka_topic``/``http_url`` field is covered without a new line here.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import yaml

from fleetwatch.cli import main
from fleetwatch.config import ENV_PREFIX, Config, ConfigError, load

ROOT = Path(__file__).resolve().parents[2]


def keys(*rules: str) -> list[tuple[str, str]]:
    """(section, key) of every field declared with one of these text rules."""
    return [(s.name, f.name) for s in dataclasses.fields(Config)
            for f in dataclasses.fields(s.default_factory())  # type: ignore[misc]
            if f.metadata.get("text") in rules]


def env_of(section: str, key: str) -> str:
    return f"{ENV_PREFIX}{section.upper()}_{key.upper()}"


NAMES = keys("name", "topic")
URLS = keys("url", "url_or_off")


def test_the_rules_cover_the_keys_the_tester_named() -> None:
    assert {("bus", "topic"), ("bus", "dead_letter_topic"), ("bus", "alert_topic"),
            ("bus", "group"), ("node", "cluster"), ("node", "node"), ("node", "rack"),
            ("store", "path"), ("store", "bucket"), ("store", "org"),
            ("agent", "spool_dir")} <= set(NAMES)
    assert {("store", "url"), ("alerts", "alertmanager_url"), ("alerts", "webhook_url"),
            ("alerts", "dashboard_url")} <= set(URLS)


@pytest.mark.parametrize("section, key", NAMES)
@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_name_is_refused_naming_the_key(section: str, key: str, value: str) -> None:
    name = env_of(section, key)
    with pytest.raises(ConfigError, match=f"environment {name}: {section}.{key} = "
                                          f"'{value}'; must not be empty"):
        load(env={name: value})


def test_an_empty_name_in_the_file_is_refused_too(tmp_path: Path) -> None:
    f = tmp_path / "fw.toml"
    f.write_text('[bus]\ntopic = ""\n')
    with pytest.raises(ConfigError, match=r"fw.toml \[bus\] topic: bus.topic = ''; must not "
                                          "be empty"):
        load(f, env={})


@pytest.mark.parametrize("section, key", [
    ("agent", "kernel_log"), ("agent", "pod_resources_socket"), ("bus", "sasl_username"),
    ("bus", "sasl_password"), ("store", "token"), ("alerts", "webhook_url"),
    ("alerts", "alertmanager_url"), ("alerts", "dashboard_url"), ("carbon", "intensity_csv"),
    ("carbon", "pue_csv")])
def test_keys_where_empty_means_none_stay_allowed(section: str, key: str) -> None:
    config = load(env={env_of(section, key): ""})
    assert getattr(getattr(config, section), key) == ""


@pytest.mark.parametrize("topic", ["a/b", "fleet watch", "frames:v1", "é", ".", "..",
                                   "x" * 250])
def test_a_topic_kafka_cannot_have_is_refused(topic: str) -> None:
    for key in ("topic", "dead_letter_topic", "alert_topic"):
        with pytest.raises(ConfigError, match=f"bus.{key} = .*; not a Kafka topic name"):
            load(env={env_of("bus", key): topic})


def test_every_legal_topic_is_accepted() -> None:
    for topic in ("fleetwatch_frames-2.v1", "x" * 249, "..."):
        assert load(env={"FLEETWATCH_BUS_TOPIC": topic}).bus.topic == topic


@pytest.mark.parametrize("section, key", URLS)
@pytest.mark.parametrize("value", ["127.0.0.1:18428", "victoriametrics:8428",
                                   "ftp://victoriametrics:8428", "http://", "localhost",
                                   " http://vm:8428"])
def test_a_url_without_http_or_https_is_refused_naming_the_key(section: str, key: str,
                                                               value: str) -> None:
    with pytest.raises(ConfigError, match=f"{section}.{key} = '{value}'; must be a URL that "
                                          "starts with http:// or https://"):
        load(env={env_of(section, key): value})


def test_the_message_shows_the_url_it_meant() -> None:
    with pytest.raises(ConfigError, match=r"\(e.g. http://127.0.0.1:18428\)$"):
        load(env={"FLEETWATCH_STORE_URL": "127.0.0.1:18428"})
    with pytest.raises(ConfigError, match=r'or "" for none$'):
        load(env={"FLEETWATCH_ALERTS_WEBHOOK_URL": "hooks.example.com/fleet"})


@pytest.mark.parametrize("section, key", URLS)
def test_http_and_https_urls_are_accepted(section: str, key: str) -> None:
    for value in ("http://10.0.0.5:8428", "https://vm.example.com/select/0/prometheus"):
        assert getattr(getattr(load(env={env_of(section, key): value}), section), key) == value


@pytest.mark.parametrize("value", ["http://[::1:8428", "http://vm:port", "http://vm:99999"])
def test_a_url_that_cannot_be_parsed_is_one_line_too(value: str) -> None:
    with pytest.raises(ConfigError, match="store.url = '.*'; not a valid URL"):
        load(env={"FLEETWATCH_STORE_URL": value})


def test_the_store_url_is_no_optional_setting() -> None:
    with pytest.raises(ConfigError, match="store.url = ''; must be a URL"):
        load(env={"FLEETWATCH_STORE_URL": ""})


@pytest.mark.parametrize("text, message", [
    ('[node]\ncluster = "CHANGE-ME"\n',
     r"\[node\] cluster: node.cluster = 'CHANGE-ME' still holds the sample configuration's "
     "placeholder CHANGE-ME; set it for your cluster"),
    ('[store]\nurl = "http://CHANGE-ME:8428"\n', "store.url = 'http://CHANGE-ME:8428' still"),
    ('[detectors]\nenabled = ["xid", "CHANGE-ME"]\n', "detectors.enabled = .* still"),
    ('[bus]\nkind = "CHANGE-ME"\n', "bus.kind = 'CHANGE-ME' still"),
])
def test_a_placeholder_is_refused_naming_the_key(tmp_path: Path, text: str,
                                                 message: str) -> None:
    f = tmp_path / "fw.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(f, env={})


def test_a_placeholder_secret_is_refused_without_printing_it() -> None:
    with pytest.raises(ConfigError) as exc:
        load(env={"FLEETWATCH_BUS_SASL_PASSWORD": "pw-CHANGE-ME-42"})
    assert "bus.sasl_password still holds" in str(exc.value)
    assert "pw-" not in str(exc.value)


def cluster_configmap(tmp_path: Path) -> Path:
    manifest = (ROOT / "deploy" / "kubernetes" / "fleetwatch.yaml").read_text("utf-8")
    configmap = next(d for d in yaml.safe_load_all(manifest) if d["kind"] == "ConfigMap")
    path = tmp_path / "configmap.toml"
    path.write_text(configmap["data"]["fleetwatch.toml"], "utf-8")
    return path


@pytest.mark.parametrize("sample", ["cluster.toml", "configmap"])
def test_the_shipped_samples_must_be_filled_in(tmp_path: Path, sample: str) -> None:
    path = (ROOT / "deploy" / "cluster.toml" if sample == "cluster.toml"
            else cluster_configmap(tmp_path))
    with pytest.raises(ConfigError, match="node.cluster = 'CHANGE-ME' still holds"):
        load(path, env={})
    # As an administrator fills it in: the file edited, or the unit's environment file.
    edited = tmp_path / "edited.toml"
    edited.write_text(path.read_text("utf-8").replace("CHANGE-ME", "dc1"), "utf-8")
    assert load(edited, env={}).node.cluster == "dc1"
    assert load(path, env={"FLEETWATCH_NODE_CLUSTER": "dc2"}).node.cluster == "dc2"


def test_a_file_that_is_not_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_bytes(b'[node]\ncluster = "caf\xe9"\n')
    with pytest.raises(ConfigError, match=rf"{f}: not UTF-8 text \(byte 0xe9 on line 2\)"):
        load(f, env={})


def test_a_directory_is_no_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"config file {tmp_path} is a directory"):
        load(tmp_path, env={})


def test_an_unreadable_file_names_the_file(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "fw.toml"
    f.write_text('[node]\ncluster = "dc1"\n')
    f.chmod(0)
    if os.geteuid() == 0:  # root reads it anyway: make the read fail as it would for a user
        def denied(self: Path) -> bytes:
            raise PermissionError(13, "Permission denied", str(self))
        monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(ConfigError, match=f"config file {f} cannot be read by this user"):
        load(f, env={})


def test_a_secret_file_that_is_not_utf8_is_named_not_shown(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_bytes(b"s3cr\xe9t")
    with pytest.raises(ConfigError, match=f"secret file {secret} is not UTF-8") as exc:
        load(env={"FLEETWATCH_STORE_TOKEN_FILE": str(secret)})
    assert "s3cr" not in str(exc.value) and "0xe9" not in str(exc.value)


@pytest.mark.parametrize("case", ["not utf-8", "directory", "empty topic", "url", "placeholder"])
def test_each_is_one_line_and_exit_status_2(tmp_path: Path, case: str,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(name)
    f = tmp_path / "fw.toml"
    f.write_text("")
    if case == "not utf-8":
        f.write_bytes(b'[node]\ncluster = "caf\xe9"\n')
    elif case == "directory":
        f = tmp_path
    elif case == "empty topic":
        monkeypatch.setenv("FLEETWATCH_BUS_TOPIC", "")
    elif case == "url":
        f.write_text('[store]\nkind = "victoriametrics"\nurl = "127.0.0.1:18428"\n')
    else:
        f = ROOT / "deploy" / "cluster.toml"
    assert main(["--config", str(f), "config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetwatch: configuration error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
