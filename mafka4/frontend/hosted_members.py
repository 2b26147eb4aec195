"""A group member as its coordinator hosts it: the group protocol's steps, in the protocol's messages.

The steps are those a consumer ran against etcd itself before (``coordinator.groups``): a
``PartitionMemberHost`` is a Mafka3-mode ``GroupMember`` (eager rebalance), a ``VirtualMemberHost``
a mafka4-mode ``VirtualGroupMember`` (VP ownership, the split on join). Each turns the member's
requests (``protocol.group_api``) into those steps and their results into answers; nothing of
the protocol changes, so both modes keep their guarantees. Every method blocks on etcd: the
coordinator (``frontend.group_sessions``) calls them off its event loop, one at a time per member.

A mafka4-mode member that the plan makes the splitter asks the controller for the split (an
intent) on a thread of its own, as the consumer did, so its syncs do not wait for the split. One
at a time: a sync whose plan names a split while the last one is still asked for (its epoch is
stored, and its event woke the member, before the controller hosted the children and answered)
does not ask, and the member's wake rule counts that split as asked (``vp_wakes.LastAnswer``),
so no event asks for it again: the end of the split under way wakes the member, whose next sync
asks. Else a split done wakes nobody by itself (the new epoch's watch event wakes whom it
concerns); a split refused wakes its member after ``VP_GROUP_SPLIT_RETRY_INTERVAL_S``, to ask again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Iterable, Mapping, Protocol

from mafka4.coordinator.groups.group_hub import GroupHub
from mafka4.coordinator.groups.membership import MembershipFactory
from mafka4.coordinator.groups.partition_groups import GroupMember, GroupStore
from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, MemberInfo, TopicPartition
from mafka4.coordinator.groups.vp_groups import (VirtualGroupMember, VirtualGroupSnapshot, VirtualGroupStore,
                                                 VpOffset, VpSyncResult)
from mafka4.errors import InvalidConfig, MafkaError, WrongReadMode
from mafka4.names import lane_topic_name
from mafka4.join_trace import JOIN_TRACES, vps_detail
from mafka4.limits import RESHARD_INTENT_WAIT_S, VP_GROUP_SPLIT_RETRY_INTERVAL_S, ConsumerConfig
from mafka4.log.epochs import NO_EPOCH
from mafka4.metadata import intents
from mafka4.metadata.intents import IntentKind
from mafka4.metadata.store import MetadataStore
from mafka4.physical.topics import TopicStore
from mafka4.protocol.group_api import (Claimed, GroupCommitAnswer, GroupJoinAnswer, GroupSyncAnswer, IdOffset,
                                       MemberPosition)
from mafka4.protocol.vp_api import VpMetadataAnswer, VpStateInfo
from mafka4.virtual.vp_state import epochs_to_json

logger = logging.getLogger(__name__)


class HostedMember(Protocol):
    """What the coordinator asks of a member it hosts (each call blocks on etcd)."""

    member_id: str
    changed: threading.Event

    def join(self) -> GroupJoinAnswer: ...

    def sync(self, positions: tuple[MemberPosition, ...]) -> GroupSyncAnswer: ...

    def commit(self, positions: tuple[MemberPosition, ...]) -> GroupCommitAnswer: ...

    def leave(self, positions: tuple[MemberPosition, ...]) -> None: ...

    def seed(self, offsets: tuple[IdOffset, ...]) -> bool: ...


class PartitionMemberHost:
    """A Mafka3-mode member (``GroupMember``) of ``group`` reading ``topic``'s physical partitions."""

    def __init__(self, store: GroupStore, group: str, member: MemberInfo, config: ConsumerConfig,
                 membership: MembershipFactory):
        self.member_id, self._topic = member.member_id, member.topic
        self._member = GroupMember(store, group, member, config, membership)
        self.changed = self._member.changed

    def join(self) -> GroupJoinAnswer:
        self._member.join()
        return GroupJoinAnswer(self.member_id, False, ())

    def sync(self, positions: tuple[MemberPosition, ...]) -> GroupSyncAnswer:
        result = self._member.sync(self._positions(positions))
        return GroupSyncAnswer(tuple(tp.partition for tp in result.revoked),
                               tuple(Claimed(tp.partition, None if committed is None else committed.offset, NO_EPOCH)
                                     for tp, committed in sorted(result.claimed.items())),
                               tuple(tp.partition for tp in result.owned), result.waiting, (), (), None)

    def commit(self, positions: tuple[MemberPosition, ...]) -> GroupCommitAnswer:
        committed, lost = self._member.commit(self._positions(positions))
        return GroupCommitAnswer(tuple(sorted(tp.partition for tp in committed)),
                                 tuple(sorted(tp.partition for tp in lost)))

    def leave(self, positions: tuple[MemberPosition, ...]) -> None:
        self._member.leave(self._positions(positions))

    def seed(self, offsets: tuple[IdOffset, ...]) -> bool:
        raise InvalidConfig(f"member {self.member_id} reads the physical partitions of {self._topic!r}: only a "
                            f"group of a mafka4-mode topic seeds its offsets")

    def _positions(self, positions: tuple[MemberPosition, ...]) -> dict[TopicPartition, int]:
        return {TopicPartition(self._topic, p.id): p.offset for p in positions}


