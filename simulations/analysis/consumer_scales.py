"""The consumer scale of each fleet-model configuration: the key of the fleet plots' lines.

The fleet model runs every fleet size (topics) at several consumer scales (``fleet model
--consumer-scales``, ``WorkloadConfig.consumers_scale``); its event logs record the resulting
members of all groups (``consumers``) but not the scale, so two scales of one mode drawn as one
line zigzag. Two columns are added to the fleet rows of ``latency_by_config`` (null on runtime
rows):

* ``consumers_scale``: the scale, from the ``fleet_summary.json`` the fleet model writes beside
  its logs (each run's ``design``, ``topics``, ``consumers`` and ``consumers_scale``, under the
  file's ``experiment_id``); null when no summary names the configuration or summaries disagree;
* ``consumers_scale_rank``: 1 for the fewest consumers of the configuration's (mode, topics),
  2 for the next, ...: the same seed draws the same workload at every scale and multiplies its
  consumers, so the ranks follow the scales even without a summary.

``scale_label`` names a row's line: ``x4`` from the summary, ``scale #2`` from the rank alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa

from simulations.schema import ANALYSIS_MARKER

SUMMARY_FILE = "fleet_summary.json"
FLEET = "fleet_model"


def summary_scales(events_dir: Path) -> dict[tuple[str, str, int, int], float | None]:
    """(experiment_id, mode, topics, consumers) -> consumers_scale from every summary below the dir;
    None where two summaries disagree. Unreadable summaries are skipped."""
    scales: dict[tuple[str, str, int, int], float | None] = {}
    for path in sorted(events_dir.rglob(SUMMARY_FILE)):
        if any((directory / ANALYSIS_MARKER).exists() for directory in path.parents):
            continue
        try:
            document = json.loads(path.read_text())
            entries = [(document["experiment_id"], run["design"], int(run["topics"]), int(run["consumers"]),
                        float(run["consumers_scale"])) for run in document["runs"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for experiment_id, mode, topics, consumers, scale in entries:
            key = (experiment_id, mode, topics, consumers)
            scales[key] = scale if scales.get(key, scale) == scale else None
    return scales


def with_scales(table: pa.Table, events_dir: Path) -> pa.Table:
    """``latency_by_config`` with ``consumers_scale`` and ``consumers_scale_rank`` (module doc)."""
    rows = table.to_pylist()
    known = summary_scales(events_dir)
    fleet_consumers: dict[tuple[str, int], list[int]] = {}
    for row in rows:
        if row["source"] == FLEET:
            fleet_consumers.setdefault((row["mode"], row["topics"]), []).append(row["consumers"])
    scales, ranks = [], []
    for row in rows:
        if row["source"] != FLEET:
            scales.append(None)
            ranks.append(None)
            continue
        ranks.append(sorted(set(fleet_consumers[(row["mode"], row["topics"])])).index(row["consumers"]) + 1)
        found = {known.get((experiment, row["mode"], row["topics"], row["consumers"]))
                 for experiment in row["experiment_ids"].split(",")}
        scales.append(found.pop() if len(found) == 1 else None)
    return table.append_column("consumers_scale", pa.array(scales, pa.float64())).append_column(
        "consumers_scale_rank", pa.array(ranks, pa.int32()))


def scale_label(row: Mapping[str, Any]) -> str:
    """The name of a fleet row's consumer scale: ``x4`` (known scale) or ``scale #2`` (rank only)."""
    if row.get("consumers_scale") is not None:
        return f"x{row['consumers_scale']:g}"
    return f"scale #{row['consumers_scale_rank']}"
