"""A real Prometheus server scrapes a running cluster, and a PromQL query for a group's lag in
seconds answers the length of a pause of its consumer while producing goes on.

Prometheus is Debian's (``/usr/bin/prometheus``: scripts/setup.sh installs it), started by the
test on a free loopback port with a scrape interval of a second or two and the targets ``mafka4
status --metrics-targets`` writes (every target on 127.0.0.1: the test sends nothing elsewhere),
and stopped by its PID.
"""

from __future__ import annotations

import json
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from mafka4.client.admin import Admin
from mafka4.client.consumer import Consumer
from mafka4.client.producer import Producer
from wait_helpers import wait_until

PROMETHEUS = "/usr/bin/prometheus"
SCRAPE_INTERVAL_S = 2
PRODUCE_INTERVAL_S = 0.05
PAUSE_S = 15  # how long the consumer stays away before the lag is checked
# How far the time a lag in seconds counts from may be from the consumer's last poll: the first
# message not read was produced within one feed round before that poll or one produce interval
# after it, and the node reads its clock just after Prometheus's scrape started.
LAG_TOLERANCE_S = 5
HTTP_TIMEOUT_S = 10
STOP_TIMEOUT_S = 30

pytestmark = pytest.mark.skipif(not Path(PROMETHEUS).exists() or shutil.which("promtool") is None,
                                reason="Prometheus is not installed (scripts/setup.sh installs it)")


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrometheusServer:
    """Debian's Prometheus on 127.0.0.1, scraping the file_sd targets in ``targets_file``."""

    def __init__(self, directory: Path, targets_file: Path):
        self.port = free_loopback_port()
        config = directory / "prometheus.yml"
        config.write_text(json.dumps({  # YAML is a superset of JSON
            "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
                       "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
            "scrape_configs": [{"job_name": "mafka4",
                                "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "5s"}]}]}))
        self._log = open(directory / "prometheus.log", "wb")
        self.process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={directory / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT)

    def query(self, promql: str) -> list[dict]:
        """The instant vector ``promql`` answers now: [{"metric": labels, "value": [timestamp, "value"]}]."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=HTTP_TIMEOUT_S) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.process.terminate()  # by its PID: Popen signals the process it started
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)
        self._log.close()


class SteadyProducer:
    """One message every ``PRODUCE_INTERVAL_S`` in a thread, until stopped."""

    def __init__(self, connection, topic: str):
        self.sent = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(connection, topic), daemon=True)
        self._thread.start()

    def _run(self, connection, topic: str) -> None:
        try:
            with Producer(topic, connection=connection, acks="all") as producer:
                while not self._stop.wait(PRODUCE_INTERVAL_S):
                    producer.send_sync(b"m%d" % self.sent, key=b"k%d" % (self.sent % 16), timeout_s=30)
                    self.sent += 1
        except BaseException as error:  # the test thread re-raises it
            self.error = error

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive() and self.error is None, self.error


def write_targets(targets_file: Path) -> dict:
    status = subprocess.run([sys.executable, "-m", "mafka4.cli", "status", "--metrics-targets", str(targets_file)],
                            capture_output=True, timeout=120)
    assert status.returncode == 0, status.stderr
    targets = [address for entry in json.loads(targets_file.read_text()) for address in entry["targets"]]
    assert targets and all(address.startswith("127.0.0.1:") for address in targets), \
        f"every target must be on the loopback interface: {targets}"
    return json.loads(status.stdout)["metrics"]


def test_prometheus_reports_a_paused_group_s_lag_in_seconds(cluster, tmp_path):
    topic, group = f"prom-{secrets.token_hex(3)}", f"prom-group-{secrets.token_hex(3)}"
    Admin(cluster).create_topic(topic, partitions=1, virtual_partitions=2)
    producer = SteadyProducer(cluster, topic)
    consumer = Consumer(topic, group=group, connection=cluster, from_beginning=True, auto_commit_interval_ms=500)
    closed, prometheus = False, None
    try:
        assert wait_until(lambda: producer.sent >= 20), "the producer is running"
        targets_file = tmp_path / "mafka4-targets.json"
        shown = write_targets(targets_file)
        assert "controller" in shown, f"the active controller names its metrics address: {shown}"
        prometheus = PrometheusServer(tmp_path, targets_file)
        assert wait_until(prometheus.ready), "Prometheus started"
        assert wait_until(lambda: prometheus.query("mafka4_controller_active == 1")), "the controller is scraped"
        assert float(prometheus.query("sum(mafka4_controller_elections_won_total)")[0]["value"][1]) >= 1

        lag_seconds = f'mafka4_group_lag_seconds{{group="{group}",topic="{topic}"}}'
        consumed, last_poll_at = 0, 0.0

        def consuming_and_scraped() -> bool:
            nonlocal consumed, last_poll_at
            consumed += len(consumer.poll(timeout_ms=200))
            last_poll_at = time.time()
            return consumed > 0 and len(prometheus.query(lag_seconds)) == 2  # one series per VP
        assert wait_until(consuming_and_scraped, timeout_s=120), prometheus.query(
            f'{{__name__=~"mafka4_group_lag.*",group="{group}"}}')
        consumer.close()  # commits what it read, and leaves: nothing is read from its last poll on
        closed, paused_at = True, last_poll_at

        def lagging_the_pause() -> list | None:
            lags = prometheus.query(lag_seconds)
            return lags if len(lags) == 2 and all(float(s["value"][1]) >= PAUSE_S for s in lags) else None
        assert wait_until(lagging_the_pause, timeout_s=PAUSE_S + 60, interval_s=1), prometheus.query(lag_seconds)
        # When each VP's oldest message not read was written, by the lag a scrape reported and when
        # that scrape was: the time of the pause, within a poll and a feed round.
        counted_from = prometheus.query(f"timestamp({lag_seconds}) - {lag_seconds}")
        assert len(counted_from) == 2, counted_from
        for sample in counted_from:
            assert abs(float(sample["value"][1]) - paused_at) <= LAG_TOLERANCE_S, (paused_at, counted_from)
        lag_messages = prometheus.query(f'sum(mafka4_group_lag_messages{{group="{group}",topic="{topic}"}})')
        assert float(lag_messages[0]["value"][1]) > 0, "messages produced during the pause are not committed"
    finally:
        if not closed:
            consumer.close()
        producer.stop()
        if prometheus is not None:
            prometheus.stop()
