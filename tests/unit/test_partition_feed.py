"""``PartitionFeed``: a read node's stream of one physical partition into its local VP leaders.

Each test runs the real stream on an asyncio loop against fakes of what it calls remotely: a
physical replica (``fetch.remote`` / ``list_offsets.remote`` return awaitable futures, the fetch
long-polls for new batches) and an in-memory metadata store (the hold keys, and the topic's
metadata that a real ``TopicView`` reads). The VP leaders are real ``HostedVp`` logs. Waits
are bounded loops on a condition, never sleeps that must be long enough.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from mafka4 import batch_frame, batch_payload
from mafka4.client.partitioner import message_hash_column
from mafka4.clocks import wall_ms
from mafka4.compression import Codec
from mafka4.errors import OffsetOutOfRange, RequestTimedOut
from mafka4.limits import TopicConfig
from mafka4.limits.servers import FeederConfig, LogConfig
from mafka4.log.read_loss import LostRange
from mafka4.metadata import keys
from mafka4.metadata.store import Versioned
from mafka4.physical.actor import FetchResult
from mafka4.physical.partition_state import PartitionState
from mafka4.risr.state import RisrConfig
from mafka4.virtual.hosted_vp import HostedVp, VpId
from mafka4.virtual.layout import TopicLayout
from mafka4.virtual.partition_feed import PartitionFeed
from mafka4.virtual.ranges import message_hash
from mafka4.virtual.topic_view import TopicView
from mafka4.virtual.vp_records import lost_range_of, route_batch, source_of
from mafka4.virtual.vp_state import VirtualPartitionState, epoch_to_json

CLUSTER, TOPIC, NODE = "test", "orders", "n1"
PRODUCER_ID = 5
FEEDER_CONFIG = FeederConfig(fetch_wait_ms_max=20, call_timeout_ms=5_000, retry_backoff_ms=10,
                             metadata_max_age_ms=600_000, hold_ms_max=600_000)
LOG_CONFIG = LogConfig(segment_bytes_max=64 * 1024, flush_interval_ms=None)
READ_ALL_BYTES = 1 << 22
WAIT_STEPS_MAX = 2_000  # of 5 ms: a condition not met in 10 s is a failure


# --- fakes of the remote side ---------------------------------------------------------------


class Remote:
    """One actor method: ``remote(...)`` returns an awaitable future, as a Ray handle does."""

    def __init__(self, function):
        self._function = function

    def remote(self, *args):
        return asyncio.ensure_future(self._function(*args))


class FakePhysical:
    """A physical replica's committed log: whole stamped batches from ``log_start``."""

    def __init__(self, batches: list[bytes] = (), failures: int = 0):
        self.batches = list(batches)
        self.failures = failures  # the first fetches fail, as those of a restarting replica do
        self.fetches = 0
        self._appended = asyncio.Event()
        self.fetch = Remote(self._fetch)
        self.list_offsets = Remote(self._list_offsets)

    @property
    def log_start(self) -> int:
        return batch_frame.read_header(self.batches[0]).base_offset if self.batches else 0

    @property
    def high_watermark(self) -> int:
        return batch_frame.read_header(self.batches[-1]).next_offset if self.batches else 0

    def append(self, batches: list[bytes]) -> None:
        self.batches.extend(batches)
        self._appended.set()
        self._appended = asyncio.Event()

    async def _fetch(self, offset: int, bytes_max: int, wait_ms: int, from_follower: bool) -> FetchResult:
        self.fetches += 1
        if self.fetches <= self.failures:
            raise ConnectionError("the replica's actor is restarting")
        if offset < self.log_start:
            raise OffsetOutOfRange(f"offset {offset} is below the log start {self.log_start}")
        if offset >= self.high_watermark:
            try:
                await asyncio.wait_for(self._appended.wait(), wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        data = b"".join(b for b in self.batches if batch_frame.read_header(b).next_offset > offset)
        return FetchResult(data, self.high_watermark, self.log_start, self.high_watermark)

    async def _list_offsets(self) -> tuple[int, int]:
        return self.log_start, self.high_watermark


class FakeStore:
    """The few ``MetadataStore`` calls a feed stream and a ``TopicView`` make, in memory."""

    def __init__(self):
        self.items: dict[str, tuple[object, int]] = {}
        self.revision = 0
        self.full_reads = 0  # get_prefixes calls (a topic view's full reads)

    def put(self, key: str, value, lease=None) -> int:
        self.revision += 1
        self.items[key] = (value, self.revision)
        return self.revision

    def delete_if(self, key: str, mod_revision: int) -> bool:
        if key in self.items and self.items[key][1] == mod_revision:
            del self.items[key]
            return True
        return False

    def delete_prefix(self, prefix: str) -> None:
        for key in [key for key in self.items if key.startswith(prefix)]:
            del self.items[key]

    def prefix_changes(self, prefixes, after_revision: int) -> tuple[dict[str, tuple[int, int]], int]:
        found = {prefix: [revision for key, (_, revision) in self.items.items() if key.startswith(prefix)]
                 for prefix in prefixes}
        return {prefix: (len(revisions), sum(1 for r in revisions if r > after_revision))
                for prefix, revisions in found.items()}, self.revision

    def get_prefixes(self, prefixes) -> dict[str, list[Versioned]]:
        self.full_reads += 1
        return {prefix: [Versioned(key, value, revision) for key, (value, revision) in sorted(self.items.items())
                         if key.startswith(prefix)] for prefix in prefixes}

    def under(self, prefix: str) -> dict[str, object]:
        return {key: value for key, (value, _) in self.items.items() if key.startswith(prefix)}


# --- the topic, its batches and its VPs --------------------------------------------------------


def physical_batches(first: int, end: int, per_batch: int = 5, codec: Codec = Codec.NONE) -> list[bytes]:
    """Stamped batches of keyed records at offsets [first, end)."""
    batches = []
    for base in range(first, end, per_batch):
        count = min(per_batch, end - base)
        items = [(b"k%d" % ((base + i) % 17), b"v%d" % (base + i), 1_000 + base + i, None) for i in range(count)]
        batch = bytearray(batch_payload.encode_batch(items, producer_id=PRODUCER_ID, base_sequence=base, codec=codec))
        batch_frame.stamp(batch, base, 0)
        batches.append(bytes(batch))
    return batches


def vp_of(layout: TopicLayout, offset: int) -> int:
    key = b"k%d" % (offset % 17)
    return layout.vp_for(0, offset, message_hash(key, 0, PRODUCER_ID, offset, offset))


def offsets_of(layout: TopicLayout, vp: int, first: int, end: int) -> list[int]:
    return [offset for offset in range(first, end) if vp_of(layout, offset) == vp]


def vp_state(layout: TopicLayout, vp: int, leader: str = NODE, leader_epoch: int = 0) -> VirtualPartitionState:
    return VirtualPartitionState(vp, layout.current.ranges.range_of(vp), leader, leader_epoch, (leader,), (leader,))


class Topic:
    """One physical partition (led by w0) and its VPs; ``leaders`` are this node's VP leaders."""

    def __init__(self, root: Path, layout: TopicLayout, led_elsewhere=(), follower: FakePhysical | None = None):
        self.root = root
        self.store = FakeStore()
        self.physical = FakePhysical()
        self.follower = follower  # w1, in the ISR when given
        replicas = ("w0",) if follower is None else ("w0", "w1")
        self.leaders: dict[int, HostedVp] = {}
        self.losses: list[LostRange] = []
        self.fed_closed: list[int] = []
        self.layout = layout
        partition = PartitionState(0, "w0", 0, replicas, replicas)
        self.store.put(keys.physical_partition(CLUSTER, TOPIC, 0), partition.to_json())
        self.store.put(keys.split_epoch(CLUSTER, TOPIC, 0), epoch_to_json(layout.epochs[0]))
        for vp in layout.current.ranges.vp_ids:
            leader = "n2" if vp in led_elsewhere else NODE
            self.store.put(keys.virtual_partition(CLUSTER, TOPIC, vp), vp_state(layout, vp, leader).to_json())
        config = TopicConfig(partitions=1, read_mode="mafka4", virtual_partitions=len(layout.current.ranges))
        self.view = TopicView(CLUSTER, TOPIC, config, lambda: self.store, FEEDER_CONFIG.metadata_max_age_ms)
        self.feed = PartitionFeed(self.view, 0, NODE, FEEDER_CONFIG, leaders=lambda: self.leaders,
                                  physical=lambda replica_id: {"w0": self.physical, "w1": self.follower}[replica_id],
                                  open_store=lambda: self.store, record_loss=self.losses.append,
                                  on_fed=lambda topic, vp: self.fed_closed.append(vp))

    def lead(self, vp: int, leader_epoch: int = 0, directory: str | None = None) -> HostedVp:
        hosted = HostedVp(VpId(TOPIC, vp), NODE, self.root / (directory or f"v{vp}"), LOG_CONFIG, RisrConfig(), 0,
                          lambda hosted, ready: None)
        hosted.become_leader(leader_epoch, (NODE,), (NODE,), now_ms=0)
        self.leaders[vp] = hosted
        return hosted

    async def start(self) -> None:
        await self.view.refresh()
        self.feed.start()

    async def stop(self) -> None:
        self.feed.close()
        await asyncio.sleep(0)
        for hosted in self.leaders.values():
            hosted.close()


def vp_records(hosted: HostedVp) -> list[batch_payload.Record]:
    return batch_payload.decode_batches(hosted.read(0, READ_ALL_BYTES, now_ms=0).data)


def sources(hosted: HostedVp) -> list[int]:
    """The physical offsets (of partition 0) the VP's log holds, in VP offset order, markers left out."""
    return [source_of(record)[1] for record in vp_records(hosted) if lost_range_of(record) is None]


async def until(condition, what: str) -> None:
    for _ in range(WAIT_STEPS_MAX):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


# --- feeding ----------------------------------------------------------------------------------


def test_every_record_ends_in_exactly_one_local_vp_leader_and_other_vps_records_are_dropped(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=3)
        topic = Topic(tmp_path, layout, led_elsewhere=(2,))
        topic.physical.append(physical_batches(0, 30))
        vp0, vp1 = topic.lead(0), topic.lead(1)
        await topic.start()
        await until(lambda: topic.feed.next_offset == 30, "the stream to pass the first batches")
        topic.physical.append(physical_batches(30, 50, per_batch=7))  # while the stream long-polls
        await until(lambda: topic.feed.next_offset == 50, "the stream to pass the new batches")
        assert sources(vp0) == offsets_of(layout, 0, 0, 50)
        assert sources(vp1) == offsets_of(layout, 1, 0, 50)
        assert offsets_of(layout, 2, 0, 50), "VP 2 has records: they are left to the node that leads it"
        # records_fed counts what this node's VPs took: VP 2's records were placed, not built.
        fed_here = len(offsets_of(layout, 0, 0, 50)) + len(offsets_of(layout, 1, 0, 50))
        assert topic.feed.stats["records_fed"] == fed_here and topic.feed.stats["resumes"] == 1
        await topic.stop()

    asyncio.run(scenario())


def test_rounds_of_an_idle_partition_visit_no_vp_once_every_vp_heard_where_the_stream_stands(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=4)
        topic = Topic(tmp_path, layout)
        topic.physical.append(physical_batches(0, 30))
        vps = [topic.lead(vp) for vp in range(4)]
        reports: list[tuple[int, int, int]] = []
        for vp, hosted in enumerate(vps):
            def fed(epoch, partition, fed_through, high_watermark, now_ms, fed=hosted.core.fed, vp=vp):
                reports.append((vp, fed_through, high_watermark))
                fed(epoch, partition, fed_through, high_watermark, now_ms)
            hosted.core.fed = fed
        visits: list[int] = []
        report = topic.feed._report
        def visit(vp, *args):
            visits.append(vp)
            return report(vp, *args)
        topic.feed._report = visit
        topic.feed.config = replace(FEEDER_CONFIG, report_interval_ms=50)  # quiet VPs hear a change soon
        await topic.start()
        await until(lambda: topic.feed.next_offset == 30 and topic.feed._settled is not None,
                    "every VP to hear that the stream is at 30")
        assert {(vp, 30, 30) for vp in range(4)} <= set(reports)
        heard, visited = len(reports), len(visits)
        rounds = topic.feed.stats["rounds"]
        await until(lambda: topic.feed.stats["rounds"] >= rounds + 5, "five idle rounds (long polls of 20 ms)")
        assert len(visits) == visited, "an idle round visits no VP"
        assert len(reports) == heard, "and tells none anything, however long it stays idle"
        assert all(hosted.core.describe(10**15)["feed_lagging_partitions"] == [] for hosted in vps), (
            "caught up and told nothing since: idle, not lagging")

        topic.physical.append(physical_batches(30, 35))
        await until(lambda: topic.feed.next_offset == 35 and topic.feed._settled is not None, "the news")
        news = reports[heard:]
        assert {(vp, 35, 35) for vp in range(4)} <= set(news), "a change reaches every VP"
        assert all(news.index((vp, 30, 30)) < news.index((vp, 35, 35)) for vp in range(4)), (
            "after a silence each VP first hears that it was still caught up, so its RISR dates that to now")
        assert all(hosted.core.describe(wall_ms())["feed_lagging_partitions"] == [] for hosted in vps)
        await topic.stop()

    asyncio.run(scenario())


def test_a_stream_describes_its_lag_behind_the_partition_s_high_watermark_in_messages_and_time(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
        topic = Topic(tmp_path, layout)
        topic.physical.append(physical_batches(0, 30))
        topic.lead(0), topic.lead(1)
        assert topic.feed.describe()["lag_messages"] is None, "no position before the first round"
        await topic.start()
        await until(lambda: topic.feed.next_offset == 30, "the stream to catch up")
        caught_up = topic.feed.describe()
        assert (caught_up["high_watermark"], caught_up["lag_messages"], caught_up["lag_ms"]) == (30, 0, 0)

        # The source answers an HW 10 past the batches it returns (as a follower answering before it
        # has fetched them would): 10 committed messages wait, their age growing from when it was seen.
        answer = topic.physical._fetch

        async def ahead(*args):
            result = await answer(*args)
            return replace(result, high_watermark=result.high_watermark + 10)
        topic.physical.fetch = Remote(ahead)
        topic.physical.append(physical_batches(30, 35))
        await until(lambda: topic.feed.describe()["high_watermark"] == 45, "an answer naming HW 45")
        await until(lambda: topic.feed.describe()["lag_ms"] > 0, "the unfed messages to age")
        behind = topic.feed.describe()
        assert (behind["next_offset"], behind["lag_messages"]) == (35, 10)
        await topic.stop()

    asyncio.run(scenario())


def test_a_topic_view_reads_its_metadata_again_only_when_some_of_it_changed_in_etcd(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=3)
        topic = Topic(tmp_path, layout)
        view, store = topic.view, topic.store
        await view.refresh()
        assert store.full_reads == 1 and set(view.states) == {0, 1, 2}
        generation = view.generation
        for _ in range(3):
            await view.refresh()
        assert store.full_reads == 1, "nothing changed: nothing read but the probe"
        assert view.generation == generation

        sealed = replace(view.states[1], sealed_end_offset=7)
        store.put(keys.virtual_partition(CLUSTER, TOPIC, 1), sealed.to_json())
        await view.refresh()
        assert store.full_reads == 2 and view.states[1].sealed_end_offset == 7 and view.sealed == {1}
        await view.refresh()
        assert store.full_reads == 2

        del store.items[keys.virtual_partition(CLUSTER, TOPIC, 2)]  # a deletion writes no revision
        await view.refresh()
        assert store.full_reads == 3 and set(view.states) == {0, 1}

    asyncio.run(scenario())


def test_compressed_batches_of_mixed_codecs_are_split_into_vp_batches_recompressed_with_their_codec(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
        topic = Topic(tmp_path, layout)
        codec_of = {}  # physical offset -> codec of its batch
        for first, end, codec in ((0, 20, Codec.ZSTD), (20, 30, Codec.NONE), (30, 45, Codec.LZ4), (45, 60, Codec.ZSTD)):
            topic.physical.append(physical_batches(first, end, per_batch=5, codec=codec))
            codec_of.update(dict.fromkeys(range(first, end), codec))
        vps = [topic.lead(0), topic.lead(1)]
        await topic.start()
        await until(lambda: topic.feed.next_offset == 60, "the stream to pass every batch")
        for vp, hosted in enumerate(vps):
            assert sources(hosted) == offsets_of(layout, vp, 0, 60)
            data = hosted.read(0, READ_ALL_BYTES, now_ms=0).data
            stored_codecs = set()
            for position, header in batch_frame.iter_batches(data):
                vp_batch = batch_payload.decode_batch(data, position)
                stored_codecs.add(header.codec)
                assert {codec_of[source_of(r)[1]] for r in vp_batch} == {header.codec}, "one codec per VP batch"
                assert [r.value for r in vp_batch] == [b"v%d" % source_of(r)[1] for r in vp_batch]
            assert stored_codecs == {Codec.ZSTD, Codec.NONE, Codec.LZ4}, f"VP {vp} holds every codec"
        await topic.stop()

    asyncio.run(scenario())


def test_a_hold_cuts_at_once_withholds_only_the_parent_and_a_release_feeds_the_children_from_the_cut(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
        topic = Topic(tmp_path, layout)
        topic.physical.append(physical_batches(0, 20))
        parent, other = topic.lead(0), topic.lead(1)
        await topic.start()
        await until(lambda: topic.feed.next_offset == 20, "the stream to reach 20")

        cut, revision = await topic.feed.hold("split-1", frozenset({0}), wait_ms_max=5_000)
        assert cut == 20, "the stream stands at its fed high: it offers where it is"
        hold_key = keys.feeder_hold(CLUSTER, TOPIC, 0, NODE)
        assert topic.store.items[hold_key] == ({"token": "split-1", "fed_through": 20}, revision)

        topic.physical.append(physical_batches(20, 40))
        await until(lambda: topic.feed.next_offset == 40, "the held stream to feed on")
        assert sources(parent) == offsets_of(layout, 0, 0, 20), "nothing at or past the cut reaches the parent"
        assert sources(other) == offsets_of(layout, 1, 0, 40), "the other VP is not paused"
        assert parent.core.fed_through(1)[0] <= 20, "the parent must not be sealed while the cut may still fail"

        epoch = layout.plan_split(0, (cut,), (cut,))  # what the reshard stores, with the children
        split = layout.append(epoch)
        children = tuple(vp_state(split, vp) for vp in epoch.children)
        topic.store.put(keys.split_epoch(CLUSTER, TOPIC, 1), epoch_to_json(epoch))
        for state in children:
            topic.store.put(keys.virtual_partition(CLUSTER, TOPIC, state.vp), state.to_json())
        topic.store.delete_prefix(keys.feeder_holds_prefix(CLUSTER, TOPIC, 0))
        left, right = (topic.lead(vp) for vp in epoch.children)
        topic.feed.release("split-1", (epoch, children))
        expected = len(offsets_of(layout, 0, 20, 40))  # the parent's range, now the children's
        await until(lambda: len(sources(left)) + len(sources(right)) == expected,
                    "the children to get the parent's records from the cut")
        topic.physical.append(physical_batches(40, 50))
        await until(lambda: topic.feed.next_offset == 50, "the stream to go on under the new epoch")

        assert sources(left) == offsets_of(split, epoch.children[0], 20, 50)
        assert sources(right) == offsets_of(split, epoch.children[1], 20, 50)
        assert sources(parent) == offsets_of(layout, 0, 0, 20)
        assert sources(other) == offsets_of(layout, 1, 0, 50), "the other VP dropped the repeats"
        assert split.is_sealed(0, parent.core.fed_through(1)), "the parent heard it was fed past its cut"
        assert 0 in topic.fed_closed, "the node hears that the closed parent may be sealed"
        await topic.stop()

    asyncio.run(scenario())


def test_a_hold_waits_until_no_vp_holds_a_record_at_or_past_the_cut(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
        topic = Topic(tmp_path, layout)
        everything = physical_batches(0, 50)
        parent, other = topic.lead(0), topic.lead(1)
        # VP 1 already holds records up to 35 (it was fed by the node that led it before).
        other.feed(0, [r for batch in everything for r in route_batch(batch, 0, layout).get(1, []) if r.offset < 36],
                   now_ms=0)
        fed_high = other.core.last_applied(0, 0) + 1
        assert fed_high > 30
        topic.physical.append(everything[:6])  # committed up to 30 only
        await topic.start()
        await until(lambda: topic.feed.next_offset == 30, "the stream to reach the physical HW")

        try:
            await topic.feed.hold("split-1", frozenset({0}), wait_ms_max=50)
            raise AssertionError("a cut below what VP 1 holds was offered")
        except RequestTimedOut:
            pass
        assert not topic.store.under(keys.feeder_holds_prefix(CLUSTER, TOPIC, 0)), "no hold key is left behind"

        topic.physical.append(everything[6:])
        await until(lambda: topic.feed.next_offset == 50, "the stream to pass what VP 1 holds")
        assert sources(parent) == offsets_of(layout, 0, 0, 50), "a hold that timed out withholds nothing"
        cut, _ = await topic.feed.hold("split-1", frozenset({0}), wait_ms_max=5_000)
        assert cut == 50 >= fed_high
        await topic.stop()

    asyncio.run(scenario())


def test_records_deleted_before_they_were_fed_are_recorded_as_lost_and_marked_in_the_vps_that_lacked_them(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
        topic = Topic(tmp_path, layout)
        everything = physical_batches(0, 50)
        vp0, vp1 = topic.lead(0), topic.lead(1)
        # VP 0 was fed up to offset 12, VP 1 up to 35 (a VP leader that failed over lost a longer tail).
        for hosted, fed_end in ((vp0, 13), (vp1, 36)):
            fed = [r for batch in everything for r in route_batch(batch, 0, layout).get(hosted.vp_id.vp, [])
                   if r.offset < fed_end]
            hosted.feed(0, fed, now_ms=0)
        first_lacking = vp0.core.last_applied(0, 0) + 1
        topic.physical.append(everything[6:])  # retention deleted offsets below 30
        await topic.start()
        await until(lambda: topic.feed.next_offset == 50, "the stream to go on past the loss")

        assert topic.losses == [LostRange(0, first_lacking, 30)]
        markers = [lost_range_of(r) for r in vp_records(vp0) if lost_range_of(r) is not None]
        assert markers == [(0, first_lacking, 30)]
        ordered = [lost_range_of(r) or source_of(r)[1] for r in vp_records(vp0)]
        assert ordered == [*offsets_of(layout, 0, 0, 13), (0, first_lacking, 30), *offsets_of(layout, 0, 30, 50)], \
            "consumers meet the loss in order, between the records around it"
        assert not any(lost_range_of(r) for r in vp_records(vp1)), "VP 1 already held its records there"
        assert sources(vp1) == offsets_of(layout, 1, 0, 50)
        assert topic.feed.stats["lost_ranges"] == 1
        await topic.stop()

    asyncio.run(scenario())


def test_a_vp_whose_leader_epoch_changed_makes_the_stream_resume_and_refeed_what_the_new_leader_lacks(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
        topic = Topic(tmp_path, layout)
        topic.physical.append(physical_batches(0, 20))
        old, other = topic.lead(0), topic.lead(1)
        await topic.start()
        await until(lambda: topic.feed.next_offset == 20, "the stream to reach 20")
        resumes = topic.feed.stats["resumes"]

        # VP 0 fails over to a replica of this node that holds only its records below 10.
        new = HostedVp(VpId(TOPIC, 0), NODE, tmp_path / "v0-new", LOG_CONFIG, RisrConfig(), 0, lambda h, r: None)
        new.become_leader(0, (NODE,), (NODE,), now_ms=0)
        held = [r for batch in physical_batches(0, 10) for r in route_batch(batch, 0, layout).get(0, [])]
        new.feed(0, held, now_ms=0)
        new.become_follower(1, "n2")
        new.become_leader(2, (NODE,), (NODE,), now_ms=0)
        topic.store.put(keys.virtual_partition(CLUSTER, TOPIC, 0), vp_state(layout, 0, leader_epoch=2).to_json())
        other_hold = keys.feeder_hold(CLUSTER, TOPIC, 0, "n2")  # a reshard holding VP 0's old node
        topic.store.put(other_hold, {"token": "split-9", "fed_through": 20})
        topic.leaders = {**topic.leaders, 0: new}  # the node builds a new dict on every role change
        topic.feed.wake()

        await until(lambda: sources(new) == offsets_of(layout, 0, 0, 20), "the new leader to be refed")
        await until(lambda: topic.feed.next_offset == 20, "the stream to stand at 20 again")
        assert topic.feed.stats["resumes"] == resumes + 1
        assert other_hold not in topic.store.items, "the old node's reshard is fenced out"
        assert sources(other) == offsets_of(layout, 1, 0, 20), "the other VP dropped the repeats"
        old.close()
        await topic.stop()

    asyncio.run(scenario())


def test_the_stream_reads_an_in_sync_follower_again_after_the_next_metadata_read(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=1)
        follower = FakePhysical(failures=1)
        topic = Topic(tmp_path, layout, follower=follower)
        topic.physical.append(physical_batches(0, 10))
        follower.append(physical_batches(0, 10))
        vp0 = topic.lead(0)
        await topic.start()
        await until(lambda: topic.feed.next_offset == 10, "the stream to read the leader while the follower fails")
        assert topic.feed.stats["source"] == "w0" and follower.fetches == 1
        await topic.view.refresh()
        await until(lambda: follower.fetches > 1, "the stream to try the follower again")
        topic.physical.append(physical_batches(10, 20))
        follower.append(physical_batches(10, 20))
        await until(lambda: topic.feed.next_offset == 20, "the stream to feed from the follower")
        assert topic.feed.stats["source"] == "w1", "the leader's write path is spared again"
        assert sources(vp0) == list(range(20))
        await topic.stop()

    asyncio.run(scenario())


# --- lanes ------------------------------------------------------------------------------------


def laned_batch(base: int, lanes: list[int]) -> bytes:
    """A stamped producer's batch (key-hash and lane-id columns) of keyed records at ``base``, record
    ``i`` in lane "blue" if ``lanes[i]``, else in the trunk."""
    records = [(i, b"k%d" % ((base + i) % 17), b"v%d" % (base + i),
                batch_payload.laned_headers("blue" if lane else "", None)) for i, lane in enumerate(lanes)]
    hashes = message_hash_column(records, PRODUCER_ID, 0, base)
    lane_ids = b"".join(lane.to_bytes(batch_payload.LANE_ID_BYTES, "big") for lane in lanes)
    batch = bytearray(batch_payload.encode_record_arrays(records, 1_000 + base, 1_000 + base + len(lanes),
                                                         PRODUCER_ID, base, message_hashes=hashes, lane_ids=lane_ids))
    batch_frame.stamp(batch, base, 0)
    return bytes(batch)


def test_a_stream_stops_at_a_lane_its_layout_lacks_until_it_reads_the_lanes_epoch_then_feeds_its_vp(tmp_path):
    async def scenario():
        layout = TopicLayout.initial(partitions=1, virtual_partitions=2)
        topic = Topic(tmp_path, layout)
        lanes = [0, 0, 1, 0, 1]
        topic.physical.append(physical_batches(0, 10) + [laned_batch(10, lanes)] + physical_batches(15, 20))
        vp0, vp1 = topic.lead(0), topic.lead(1)
        await topic.start()
        await until(lambda: topic.feed.stats["unknown_lane_rounds"] >= 3, "rounds to meet the unknown lane")
        assert topic.feed.next_offset == 12, "nothing at or past the lane's first record"
        assert sorted(sources(vp0) + sources(vp1)) == list(range(12))
        resumes = topic.feed.stats["resumes"]

        # The lane's epoch and VP are stored (as the Producer has them stored before it sends to the lane).
        opened = layout.append(layout.plan_open_lane("blue"))
        (blue,) = opened.current.children
        topic.store.put(keys.split_epoch(CLUSTER, TOPIC, 1), epoch_to_json(opened.epochs[1]))
        topic.store.put(keys.virtual_partition(CLUSTER, TOPIC, blue), VirtualPartitionState(
            blue, opened.current.range_of(blue), NODE, 0, (NODE,), (NODE,)).to_json())
        vp_blue = topic.lead(blue)
        await until(lambda: topic.feed.next_offset == 20, "the stream to go on past the lane's records")
        assert sources(vp_blue) == [12, 14]
        trunk = [offset for offset in range(20) if offset not in (12, 14)]
        assert sorted(sources(vp0) + sources(vp1)) == trunk
        assert sources(vp0) == [o for o in trunk if vp_of(opened, o) == 0]
        assert topic.feed.stats["resumes"] == resumes, (
            "a VP of a lane the stream's layout lacked holds nothing below where the stream stands: no refeed")
        await topic.stop()

    asyncio.run(scenario())
