"""``VirtualConsumer``: reads every virtual partition (VP) of a mafka4-mode topic, without a group.

It reads every lane of the topic (the trunk and each lane: the whole topic, as a tool would), or
only the lanes it is given (``lanes``; "" names the trunk).

    consumer = VirtualConsumer("orders", from_beginning=True)
    for message in consumer.poll(timeout_ms=500): ...      # message.partition is the VP id
    consumer.seek(vp, offset); consumer.position(vp); consumer.close()

The same interface as the group-less ``Consumer`` (``poll``, ``seek``, ``seek_to_time``,
``position``, ``assignment``, ``close``), with VP ids and VP offsets in place of physical
partitions and offsets; ``Consumer(topic)`` of a mafka4-mode topic is one of these. Messages
are the producer's records: the source header the feeder added (``vp_records.SOURCE_HEADER``) is
stripped. Fetching is ``VpFetcher``'s; the poll loop and seeking by time are ``client.reading``'s.

Parent before child, for this reader's own positions: it fetches only the VPs
``TopicLayout.consumable_vps`` gives for them, i.e. a child of a split or merge only once the
reader read each parent to its sealed end (or retention retired the parent), so each key's
messages arrive in produce order across any reshard. A VP that appears after the reader
started (a child) is read from its start; at construction every VP known and not retired is
positioned at its start (``from_beginning``) or at its high watermark. The reader re-reads the
metadata every ``metadata_max_age_ms``, and every ``RESHARD_CHECK_INTERVAL_S`` while it waits for
a closed VP's sealed end, which the parent's leader node records once the parent is complete.
"""

from __future__ import annotations

from typing import Any, Iterable

from mafka4.client.message import Message, new_member_id
from mafka4.client.positions import start_offset
from mafka4.client.reading import poll_until, seek_to_time
from mafka4.client.cluster_access import cluster_access
from mafka4.client.cluster_metadata import topic_metadata
from mafka4.client.vp_fetcher import VpFetcher
from mafka4.errors import PartitionNotAssigned, WrongReadMode
from mafka4.limits import RESHARD_CHECK_INTERVAL_S, ConsumerConfig, ReadMode
from mafka4.names import validate_reader_lanes, validate_topic_name


class VirtualConsumer:
    def __init__(self, topic: str, connection: object = None, from_beginning: bool = False,
                 lanes: Iterable[str] | None = None, **settings: Any):
        """``connection``: which cluster, as ``client.cluster_access`` reads it (None: the environment's or the
        local one). ``lanes``: read only these ("" the trunk); None: every lane. ``settings`` are
        ``ConsumerConfig`` fields (fetch_bytes_max, fetch_wait_ms_max, ...)."""
        self.topic = validate_topic_name(topic)
        self.lanes = None if lanes is None else frozenset(validate_reader_lanes(list(lanes)) or ("",))
        self.config = ConsumerConfig(**settings)
        access = cluster_access(connection)
        metadata = topic_metadata(access, topic)
        if metadata.config.read_mode is not ReadMode.MAFKA4:
            raise WrongReadMode(
                f"topic {topic!r} is in read_mode={metadata.config.read_mode.value!r}: it has no virtual partitions; "
                f"read it with Consumer (physical partitions)"
            )
        self.reader_id = new_member_id()
        self._fetcher = VpFetcher(access, metadata, self.config, self.reader_id)
        vps = sorted(vp for vp in set(self._fetcher.states) - self._fetcher.retired  # a retired VP's logs are gone
                     if self._reads(vp))
        for vp, log_range in zip(vps, self._fetcher.list_offsets_many(vps)):
            self._fetcher.seek(vp, start_offset(None, log_range, from_beginning))
            self._fetcher.high_watermarks[vp] = log_range[1]
        self._update_fetching()

    @property
    def member_id(self) -> None:
        """None: a reader without a group is no group's member (``reader_id`` names it to the read nodes)."""
        return None

    # --- positions ------------------------------------------------------------------------

    def assignment(self) -> list[int]:
        """The VPs read now (readable and not read to their sealed end)."""
        return sorted(self._fetcher.fetching)

    def position(self, vp: int) -> int:
        return self._fetcher.positions[vp]

    def seek(self, vp: int, offset: int) -> None:
        if vp not in self._fetcher.positions:
            raise PartitionNotAssigned(
                f"virtual partition {vp} of {self.topic!r} does not exist (virtual partitions: "
                f"{sorted(self._fetcher.positions)})")
        self._fetcher.seek(vp, offset)
        self._update_fetching()

    def seek_to_time(self, timestamp_ms: int) -> None:
        """Move every VP read now to its first message at or after ``timestamp_ms`` (or its end)."""
        seek_to_time(self._fetcher, self.assignment(), timestamp_ms)

    # --- parent before child ----------------------------------------------------------------

    def _update_fetching(self) -> None:
        fetcher = self._fetcher
        for vp in fetcher.states:
            fetcher.positions.setdefault(vp, 0)  # a VP born after this reader started: all of it is new
        consumable = {vp for vp in fetcher.layout.consumable_vps(fetcher.positions, fetcher.sealed_end_offsets,
                                                                   fetcher.retired) if self._reads(vp)}
        for vp in fetcher.fetching - consumable:
            fetcher.stop(vp)
        fetcher.fetching |= consumable

    def _reads(self, vp: int) -> bool:
        """Whether ``vp`` is in a lane this reader reads."""
        return self.lanes is None or self._fetcher.layout.lane_of(vp) in self.lanes

    def _waiting_for_a_seal(self) -> bool:
        """True if a closed VP read to its current end has no sealed end yet (its children wait on it)."""
        fetcher = self._fetcher
        return any(not fetcher.layout.is_active(vp) and vp not in fetcher.sealed_end_offsets
                   and fetcher.positions[vp] >= fetcher.high_watermarks.get(vp, 0) for vp in fetcher.fetching)

    def _refresh_if_due(self) -> None:
        fetcher = self._fetcher
        waiting = self._waiting_for_a_seal()
        age_s = fetcher.metadata_age_s
        if age_s < self.config.metadata_max_age_ms / 1000 and not (waiting and age_s >= RESHARD_CHECK_INTERVAL_S):
            return
        fetcher.refresh()
        self._update_fetching()

    # --- polling ----------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 1000) -> list[Message]:
        """Messages that arrived, up to ``poll_messages_max``; waits at most ``timeout_ms`` for some."""
        return poll_until(timeout_ms, self._refresh_if_due, self._fetch)

    def _fetch(self, remaining_s: float) -> list[Message]:
        messages = self._fetcher.fetch(min(remaining_s, RESHARD_CHECK_INTERVAL_S))
        if messages:
            self._update_fetching()  # a parent read to its sealed end lets its children in
        return messages

    def close(self) -> None:
        """Stop fetching (there is no group to leave)."""
        self._fetcher.close()

    def __enter__(self) -> "VirtualConsumer":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
