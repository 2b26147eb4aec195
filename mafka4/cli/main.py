"""mafka4: a local cluster, topics, producing, consuming and benchmarks.

Every command prints a one-line error naming the problem and the fix (exit code 2 for
usage or input errors, ``MafkaError.usage_error``; 1 for cluster errors) instead of a
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from mafka4.cli import plugins
from mafka4.errors import MafkaError

# The modules of mafka4.cli that add the built-in commands, in the order the help lists them, with
# the commands each adds: a command line runs one of them, and needs no other module's parsers.
COMMAND_MODULES = {
    "cluster": ("up", "down", "status", "demo"),
    "deployment": ("deploy", "undeploy"),
    "topics": ("topic", "scale"),
    "clients": ("produce", "consume"),
    "groups": ("group",),
    "dead_letters": ("dlq",),
    "security": ("user", "acl"),
    "bench": ("bench",),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every ``mafka4`` command, or, given the first word of a command line, of what it needs.

    A built-in command needs only the parsers its own module adds (``COMMAND_MODULES``): the other
    modules are neither imported nor built, nor are the commands of other packages (``plugins``),
    so a client command pays for none of them; ``mafka4 bench`` builds every bench, other
    packages' too. The help, and any other word (another package's command, or a mistake),
    build every command.
    """
    parser = argparse.ArgumentParser(prog="mafka4", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    own = [module for module, names in COMMAND_MODULES.items() if command in names]
    for module in own or COMMAND_MODULES:
        importlib.import_module(f"mafka4.cli.{module}").add_commands(commands)
    if not own:
        plugins.add_commands(commands)
    return parser


# What the "server" extra installs (pyproject.toml): a client install has none of them.
SERVER_MODULES = frozenset({"ray", "etcd3", "grpc", "google", "networkx", "psutil", "numpy", "scramp",
                            "prometheus_client"})
INSTALL_SERVER = 'pip install "mafka4[server]" (in a checkout: pip install -e ".[server]")'


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as missing:
        if missing.name is None or missing.name.split(".")[0] not in SERVER_MODULES:
            raise
        print(f"mafka4: error: this command runs or joins a cluster and needs {missing.name!r}, which a client "
              f"install leaves out: {INSTALL_SERVER}", file=sys.stderr)
        return 2
    except Exception as raised:
        error = raised
        # Only a command that ran Ray can have an error of ours wrapped in a Ray error; a client of
        # the client port must not pay a quarter of a second for importing Ray to find that out.
        if not isinstance(error, MafkaError) and "ray" in sys.modules:
            from mafka4.transport.remote_errors import unwrap

            error = unwrap(raised)
        if not isinstance(error, MafkaError):
            raise
        print(f"mafka4: error: {error.message}", file=sys.stderr)
        return 2 if error.usage_error else 1
