"""A URL that fails its check is shown masked, as `fleetwatch config` shows it.

Its password (typed as-is with a character URLs reserve, next to a mistyped port, or
without a scheme) appears nowhere: not in the message from the file, the environment,
or `fleetwatch config`; a reserved character gets a hint to percent-encode it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.config import ConfigError, load

HINT = ("; its password holds a character a URL reserves: percent-encode the password "
        "(@ as %40, : as %3A, / as %2F, ? as %3F, # as %23, % as %25)")
CASES = [
    ("http://fw:p@ss:w/rd%@127.0.0.1:19602", "p@ss:w/rd%",
     "'http://fw:***@127.0.0.1:19602'; not a valid URL" + HINT),
    ("http://fw:s3cr3t@127.0.0.1:notaport", "s3cr3t",
     "'http://fw:***@127.0.0.1:notaport'; not a valid URL (Port could not be cast to integer "
     "value as 'notaport')"),
    ("fw:s3cr3t@127.0.0.1:19602", "s3cr3t",
     "'fw:***@127.0.0.1:19602'; must be a URL that starts with http:// or https:// "
     "(e.g. http://fw:***@127.0.0.1:19602)"),
    ("http://fw:pa/ss@127.0.0.1:19602", "pa/ss",
     "'http://fw:***@127.0.0.1:19602'; not a valid URL" + HINT),
]


@pytest.mark.parametrize("url, password, tail", CASES)
@pytest.mark.parametrize("key", ["store.url", "alerts.alertmanager_url"])
def test_a_refused_url_is_shown_masked_from_the_environment(key: str, url: str, password: str,
                                                            tail: str) -> None:
    off = ', or "" for none' if key != "store.url" else ""
    with pytest.raises(ConfigError) as err:
        load(env={"FLEETWATCH_" + key.upper().replace(".", "_"): url})
    assert str(err.value) == f"environment FLEETWATCH_{key.upper().replace('.', '_')}: " \
                             f"{key} = {tail}{off}"
    assert password not in str(err.value)


def test_a_webhook_url_keeps_its_path_masked_too() -> None:
    with pytest.raises(ConfigError) as err:
        load(env={"FLEETWATCH_ALERTS_WEBHOOK_URL": "https://u:p/w@hooks.example.com/T1/B2/X3"})
    assert str(err.value) == ("environment FLEETWATCH_ALERTS_WEBHOOK_URL: alerts.webhook_url = "
                              "'https://u:***@hooks.example.com/***'; not a valid URL" + HINT
                              + ', or "" for none')


@pytest.mark.parametrize("url, password, tail", CASES)
def test_a_refused_url_is_shown_masked_from_the_file_and_by_fleetwatch_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, password: str,
        tail: str) -> None:
    path = tmp_path / "fw.toml"
    path.write_text(f'[store]\nkind = "victoriametrics"\nurl = "{url}"\n')
    assert main(["--config", str(path), "config"]) == 2
    err = capsys.readouterr().err
    assert err == (f"fleetwatch: configuration error: {path} [store] url: store.url = "
                   f"{tail}\n")
    assert password not in err


def test_urls_without_a_password_are_left_as_they_are() -> None:
    from fleetwatch.config import _masked_url

    assert _masked_url("http://host:8080/a@b", False) == "http://host:8080/a@b"
    assert _masked_url("http://fw@host:8080", False) == "http://fw@host:8080"
    assert _masked_url("http://fw:s%40cret@host:8080", False) == "http://fw:***@host:8080"
