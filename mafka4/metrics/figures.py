"""The cluster's figures for ``mafka4 status``, from what its processes' metrics serve (pure).

``mafka4 status`` scrapes every metrics target it lists (``metrics.scrape``) and hands the answers
here: each target's Prometheus text exposition (parsed with ``prometheus_client``'s parser), or
why it gave none. ``figures`` sums them up in a short report, the same figures Prometheus and the
dashboard show, read from the same series (``metrics.families``):

* ``not_answering``: by process, each target that gave no exposition and why; its figures are
  missing below.
* ``partitions``: the physical partitions whose leader says they are under-replicated or under
  min ISR (names ``<topic>-<partition>``), and those whose ISR is smaller than their replicas,
  with both sizes. If two replicas claim to lead one partition (a deposed leader not yet told),
  the one of the higher leader epoch is believed.
* ``vps``: the VPs whose RISR is smaller than their read replicas, with both sizes (``<topic>/v<vp>``;
  two claimed leaders: the smaller RISR).
* ``feed_lag``: per read node, its feeds' largest lag in messages and in seconds.
* ``group_lag``: per group, its largest lag in messages and in seconds over the partitions it
  committed in, and where each is (``<topic>/v<vp>`` or ``<topic>-<partition>``).
* ``latency``: the produce and the end-to-end latency histograms, every series of a family summed
  (the whole cluster, and per topic): observations and the 99th percentile in seconds, estimated
  from the buckets as Prometheus's ``histogram_quantile`` does (linear within the bucket it falls
  in; the highest finite bound if it falls past them). These are totals since each process
  started, not a recent window: a restarted process starts from 0.
* ``controller``: per controller target (the active one), whether it is active, its epoch, the
  controller elections it won (failovers to it), the partition and VP leaders it elected
  (failovers) and the reshards it stored, by kind.
* ``refused``: client requests and connections refused, by reason, summed over every process.

A figure the answers lack (no such series) is left out, never shown as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from mafka4.metrics.families import END_TO_END_FAMILY
from mafka4.metrics.targets import MetricsTarget

P99 = 0.99
LATENCY_FAMILIES = {"produce": "mafka4_replica_produce_latency_seconds", "end_to_end": END_TO_END_FAMILY}


@dataclass(frozen=True, slots=True)
class TargetAnswer:
    """What one target gave: its exposition (``text``), or why none (``error``)."""

    target: MetricsTarget
    text: str | None = None
    error: str | None = None

    def __post_init__(self):
        assert (self.text is None) != (self.error is None), "a target gives an exposition or an error"


class Sample(NamedTuple):
    name: str
    labels: Mapping[str, str]
    value: float


def samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition; ``ValueError`` if it is none."""
    return [Sample(sample.name, sample.labels, sample.value)
            for family in text_string_to_metric_families(text) for sample in family.samples]


def figures(answers: Iterable[TargetAnswer]) -> dict:
    """The report of the module docstring, from every target's answer."""
    not_answering: dict[str, dict[str, str]] = {}
    found: list[Sample] = []
    for answer in answers:
        error = answer.error
        if error is None:
            try:
                found += samples(answer.text)
            except ValueError as parse_error:
                error = f"served no Prometheus text exposition: {parse_error}"
        if error is not None:
            not_answering.setdefault(answer.target.process, {})[answer.target.name] = error
    by_name: dict[str, list[Sample]] = {}
    for sample in found:
        by_name.setdefault(sample.name, []).append(sample)
    return {"not_answering": not_answering, "partitions": _partitions(by_name), "vps": _vps(by_name),
            "feed_lag": _feed_lag(by_name), "group_lag": _group_lag(by_name),
            "latency": {kind: _latency(by_name, family) for kind, family in LATENCY_FAMILIES.items()},
            "controller": _controller(by_name), "refused": _refused(by_name)}


def _series(by_name: Mapping[str, list[Sample]], name: str, *label_names: str) -> dict[tuple, float]:
    """The values of ``name``'s samples by their ``label_names`` (samples lacking one are skipped)."""
    return {tuple(sample.labels[label] for label in label_names): sample.value for sample in by_name.get(name, ())
            if all(label in sample.labels for label in label_names)}


