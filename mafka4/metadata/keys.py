"""The etcd key layout of a mafka4 cluster: the only place that spells keys.

    /mafka4/<cluster>/nodes/<node_id>                   node registration, bound to the node's lease
                                                         value: {"node_id", "role": "write"|"read", "resource" (a node named after its Ray node: none), "ray_node_id" (an agent actor's), "client_port"}
    /mafka4/<cluster>/config                            cluster-wide settings (data root, ...)
    /mafka4/<cluster>/topics/<topic>                    topic config (TopicConfig fields as JSON)
    /mafka4/<cluster>/topics/<topic>/physical/<p>       partition state: leader, leader_epoch, replicas, isr
    /mafka4/<cluster>/topics/<topic>/creation           only while a topic too large for one etcd transaction
                                                         is created: the token of the creation writing its keys
                                                         (store.MetadataStore.create_with_children); JSON text
    /mafka4/<cluster>/topics/<topic>/virtual/<epoch>    split epoch <epoch> of the VP layout (reshard.SplitEpoch),
                                                         written once, never changed; epoch 0 with the topic
                                                         value: {"epoch", "ranges": [[start, end, vp], ...],
                                                                 "cut": [offset per p], "parents", "children"}
    /mafka4/<cluster>/topics/<topic>/vp/<v>             virtual partition state (coordinator/metadata/vp_store.py), CAS by
                                                         mod_revision: the VP leader writes risr, a failover
                                                         writes leader and leader_epoch
                                                         value: {"range": [start, end], "leader", "leader_epoch",
                                                                 "replicas", "risr"}
                                                         sealed_end_offset is added once a closed VP is
                                                         complete (coordinator/control/resharding.py)
    /mafka4/<cluster>/topics/<topic>/holds/<p>          feeder of <p> stopped for a reshard at fed_through;
                                                         written by the feeder, deleted by the epoch's txn
                                                         or by the feeder when the hold times out
                                                         value: {"token", "fed_through"}
    /mafka4/<cluster>/topics/<topic>/feed_positions/<p>/<node_id>
                                                         the next physical offset of <p> that read node
                                                         <node_id> still has to feed; written by its feed
                                                         stream, deleted when it stops feeding <p>. Not
                                                         lease-bound: a read node that is down keeps
                                                         holding physical retention (up to the topic's
                                                         unfed_hold_ms_max); value: {"next_offset"}
    /mafka4/<cluster>/topics/<topic>/read_loss/<p>      physical offsets of <p> that retention deleted
                                                         before every read node fed them
                                                         value: {"ranges": [[first, end], ...]} (end excluded;
                                                         log/read_loss.py)
    /mafka4/<cluster>/read_loads/<node_id>              a read node's load over its last report window, bound
                                                         to its liveness lease (metadata/read_node_load.py)
                                                         value: {"node_id", "hosted_vp_replicas",
                                                                 "fed_bytes_per_s", "fetch_cpu_cores",
                                                                 "window_ms", "measured_at_ms",
                                                                 "sealed_vp_replicas" (absent from older nodes)}
    /mafka4/<cluster>/replica_moves/<topic>/<v>         a move of VP <v>'s replica between two live read nodes,
                                                         in flight (coordinator/control/read_scaling.py); created
                                                         (only while absent) and deleted by the controller,
                                                         fenced by its key, so a controller that takes over
                                                         resumes it; one per VP at a time
                                                         value: {"source", "target", "purpose": "onto"|"off",
                                                                 "reason", "started_ms"}
    /mafka4/<cluster>/read_scaling                      the controller's last read-node scaling decision, for
                                                         ``mafka4 status``; written by the controller, fenced
                                                         value: {"kind": "add"|"release"|"hold", "reason",
                                                                 "target_read_nodes", "decided_ms", "moves",
                                                                 "releasing"}
    /mafka4/<cluster>/released_read_nodes/<node_id>     a read node the controller released (its replicas moved
                                                         off, its read node stopped): the node agent keeper stops
                                                         its agent and starts none, so Ray can end the node; written
                                                         by the controller (fenced), deleted when the release is
                                                         called off or by the keeper once Ray no longer shows it
                                                         value: {"released_ms"}
    /mafka4/<cluster>/replicas/<topic>/<p>/<replica>    a live replica actor, bound to its own lease
                                                         value: {"replica_id", "pid"}
    /mafka4/<cluster>/controller                        the active controller, bound to its lease; created
                                                         only while absent, in one txn with controller_epoch;
                                                         its mod_revision fences the controller's writes
                                                         value: {"controller_id", "controller_epoch", "pid",
                                                                 "metrics" (its metrics address; None: none)}
    /mafka4/<cluster>/controller_epoch                  last controller epoch handed out (never decreases)
    /mafka4/<cluster>/groups/<group>/members/<member>   group membership, bound to the member's lease
                                                         value: {"member_id", "topic", "assignor"}
    /mafka4/<cluster>/groups/<group>/generation         current generation: members and assignment
                                                         value: see coordinator/groups/partition_protocol.py
    /mafka4/<cluster>/groups/<group>/owners/<topic>/<p> which member owns a partition, bound to its lease
                                                         value: {"member_id", "generation"}
    /mafka4/<cluster>/groups/<group>/offsets/<topic>/<p> committed offset of a partition
                                                         value: {"offset", "member_id", "generation"}
    /mafka4/<cluster>/groups/<group>/vp_owners/<topic>/<v>   which member owns a VP (mafka4-mode groups),
                                                         bound to its lease; value: {"member_id"}
    /mafka4/<cluster>/groups/<group>/vp_offsets/<topic>/<v>  committed VP offset (mafka4-mode groups)
                                                         value: {"offset", "member_id", "high_watermark"}
    /mafka4/<cluster>/delays/<topic>                    the delay scheduler's state of <topic>'s delay topic
                                                         (scheduling/delay_service.py): where to read it again
                                                         after a restart, and what waits, for describe;
                                                         written by the scheduler, deleted with the delay topic
                                                         value: {"restart_offsets": {p: offset}, "waiting",
                                                                 "horizons": {"minute", "hour", "day", "later"},
                                                                 "counts", "written_ms", "started_ms",
                                                                 "caught_up_ms"}
    /mafka4/<cluster>/users/<user>                      a user's SCRAM credential, never its password
                                                         (security/user_store.py); value: {"salt",
                                                         "stored_key", "server_key" (base64), "iterations"}
    /mafka4/<cluster>/acls/<id>                         one ACL rule (security/acl_store.py); <id> is a
                                                         digest of the rule, so adding it twice is one key
                                                         value: {"principal", "permission", "operation",
                                                                 "resource_type", "pattern_type", "name"}

A VP's state is not nested under a split epoch (DESIGN.md's sketch): a VP lives through
many epochs while its leader and RISR change, and the epochs hold only the immutable layout.

Values are UTF-8 JSON. A topic's sub-keys share ``topic_children_prefix`` (which ends in
"/", so topic "t" never matches topic "t2"); deleting a topic deletes its config key and
that prefix in one transaction. The config key is the topic's commit point: a topic is created
with its config key last (physical/topics.py), so sub-keys of a topic without one are the
leftovers of a creation not finished, and every reader takes the topic as absent.
"""

