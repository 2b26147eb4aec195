"""``metrics.exposition``: a process's metrics scraped over HTTP on loopback, then the port closed."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mafka4.metrics.exposition import MetricsServer, on_loop, start_on_loop
from mafka4.metrics.families import read_node_families

LOOPBACK = "127.0.0.1"
SCRAPE_TIMEOUT_S = 30  # a scrape answers at once here: this only keeps a broken server from hanging the test


def _scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=SCRAPE_TIMEOUT_S) as answer:
        assert answer.status == 200
        return answer.read().decode()


def _snapshot(hosted_vps: int) -> dict:
    return {"node_id": "r0", "hosted_vps": hosted_vps, "vps": {}, "feeds": {"orders": {0: {
        "next_offset": 10, "high_watermark": 25, "lag_messages": 15, "lag_ms": 1_500, "records_fed": 10,
        "errors": 0}}}}


def _closed(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=SCRAPE_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return True
    return False


def test_each_scrape_takes_a_new_snapshot_and_stop_closes_the_port():
    taken = []

    def snapshot() -> dict:
        taken.append(len(taken) + 1)
        return _snapshot(hosted_vps=len(taken))

    server = MetricsServer("read node r0", read_node_families, snapshot)
    address = server.start(LOOPBACK)
    try:
        assert address.startswith(f"{LOOPBACK}:") and not address.endswith(":0")
        assert server.start(LOOPBACK) == address, "started once"
        first, second = _scrape(address), _scrape(address)
        assert 'mafka4_read_node_hosted_vps{node="r0"} 1.0' in first
        assert 'mafka4_read_node_hosted_vps{node="r0"} 2.0' in second
        families = {family.name: family for family in text_string_to_metric_families(second)}
        [lag] = families["mafka4_feed_lag_seconds"].samples
        assert (lag.labels, lag.value) == ({"topic": "orders", "partition": "0", "node": "r0"}, 1.5)
    finally:
        server.stop()
    assert _closed(address)
    server.stop()  # again: nothing left to stop


def test_two_servers_in_one_process_expose_only_their_own_metrics():
    one = MetricsServer("one", read_node_families, lambda: _snapshot(hosted_vps=1))
    two = MetricsServer("two", read_node_families, lambda: {**_snapshot(hosted_vps=2), "node_id": "r1"})
    try:
        first, second = _scrape(one.start(LOOPBACK)), _scrape(two.start(LOOPBACK))
    finally:
        one.stop()
        two.stop()
    assert 'node="r0"' in first and 'node="r1"' not in first
    assert 'node="r1"' in second and 'node="r0"' not in second


def test_a_process_s_snapshot_is_taken_on_its_event_loop_while_the_scrape_waits_in_the_server_s_thread():
    async def scenario() -> tuple[str, list[bool]]:
        loop = asyncio.get_running_loop()
        on_the_loop = []

        async def take() -> dict:
            on_the_loop.append(asyncio.get_running_loop() is loop)
            return _snapshot(hosted_vps=7)

        server = start_on_loop("read node r0", read_node_families, take, LOOPBACK)
        try:
            return await asyncio.to_thread(_scrape, server.address), on_the_loop
        finally:
            await asyncio.to_thread(server.stop)

    text, on_the_loop = asyncio.run(scenario())
    assert 'mafka4_read_node_hosted_vps{node="r0"} 7.0' in text
    assert on_the_loop == [True]


def test_a_loop_that_takes_no_snapshot_in_time_fails_the_scrape_instead_of_serving_stale_figures():
    async def scenario() -> int:
        never = asyncio.Event()

        async def take() -> dict:
            await never.wait()
            return _snapshot(hosted_vps=1)

        server = MetricsServer("read node r0", read_node_families,
                               on_loop(asyncio.get_running_loop(), take, timeout_s=0.05))
        address = server.start(LOOPBACK)
        try:
            with pytest.raises(urllib.error.HTTPError) as failed:
                await asyncio.to_thread(_scrape, address)
            return failed.value.code
        finally:
            await asyncio.to_thread(server.stop)

    assert asyncio.run(scenario()) == 500
