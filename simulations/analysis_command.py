"""``mafka4 analyze``: the command line of ``simulations.analysis``.

Registering the command needs neither pyspark nor pyarrow; running it does, and says which
extra to install when they are missing.
"""

from __future__ import annotations

import argparse

from simulations.analysis_settings import AnalysisSettings
from simulations.extras import require_analysis_extra


def add_analyze_parser(commands) -> None:
    """Register ``analyze`` on the ``mafka4`` sub-command parsers (``commands.add_parser``)."""
    analyze_parser = commands.add_parser(
        "analyze", help="Spark analysis of event logs: exact tp50/tp99/tp999 and node counts per configuration, "
                        "Mafka3/Mafka4 ratios, plots and report.md")
    analyze_parser.add_argument("dir", help="directory holding event-log Parquet files (searched recursively)")
    analyze_parser.add_argument("--out", default=None, help="output directory (default DIR/analysis)")
    analyze_parser.add_argument("--master", default=AnalysisSettings().master,
                                help="Spark master URL (default %(default)s)")
    analyze_parser.set_defaults(run=_cmd_analyze)


def _cmd_analyze(args: argparse.Namespace) -> int:
    require_analysis_extra("analyze")
    from simulations.analysis import analyze

    result = analyze(args.dir, args.out, AnalysisSettings(master=args.master))
    print(f"report: {result.report_path}")
    for name, (parquet_path, csv_path) in result.table_paths.items():
        print(f"table {name}: {parquet_path} {csv_path}")
    for name, path in result.plot_paths.items():
        print(f"plot {name}: {path}")
    for name, reason in result.skipped_plots.items():
        print(f"plot {name} skipped: {reason}")
    return 0