from __future__ import annotations

ROOT = "/mafka4"


def cluster_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/"


def nodes_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/nodes/"


def node(cluster: str, node_id: str) -> str:
    return f"{nodes_prefix(cluster)}{node_id}"


def cluster_config(cluster: str) -> str:
    return f"{ROOT}/{cluster}/config"


def topics_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/topics/"


def topic(cluster: str, name: str) -> str:
    return f"{topics_prefix(cluster)}{name}"


def delay_states_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/delays/"


def delay_state(cluster: str, topic_name: str) -> str:
    """The delay scheduler's state of ``topic_name``'s delay topic (not below the topic's keys: a
    delete of the topic must not race the scheduler's last write)."""
    return f"{delay_states_prefix(cluster)}{topic_name}"


def topic_children_prefix(cluster: str, name: str) -> str:
    """Prefix of every key below one topic's config key."""
    return f"{topic(cluster, name)}/"


def topic_creation(cluster: str, name: str) -> str:
    return f"{topic(cluster, name)}/creation"


def physical_partition(cluster: str, name: str, partition: int) -> str:
    return f"{topic(cluster, name)}/physical/{partition}"


def physical_prefix(cluster: str, name: str) -> str:
    return f"{topic(cluster, name)}/physical/"


def split_epochs_prefix(cluster: str, name: str) -> str:
    return f"{topic(cluster, name)}/virtual/"


def split_epoch(cluster: str, name: str, epoch: int) -> str:
    return f"{split_epochs_prefix(cluster, name)}{epoch}"


def virtual_partitions_prefix(cluster: str, name: str) -> str:
    return f"{topic(cluster, name)}/vp/"


def virtual_partition(cluster: str, name: str, vp: int) -> str:
    return f"{virtual_partitions_prefix(cluster, name)}{vp}"


def feeder_holds_prefix(cluster: str, name: str, partition: int) -> str:
    return f"{topic(cluster, name)}/holds/{partition}/"


def feeder_hold(cluster: str, name: str, partition: int, node_id: str) -> str:
    return f"{feeder_holds_prefix(cluster, name, partition)}{node_id}"


def feeder_holds_of_topic(cluster: str, name: str) -> str:
    return f"{topic(cluster, name)}/holds/"


