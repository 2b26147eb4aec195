"""The Kafka listener's consumer groups: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit and OffsetFetch, on mafka4's own group coordinator.

**One coordinator for both protocols.** A group's coordinator is the read node its name hashes
to (``frontend.group_handlers.coordinator_of`` over ``ViewState.coordinator_candidates``, the
same rule the client port's ``FIND_COORDINATOR`` follows); FindCoordinator (group keys only:
transactions are not served) names that node as a Kafka broker (``kafka.topology.broker_id``,
its listener's address from its liveness key), ``COORDINATOR_NOT_AVAILABLE`` if it serves no
Kafka listener. A Kafka member is one member session in the very ``GroupSessions`` the node's
client port hosts (``frontend.group_sessions``): mafka4 clients and Kafka clients of one topic
may share a group, and every rule of mafka4's groups holds for both. The listener drives the
session for the Kafka member as ``client.remote_member`` drives it for a mafka4 consumer: join,
sync with the member's positions, commit, heartbeat, leave. What Kafka's protocol adds (a
generation, the rebalance state, the assignment handed out) is ``kafka.group_members``'.

**JoinGroup** (protocol type "consumer"): the first join of a member opens a session for the
one topic its subscription names (a ``ConsumerProtocolSubscription``, ``kafka.consumer_protocol``;
mafka4 members read one topic, so several are ``INCONSISTENT_GROUP_PROTOCOL``), with its session
timeout (``INVALID_SESSION_TIMEOUT`` outside 2 to 600 s) and rebalance timeout. A join of a
known member is its rejoin: its generation moves on, the session stays. Every member is
answered as a follower (an empty leader id and member list): no client runs its assignor, and
its SyncGroup carries no assignments (a leader's would be ignored anyway). The assignor name
answered is one the client offered, eager first (``consumer_protocol.chosen_protocol``).
KIP-394 (``MEMBER_ID_REQUIRED`` on a first join of v4+) is not asked: a first join is answered
with its member id at once, which clients accept; a join whose answer is lost leaves a session
that expires after the session timeout. ``group_instance_id`` (static membership, v5+) is read
as a dynamic member's join.

**SyncGroup**: the session syncs (``GROUP_SYNC``) with the member's positions (its commits), and
the assignment answered is what the session owns then: VP numbers of a Mafka4-mode topic (the
partitions its Kafka clients see, ``kafka.topology``), physical partitions of a Mafka3-mode one;
the assignments a leader might send are ignored. While the sync asks for another one (the VP
the target gives the member is still another's, a Mafka3-mode rebalance waits for its barrier,
a release let the target move on), the listener syncs again, up to ``KAFKA_GROUP_SYNC_SETTLE_S``,
as a Kafka coordinator holds SyncGroup until the assignment is in.

**Heartbeat**: ``REBALANCE_IN_PROGRESS`` when the session must sync (its coordinator's wake:
a joiner, a leaver, a split, a sealed end of a VP it owns, a VP it waits for freed) or when the
listener asks the member to rejoin (``KafkaMember.rejoin``); the client then rejoins and its
SyncGroup hands out the new assignment. ``UNKNOWN_MEMBER_ID`` once the session expired (no
request for its session timeout) or its coordinator restarted; ``ILLEGAL_GENERATION`` for a
generation not the member's last.

**Why a VP changes owner only once its Kafka reader stopped.** A session releases a VP only in
a sync, and the listener syncs only in SyncGroup. An eager client (range, roundrobin, sticky:
librdkafka's and kafka-python's defaults) revokes everything, committing its positions, before
it rejoins, so a VP it loses has no reader left when the sync releases it, and the next owner
starts at the last commit. A ``cooperative-sticky``-only client keeps fetching what it owns
across the rebalance: a VP moved away from it is released while it may still read it, which
keeps delivery at-least-once but may show records of the next owner before its own last ones
(the listener prefers any eager assignor the client offers).

**OffsetCommit** (v2-8): a member's commit of partitions it was assigned is the session's
``GROUP_COMMIT`` (its committed leader epoch -1 unless the client gave one); of other
partitions, or of another generation, ``ILLEGAL_GENERATION``; during its rebalance
``REBALANCE_IN_PROGRESS``; a VP lost meanwhile (its owner key gone) ``ILLEGAL_GENERATION``, and
the member rejoins. A commit never moves an offset back (mafka4's rule: a commit behind the
committed offset is answered without error and not written). A commit of a consumer outside any
group (generation -1, no member id) is written only while the group has no member, else
``UNKNOWN_MEMBER_ID``, as Kafka does (``kafka.group_offsets``).

**Parents before children (the ordering rule).** A child VP is readable for a group only once
the group consumed its parents to their sealed end (``coordinator.groups.vp_ownership``). A
Kafka member's commit that reaches an owned parent's sealed end stores the parent as consumed;
it makes the member rejoin at its next heartbeat (``KafkaMember.rejoin``), and that rejoin's sync
releases the parent and may claim its children; the others are woken by the release and claim
the rest through their own rejoin. A parent sealed after the member's last sync wakes its owner
(the session learns the sealed end), so the member rejoins and learns it. Children are thus
assigned only once their parents were committed to their end, and each key's records reach a
group's Kafka members in order across a split.

**Fetches.** The Fetch handler (``kafka.data_handlers``) serves any VP its node hosts, children
before their parents were consumed included: for a group's members the ordering is kept by the
assignment, since a member is given a child only after the release above, and a Kafka client
fetches only what it was assigned. A consumer without a group (``assign``) reads whatever VPs it
names, parents and children in any order: per-key order across a split is then its own to keep.

**OffsetFetch** (v1-7): the group's committed offsets (``kafka.group_offsets``): a partition
never committed is -1 (the client's ``auto.offset.reset``), but a child VP readable for the
group, never committed, is 0 (its start). The committed leader epoch answered is always -1:
OffsetForLeaderEpoch is not served, and a client told an epoch validates its position with it.

**LeaveGroup** (v0-4): the session's ``GROUP_LEAVE``, committing its positions and releasing
everything it owns.

**ACLs**, as on the client port: ``consume`` on the group for everything a member asks, and
``consume`` on the topic to join and to commit; ``describe`` on the group (and on each topic)
for FindCoordinator and OffsetFetch.

A group of a Mafka4-mode topic started with ``auto.offset.reset=latest`` is not seeded as
mafka4's own consumers seed one (``GROUP_SEED``): its closed VPs are read (or skipped by the
reset) like any other, and a closed VP it never commits keeps its children waiting.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from mafka4.coordinator.groups.partition_protocol import VIRTUAL_ASSIGNOR, validate_group_name
from mafka4.errors import InvalidConfig, KafkaWireError, MafkaError, NotAuthorized, UnknownMember
from mafka4.frontend.cluster_view import ClusterView
from mafka4.frontend.group_handlers import coordinator_of
from mafka4.frontend.group_sessions import GroupSessions
from mafka4.frontend.port_security import PortSecurity
from mafka4.kafka import error_codes, topology
from mafka4.kafka.consumer_protocol import (CONSUMER_PROTOCOL_TYPE, assignment_bytes, chosen_protocol,
                                            subscribed_topics)
from mafka4.kafka.error_codes import kafka_error_code, kafka_error_message
from mafka4.kafka.group_members import CommitAsked, KafkaMember, KafkaMembers
from mafka4.kafka.group_offsets import NOT_COMMITTED, KafkaGroupOffsets
from mafka4.limits import KAFKA_GROUP_SYNC_RETRY_S, KAFKA_GROUP_SYNC_SETTLE_S, ConsumerConfig, ReadMode
from mafka4.log.epochs import NO_EPOCH
from mafka4.physical.partition_state import TopicMetadata
from mafka4.protocol.group_api import GroupSyncAnswer
from mafka4.protocol.session import Session
from mafka4.security.acl import Operation, ResourceType

logger = logging.getLogger(__name__)

FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 10, 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH = 8, 9
GROUP_KEY = 0  # FindCoordinator's key type of a group (1: a transactional id)
PARTITION_ASSIGNOR = "range"  # the Mafka3-mode sessions' assignor (the client's is not run)
_NO_TIME = datetime.timedelta(0)


class _Refused(Exception):
    """A request answered with ``code`` (and ``message``, logged) before anything was done."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class KafkaGroupHandlers:
    """The group APIs of node ``node_id``'s Kafka listener; see the module docstring."""

    def __init__(self, sessions: GroupSessions, view: ClusterView, security: PortSecurity, offsets: KafkaGroupOffsets,
                 node_id: str):
        self._sessions, self._view, self._security, self._offsets = sessions, view, security, offsets
        self._node_id = node_id
        self.members = KafkaMembers()

    def handlers(self) -> dict:
        return {FIND_COORDINATOR: self.find_coordinator, JOIN_GROUP: self.join_group, SYNC_GROUP: self.sync_group,
                HEARTBEAT: self.heartbeat, LEAVE_GROUP: self.leave_group, OFFSET_COMMIT: self.offset_commit,
                OFFSET_FETCH: self.offset_fetch}

    # --- the view ----------------------------------------------------------------------------

    def _coordinator(self, group: str) -> tuple[str, topology.KafkaBroker | None] | None:
        """(node id, its Kafka broker or None) of the coordinator of ``group``; None: no candidate."""
        def read(state):
            found = coordinator_of(group, state.coordinator_candidates())
            if found is None:
                return None
            listeners = [(node_id, value.get("kafka")) for node_id, value in state.read_nodes.items()]
            brokers, _ = topology.brokers(listeners)
            return found[0], next((b for b in brokers if b.read_node == found[0]), None)
        return self._view.read(read)

    def _topic(self, name: str) -> TopicMetadata | None:
        return self._view.read(lambda state: state.topic(name))

    # --- FindCoordinator ---------------------------------------------------------------------

    async def find_coordinator(self, session: Session, request) -> dict:
        key_type = getattr(request, "key_type", GROUP_KEY)
        keys = request.coordinator_keys if hasattr(request, "coordinator_keys") else (request.key,)
        found = [self._find(session, key, key_type) for key in keys]
        first = found[0] if found else {"error_code": error_codes.INVALID_REQUEST, "node_id": -1}
        return {"throttle_time": _NO_TIME, **first, "coordinators": found}

    def _find(self, session: Session, key: str, key_type: int) -> dict:
        def refused(code: int, message: str) -> dict:
            return {"key": key, "error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}
        if key_type != GROUP_KEY:
            return refused(error_codes.INVALID_REQUEST, f"coordinator key type {key_type}: only groups' (0) are "
                                                        f"served; transactions are not")
        try:
            self._security.check(session, Operation.DESCRIBE, ResourceType.GROUP, key)
        except NotAuthorized as error:
            return refused(error_codes.GROUP_AUTHORIZATION_FAILED, str(error))
        found = self._coordinator(key)
        if found is None or found[1] is None:
            return refused(error_codes.COORDINATOR_NOT_AVAILABLE,
                           f"no live read node serving Kafka clients coordinates group {key!r} yet")
        broker = found[1]
        return {"key": key, "error_code": error_codes.NONE, "error_message": None, "node_id": broker.node_id,
                "host": broker.host, "port": broker.port}

    # --- JoinGroup ---------------------------------------------------------------------------

    async def join_group(self, session: Session, request) -> dict:
        try:
            member = await self._join(session, request)
        except _Refused as refusal:
            logger.info("a Kafka JoinGroup of group %r from %s refused (%d): %s", request.group_id, session.peer,
                        refusal.code, refusal)
            return {"throttle_time": _NO_TIME, "error_code": refusal.code, "generation_id": -1,
                    # Null where the version allows it (v7+), as Kafka answers a failed join.
                    "protocol_type": None, "protocol_name": None if type(request).__version__ >= 7 else "", "leader": "",
                    "member_id": request.member_id if refusal.code != error_codes.UNKNOWN_MEMBER_ID else "",
                    "members": ()}
        return {"throttle_time": _NO_TIME, "error_code": error_codes.NONE, "generation_id": member.generation,
                "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocol_name": member.protocol, "leader": "",
                "member_id": member.member_id, "members": ()}

    async def _join(self, session: Session, request) -> KafkaMember:
        group = request.group_id
        try:
            validate_group_name(group)
        except MafkaError as error:
            raise _Refused(error_codes.INVALID_GROUP_ID, str(error)) from None
        self._check(session, Operation.CONSUME, ResourceType.GROUP, group)
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise _Refused(error_codes.INCONSISTENT_GROUP_PROTOCOL,
                           f"protocol type {request.protocol_type!r}: only Kafka consumers' ({CONSUMER_PROTOCOL_TYPE!r}) "
                           f"groups are served")
        offered = {protocol.name: bytes(protocol.metadata) for protocol in request.protocols}
        protocol = chosen_protocol(list(offered))
        if protocol is None:
            raise _Refused(error_codes.INCONSISTENT_GROUP_PROTOCOL, "the join offers no assignor")
        try:
            topics = subscribed_topics(offered[protocol])
        except KafkaWireError as error:
            raise _Refused(error_codes.INCONSISTENT_GROUP_PROTOCOL, str(error)) from None
        if len(topics) != 1:
            raise _Refused(error_codes.INCONSISTENT_GROUP_PROTOCOL,
                           f"the member subscribes to {len(topics)} topics {sorted(topics)}: a member of a mafka4 "
                           f"group reads one topic (subscribe each consumer to one topic)")
        coordinator = self._coordinator(group)
        if coordinator is None or coordinator[0] != self._node_id:
            raise _Refused(error_codes.NOT_COORDINATOR, f"node {self._node_id} does not coordinate group {group!r}")
        if request.member_id:
            member = self._member(session, group, request.member_id)
            if member.topic != topics[0]:
                raise _Refused(error_codes.INCONSISTENT_GROUP_PROTOCOL,
                               f"member {member.member_id} joined to read {member.topic!r}, not {topics[0]!r}: leave "
                               f"the group and join again to read another topic")
            member.protocol = protocol
            member.joined()
            return member
        return await self._new_member(session, request, group, topics[0], protocol)

    async def _new_member(self, session: Session, request, group: str, topic: str, protocol: str) -> KafkaMember:
        self._check(session, Operation.CONSUME, ResourceType.TOPIC, topic)
        metadata = self._topic(topic)
        if metadata is None:
            raise _Refused(error_codes.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} does not exist")
        session_ms = int(request.session_timeout.total_seconds() * 1000)
        rebalance = getattr(request, "rebalance_timeout", request.session_timeout)
        try:
            config = ConsumerConfig(member_lease_ttl_s=round(session_ms / 1000),
                                    rebalance_timeout_ms=int(rebalance.total_seconds() * 1000))
        except InvalidConfig as error:
            raise _Refused(error_codes.INVALID_SESSION_TIMEOUT, str(error)) from None
        assignor = VIRTUAL_ASSIGNOR if metadata.config.read_mode is ReadMode.MAFKA4 else PARTITION_ASSIGNOR
        self.members.prune(self._sessions.hosts)
        try:
            answer = await self._sessions.join(session.principal, group, topic, assignor, config)
        except MafkaError as error:
            raise _Refused(self._group_code(error), kafka_error_message(error)) from None
        member = KafkaMember(answer.member_id, group, topic, session.principal, protocol,
                             virtual=assignor == VIRTUAL_ASSIGNOR, session_timeout_s=config.member_lease_ttl_s,
                             sealed={o.id: o.offset for o in answer.sealed_end_offsets})
        self.members.add(member)
        member.joined()
        return member

    # --- SyncGroup ---------------------------------------------------------------------------

    async def sync_group(self, session: Session, request) -> dict:
        try:
            member = await self._sync(session, request)
        except _Refused as refusal:
            logger.info("a Kafka SyncGroup of group %r from %s refused (%d): %s", request.group_id, session.peer,
                        refusal.code, refusal)
            return {"throttle_time": _NO_TIME, "error_code": refusal.code, "protocol_type": None,
                    "protocol_name": None, "assignment": b""}
        return {"throttle_time": _NO_TIME, "error_code": error_codes.NONE, "protocol_type": CONSUMER_PROTOCOL_TYPE,
                "protocol_name": member.protocol, "assignment": assignment_bytes(member.topic, member.assignment)}

    async def _sync(self, session: Session, request) -> KafkaMember:
        group = request.group_id
        self._check(session, Operation.CONSUME, ResourceType.GROUP, group)
        member = self._member(session, group, request.member_id)
        if error := member.generation_error(request.generation_id):
            raise _Refused(error, f"generation {request.generation_id}: member {member.member_id} is at "
                                  f"{member.generation}")
        protocol_type = getattr(request, "protocol_type", None)
        protocol_name = getattr(request, "protocol_name", None)
        if (protocol_type not in (None, CONSUMER_PROTOCOL_TYPE)
                or protocol_name not in (None, member.protocol)):
            raise _Refused(error_codes.INCONSISTENT_GROUP_PROTOCOL,
                           f"SyncGroup names protocol {protocol_type!r}/{protocol_name!r}, the join answered "
                           f"{CONSUMER_PROTOCOL_TYPE!r}/{member.protocol!r}")
        answer = await self._settled_sync(session, member)
        member.synced(answer.owned, None)  # the sealed ends are the settling syncs' (``_settled_sync``)
        return member

    async def _settled_sync(self, session: Session, member: KafkaMember) -> GroupSyncAnswer:
        """The session's sync, again while it asks for another one (see the module docstring)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(KAFKA_GROUP_SYNC_SETTLE_S, member.session_timeout_s / 3)
        pause, pause_max = KAFKA_GROUP_SYNC_RETRY_S
        while True:
            positions = member.positions()
            answer = await self._session_call(session, member, lambda hosted: hosted.sync(positions),
                                              arrived="sync_arrived")
            if answer.waiting is None and member.virtual:
                member.sealed = {o.id: o.offset for o in answer.sealed_end_offsets}
            member.assignment = tuple(sorted(answer.owned))  # the next round's positions are of these
            again = await self._changed(session, member)
            if not (again or answer.waiting is not None) or loop.time() + pause > deadline:
                return answer
            await asyncio.sleep(pause)
            pause = min(pause * 2, pause_max)

    # --- Heartbeat ---------------------------------------------------------------------------

    async def heartbeat(self, session: Session, request) -> dict:
        try:
            member = self._member(session, request.group_id, request.member_id)
            self._check(session, Operation.CONSUME, ResourceType.GROUP, request.group_id)
            if error := member.generation_error(request.generation_id):
                raise _Refused(error, f"generation {request.generation_id}, not {member.generation}")
            code = member.heartbeat_error(request.generation_id, await self._changed(session, member))
        except _Refused as refusal:
            code = refusal.code
        return {"throttle_time": _NO_TIME, "error_code": code}

    async def _changed(self, session: Session, member: KafkaMember) -> bool:
        """Whether the member's session must sync (without waiting); it keeps the session alive."""
        try:
            return await self._sessions.heartbeat(session.principal, member.group, member.member_id, 0)
        except UnknownMember as error:
            self.members.drop(member.member_id)
            raise _Refused(error_codes.UNKNOWN_MEMBER_ID, str(error)) from None

    # --- LeaveGroup --------------------------------------------------------------------------

    async def leave_group(self, session: Session, request) -> dict:
        group = request.group_id
        if hasattr(request, "members"):
            identities = [(m.member_id, m.group_instance_id) for m in request.members]
        else:
            identities = [(request.member_id, None)]
        answers = [{"member_id": member_id, "group_instance_id": instance,
                    "error_code": await self._leave(session, group, member_id)}
                   for member_id, instance in identities]
        top = answers[0]["error_code"] if len(answers) == 1 and not hasattr(request, "members") else error_codes.NONE
        return {"throttle_time": _NO_TIME, "error_code": top, "members": answers}

    async def _leave(self, session: Session, group: str, member_id: str) -> int:
        try:
            self._check(session, Operation.CONSUME, ResourceType.GROUP, group)
            member = self._member(session, group, member_id)
        except _Refused as refusal:
            return refusal.code
        positions = member.positions()
        self.members.drop(member_id)
        try:
            await self._sessions.leave(session.principal, group, member_id, lambda hosted: hosted.leave(positions))
        except MafkaError as error:
            logger.warning("Kafka member %s of group %s left without a clean leave: %s", member_id, group, error)
            return self._group_code(error) if isinstance(error, UnknownMember) else error_codes.NONE
        return error_codes.NONE

    # --- OffsetCommit ------------------------------------------------------------------------

    async def offset_commit(self, session: Session, request) -> dict:
        group, generation = request.group_id, request.generation_id_or_member_epoch
        codes: dict[tuple[str, int], int] = {}
        try:
            self._check(session, Operation.CONSUME, ResourceType.GROUP, group)
            if generation < 0 and not request.member_id:
                await self._commit_outside(session, request, codes)
            else:
                await self._commit_of_member(session, request, codes)
        except _Refused as refusal:
            codes = {(t.name, p.partition_index): refusal.code for t in request.topics for p in t.partitions}
        return {"throttle_time": _NO_TIME, "topics": [
            {"name": t.name, "partitions": [{"partition_index": p.partition_index,
                                             "error_code": codes.get((t.name, p.partition_index), error_codes.NONE)}
                                            for p in t.partitions]} for t in request.topics]}

    async def _commit_of_member(self, session: Session, request, codes: dict) -> None:
        member = self._member(session, request.group_id, request.member_id)
        asked = []
        for topic in request.topics:
            for partition in topic.partitions:
                key = (topic.name, partition.partition_index)
                if topic.name != member.topic:
                    codes[key] = error_codes.ILLEGAL_GENERATION
                elif not self._allowed(session, Operation.CONSUME, ResourceType.TOPIC, topic.name):
                    codes[key] = error_codes.TOPIC_AUTHORIZATION_FAILED
                elif partition.committed_offset < 0:
                    codes[key] = error_codes.INVALID_REQUEST
                else:
                    asked.append(CommitAsked(partition.partition_index, partition.committed_offset,
                                             max(getattr(partition, "committed_leader_epoch", NO_EPOCH), NO_EPOCH)))
        refused, positions = member.commit_request(request.generation_id_or_member_epoch, asked)
        codes.update({(member.topic, p): code for p, code in refused.items()})
        if not positions:
            return
        answer = await self._session_call(session, member, lambda hosted: hosted.commit(positions))
        codes.update({(member.topic, p): code for p, code in member.commit_answered(positions, answer.lost).items()})

    async def _commit_outside(self, session: Session, request, codes: dict) -> None:
        """A commit of a consumer that is no member (see ``kafka.group_offsets``)."""
        for topic in request.topics:
            keys = [(topic.name, p.partition_index) for p in topic.partitions]
            metadata = self._topic(topic.name)
            if not self._allowed(session, Operation.CONSUME, ResourceType.TOPIC, topic.name):
                codes.update(dict.fromkeys(keys, error_codes.TOPIC_AUTHORIZATION_FAILED))
                continue
            if metadata is None:
                codes.update(dict.fromkeys(keys, error_codes.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            offsets = {p.partition_index: p.committed_offset for p in topic.partitions if p.committed_offset >= 0}
            try:
                written = not offsets or await self._offsets.commit_when_empty(request.group_id, metadata, offsets)
            except MafkaError as error:
                codes.update(dict.fromkeys(keys, self._group_code(error)))
                continue
            if not written:
                codes.update(dict.fromkeys(keys, error_codes.UNKNOWN_MEMBER_ID))
            codes.update({(topic.name, p.partition_index): error_codes.INVALID_REQUEST
                          for p in topic.partitions if p.committed_offset < 0})

    # --- OffsetFetch -------------------------------------------------------------------------

    async def offset_fetch(self, session: Session, request) -> dict:
        group = request.group_id
        try:
            self._check(session, Operation.DESCRIBE, ResourceType.GROUP, group)
            if request.topics is None:
                names = [name for name in await self._offsets.topics(group)
                         if self._allowed(session, Operation.DESCRIBE, ResourceType.TOPIC, name)]
                wanted = [(name, None) for name in names]
            else:
                wanted = [(topic.name, tuple(topic.partition_indexes)) for topic in request.topics]
            topics = [await self._fetched_topic(session, group, name, partitions) for name, partitions in wanted]
        except _Refused as refusal:
            if request.topics is None:
                return {"throttle_time": _NO_TIME, "error_code": refusal.code, "topics": ()}
            return {"throttle_time": _NO_TIME, "error_code": refusal.code, "topics": [
                {"name": t.name, "partitions": [_fetched(p, NOT_COMMITTED, refusal.code) for p in t.partition_indexes]}
                for t in request.topics]}
        return {"throttle_time": _NO_TIME, "error_code": error_codes.NONE, "topics": topics}

    async def _fetched_topic(self, session: Session, group: str, name: str, partitions: tuple[int, ...] | None) -> dict:
        metadata = self._topic(name)
        code = error_codes.NONE
        committed: dict[int, int] = {}
        if not self._allowed(session, Operation.DESCRIBE, ResourceType.TOPIC, name):
            code = error_codes.TOPIC_AUTHORIZATION_FAILED
        elif metadata is None:
            code = error_codes.UNKNOWN_TOPIC_OR_PARTITION
        else:
            try:
                committed = await self._offsets.committed(group, metadata)
            except MafkaError as error:
                raise _Refused(self._group_code(error), kafka_error_message(error)) from None
        if partitions is None:
            partitions = tuple(sorted(committed))
        return {"name": name, "partitions": [_fetched(p, committed.get(p, NOT_COMMITTED), code) for p in partitions]}

    # --- helpers -----------------------------------------------------------------------------

    def _check(self, session: Session, operation: Operation, resource: ResourceType, name: str) -> None:
        try:
            self._security.check(session, operation, resource, name)
        except NotAuthorized as error:
            raise _Refused(kafka_error_code(error, resource.value), str(error)) from None

    def _allowed(self, session: Session, operation: Operation, resource: ResourceType, name: str) -> bool:
        try:
            self._security.check(session, operation, resource, name)  # a refusal is logged and counted
            return True
        except NotAuthorized:
            return False

    def _member(self, session: Session, group: str, member_id: str) -> KafkaMember:
        try:
            member = self.members.get(group, member_id, session.principal)
        except UnknownMember as error:
            raise _Refused(error_codes.UNKNOWN_MEMBER_ID, str(error)) from None
        if not self._sessions.hosts(member_id):
            self.members.drop(member_id)
            raise _Refused(error_codes.UNKNOWN_MEMBER_ID, f"the session of member {member_id} of group {group!r} "
                                                          f"expired: join again")
        return member

    async def _session_call(self, session: Session, member: KafkaMember, step, arrived: str | None = None) -> Any:
        try:
            return await self._sessions.call(session.principal, member.group, member.member_id, step, arrived=arrived)
        except UnknownMember as error:
            self.members.drop(member.member_id)
            raise _Refused(error_codes.UNKNOWN_MEMBER_ID, str(error)) from None
        except MafkaError as error:
            raise _Refused(self._group_code(error), kafka_error_message(error)) from None

    @staticmethod
    def _group_code(error: MafkaError) -> int:
        code = kafka_error_code(error, "group")
        if code == error_codes.UNKNOWN_SERVER_ERROR and error.retriable:
            return error_codes.COORDINATOR_NOT_AVAILABLE  # etcd away, a call that timed out: find it and retry
        return code


def _fetched(partition: int, offset: int, code: int) -> dict:
    return {"partition_index": partition, "committed_offset": offset, "committed_leader_epoch": NO_EPOCH,
            "metadata": "", "error_code": code}
