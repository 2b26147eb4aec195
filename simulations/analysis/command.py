"""``mafka4 analyze``: the command line of ``simulations.analysis.job``.

Registering the command needs neither pyspark nor pyarrow; running it does, and says which
extra to install when they are missing.
"""

from __future__ import annotations

import argparse

from simulations.analysis.settings import AnalysisSettings
from simulations.extras import require_analysis_extra


def add_analyze_parser(commands) -> None:
    """Register ``analyze`` on the ``mafka4`` sub-command parsers (``commands.add_parser``)."""
    analyze_parser = commands.add_parser(
        "analyze", help="Spark analysis of event logs: exact tp50/tp99/tp999 per repetition and their median per "
                        "configuration, integrity checks, Mafka3/Mafka4 ratios and each mode's ratio of its "
                        "most consumers over its fewest, both with block-bootstrap intervals, per-stage latencies, "
                        "OpenMessaging-Benchmark-shaped JSON, plots and report.md (runs with lanes in a section of "
                        "their own)")
    analyze_parser.add_argument("dir", help="directory holding event-log Parquet files (searched recursively)")
    analyze_parser.add_argument("--out", default=None, help="output directory (default DIR/analysis)")
    analyze_parser.add_argument("--master", default=AnalysisSettings().master,
                                help="Spark master URL (default %(default)s)")
    defaults = AnalysisSettings()
    analyze_parser.add_argument("--replicates", type=int, default=defaults.bootstrap_replicates,
                                help="bootstrap replicates of the ratio intervals, between the modes and within each "
                                     "(default %(default)s)")
    analyze_parser.add_argument("--block-ms", type=float, default=defaults.bootstrap_block_ms,
                                help="bootstrap block length in ms of produce time (default %(default)s)")
    analyze_parser.add_argument("--bootstrap-seed", type=int, default=defaults.bootstrap_seed,
                                help="seed of the bootstrap weights (default %(default)s)")
    analyze_parser.set_defaults(run=_cmd_analyze)


def _cmd_analyze(args: argparse.Namespace) -> int:
    require_analysis_extra("analyze")
    from simulations.analysis.job import analyze

    settings = AnalysisSettings(master=args.master, bootstrap_replicates=args.replicates,
                                bootstrap_block_ms=args.block_ms, bootstrap_seed=args.bootstrap_seed)
    result = analyze(args.dir, args.out, settings)
    print(f"report: {result.report_path}")
    for name, (parquet_path, csv_path) in result.table_paths.items():
        print(f"table {name}: {parquet_path} {csv_path}")
    for name, path in result.plot_paths.items():
        print(f"plot {name}: {path}")
    for name, reason in result.skipped_plots.items():
        print(f"plot {name} skipped: {reason}")
    if result.omb_paths:
        print(f"OpenMessaging-Benchmark-shaped results: {len(result.omb_paths)} files in {result.out_dir / 'omb'}")
    return 0