def read_nodes_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/read_nodes/"


def read_node_liveness(cluster: str, node_id: str) -> str:
    return f"{read_nodes_prefix(cluster)}{node_id}"


def read_loads_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/read_loads/"


def read_node_load(cluster: str, node_id: str) -> str:
    return f"{read_loads_prefix(cluster)}{node_id}"


def parse_read_node_load(cluster: str, key: str) -> str | None:
    """The node id of a read node's load report key, else None."""
    return _child_of(read_loads_prefix(cluster), key)


def replica_moves_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/replica_moves/"


def replica_move(cluster: str, topic: str, vp: int) -> str:
    return f"{replica_moves_prefix(cluster)}{topic}/{vp}"


def parse_replica_move(cluster: str, key: str) -> tuple[str, int] | None:
    """(topic, VP id) of a replica move key, else None (the VP id is the last part: topic names may hold "/")."""
    prefix = replica_moves_prefix(cluster)
    if not key.startswith(prefix):
        return None
    rest = key[len(prefix):]
    topic, _, vp = rest.rpartition("/")
    return (topic, int(vp)) if topic and vp.isdigit() else None


def read_scaling(cluster: str) -> str:
    return f"{ROOT}/{cluster}/read_scaling"


def released_read_nodes_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/released_read_nodes/"


def released_read_node(cluster: str, node_id: str) -> str:
    """A read node the controller released: its node agent is stopped and not started again (``agent_plan``)."""
    return f"{released_read_nodes_prefix(cluster)}{node_id}"


def parse_released_read_node(cluster: str, key: str) -> str | None:
    """The node id of a ``released_read_node`` key, else None."""
    return _child_of(released_read_nodes_prefix(cluster), key)


def parse_read_node_liveness(cluster: str, key: str) -> str | None:
    """The node id of a read node's liveness key, else None."""
    return _child_of(read_nodes_prefix(cluster), key)


def _child_of(prefix: str, key: str) -> str | None:
    """The last part of ``key`` if it lies directly below ``prefix``, else None."""
    if not key.startswith(prefix) or "/" in key[len(prefix):] or len(key) == len(prefix):
        return None
    return key[len(prefix):]


def intents_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/intents/"


def intent(cluster: str, intent_id: str) -> str:
    return f"{intents_prefix(cluster)}{intent_id}"


def intent_results_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/intent_results/"


def intent_result(cluster: str, intent_id: str) -> str:
    return f"{intent_results_prefix(cluster)}{intent_id}"


def topic_feed_positions_prefix(cluster: str, name: str) -> str:
    """Prefix of the feed positions of every partition of one topic."""
    return f"{topic(cluster, name)}/feed_positions/"


def feed_positions_prefix(cluster: str, name: str, partition: int) -> str:
    """Prefix of the feed positions of one physical partition, one key per read node feeding it."""
    return f"{topic_feed_positions_prefix(cluster, name)}{partition}/"


def feed_position(cluster: str, name: str, partition: int, node_id: str) -> str:
    return f"{feed_positions_prefix(cluster, name, partition)}{node_id}"


def read_losses_prefix(cluster: str, name: str) -> str:
    return f"{topic(cluster, name)}/read_loss/"


def read_loss(cluster: str, name: str, partition: int) -> str:
    return f"{read_losses_prefix(cluster, name)}{partition}"


def _parse_indexed(prefix: str, key: str, parts_expected: int) -> tuple | None:
    """``<topic>/<number>[/<id>]`` below ``prefix`` as (topic, number[, id]), else None."""
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix):].split("/")
    if len(parts) != parts_expected or not parts[1].isdigit() or not all(parts):
        return None
    return (parts[0], int(parts[1]), *parts[2:])


def replicas_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/replicas/"


def replica_liveness(cluster: str, topic_name: str, partition: int, replica_id: str) -> str:
    return f"{replicas_prefix(cluster)}{topic_name}/{partition}/{replica_id}"


def parse_replica_liveness(cluster: str, key: str) -> tuple[str, int, str] | None:
    """(topic, partition, replica id) of a replica liveness key, else None."""
    prefix = replicas_prefix(cluster)
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix):].split("/")
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    return parts[0], int(parts[1]), parts[2]


def topic_name_of(cluster: str, key: str) -> str | None:
    """The topic name if ``key`` is a topic's config key, else None."""
    prefix = topics_prefix(cluster)
    if not key.startswith(prefix):
        return None
    rest = key[len(prefix):]
    return None if "/" in rest else rest


def parse_physical_partition(cluster: str, key: str) -> tuple[str, int] | None:
    """(topic, partition) if ``key`` is a physical partition's state key, else None."""
    return _parse_topic_child(cluster, key, "physical")


