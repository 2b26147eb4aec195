"""``fleet model``, ``fleet calibrate`` and ``fleet sensitivity``: the fleet-scale model's commands.

``add_fleet_parser(subparsers)`` registers them under a ``fleet`` command of an argparse
parser (``mafka4`` gets it through the ``mafka4.commands`` entry point of ``pyproject.toml``);
each handler returns an exit code and lets ``MafkaError`` propagate, so the caller prints it as
a one-line error. ``python -m simulations.fleet.cli`` runs them standalone.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from typing import Sequence

from simulations.extras import require_analysis_extra
from simulations.fleet.config import (CONSUMER_SCALES_DEFAULT, LANE_CONSUMERS_DEFAULT, LANE_TRAFFIC_SHARE_DEFAULT,
                                      ROWS_DEFAULT, SENSITIVITY_TOPICS_DEFAULT, TOPICS_DEFAULT, ModelConfig)

CALIBRATION_OUT_DEFAULT = "results/fleet/calibration.json"
MODEL_OUT_DEFAULT = "results/fleet"
SENSITIVITY_OUT_DEFAULT = "results/fleet/sensitivity"
SENSITIVITY_TOP_PRINTED = 8  # parameters per consumer scale in the printed summary; the files have all
LANE_TOPICS_SHARE_DEFAULT = 0.1  # of the topics carrying lanes, when --lanes-per-topic asks for lanes


def _calibration_overrides(pairs: list[str]) -> dict[str, float]:
    from mafka4.errors import InvalidConfig

    overrides = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        try:
            overrides[name.strip()] = float(value)
        except ValueError:
            raise InvalidConfig(f"--set {pair!r} is not NAME=NUMBER, e.g. --set idle_wakeup_cpu_cores_per_partition=0") from None
    return overrides


def _cmd_fleet_model(args: argparse.Namespace) -> int:
    require_analysis_extra("fleet model", ("pyarrow",))  # the event logs are Parquet
    from simulations.fleet.params import DEFAULT_CALIBRATION, CalibrationParams, load_calibration
    from simulations.fleet.sweep import SweepSettings, node_ratios, run_sweep
    from simulations.fleet.workload import WorkloadConfig

    params = load_calibration(args.calibration) if args.calibration else DEFAULT_CALIBRATION
    overrides = _calibration_overrides(args.set or [])
    if overrides:
        params = CalibrationParams.from_json({**params.to_json(), **overrides})
    model = replace(ModelConfig(), feeder_calls_every_vp=args.feeder_calls_every_vp)
    if args.produce_tp999_ms_target is not None:
        model = replace(model, produce_tp999_ms_target=args.produce_tp999_ms_target)
    workload = WorkloadConfig() if args.read_replicas is None else replace(WorkloadConfig(), read_replicas=args.read_replicas)
    with_lanes = any(args.lanes_per_topic)
    if with_lanes:  # without lanes the workload stays the one of every result before lanes
        workload = replace(workload, lane_topics_share=args.lane_topics_share,
                           lane_traffic_share=args.lane_traffic_share, lane_consumers=args.lane_consumers)
    settings = SweepSettings(seed=args.seed, topics=tuple(args.topics), consumer_scales=tuple(args.consumer_scales),
                             lanes_per_topic=tuple(args.lanes_per_topic), rows=args.rows, workload=workload,
                             model=model, experiment_id=args.experiment_id or "")
    lanes_text = (f", lanes per topic {list(settings.lanes_per_topic)} on {workload.lane_topics_share:g} of the topics "
                  f"({workload.lane_traffic_share:g} of the topic's rate and {workload.lane_consumers} member(s) of "
                  f"each group a lane)" if with_lanes else "")
    print(f"fleet model: seed {settings.seed}, topics {list(settings.topics)}, consumer scales "
          f"{list(settings.consumer_scales)}{lanes_text}, calibration {args.calibration or 'default'}"
          f"{', overrides ' + str(overrides) if overrides else ''}", file=sys.stderr)
    summary = run_sweep(args.out, settings, params, args.calibration, use_ray=args.ray)
    if with_lanes:
        _print_lanes(summary)
        print(f"event logs, calibration.json and fleet_summary.json written to {args.out}", file=sys.stderr)
        return 0
    print(f"{'topics':>7} {'x':>4} {'design':<7} {'P':>8} {'VPs':>8} {'write':>6} {'read':>6} {'nodes':>6} "
          f"{'bound':<9} {'produce tp999':>13} {'e2e tp999':>10}")
    for run in summary:
        print(f"{run['topics']:>7} {run['consumers_scale']:>4g} {run['design']:<7} {run['physical_partitions']:>8} "
              f"{run['virtual_partitions']:>8} {run['write_nodes']:>6} {run['read_nodes']:>6} {run['nodes']:>6} "
              f"{run['write_constraint']:<9} {run['produce_latency_ms']['tp999']:>13.1f} "
              f"{run['end_to_end_latency_ms']['tp999']:>10.1f}")
    print(f"\n{'topics':>7} {'x':>4} {'nodes mafka3':>12} {'nodes mafka4':>12} {'ratio':>7}")
    for ratio in node_ratios(summary):
        print(f"{ratio['topics']:>7} {ratio['consumers_scale']:>4g} {ratio['nodes_mafka3']:>12} "
              f"{ratio['nodes_mafka4']:>12} {ratio['node_ratio']:>7.3f}")
    print(f"event logs, calibration.json and fleet_summary.json written to {args.out}", file=sys.stderr)
    return 0


def _print_lanes(summary: list[dict]) -> None:
    """Per configuration and design: what the lanes cost (partitions, actors, nodes, tails)."""
    from simulations.fleet.sweep import node_ratios

    print(f"{'topics':>7} {'x':>4} {'lanes':>5} {'design':<7} {'P':>8} {'VPs':>8} {'write act':>9} {'read act':>9} "
          f"{'nodes':>6} {'produce tp999':>13} {'e2e tp999':>10}")
    for run in summary:
        print(f"{run['topics']:>7} {run['consumers_scale']:>4g} {run['lanes_per_topic']:>5} {run['design']:<7} "
              f"{run['physical_partitions']:>8} {run['virtual_partitions']:>8} {run['write_actors']:>9} "
              f"{run['read_actors']:>9} {run['nodes']:>6} {run['produce_latency_ms']['tp999']:>13.1f} "
              f"{run['end_to_end_latency_ms']['tp999']:>10.1f}")
    print(f"\n{'topics':>7} {'x':>4} {'lanes':>5} {'nodes mafka3':>12} {'nodes mafka4':>12} {'ratio':>7}")
    for ratio in node_ratios(summary):
        print(f"{ratio['topics']:>7} {ratio['consumers_scale']:>4g} {ratio['lanes_per_topic']:>5} "
              f"{ratio['nodes_mafka3']:>12} {ratio['nodes_mafka4']:>12} {ratio['node_ratio']:>7.3f}")


def _cmd_fleet_calibrate(args: argparse.Namespace) -> int:
    require_analysis_extra("fleet calibrate", ("pyarrow",))  # its module imports the event-log schema
    from simulations.fleet.calibrate import run_calibration
    from simulations.fleet.params import calibration_source

    document = run_calibration(args.out, command=" ".join(["fleet calibrate", "--out", args.out]))
    errors = document["measurement_error"]
    for name, value in document["derived"].items():
        print(f"{name:<40} {value:>14.6g}  +/- {errors[name]:.3g}")
    for note in document["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(f"calibration: {calibration_source(document)}", file=sys.stderr)
    print(f"calibration written to {args.out} ({document['elapsed_s']} s)", file=sys.stderr)
    return 0


def _cmd_fleet_sensitivity(args: argparse.Namespace) -> int:
    from simulations.fleet.params import (DEFAULT_CALIBRATION_DOCUMENT, CalibrationParams, calibration_source,
                                          load_document, measurement_error_of)
    from simulations.fleet.sensitivity import SensitivitySettings, moves_at, run_sensitivity

    document = load_document(args.calibration) if args.calibration else DEFAULT_CALIBRATION_DOCUMENT
    params, errors = CalibrationParams.from_json(document["derived"]), measurement_error_of(document)
    settings = SensitivitySettings(topics=args.topics, consumer_scales=tuple(args.consumer_scales), seed=args.seed,
                                   parameters=tuple(args.parameters or ()))
    print(f"fleet sensitivity: {settings.topics} topics, consumer scales {list(settings.consumer_scales)}, "
          f"{len(settings.chosen_parameters)} parameters, calibration {args.calibration or 'default'}"
          f"{'' if errors else ' (it has no measurement errors: no +/-1 sigma rows)'}", file=sys.stderr)
    started = time.perf_counter()
    rows = run_sensitivity(args.out, settings, params, errors, calibration_source(document))
    print(f"{'x':>4} {'parameter':<38} {'widest ratio move':>17}  {'widest latency move (ms)':<28} "
          "(baseline ratio)")
    for scale in settings.consumer_scales:
        baseline, moves = moves_at(rows, scale)
        for move in moves[:SENSITIVITY_TOP_PRINTED]:
            print(f"{scale:>4g} {move.parameter:<38} {move.ratio:>17.4f}  {move.latency_text:<28} "
                  f"({baseline['node_ratio']})")
    print(f"sensitivity.json and sensitivity.md written to {args.out} ({time.perf_counter() - started:.0f} s)",
          file=sys.stderr)
    return 0


def add_fleet_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``fleet model``, ``fleet calibrate`` and ``fleet sensitivity`` on ``subparsers``; returns the ``fleet`` parser."""
    fleet = subparsers.add_parser("fleet", help="fleet-scale model: nodes and tail latency of Mafka3 vs Mafka4")
    commands = fleet.add_subparsers(dest="fleet_command", required=True, metavar="ACTION")
    model = commands.add_parser(
        "model", help="size both designs over fleet sizes; write event logs",
        description="Size Mafka3 and Mafka4 for every fleet size (--topics) at every consumer scale "
                    "(--consumer-scales) and lane count (--lanes-per-topic: Mafka3 makes each lane a topic of its "
                    "own, Mafka4 VPs of the same topic); write one event log per design and configuration, "
                    "calibration.json and fleet_summary.json (every run, and the node ratio Mafka3 / Mafka4 of every "
                    "configuration).")
    model.add_argument("--out", default=MODEL_OUT_DEFAULT, help="output directory (default %(default)s)")
    model.add_argument("--seed", type=int, default=7, help="workload seed (default %(default)s)")
    model.add_argument("--topics", type=int, nargs="+", default=list(TOPICS_DEFAULT),
                       help="fleet sizes in topics (default %(default)s)")
    model.add_argument("--consumer-scales", type=float, nargs="+", default=list(CONSUMER_SCALES_DEFAULT),
                       help="multipliers of every group's consumers (default %(default)s)")
    model.add_argument("--calibration", help="calibration.json from 'fleet calibrate' (default: the shipped one)")
    model.add_argument("--rows", type=int, default=ROWS_DEFAULT, help="sampled messages per event log (default %(default)s)")
    model.add_argument("--produce-tp999-ms-target", type=float, help="produce tp999 each design must meet (default %s)" % ModelConfig().produce_tp999_ms_target)
    model.add_argument("--read-replicas", type=int, help="replicas per virtual partition (default 2)")
    model.add_argument("--set", action="append", metavar="NAME=VALUE",
                       help="override one calibration figure (what-if), e.g. idle_wakeup_cpu_cores_per_partition=0")
    model.add_argument("--feeder-calls-every-vp", action="store_true",
                       help="what-if: a feeder round calls every VP of the topic (the runtime calls only the VPs "
                            "its messages hash to)")
    model.add_argument("--lanes-per-topic", type=int, nargs="+", default=[0], metavar="N",
                       help="test lanes on each lane-carrying topic, one configuration per value (default %(default)s: "
                            "no lanes); above 0 the output adds a table of partitions, actors and nodes per lane count")
    model.add_argument("--lane-topics-share", type=float, default=LANE_TOPICS_SHARE_DEFAULT,
                       help="share of the topics that carry lanes, with --lanes-per-topic (default %(default)s)")
    model.add_argument("--lane-traffic-share", type=float, default=LANE_TRAFFIC_SHARE_DEFAULT,
                       help="share of its topic's rate each lane carries, on top of the topic's (default %(default)s)")
    model.add_argument("--lane-consumers", type=int, default=LANE_CONSUMERS_DEFAULT,
                       help="members of each of a topic's groups in each lane (default %(default)s: a test chain)")
    model.add_argument("--experiment-id", help="experiment_id of the event logs (default fleet-model-seed<seed>)")
    model.add_argument("--ray", action="store_true", help="run the configurations as tasks on a local Ray")
    model.set_defaults(run=_cmd_fleet_model)
    calibrate = commands.add_parser(
        "calibrate", help="measure the runtime's costs and their errors on a throwaway local cluster (~8 min; run it "
                          "on a quiet machine: the document says whether the background load average stayed <= 1 "
                          "per core)",
        description="Start a throwaway local cluster (3 write nodes, 1 read node), measure CPU per request, message "
                    "and byte of every actor role (3 trials each), idle CPU over 60 s windows from schedstat, the "
                    "read node's growth per hosted VP (a topic of 128 VPs), and latencies (ack -> reader, 10 trials "
                    "each through a physical partition and through VPs, produced and read over the nodes' client "
                    "ports as clients do; produce latency, 5 paced trials), then "
                    "write calibration.json: raw figures, derived parameters, their 1-sigma measurement errors, "
                    "notes and whether the machine was quiet (every 1-minute load average read before the run and in its "
                    "idle windows <= 1 per core; the trials' own load is recorded beside it).")
    calibrate.add_argument("--out", default=CALIBRATION_OUT_DEFAULT, help="calibration.json path (default %(default)s)")
    calibrate.set_defaults(run=_cmd_fleet_calibrate)
    sensitivity = commands.add_parser(
        "sensitivity", help="how nodes, node ratio and tp999 move when each calibrated parameter moves",
        description="Size both designs at the default workload with one calibrated parameter at a time changed "
                    "x0.8, x1.2, -1 sigma and +1 sigma (its measurement error; skipped where that is 0). Writes "
                    "sensitivity.json (every row) and sensitivity.md (parameters sorted by how far the node ratio "
                    f"moves). Its time hangs on the calibration, which sets how many rounds of placing a "
                    f"sample each model run takes: the whole table at {SENSITIVITY_TOPICS_DEFAULT} topics, both "
                    f"consumer scales, took 136 s on a 2-core machine with the calibration of 2026-12-04 and 32 "
                    f"min with that of 2026-11-26; --topics or --parameters make it shorter.")
    sensitivity.add_argument("--out", default=SENSITIVITY_OUT_DEFAULT, help="output directory (default %(default)s)")
    sensitivity.add_argument("--calibration", help="calibration.json from 'fleet calibrate' (default: the shipped one)")
    sensitivity.add_argument("--topics", type=int, default=SENSITIVITY_TOPICS_DEFAULT,
                             help="fleet size in topics (default %(default)s)")
    sensitivity.add_argument("--consumer-scales", "--consumer-scale", type=float, nargs="+",
                             default=list(CONSUMER_SCALES_DEFAULT), help="multipliers of every group's consumers "
                                                                          "(default %(default)s)")
    sensitivity.add_argument("--seed", type=int, default=7, help="workload seed (default %(default)s, as fleet model)")
    sensitivity.add_argument("--parameters", nargs="+", metavar="NAME",
                             help="only these calibrated parameters, e.g. pass_ms_per_replica (default: all but "
                                  "service_scv and reference_message_bytes)")
    sensitivity.set_defaults(run=_cmd_fleet_sensitivity)
    return fleet


def main(argv: Sequence[str] | None = None) -> int:
    from mafka4.errors import MafkaError

    parser = argparse.ArgumentParser(prog="python -m simulations.fleet.cli")
    add_fleet_parser(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(["fleet", *(argv if argv is not None else sys.argv[1:])])
    try:
        return args.run(args)
    except MafkaError as error:
        print(f"fleet: error: {error.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