def _count(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


# --- physical partitions and VPs --------------------------------------------------------------

def _partitions(by_name: Mapping[str, list[Sample]]) -> dict:
    keys = ("topic", "partition", "node")
    leading = [key for key, value in _series(by_name, "mafka4_replica_leader", *keys).items() if value == 1]
    epochs = _series(by_name, "mafka4_replica_leader_epoch", *keys)
    believed: dict[tuple[str, str], tuple] = {}  # (topic, partition) -> the leader's series key
    for key in leading:
        partition = key[:2]
        if partition not in believed or epochs.get(key, -1) > epochs.get(believed[partition], -1):
            believed[partition] = key
    under_replicated = _series(by_name, "mafka4_replica_under_replicated", *keys)
    under_min_isr = _series(by_name, "mafka4_replica_under_min_isr", *keys)
    isr = _series(by_name, "mafka4_replica_isr_size", *keys)
    replicas = _series(by_name, "mafka4_replica_replicas", *keys)
    report = {"under_replicated": [], "under_min_isr": [], "isr_below_replicas": {}}
    for (topic, partition), key in sorted(believed.items(), key=lambda item: _numbered(*item[0])):
        name = f"{topic}-{partition}"
        if under_replicated.get(key) == 1:
            report["under_replicated"].append(name)
        if under_min_isr.get(key) == 1:
            report["under_min_isr"].append(name)
        if key in isr and key in replicas and isr[key] < replicas[key]:
            report["isr_below_replicas"][name] = {"isr": _count(isr[key]), "replicas": _count(replicas[key])}
    return report


def _vps(by_name: Mapping[str, list[Sample]]) -> dict:
    keys = ("topic", "vp", "node")
    risr, replicas = _series(by_name, "mafka4_vp_risr_size", *keys), _series(by_name, "mafka4_vp_replicas", *keys)
    short: dict[tuple[str, str], dict] = {}
    for key, size in risr.items():
        if key not in replicas or size >= replicas[key]:
            continue
        vp = key[:2]
        if vp not in short or size < short[vp]["risr"]:
            short[vp] = {"risr": _count(size), "replicas": _count(replicas[key])}
    return {"risr_below_replicas": {f"{topic}/v{vp}": row
                                    for (topic, vp), row in sorted(short.items(), key=lambda item: _numbered(*item[0]))}}


def _numbered(topic: str, number: str) -> tuple:
    """Order by topic, then by the number a label holds (as text: a label is any string)."""
    return topic, len(number), number


# --- lags ---------------------------------------------------------------------------------------

def _feed_lag(by_name: Mapping[str, list[Sample]]) -> dict:
    report: dict[str, dict] = {}
    for figure, name in (("messages", "mafka4_feed_lag_messages"), ("seconds", "mafka4_feed_lag_seconds")):
        for (node,), value in _largest(_series(by_name, name, "node", "topic", "partition"), 0).items():
            report.setdefault(node, {})[figure] = _count(value) if figure == "messages" else value
    return dict(sorted(report.items()))


def _largest(series: Mapping[tuple, float], by: int) -> dict[tuple, float]:
    """The largest value of ``series`` per its key's element ``by``."""
    largest: dict[tuple, float] = {}
    for key, value in series.items():
        if (key[by],) not in largest or value > largest[(key[by],)]:
            largest[(key[by],)] = value
    return largest


def _group_lag(by_name: Mapping[str, list[Sample]]) -> dict:
    report: dict[str, dict] = {}
    for figure, name in (("messages", "mafka4_group_lag_messages"), ("seconds", "mafka4_group_lag_seconds")):
        for group, where, value in _group_rows(by_name.get(name, ())):
            row = report.setdefault(group, {})
            if figure not in row or value > row[figure] or (value == row[figure] and where < row[f"{figure}_at"]):
                row[figure], row[f"{figure}_at"] = (_count(value) if figure == "messages" else value), where
    return dict(sorted(report.items()))


def _group_rows(found: Iterable[Sample]) -> Iterator[tuple[str, str, float]]:
    """(group, where, value) of each group lag sample: ``<topic>/v<vp>`` or ``<topic>-<partition>``."""
    for sample in found:
        labels = sample.labels
        if "group" not in labels or "topic" not in labels:
            continue
        if "vp" in labels:
            yield labels["group"], f"{labels['topic']}/v{labels['vp']}", sample.value
        elif "partition" in labels:
            yield labels["group"], f"{labels['topic']}-{labels['partition']}", sample.value


# --- latency ------------------------------------------------------------------------------------

def _latency(by_name: Mapping[str, list[Sample]], family: str) -> dict:
    """The family's series summed, in all and per topic: observations and the 99th percentile."""
    series: dict[tuple, dict[float, float]] = {}  # the series' labels but le -> {le: cumulative count}
    for sample in by_name.get(f"{family}_bucket", ()):
        try:
            bound = float(sample.labels["le"])
        except (KeyError, ValueError):  # no bucket of ours: skipped
            continue
        labels = tuple(sorted((name, value) for name, value in sample.labels.items() if name != "le"))
        series.setdefault(labels, {})[bound] = sample.value
    by_topic: dict[str, list[dict[float, float]]] = {}
    for labels, buckets in series.items():
        by_topic.setdefault(dict(labels).get("topic", ""), []).append(buckets)
    return {**_summary(summed_buckets([buckets for topic in by_topic.values() for buckets in topic])),
            "by_topic": {topic: _summary(summed_buckets(found)) for topic, found in sorted(by_topic.items())}}


def _summary(buckets: Mapping[float, float]) -> dict:
    count = buckets.get(math.inf, 0)
    return {"count": _count(count), "p99_s": bucket_quantile(P99, buckets)}


def summed_buckets(series: Iterable[Mapping[float, float]]) -> dict[float, float]:
    """The cumulative buckets ({upper bound: count}, ``inf`` included) of histograms summed: at each
    bound every series has (a series of other bounds counts at the ones they share)."""
    series = list(series)
    if not series:
        return {}
    shared = set.intersection(*(set(buckets) for buckets in series))
    return {bound: sum(buckets[bound] for buckets in series) for bound in sorted(shared)}


def bucket_quantile(quantile: float, buckets: Mapping[float, float]) -> float | None:
    """The ``quantile`` of a histogram's cumulative ``buckets`` ({upper bound: count}, ``inf`` the
    total), as Prometheus's ``histogram_quantile`` estimates it; None with no observation."""
    assert 0 <= quantile <= 1, quantile
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf or buckets[math.inf] <= 0:
        return None
    rank = quantile * buckets[math.inf]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if bound == math.inf:
                return lower if len(bounds) > 1 else None  # past every finite bound: the highest
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    raise AssertionError(f"cumulative buckets must grow to their +Inf total: {buckets}")


# --- the controller and the client ports --------------------------------------------------------

def _controller(by_name: Mapping[str, list[Sample]]) -> dict:
    report: dict[str, dict] = {}
    for (controller,), value in _series(by_name, "mafka4_controller_active", "controller").items():
        report.setdefault(controller, {})["active"] = value == 1
    for figure, name in (("epoch", "mafka4_controller_epoch"),
                         ("elections_won", "mafka4_controller_elections_won_total")):
        for (controller,), value in _series(by_name, name, "controller").items():
            report.setdefault(controller, {})[figure] = _count(value)
    for figure, name in (("leader_elections", "mafka4_controller_leader_elections_total"),
                         ("reshards", "mafka4_controller_reshards_total")):
        for (controller, kind), value in sorted(_series(by_name, name, "controller", "kind").items()):
            report.setdefault(controller, {}).setdefault(figure, {})[kind] = _count(value)
    return dict(sorted(report.items()))


def _refused(by_name: Mapping[str, list[Sample]]) -> dict[str, int | float]:
    refused: dict[str, float] = {}
    for sample in by_name.get("mafka4_client_port_refused_total", ()):
        reason = sample.labels.get("reason")
        if reason is not None:
            refused[reason] = refused.get(reason, 0) + sample.value
    return {reason: _count(value) for reason, value in sorted(refused.items())}
