"""``mafka4 bench WHAT``: the benchmarks, run against the running cluster, each writing a JSON report.

Every benchmark has the same shape, so one runner serves them all. A ``Bench`` names its
settings dataclass and its driver. The settings class gives the options: a field with a
``help`` in its metadata is one, named after the field, with the field's type and default
(shown in the help; an option not given keeps the class's default). Metadata ``choices``
limits the values; a bool field is a flag that turns its default over, named by metadata
``switch`` (``--skip-memory`` sets ``stalled_producer=False``). A tuple field takes a
comma-separated list (``--consumers 1,4,16``; ``--compression none,zstd``, whose None default
the help explains). A class with ``smoke_sized()`` also gets ``--smoke``: a test-sized run that
its report marks as no result. Every bench takes ``--output``, the path of its report.

The benches here (``BENCHES``) are the operator's: what the running cluster writes, reads and
costs (``produce``, ``consume``, ``stream``, ``vp-join``, ``vp-density``, and ``rebalance``, the
Mafka3 half of ``vp-join``). Benches of other packages register a ``Bench`` through the
``mafka4.benches`` entry points (``mafka4.cli.plugins``) and are served the same way:
``benchmarks`` adds the Redis Streams comparison and the experiments' probes (``failover``,
``feed-lag``, ``redis-streams``). They are loaded only when the command line may need them.

The runner builds the settings first, so a bad value is refused before anything connects;
then it imports the driver (most import Ray), runs it, prints the report's summary (as JSON,
or as the text its ``render`` function makes of the report) and says where the full report went.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import sys
import typing
from dataclasses import Field, dataclass, fields

from mafka4.cli import plugins


@dataclass(frozen=True, slots=True)
class Bench:
    """One bench of ``mafka4 bench``: its word, its help line, its settings class and its driver.

    Another package's bench is a value of this type that a ``mafka4.benches`` entry point of the
    same name gives (``mafka4.cli.plugins``).
    """

    name: str
    help: str
    settings: type
    # "module:function" of the driver, run(settings, output_path) -> report with a "summary";
    # imported only when the bench runs.
    driver: str
    # "module:function" turning the report into the text printed instead of its JSON summary.
    render: str | None = None

    @property
    def output_default(self) -> str:
        return f"results/bench_{self.name.replace('-', '_')}.json"


def builtin_benches() -> tuple[Bench, ...]:
    """The operator's benches. Their settings classes are imported here, not with this module: a
    command line that runs no bench (``mafka4 topic list``) does not pay for their imports."""
    from mafka4.bench.density import VpDensityBenchSettings
    from mafka4.bench.drain import ConsumeBenchSettings
    from mafka4.bench.produce_settings import ProduceBenchSettings
    from mafka4.bench.rebalance import RebalanceBenchSettings
    from mafka4.bench.stream_transfer import StreamBenchSettings
    from mafka4.bench.vp_join import VpJoinBenchSettings

    return (
        Bench("produce", "producer throughput and latency vs a bare Ray actor and a bare stream (a ratio above 1: that "
                         "bare run is no ceiling)", ProduceBenchSettings, "mafka4.bench.produce:run_produce_bench"),
        Bench("rebalance", "consumer stall while a member joins a group (Mafka3 eager rebalance)", RebalanceBenchSettings,
              "mafka4.bench.rebalance:run_rebalance_bench"),
        Bench("vp-join", "consumer stall while a member joins a mafka4-mode group (VP split), next to the Mafka3 eager "
                         "rebalance", VpJoinBenchSettings, "mafka4.bench.vp_join:run_vp_join_bench"),
        Bench("vp-density", "RSS and idle CPU of the read nodes per hosted virtual partition, next to one bare idle Ray "
                            "actor", VpDensityBenchSettings, "mafka4.bench.vp_density:run_vp_density_bench"),
        Bench("consume", "one group of consumer processes drains a backlog, per read mode, commit cadence and consumer "
                         "count: msgs/s, MB/s, fetch latency, and CPU per message (the members', the machine's)",
              ConsumeBenchSettings,
              "mafka4.bench.consume:run_consume_bench", render="mafka4.bench.drain:table"),
        Bench("stream", "what a stream call carrying a consumer's fetch answer costs in CPU per MiB, on the caller's and "
                        "the server's side (and, with --decode, the caller's decoding per message). No cluster",
              StreamBenchSettings, "mafka4.bench.stream_transfer:run_stream_bench"),
    )


def add_commands(commands) -> None:
    """``mafka4 bench`` with every bench: the operator's, then other packages'."""
    bench_parser = commands.add_parser("bench", help="benchmarks")
    benches = bench_parser.add_subparsers(dest="bench_command", required=True, metavar="WHAT")
    for bench in builtin_benches():
        _add_bench(benches, bench)
    plugins.add_benches(benches.choices, lambda name, bench: _add_bench(benches, _checked(name, bench)))


def _checked(name: str, bench: object) -> Bench:
    """``bench`` if it is the ``Bench`` an entry point of ``name`` must give; ``TypeError`` naming the fault if not."""
    if not isinstance(bench, Bench) or bench.name != name:
        raise TypeError(f"the entry point must name a mafka4.cli.bench.Bench whose name is {name!r}, not {bench!r}")
    return bench


def _add_bench(benches, bench: Bench) -> None:
    parser = benches.add_parser(bench.name, help=bench.help)
    for field, kind in _options_of(bench.settings):
        _add_option(parser, field, kind)
    if hasattr(bench.settings, "smoke_sized"):
        parser.add_argument("--smoke", action="store_true", help=_smoke_help(bench.settings))
    parser.add_argument("--output", default=bench.output_default, help="JSON report path (default %(default)s)")
    parser.set_defaults(run=functools.partial(_run, bench))


def _options_of(settings_class: type) -> list[tuple[Field, object]]:
    """The fields of ``settings_class`` that are command-line options, each with its type."""
    kinds = typing.get_type_hints(settings_class)
    return [(field, kinds[field.name]) for field in fields(settings_class) if "help" in field.metadata]


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers, e.g. 8,256") from None


def _name_list(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(","))


# How an option's text becomes its field's value, per field type.
_PARSERS = {int: int, float: float, str: str, int | None: int, tuple[int, ...]: _int_list, tuple[str, ...]: _name_list,
            tuple[str, ...] | None: _name_list}
_METAVARS = {tuple[int, ...]: "N[,N...]", tuple[str, ...]: "NAME[,NAME...]", tuple[str, ...] | None: "NAME[,NAME...]"}


def _add_option(parser: argparse.ArgumentParser, field: Field, kind: object) -> None:
    help_text = field.metadata["help"]
    # No argparse default: an option not given is left out of the settings, which keep their own.
    if kind is bool:
        parser.add_argument(field.metadata.get("switch", _flag(field)), dest=field.name, action="store_const",
                            const=not field.default, help=help_text)
        return
    assert kind in _PARSERS, f"{field.name}: no command-line form for {kind}"
    if field.default is not None:  # a None default means something the help says itself
        help_text += f" (default {_shown(field.default)})"
    parser.add_argument(_flag(field), dest=field.name, type=_PARSERS[kind], choices=field.metadata.get("choices"),
                        metavar=_METAVARS.get(kind), help=help_text)


def _smoke_help(settings_class: type) -> str:
    default, smoke = settings_class(), settings_class.smoke_sized()
    sizes = " ".join(f"{_flag(field)} {_shown(getattr(smoke, field.name))}" for field, _ in _options_of(settings_class)
                     if getattr(smoke, field.name) != getattr(default, field.name))
    return f"a test-sized run ({sizes}): not a result"


def _flag(field: Field) -> str:
    return "--" + field.name.replace("_", "-")


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _run(bench: Bench, args: argparse.Namespace) -> int:
    given = {field.name: getattr(args, field.name) for field, _ in _options_of(bench.settings)
             if getattr(args, field.name) is not None}
    settings = bench.settings.smoke_sized(**given) if getattr(args, "smoke", False) else bench.settings(**given)
    report = _function(bench.driver)(settings, args.output)
    print(json.dumps(report["summary"], indent=2) if bench.render is None else _function(bench.render)(report))
    print(f"full report written to {args.output}", file=sys.stderr)
    return 0


def _function(path: str):
    """The function a "module:function" path names, importing its module."""
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)
