"""``fleet model``: the capacity model over fleet sizes and consumer scales, written as event logs.

For every fleet size (topics), consumer scale (``WorkloadConfig.consumers_scale``) and lanes per
lane-carrying topic (``lanes_per_topic``: ``WorkloadConfig.lanes_per_topic``, on the settings'
``workload.lane_topics_share`` of the topics; 0, the default, is the fleet without lanes), one
seeded workload is drawn and both designs are sized (``capacity.model_design``). The same seed
draws the same topics at every lane count, and the same lane topics at every count above 0. Each design
and configuration gives one Parquet event log (``simulations.schema``, ``source="fleet_model"``):

* ``rows`` modelled messages drawn uniformly from one second of the fleet's traffic (each
  message equally likely; ``capacity.sample_messages``), so ``sample_rate = rows / (msgs/s of
  the fleet)``; ``produce_time_ms`` is the message's time within that modelled second (model
  time from 0, not the wall clock), latencies are the modelled ones, ack and consume times are
  left out;
* per-run columns: ``consumers`` = every member of every group in the fleet, ``topics`` = fleet
  size, partition, VP, node and actor counts of the sized design.

Next to the logs: ``calibration.json`` (the calibration used, as ``fleet calibrate`` wrote it,
plus the model's assumptions under ``fleet_model``) and ``fleet_summary.json`` (every
``DesignResult`` under ``runs``, with its configuration's ``consumers_scale`` and
``lanes_per_topic``, and under ``node_ratios`` the nodes of both designs and their ratio Mafka3 /
Mafka4 for every fleet size, consumer scale and lane count, not only the largest). A lane count
above 0 adds ``-lanes<N>`` to its event logs' names; a run's ``consumers`` then counts the lanes'
members too. With ``use_ray`` each configuration is a Ray task on a local Ray started for the
sweep (and shut down after); the driver writes every file, so the output is the same.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from mafka4.errors import InvalidConfig
from simulations.fleet.capacity import DesignResult, model_design, sample_messages
from simulations.fleet.config import CONSUMER_SCALES_DEFAULT, ROWS_DEFAULT, TOPICS_DEFAULT, ModelConfig, NodeSpec
from simulations.fleet.loads import Design
from simulations.fleet.params import (DEFAULT_CALIBRATION, DEFAULT_CALIBRATION_PATH, DEFAULT_CALIBRATION_SOURCE,
                                      CalibrationParams)
from simulations.fleet.workload import WorkloadConfig, generate
from simulations.schema import RunInfo, git_commit, write_events

SOURCE = "fleet_model"


@dataclass(frozen=True, slots=True)
class SweepSettings:
    seed: int = 7
    topics: tuple[int, ...] = TOPICS_DEFAULT
    consumer_scales: tuple[float, ...] = CONSUMER_SCALES_DEFAULT
    lanes_per_topic: tuple[int, ...] = (0,)  # on workload.lane_topics_share of the topics
    rows: int = ROWS_DEFAULT
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    node: NodeSpec = field(default_factory=NodeSpec)
    model: ModelConfig = field(default_factory=ModelConfig)
    experiment_id: str = ""  # default: fleet-model-seed<seed>

    def __post_init__(self) -> None:
        if not self.topics or not self.consumer_scales or not self.lanes_per_topic:
            raise InvalidConfig("a fleet sweep needs at least one fleet size (--topics), one consumer scale and one "
                                "lane count (--lanes-per-topic)")
        if not 1 <= self.rows <= 10_000_000:
            raise InvalidConfig(f"rows={self.rows} must be in [1, 10000000]")
        for topics in self.topics:
            replace(self.workload, topics=topics)  # validates the size
        for scale in self.consumer_scales:
            replace(self.workload, consumers_scale=scale)
        for lanes in self.lanes_per_topic:
            for topics in self.topics:
                replace(self.workload, topics=topics, lanes_per_topic=lanes)

    @property
    def run_id(self) -> str:
        return self.experiment_id or f"fleet-model-seed{self.seed}"


def run_configuration(settings: SweepSettings, params: CalibrationParams, topics: int, scale: float,
                      lanes: int = 0) -> list[tuple]:
    """Both designs for one fleet size, consumer scale and lane count: (result, sampled columns, sample rate) each."""
    workload = generate(replace(settings.workload, topics=topics, consumers_scale=scale, lanes_per_topic=lanes),
                        settings.seed)
    runs = []
    for design in Design:
        model = model_design(design, workload, params, settings.node, settings.model)
        rows = min(settings.rows, max(1, int(workload.msgs_per_s_total)))
        columns = sample_messages(model, rows, settings.seed)
        runs.append((model.result, columns, rows / workload.msgs_per_s_total))
    return runs


def _log_path(out: Path, result: DesignResult, scale: float, lanes: int) -> Path:
    suffix = f"-lanes{lanes}" if lanes else ""
    return out / f"fleet-{result.design.value}-topics{result.topics}-consumers_x{scale:g}{suffix}.parquet"


def _write_run(out: Path, settings: SweepSettings, commit: str, scale: float, lanes: int, run: tuple) -> Path:
    result, columns, sample_rate = run
    info = RunInfo(experiment_id=settings.run_id, source=SOURCE, mode=result.design.value, consumers=result.consumers,
                   topics=result.topics, physical_partitions=result.physical_partitions,
                   virtual_partitions=result.virtual_partitions, write_nodes=result.write_nodes,
                   read_nodes=result.read_nodes, actors=result.actors, seed=settings.seed, git_commit=commit,
                   sample_rate=min(sample_rate, 1.0))
    return write_events(_log_path(out, result, scale, lanes), info, columns)


def result_json(result: DesignResult, scale: float, lanes: int = 0) -> dict:
    values = asdict(result)
    values.update(design=result.design.value, write_constraint=result.write_constraint.value,
                  read_constraint=None if result.read_constraint is None else result.read_constraint.value,
                  nodes=result.nodes, consumers_scale=scale, lanes_per_topic=lanes)
    return values


def node_ratios(summary: list[dict]) -> list[dict]:
    """Per fleet size, consumer scale and lane count (in the order of ``summary``): both designs' nodes
    and their ratio."""
    nodes: dict[tuple[int, float, int], dict[str, int]] = {}
    for run in summary:
        key = (run["topics"], run["consumers_scale"], run.get("lanes_per_topic", 0))
        nodes.setdefault(key, {})[run["design"]] = run["nodes"]
    return [{"topics": topics, "consumers_scale": scale, "lanes_per_topic": lanes, "nodes_mafka3": by_design["mafka3"],
             "nodes_mafka4": by_design["mafka4"], "node_ratio": round(by_design["mafka3"] / by_design["mafka4"], 4)}
            for (topics, scale, lanes), by_design in nodes.items() if set(by_design) == {d.value for d in Design}]


def calibration_document(params: CalibrationParams, calibration_path: str | None) -> dict:
    """The calibration as ``fleet calibrate`` wrote it (the given file, else the shipped default run)."""
    path = Path(calibration_path) if calibration_path else DEFAULT_CALIBRATION_PATH
    if path.exists():
        return json.loads(path.read_text())
    return {"source": DEFAULT_CALIBRATION_SOURCE, "derived": params.to_json()}


def _configurations(settings: SweepSettings, params: CalibrationParams, use_ray: bool) -> list[tuple[float, int, list]]:
    triples = [(topics, scale, lanes) for lanes in settings.lanes_per_topic for scale in settings.consumer_scales
               for topics in settings.topics]
    if not use_ray:
        return [(scale, lanes, run_configuration(settings, params, topics, scale, lanes))
                for topics, scale, lanes in triples]
    from mafka4.runtime.environment import apply_ray_environment

    apply_ray_environment()
    import ray

    ray.init(num_cpus=min(len(triples), os.cpu_count() or 1), include_dashboard=False, logging_level="WARNING")
    try:
        task = ray.remote(run_configuration)
        refs = [task.remote(settings, params, topics, scale, lanes) for topics, scale, lanes in triples]
        return [(scale, lanes, runs) for (_, scale, lanes), runs in zip(triples, ray.get(refs))]
    finally:
        ray.shutdown()


def run_sweep(out: str | Path, settings: SweepSettings, params: CalibrationParams = DEFAULT_CALIBRATION,
              calibration_path: str | None = None, use_ray: bool = False) -> list[dict]:
    """Model every configuration, write the event logs, calibration.json and fleet_summary.json."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    commit = git_commit()
    summary = []
    for scale, lanes, runs in _configurations(settings, params, use_ray):
        for run in runs:
            path = _write_run(out, settings, commit, scale, lanes, run)
            summary.append({**result_json(run[0], scale, lanes), "event_log": path.name, "sample_rate": run[2]})
    document = calibration_document(params, calibration_path)
    document["fleet_model"] = {"workload": asdict(settings.workload), "node": asdict(settings.node),
                               "model": asdict(settings.model), "seed": settings.seed, "rows": settings.rows,
                               "lanes_per_topic": list(settings.lanes_per_topic),
                               "calibration_used": params.to_json()}
    (out / "calibration.json").write_text(json.dumps(document, indent=2) + "\n")
    (out / "fleet_summary.json").write_text(json.dumps({"experiment_id": settings.run_id, "seed": settings.seed,
                                                        "git_commit": commit, "runs": summary,
                                                        "node_ratios": node_ratios(summary)}, indent=2) + "\n")
    return summary
