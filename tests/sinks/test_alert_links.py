"""Every sink's link to an alert opens the dashboard page about its subject: the node page
of a GPU or node alert (in its cluster, the GPU brought forward), the job page of a job
alert, the fleet page of the rack's cluster for a rack alert."""

from __future__ import annotations

from fleetwatch.dashboards.components import job_href, node_href
from fleetwatch.pipeline.links import alert_jobs, alert_url
from fleetwatch.pipeline.silences import Notice
from fleetwatch.pipeline.sinks.alertmanager import AlertmanagerSink
from fleetwatch.pipeline.sinks.base import change_json
from fleetwatch.pipeline.store.base import Alert

BASE = "https://fleet.example.com/dash/"


def alert(device: str = "gpu3", node: str = "gpu-a01", rule: str = "gpu_temp_critical",
          message: str = "GPU 3 hot", cluster: str = "prod-a") -> Alert:
    return Alert(id=f"{rule}/{node}/{device}", rule=rule, severity="critical",
                 cluster=cluster, rack="rack-1", node=node, device=device, state="firing",
                 started_ts=1000.0, updated_ts=1000.0, value=95.0, message=message,
                 fired_ts=1000.0)


def test_a_gpu_alert_links_to_its_gpu_on_the_node_page_of_its_cluster() -> None:
    url = alert_url(BASE, alert())
    assert url == "https://fleet.example.com/dash/node/gpu-a01?cluster=prod-a&gpu=3"
    assert url.endswith(node_href("gpu-a01", gpu=3, cluster="prod-a"))


def test_a_node_alert_links_to_the_node_page_without_a_gpu() -> None:
    url = alert_url(BASE, alert("host", rule="node_silent"))
    assert url == "https://fleet.example.com/dash/node/gpu-a01?cluster=prod-a"


def test_a_rack_alert_links_to_the_fleet_page_of_its_cluster() -> None:
    url = alert_url(BASE, alert("rack:rack-02", node="", rule="rack_cooling"))
    assert url == "https://fleet.example.com/dash/?cluster=prod-a"


def test_a_job_alert_links_to_the_job_page() -> None:
    a = alert("host", rule="job_hung", message="job 42/b on gpu-a01: its 8 GPUs ...")
    assert alert_url(BASE, a) == "https://fleet.example.com/dash" + job_href(
        "42/b", cluster="prod-a")


def test_a_job_alert_on_a_shared_gpu_links_the_gpu_on_its_node_page() -> None:
    a = alert(rule="job_straggler", message="GPU 3 on gpu-a01 (job 111,222) lags its peers")
    assert alert_url(BASE, a) == "https://fleet.example.com/dash/node/gpu-a01?cluster=prod-a&gpu=3"
    assert alert_jobs(a) == ("111", "222")


def test_the_job_link_never_comes_from_the_node_name() -> None:
    a = alert(node="evil (job 999)", rule="job_straggler",
              message="GPU 3 on evil (job 999) (job 42) lags")
    assert alert_url(BASE, a) == "https://fleet.example.com/dash/job/42?cluster=prod-a"


def test_a_hung_alert_names_each_of_its_jobs() -> None:
    a = alert("host", rule="job_hung", message="job 7 (and 8, 9) hung on gpu-a01: its 8 GPUs")
    assert alert_jobs(a) == ("7", "8", "9")
    assert alert_url(BASE, a) == "https://fleet.example.com/dash/node/gpu-a01?cluster=prod-a"


def test_odd_names_are_quoted_and_no_base_gives_no_link() -> None:
    assert alert_url(BASE, alert(node="n 1/x")).startswith(
        "https://fleet.example.com/dash/node/n%201%2Fx?")
    assert alert_url("", alert()) == ""


def test_alertmanager_and_webhook_payloads_carry_the_same_link() -> None:
    a = alert()
    sink = AlertmanagerSink("http://127.0.0.1:9", dashboard_url=BASE)
    assert sink._payload(a, 1000.0)["generatorURL"] == alert_url(BASE, a)
    assert change_json(Notice(a), BASE)["link"] == alert_url(BASE, a)
    assert "link" not in change_json(Notice(a))


def test_annotations_name_the_cluster_where_several_share_alertmanager() -> None:
    from fleetwatch.pipeline.sinks.am_payload import am_annotations

    gpu, node = alert(), alert("host", rule="node_silent", message="gpu-a01 has sent nothing")
    assert "gpu3 on gpu-a01 (rack rack-1, cluster prod-a)" in am_annotations(gpu)["description"]
    assert "gpu-a01 (rack rack-1, cluster prod-a), since" in am_annotations(node)["description"]
    assert am_annotations(gpu)["summary"] == "GPU 3 hot"
    assert am_annotations(gpu, several_clusters=True)["summary"] == "prod-a: GPU 3 hot"
    sink = AlertmanagerSink("http://127.0.0.1:9", clusters=("prod-a", "prod-b"))
    assert sink._payload(gpu, 1000.0)["annotations"]["summary"] == "prod-a: GPU 3 hot"
    one = AlertmanagerSink("http://127.0.0.1:9")
    assert one._payload(gpu, 1000.0)["annotations"]["summary"] == "GPU 3 hot"


def test_the_webhook_posts_each_alerts_link() -> None:
    from fleetwatch.pipeline.sinks.webhook import WebhookSink
    from tests.sinks.conftest import Receiver

    receiver = Receiver()
    try:
        a = alert()
        WebhookSink(receiver.url, dashboard_url=BASE).send([Notice(a)])
        (body,) = receiver.bodies
        (change,) = body["groups"][0]["alerts"]
        assert change["link"] == "https://fleet.example.com/dash/node/gpu-a01?cluster=prod-a&gpu=3"
    finally:
        receiver.close()
