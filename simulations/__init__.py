"""The experiments around mafka4: what its claims rest on, outside the product.

* ``scaling``: the consumer-scaling experiment on the real runtime (``mafka4 experiment``);
* ``fleet``: the fleet-scale model, its calibration and sensitivity (``mafka4 fleet``);
* ``analysis``: the Spark job over both's event logs, its tables, plots and report
  (``mafka4 analyze``), and the figures of the README and ``docs/performance.md`` rendered from
  the reports in ``reports/``;
* ``dst``: the deterministic simulator of a whole cluster (``python3 -m simulations.dst``);
* ``chaos``: Jepsen-style runs against a real local cluster (``mafka4 chaos``).

Four modules stay at this level because more than one of those packages uses them, and
inside one they would make its siblings import it:

* ``schema``: the event-log schema; ``scaling`` and ``fleet`` write it, ``analysis`` reads it;
* ``checkers``: the history checkers that judge both ``dst`` and ``chaos`` runs;
* ``extras``: the check for the ``analysis`` extra, which ``scaling``, ``fleet``, ``analysis``
  and ``compare`` make before they start;
* ``compare``: ``mafka4 compare``, which runs ``scaling``, ``fleet`` and ``analysis`` in turn
  and so belongs to none of them.


The commands register through the ``mafka4.commands`` entry points (``mafka4.cli.plugins``):
these packages import mafka4, never the other way round.
"""
