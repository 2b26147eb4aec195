"""``mafka4 experiment scaling``: the consumer-scaling experiment on the real runtime.

``experiment`` runs it (both modes, every consumer count, every repetition, each on a local
cluster of this machine) and writes event logs, in the order of ``run_plan`` (the modes take
turns by repetition); ``pinning`` pins the simulated nodes to CPU sets so that one machine
stands in for separate write and read machines; ``stage_stamps`` joins the stage trace of the
cluster to the messages; ``command`` is its command line, importable without the ``analysis``
extra. ``simulations.compare`` runs it as the first step of ``mafka4 compare``.
"""
