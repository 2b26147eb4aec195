"""The simulated producers run production's producer pipeline, and compress as a Producer does.

``simulations.dst.producer`` drives ``client.accumulator``, ``client.partitioner`` and
``client.sender_core`` on the simulated network and clock (the checkers catching a broken
pipeline is in ``test_simulation.py``). Here: batches reach the leaders compressed with the codec
a ``Producer`` takes from ``$MAFKA4_COMPRESSION``, and the run with them is still judged clean.
"""

from __future__ import annotations

import random

import pytest

from mafka4.batch_frame import iter_batches
from mafka4.compression import Codec
from mafka4.limits import COMPRESSION_ENV
from simulations.dst.cluster import Cluster, read_all
from simulations.dst.disk import SimDisk
from simulations.dst.env import Env
from simulations.dst.network import Network
from simulations.dst.options import options_for_seed
from simulations.dst.scheduler import Scheduler

SEED = 3


@pytest.mark.parametrize("codec", [Codec.LZ4, Codec.ZSTD])
def test_the_simulated_producers_send_batches_compressed_with_the_codec_a_producer_resolves(monkeypatch, codec):
    monkeypatch.setenv(COMPRESSION_ENV, str(codec))
    rng = random.Random(SEED)
    options = options_for_seed(rng)
    assert options.producer_config.compression is codec
    with SimDisk(rng) as disk:
        scheduler = Scheduler()
        env = Env(rng, options, scheduler, Network(scheduler, rng, options.network), disk)
        cluster = Cluster(env)
        cluster.run()
        assert cluster.drained, cluster.not_drained
        assert cluster.check() == []
        codecs = set()
        for partition, state in cluster.coordinator.partitions.items():
            leader = cluster.physical_replica(state.leader, partition)
            data = read_all(leader.log, leader.state.high_watermark)
            codecs |= {header.codec for _, header in iter_batches(data)}
    assert codecs == {codec}