def parse_split_epoch(cluster: str, key: str) -> tuple[str, int] | None:
    """(topic, epoch) if ``key`` is a split epoch's key, else None."""
    return _parse_topic_child(cluster, key, "virtual")


def parse_virtual_partition(cluster: str, key: str) -> tuple[str, int] | None:
    """(topic, vp) if ``key`` is a virtual partition's state key, else None."""
    return _parse_topic_child(cluster, key, "vp")


def _parse_topic_child(cluster: str, key: str, kind: str) -> tuple[str, int] | None:
    """(topic, number) if ``key`` is ``<topic>/<kind>/<number>`` below the topics, else None."""
    prefix = topics_prefix(cluster)
    if not key.startswith(prefix):
        return None
    parts = key[len(prefix):].split("/")
    if len(parts) != 3 or parts[1] != kind or not parts[2].isdigit() or not parts[0]:
        return None
    return parts[0], int(parts[2])


def controller(cluster: str) -> str:
    return f"{ROOT}/{cluster}/controller"


def controller_epoch(cluster: str) -> str:
    return f"{ROOT}/{cluster}/controller_epoch"


def groups_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/groups/"


def group_prefix(cluster: str, group: str) -> str:
    return f"{groups_prefix(cluster)}{group}/"


def group_members_prefix(cluster: str, group: str) -> str:
    return f"{group_prefix(cluster, group)}members/"


def group_member(cluster: str, group: str, member_id: str) -> str:
    return f"{group_members_prefix(cluster, group)}{member_id}"


def group_generation(cluster: str, group: str) -> str:
    return f"{group_prefix(cluster, group)}generation"


def group_owners_prefix(cluster: str, group: str) -> str:
    return f"{group_prefix(cluster, group)}owners/"


def group_owner(cluster: str, group: str, topic_name: str, partition: int) -> str:
    return f"{group_owners_prefix(cluster, group)}{topic_name}/{partition}"


def group_offsets_prefix(cluster: str, group: str) -> str:
    return f"{group_prefix(cluster, group)}offsets/"


def group_offset(cluster: str, group: str, topic_name: str, partition: int) -> str:
    return f"{group_offsets_prefix(cluster, group)}{topic_name}/{partition}"


def group_vp_owners_prefix(cluster: str, group: str) -> str:
    return f"{group_prefix(cluster, group)}vp_owners/"


def group_vp_owner(cluster: str, group: str, topic_name: str, vp: int) -> str:
    return f"{group_vp_owners_prefix(cluster, group)}{topic_name}/{vp}"


def group_vp_offsets_prefix(cluster: str, group: str) -> str:
    return f"{group_prefix(cluster, group)}vp_offsets/"


def group_vp_offset(cluster: str, group: str, topic_name: str, vp: int) -> str:
    return f"{group_vp_offsets_prefix(cluster, group)}{topic_name}/{vp}"


def group_name_of(cluster: str, key: str) -> str | None:
    """The group name of any key below ``groups_prefix``, else None."""
    prefix = groups_prefix(cluster)
    if not key.startswith(prefix):
        return None
    name, separator, _ = key[len(prefix):].partition("/")
    return name if separator and name else None


def parse_group_partition(prefix: str, key: str) -> tuple[str, int] | None:
    """(topic, partition) of an owner or offset key below ``prefix``, else None."""
    if not key.startswith(prefix):
        return None
    topic_name, separator, partition = key[len(prefix):].rpartition("/")
    if not separator or not topic_name or not partition.isdigit():
        return None
    return topic_name, int(partition)


def parse_group_offset(cluster: str, key: str) -> tuple[str, bool, str, int] | None:
    """(group, virtual, topic, partition or VP) of a committed offset key (``group_offset``: virtual
    False; ``group_vp_offset``: True), else None."""
    group = group_name_of(cluster, key)
    if group is None:
        return None
    for virtual, prefix in ((False, group_offsets_prefix(cluster, group)), (True, group_vp_offsets_prefix(cluster, group))):
        parsed = parse_group_partition(prefix, key)
        if parsed is not None:
            return group, virtual, parsed[0], parsed[1]
    return None


def users_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/users/"


def user(cluster: str, name: str) -> str:
    return f"{users_prefix(cluster)}{name}"


def acls_prefix(cluster: str) -> str:
    return f"{ROOT}/{cluster}/acls/"


def acl(cluster: str, rule_id: str) -> str:
    return f"{acls_prefix(cluster)}{rule_id}"


def user_name_of(cluster: str, key: str) -> str | None:
    """The user name of a user's credential key, else None."""
    return _child_of(users_prefix(cluster), key)


def acl_id_of(cluster: str, key: str) -> str | None:
    """The rule id of an ACL rule's key, else None."""
    return _child_of(acls_prefix(cluster), key)
