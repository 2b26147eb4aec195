"""Deterministic simulation of a mafka4 cluster around the real pure cores, from one seed.

The simulator drives the real code (``ReplicaState``, ``Log`` on a simulated disk,
``partition_decisions.decide_partition``, ``read_path_decisions.decide_virtual_partition`` with
``failover.decide_failover``, ``feed_plan``/``vp_records``, ``TopicLayout``, production's VP replica
``HostedVp`` with its ``VpReplicaCore`` and ``RisrState``, ``vp_ownership.plan_ownership``, the
producer's ``RecordAccumulator``, ``Partitioner`` and sender pipeline ``PipelineCore``) through
thin shells that mirror the Ray actors, etcd, the producers' sender and the
group members, with a simulated clock (``scheduler``), network (``network``:
delay, drop, duplicate, reorder, partitions) and disk (``disk``: torn writes, loss of
unflushed data), all drawn from one ``random.Random(seed)``. The checkers that judge a run
are in ``simulations/checkers.py``.

    python3 -m simulations.dst --seed 1234 --trace     replay one seed
    python3 -m simulations.dst --seeds 1000            many seeds, a summary
    python3 -m simulations.dst --seeds 30 --planted-bug ack-before-isr
                                                       the same with a bug of ``mafka4.planted_bugs``
                                                       planted in the cores: seeds must fail

Tests: ``tests/sim`` runs 200 seeds by default; ``MAFKA4_SIM_SEEDS=5000`` runs more.

The shells work around nothing in the code under test: a bug a seed finds is fixed in the
code and pinned by a test (``tests/sim/test_found_bugs.py`` lists those found so far, with
the seed that found each).

Modules: ``run`` (entry), ``cluster`` (phases, final checks), ``options`` (the seed's
shape), ``physical`` (replica shell),
``write_node``, ``virtual`` (read nodes hosting ``HostedVp``), ``feeder``, ``producer``, ``group``
(the group's etcd keys), ``consumer`` (group members and their churn), ``coordinator`` (etcd +
controller), ``resharding``, ``nemesis`` (faults), ``messages``, ``env``, ``scheduler``,
``network``, ``disk``.

What is simulated and what is not: see ``cluster`` (phases), ``disk`` (what a crash
loses), ``nemesis`` (which faults, with which limits), ``coordinator`` (etcd never fails;
controller failover is not simulated), ``feeder``, ``virtual`` and ``consumer`` (deliberate
deviations from the production shells).
"""
