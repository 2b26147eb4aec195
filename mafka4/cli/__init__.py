"""The ``mafka4`` command, one module per command group.

``main`` builds the parser and runs a command line; each group adds its commands to the parser
and runs them: ``cluster`` (up, down, status, demo), ``topics`` (topic, scale), ``clients``
(produce, consume), ``groups`` (group) and ``bench``. A handler imports what it needs to run
(Ray, the client) itself, so that parsing a command line imports none of it.
"""

from mafka4.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
