"""Benchmarks that measure something other than the product, or measure it for an experiment.

``mafka4/bench`` keeps what an operator measures on a running cluster (``mafka4 bench
produce|consume|stream|vp-join|vp-density|rebalance``). What is here answers the experiments'
and the comparisons' questions instead:

* ``redis-streams`` (``redis_streams``, its pure half ``redis_streams_figures`` and its member
  process ``redis_streams_member``): Redis Streams on this machine, the system issue 15 compares
  mafka4 with. It starts its own redis-server and needs the ``redis`` extra.
* ``failover`` (``failover``, ``failover_settings``): how long producing stops when a
  partition leader is killed.
* ``feed-lag`` (``feed_lag``, its pure half ``lag``): whether feeding keeps up with a
  saturated producer, per VP count.

They are commands of ``mafka4 bench`` all the same, with the same options and reports: each
registers a ``Bench`` (``benches``) through the ``mafka4.benches`` entry points of
``pyproject.toml``, which ``mafka4.cli.plugins`` reads, so that the product never imports this
package. This package imports the product (its clients, the bench runner and the measuring
helpers of ``mafka4.bench``), never the other way round.
"""
