"""A topic as the METADATA answer carries it (``metadata_api.TopicInfo``), and back.

The node makes a ``TopicInfo`` of each topic it describes (``topic_info``); a client that routes
to a topic's leaders or reads its config makes the topic of it again (``topic_of``). Apart from
the messages because a client that only lists topics needs their names alone. Pure.
"""

from __future__ import annotations

import json
from typing import Sequence

from mafka4.physical.partition_state import PartitionState, TopicMetadata, config_from_json, config_to_json
from mafka4.protocol.metadata_api import PartitionInfo, TopicInfo


def topic_info(topic: TopicMetadata, leader_addresses: Sequence[str | None] | None = None) -> TopicInfo:
    """``topic`` as the METADATA answer carries it; ``leader_addresses`` in partition order (None: none known)."""
    addresses = leader_addresses if leader_addresses is not None else [None] * len(topic.partitions)
    partitions = tuple(PartitionInfo(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr, address)
                       for p, address in zip(topic.partitions, addresses))
    return TopicInfo(topic.name, json.dumps(config_to_json(topic.config), sort_keys=True), partitions)


def topic_of(info: TopicInfo) -> TopicMetadata:
    """The topic ``info`` describes (without the eligible leader replicas, which clients never use)."""
    partitions = tuple(PartitionState(p.partition, p.leader, p.leader_epoch, p.replicas, p.isr) for p in info.partitions)
    return TopicMetadata(info.name, config_from_json(json.loads(info.config_json)), partitions)
