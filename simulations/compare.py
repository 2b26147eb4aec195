"""``mafka4 compare``: the whole Mafka3-vs-Mafka4 comparison at a small size, in one command.

    mafka4 compare --out results/compare      # about 10-15 minutes on a 2-core machine

1. the consumer-scaling experiment on the real runtime (``simulations.scaling``) at a small
   size: consumers 1, 2, 4, 8, 1,000 msgs/s for 8 s per configuration;
2. the fleet-scale model (``simulations.fleet``) over fleet sizes up to 40,000 topics, with the
   calibration in ``--calibration`` (default: the one shipped with the model, measured
   once on this kind of machine; ``mafka4 fleet calibrate`` measures a new one);
3. the Spark analysis (``simulations.analysis``) of both event logs into tables, plots and
   ``report.md``.

Each step writes under ``--out``; the experiment step is resumable, so rerunning after an
interruption continues where it stopped.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from simulations.cli import add_scaling_arguments, settings_from_args
from simulations.extras import require_analysis_extra
from simulations.scaling import ScalingSettings

SMALL = ScalingSettings(consumers=(1, 2, 4, 8), duration_s=8.0)


def run_compare(out: Path, scaling: ScalingSettings, calibration: Path | None, progress=sys.stderr) -> Path:
    from simulations.analysis import analyze
    from simulations.fleet.params import DEFAULT_CALIBRATION, load_calibration
    from simulations.fleet.sweep import SweepSettings, run_sweep
    from simulations.scaling import run_scaling

    began = time.monotonic()
    print(f"1/3 consumer-scaling experiment on a local cluster -> {out / 'runtime'}", file=progress, flush=True)
    run_scaling(scaling, out / "runtime", progress)
    print(f"2/3 fleet-scale model -> {out / 'fleet'}", file=progress, flush=True)
    params = load_calibration(calibration) if calibration else DEFAULT_CALIBRATION
    run_sweep(out / "fleet", SweepSettings(seed=scaling.seed), params, str(calibration) if calibration else None)
    print(f"3/3 Spark analysis -> {out / 'analysis'}", file=progress, flush=True)
    result = analyze(out, out / "analysis")
    print(f"done in {time.monotonic() - began:.0f} s", file=progress, flush=True)
    return result.report_path


def _cmd_compare(args: argparse.Namespace) -> int:
    require_analysis_extra("compare")
    report = run_compare(Path(args.out), settings_from_args(args), Path(args.calibration) if args.calibration else None)
    print(f"report: {report}")
    return 0


def add_compare_parser(commands) -> None:
    compare = commands.add_parser("compare", help="experiment + fleet model + Spark report, small size, one command")
    add_scaling_arguments(compare, SMALL)
    compare.add_argument("--calibration", help="calibration.json for the fleet model (default: the shipped one)")
    compare.add_argument("--out", default="results/compare", help="output directory (default %(default)s)")
    compare.set_defaults(run=_cmd_compare)
