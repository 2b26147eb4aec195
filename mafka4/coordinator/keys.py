"""The etcd key layout of a mafka4 cluster: the only place that spells keys.

    /mafka4/<cluster>/nodes/<node_id>                   node registration, bound to the node's lease
                                                         value: {"node_id", "role": "write"|"read", "resource"}
    /mafka4/<cluster>/config                            cluster-wide settings (data root, ...)
    /mafka4/<cluster>/topics/<topic>                    topic config (TopicConfig fields as JSON)
    /mafka4/<cluster>/topics/<topic>/physical/<p>       partition state: leader, leader_epoch, replicas, isr
    /mafka4/<cluster>/groups/<group>/...                consumer groups (coordinator issue)

Values are UTF-8 JSON. A topic's sub-keys share ``topic_children_prefix`` (which ends in
"/", so topic "t" never matches topic "t2"); deleting a topic deletes its config key and
that prefix in one transaction.
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


def topic_children_prefix(cluster: str, name: str) -> str:
    """Prefix of every key below one topic's config key."""
    return f"{topic(cluster, name)}/"


def physical_partition(cluster: str, name: str, partition: int) -> str:
    return f"{topic(cluster, name)}/physical/{partition}"


def physical_prefix(cluster: str, name: str) -> str:
    return f"{topic(cluster, name)}/physical/"


def topic_name_of(cluster: str, key: str) -> str | None:
    """The topic name if ``key`` is a topic's config key, else None."""
    prefix = topics_prefix(cluster)
    if not key.startswith(prefix):
        return None
    rest = key[len(prefix):]
    return None if "/" in rest else rest
