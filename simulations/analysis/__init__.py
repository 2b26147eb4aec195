"""``mafka4 analyze``: the Spark job that turns event logs into result tables, plots and a report.

``job`` reads the event logs (``simulations.schema``) and writes every table; what it computes
is split by concern: ``runs`` (configurations, runs, and which runs count), ``percentiles``
(exact nearest-rank percentiles as Spark expressions), ``intervals`` (bootstrap intervals of
the Mafka3 / Mafka4 ratios), ``scale_ratios`` (each mode's ratio of its most consumers over its
fewest, on the same bootstrap), ``stages`` (the per-stage latency breakdown), ``omb``
(OpenMessaging-Benchmark-shaped results) and ``consumer_scales`` (the key of the fleet plots'
lines). ``report`` writes ``report.md`` from the (small) tables and ``report_plots`` draws the
PNGs, neither with Spark. ``command`` is the command line and ``settings`` how Spark runs,
both importable without the ``analysis`` extra.
"""