class VirtualMemberHost:
    """A mafka4-mode member (``VirtualGroupMember``) of ``group`` reading ``topic``'s VPs."""

    def __init__(self, store: VirtualGroupStore, group: str, member: MemberInfo, config: ConsumerConfig,
                 membership: MembershipFactory):
        self.member_id, self._group, self._topic, self._store = member.member_id, group, member.topic, store
        topic_config = TopicStore(store, store.cluster).get(member.topic).config
        self._member = VirtualGroupMember(store, group, member.topic, topic_config, member.member_id, config,
                                          membership, member.lanes)
        self.changed = self._member.changed
        self._split_lock = threading.Lock()  # guards the three fields below
        self._splitter: threading.Thread | None = None  # the split asked for now, until its answer is handled
        self._split_failed_at = 0.0
        self._split_deferred = False  # a sync named a split while one was asked for: wake when it ends

    def join(self) -> GroupJoinAnswer:
        before = self._member.join()
        sealed = before.view().sealed_end_offsets
        return GroupJoinAnswer(self.member_id, bool(before.offsets), _id_offsets(sealed))

    def sync(self, positions: tuple[MemberPosition, ...]) -> GroupSyncAnswer:
        JOIN_TRACES.record(self._topic, "sync_received", self.member_id)
        result = self._member.sync(self._positions(positions))
        if JOIN_TRACES.on(self._topic):
            self._trace_sync(result)
        claimed = tuple(Claimed(vp, None, NO_EPOCH) if committed is None
                        else Claimed(vp, committed.offset, committed.leader_epoch)
                        for vp, committed in sorted(result.claimed.items()))
        if result.snapshot is None:  # etcd did not answer: the member keeps what it knew
            return GroupSyncAnswer(result.revoked, claimed, result.owned, "the coordinator could not read the group",
                                   (), (), None)
        if result.plan is not None and result.plan.split is not None:
            self._start_split(result.plan.split)
        return GroupSyncAnswer(result.revoked, claimed, result.owned, None,
                               _id_offsets(result.snapshot.view().sealed_end_offsets),
                               _id_offsets({vp: o.offset for vp, o in result.snapshot.offsets.items()}),
                               claimed_vp_metadata(self._topic, result.snapshot, result.claimed) if claimed else None)

    def _trace_sync(self, result: VpSyncResult) -> None:
        """Rows of a traced topic's join (``mafka4.join_trace``): what this sync released and claimed."""
        if result.plan is not None and result.plan.release:
            JOIN_TRACES.record(self._topic, "released", self.member_id, vps_detail(result.plan.release))
        if result.claimed:
            JOIN_TRACES.record(self._topic, "claimed", self.member_id, vps_detail(result.claimed))

    def commit(self, positions: tuple[MemberPosition, ...]) -> GroupCommitAnswer:
        committed, lost = self._member.commit(self._positions(positions))
        return GroupCommitAnswer(tuple(sorted(committed)), tuple(sorted(lost)))

    def leave(self, positions: tuple[MemberPosition, ...]) -> None:
        # A split this member asked for is not waited for (up to RESHARD_INTENT_WAIT_S, on one of
        # the coordinator's few group threads): the controller carries it out for the group, and
        # the asking thread closes its own etcd client.
        self._member.leave(self._positions(positions))

    def seed(self, offsets: tuple[IdOffset, ...]) -> bool:
        return self._store.seed_offsets(self._group, self._topic, {o.id: o.offset for o in offsets})

    @staticmethod
    def _positions(positions: tuple[MemberPosition, ...]) -> dict[int, VpOffset]:
        return {p.id: VpOffset(p.offset, p.high_watermark, p.leader_epoch) for p in positions}

    def _start_split(self, vp: int) -> None:
        with self._split_lock:
            if self._splitter is not None:
                self._split_deferred = True  # asked once the split under way ends (module docstring)
                return
            if time.monotonic() - self._split_failed_at < VP_GROUP_SPLIT_RETRY_INTERVAL_S:
                return  # the refusal's timer wakes the member when it may ask again
            splitter = self._splitter = threading.Thread(target=self._split, args=(vp,),
                                                         name=f"split-{self._topic}-v{vp}", daemon=True)
        splitter.start()

    def _split(self, vp: int) -> None:
        """The splitter thread: ask for the split, then let the next one be asked (``_start_split``)."""
        answered = False  # a refusal's timer wakes the member, any other failure wakes it at once
        try:
            answered = self._ask_split(vp)
        finally:
            with self._split_lock:
                self._splitter = None
                deferred, self._split_deferred = self._split_deferred, False
            if deferred and answered:
                # A sync named a split while this one was asked for, and did not ask for it; no
                # event will ask again (module docstring).
                self.changed.set()

    def _ask_split(self, vp: int) -> bool:
        """Ask for a split of ``vp`` with an etcd client of this thread's own; the group sees the new epoch by
        its watch. False if refused (or etcd did not answer): the member is woken to ask again later."""
        store: MetadataStore | None = None
        traced = JOIN_TRACES.on(self._topic)
        try:
            store = MetadataStore(self._store.endpoint)
            JOIN_TRACES.record(self._topic, "split_asked", self.member_id, str(vp))
            # A traced split's controller returns its own stamps in the result (``mafka4.join_trace``).
            done = intents.request(store, self._store.cluster, IntentKind.SPLIT, self._topic,
                                   {"vp": vp, **({"trace": True} if traced else {})}, RESHARD_INTENT_WAIT_S)
            for hop, ms in done.get("trace", ()) if traced else ():
                JOIN_TRACES.record(self._topic, hop, self.member_id, str(vp), ms)
            JOIN_TRACES.record(self._topic, "split_answered", self.member_id, str(vp))
            logger.info("group %s: member %s split %s/v%d", self._group, self.member_id, self._topic, vp)
            # No wake: the new split epoch's watch event wakes the members it asks something of
            # (``vp_wakes.asks_to_act``), this one only if it must act on it (or if a sync named
            # another split meanwhile: ``_split``).
            return True
        except MafkaError as error:
            with self._split_lock:
                self._split_failed_at = time.monotonic()
            logger.warning("group %s: split of %s/v%d not done (%s); the group tries again", self._group, self._topic,
                           vp, error)
            # The sync that asks again comes after the retry interval: before it, a sync would not
            # ask, and after it no event may come (the plan still names the split it asked for).
            retry = threading.Timer(VP_GROUP_SPLIT_RETRY_INTERVAL_S, self.changed.set)
            retry.daemon = True
            retry.start()
            return False
        except BaseException:
            self.changed.set()  # not a refusal: the next sync asks again at once
            raise
        finally:
            if store is not None:
                store.close()


