"""The ``mafka4`` command, one module per command group.

``main`` builds the parser and runs a command line; each group adds its commands to the parser
and runs them: ``cluster`` (up, down, status, demo), ``topics`` (topic, scale), ``clients``
(produce, consume), ``groups`` (group), ``security`` (user, acl) and ``bench``; ``plugins`` adds
the commands of other packages (the experiments of ``simulations``) through entry points. A
command line imports the group of its command alone, and a handler imports what it needs to run
(Ray, the client, Spark) itself, so that parsing a command line imports none of it.
"""

from mafka4.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
