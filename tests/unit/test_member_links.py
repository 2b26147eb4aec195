"""A group member's fetcher and group link share their connections: a joiner finds its coordinator
over the connection its metadata read opened, and fetches a VP its coordinator's node leads over
the coordinator's connection, so a join opens two connections where it opened four. Neither
closes what it shares (the consumer does). A real client port with stand-in handlers."""

from __future__ import annotations

from mafka4.client.client_loop import client_loop
from mafka4.client.group_link import GroupLink
from mafka4.client.node_links import NodeLinks
from mafka4.client.vp_fetcher import VpFetcher
from mafka4.limits import ConsumerConfig, TopicConfig
from mafka4.physical.partition_state import TopicMetadata
from mafka4.protocol.group_api import FindCoordinatorAnswer, FindCoordinatorRequest
from mafka4.protocol.messages import ApiKey
from tests.unit.test_group_membership import wait_until
from tests.unit.stand_in_ports import TOPIC, LongPolling, reads_come_to, stand_in_port


class Coordinating(LongPolling):
    """``LongPolling``'s read node ``r1``, which also coordinates every group."""

    def handlers(self) -> dict:
        return {**super().handlers(), ApiKey.FIND_COORDINATOR: self._find_coordinator}

    async def _find_coordinator(self, session, request, _buffers):
        return FindCoordinatorAnswer("r1", self.address), ()


def test_a_members_fetcher_and_group_link_share_their_connections_and_leave_them_to_their_owner():
    node = Coordinating()
    with stand_in_port(node) as (server, access, loop):
        links = NodeLinks(access)
        fetcher = VpFetcher(access, TopicMetadata(TOPIC, TopicConfig(partitions=1, read_mode="mafka4"), ()),
                            ConsumerConfig(fetch_wait_ms_max=10), "reader-1", links)
        link = GroupLink(access, "billing", 30.0, links)
        try:
            assert isinstance(link.call(lambda _: FindCoordinatorRequest("billing")), FindCoordinatorAnswer)
            fetcher.seek(0, 0)
            fetcher.fetching.add(0)
            fetcher.fetch(0.05)
            reads_come_to(node, 1)  # sent by now, received a moment later
            assert node.requests, "VP 0 was fetched"
            # The metadata read's connection answered FIND_COORDINATOR too; the coordinator's served the fetch.
            assert server.counters["connections"] == 2
            fetcher.close()
            link.close()
            assert server.counters["connections_open"] == 2, "the consumer owning the links closes them"
        finally:
            client_loop().run(links.close_after_cancelled())
        # The port counts a connection closed once its reader sees the end: wait for it, bounded.
        wait_until(lambda: server.counters["connections_open"] == 0)


def test_a_member_owning_nothing_connects_ahead_to_its_topics_vp_leaders_and_its_first_fetch_uses_that():
    """A joiner waiting for its child opens the leaders' connections before its claim
    (``VpFetcher.connect_ahead``): the child's first fetch opens none."""
    node = LongPolling()
    with stand_in_port(node) as (server, access, loop):
        links = NodeLinks(access)
        fetcher = VpFetcher(access, TopicMetadata(TOPIC, TopicConfig(partitions=1, read_mode="mafka4"), ()),
                            ConsumerConfig(fetch_wait_ms_max=10), "reader-1", links)
        try:
            assert server.counters["connections"] == 1, "the metadata read's"
            fetcher.connect_ahead(0)
            fetcher.connect_ahead(8)
            wait_until(lambda: server.counters["connections"] == 2)
            fetcher.seek(0, 0)
            fetcher.fetching.add(0)
            fetcher.fetch(0.05)
            reads_come_to(node, 1)  # sent by now, received a moment later
            assert node.requests, "VP 0 was fetched"
            assert server.counters["connections"] == 2, "over the connection opened ahead (one per node, however asked)"
        finally:
            fetcher.close()
            client_loop().run(links.close_after_cancelled())
        wait_until(lambda: server.counters["connections_open"] == 0)