def hosted_member(stores: "GroupStores", group: str, member: MemberInfo, config: ConsumerConfig,
                  changed: threading.Event) -> HostedMember:
    """The host of ``member``: by its assignor, a mafka4-mode or a Mafka3-mode member, on the
    coordinator's one lease and shared watches (``GroupHub``), waking ``changed``."""
    membership = stores.hub().membership(changed)
    if member.assignor == VIRTUAL_ASSIGNOR:
        return VirtualMemberHost(stores.virtual(), group, member, config, membership)
    if member.lanes:
        raise WrongReadMode(
            f"topic {member.topic!r} is in read_mode='mafka3': its lanes are topics of their own; read lane "
            f"{member.lanes[-1]!r} as topic {lane_topic_name(member.topic, member.lanes[-1])!r} (group {group!r}), "
            f"without a lane")
    return PartitionMemberHost(stores.partition(), group, member, config, membership)


class GroupStores:
    """A coordinator's etcd clients for its members, opened on first use: one per protocol, and the
    hub's (its lease and watches: a failed call on a client ends every watch on it)."""

    def __init__(self, endpoint: str, cluster: str, name: str):
        self._endpoint, self._cluster, self._name = endpoint, cluster, name
        self._lock = threading.Lock()
        self._partition: GroupStore | None = None
        self._virtual: VirtualGroupStore | None = None
        self._hub: tuple[GroupHub, MetadataStore] | None = None

    def hub(self) -> GroupHub:
        with self._lock:
            if self._hub is None:
                store = GroupStore(self._endpoint, self._cluster)
                self._hub = (GroupHub(store, self._name), store)
            return self._hub[0]

    def partition(self) -> GroupStore:
        with self._lock:
            if self._partition is None:
                self._partition = GroupStore(self._endpoint, self._cluster)
            return self._partition

    def virtual(self) -> VirtualGroupStore:
        with self._lock:
            if self._virtual is None:
                self._virtual = VirtualGroupStore(self._endpoint, self._cluster)
            return self._virtual

    def close(self) -> None:
        """Revoke the hub's lease (the keys of members still hosted go with it) and close every client."""
        with self._lock:
            hub, self._hub = self._hub, None
            stores, self._partition, self._virtual = (self._partition, self._virtual), None, None
        if hub is not None:
            hub[0].close()
            stores += (hub[1],)
        for store in stores:
            if store is not None:
                store.close()


def claimed_vp_metadata(topic: str, snapshot: VirtualGroupSnapshot, claimed: Iterable[int]) -> VpMetadataAnswer:
    """What a member needs of ``claimed`` VPs before it positions and fetches them: the layout and
    their states, as the sync read them (at least as new as any metadata read before the sync);
    the nodes' addresses are the port's to add (``frontend.group_handlers``)."""
    return VpMetadataAnswer(topic, tuple(json.dumps(value, sort_keys=True)
                                         for value in epochs_to_json(snapshot.layout.epochs)),
                            tuple(VpStateInfo(vp, json.dumps(snapshot.states[vp].to_json(), sort_keys=True))
                                  for vp in sorted(claimed) if vp in snapshot.states), ())


def _id_offsets(offsets: Mapping[int, int]) -> tuple[IdOffset, ...]:
    return tuple(IdOffset(id_, offset) for id_, offset in sorted(offsets.items()))
