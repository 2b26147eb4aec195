"""The benches of ``benchmarks``, as ``mafka4 bench`` finds them through the ``mafka4.benches`` entry points.

Each is a ``Bench`` (``mafka4.cli.bench``) named as its entry point in ``pyproject.toml``. The
CLI imports this module to build ``mafka4 bench``'s parser, for ``--help`` too, so it imports
the settings classes only: a driver (Ray, a Redis client) is imported when its bench runs.
"""

from __future__ import annotations

from benchmarks.delays_settings import DelaysBenchSettings
from benchmarks.failover_settings import FailoverBenchSettings
from benchmarks.kafka_clients_settings import KafkaClientsBenchSettings
from benchmarks.lag import FeedLagBenchSettings
from benchmarks.lanes_settings import LanesBenchSettings
from benchmarks.read_scale_settings import ReadScaleBenchSettings
from benchmarks.redis_streams_figures import RedisStreamsBenchSettings
from mafka4.cli.bench import Bench

DELAYS = Bench(
    "delays", "delayed delivery and retries (issue 41), on the running cluster: how late delayed messages come "
              "(p50/p99/p99.9 of due-time error) while normal traffic flows; produce tail with and without a million "
              "scheduled messages (A B A); the scheduler's memory per scheduled message and its recovery time after "
              "a kill; consume rate of a handler failing a share of messages once beside one that never fails",
    DelaysBenchSettings, "benchmarks.delays:run_delays_bench")
FAILOVER = Bench("failover", "unavailability of a partition when its leader is killed", FailoverBenchSettings,
                 "benchmarks.failover:run_failover_bench")
FEED_LAG = Bench("feed-lag", "how far feeding trails the high watermark while one producer is saturated, per VP count",
                 FeedLagBenchSettings, "benchmarks.feed_lag:run_feed_lag_bench")
KAFKA_CLIENTS = Bench(
    "kafka-clients", "the Kafka protocol's cost (issue 39): confluent-kafka's producer and kcat through the read nodes' "
                     "Kafka listener beside mafka4's own Producer and Consumer, A B A B, on the running cluster: "
                     "throughput, produce latency at a paced rate, consume throughput", KafkaClientsBenchSettings,
    "benchmarks.kafka_clients:run_kafka_clients_bench")
LANES = Bench(
    "lanes", "what lanes cost (issue 40), on the running cluster: produce latency over 1..100 lanes with Mafka4's "
             "queue merging beside Mafka3's topic per lane (A B A B), with the physical partitions and actors each "
             "took; RSS and idle CPU per idle lane on a read node; a lane member's takeover from a trunk member",
    LanesBenchSettings, "benchmarks.lanes:run_lanes_bench")
READ_SCALE = Bench(
    "read-scale", "a read node added by Ray's autoscaler while a group grows, on Ray's fake multi-node cluster of "
                  "ray_cluster.yaml (issue 38): decision to first records served, produce latency and members' gaps "
                  "during the replica moves beside a run without scaling. Its own fake cluster and deploy, no "
                  "running cluster", ReadScaleBenchSettings, "benchmarks.read_scale:run_read_scale_bench")
REDIS_STREAMS = Bench(
    "redis-streams", "Redis Streams on this machine (issue 15): pipelined XADD by redis-py and by a raw hiredis "
                     "socket; one group of consumer processes drains a backlog (msgs/s, CPU per message), per "
                     "acknowledgement cadence, pipeline depth and read COUNT, each also matched to mafka4's. Its own "
                     "redis-server, no cluster", RedisStreamsBenchSettings,
    "benchmarks.redis_streams:run_redis_streams_bench", render="benchmarks.redis_streams_figures:table")
