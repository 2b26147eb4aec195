"""The report without Spark: the headline names every consumer count and consumer scale, fleet
rows find their consumer scale, and the plots draw from table rows."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from simulations.analysis import report_plots
from simulations.analysis.consumer_scales import scale_label, with_scales
from simulations.analysis.report import SETUP_KEYS, headline, load_calibrations, setup_section, stage_order

LATENCIES = ("produce_latency_ms", "end_to_end_latency_ms")


def config_row(source: str, mode: str, consumers: int, topics: int, tp999: float, **extra) -> dict:
    row = {"source": source, "mode": mode, "consumers": consumers, "topics": topics, "lanes": 0,
           "few_tp999_samples": False, "nodes": 10, "experiment_ids": "e"}
    for latency in LATENCIES:
        for name in ("tp50", "tp99", "tp999"):
            row[f"{latency}_{name}"] = tp999
            row[f"{latency}_{name}_min"], row[f"{latency}_{name}_max"] = tp999 * 0.9, tp999 * 1.1
    return {**row, **extra}


def ratio_row(source: str, consumers: int, topics: int, ratio: float, bounded: bool, nodes: tuple = (10, 7),
              lanes: int = 0) -> dict:
    row = {"source": source, "consumers": consumers, "topics": topics, "lanes": lanes, "nodes_ratio": nodes[0] / nodes[1],
           "nodes_mafka3": nodes[0], "nodes_mafka4": nodes[1]}
    for latency in LATENCIES:
        for name in ("tp99", "tp999"):
            row[f"{latency}_{name}_ratio"] = ratio
            row[f"{latency}_{name}_ratio_low"] = ratio - 0.25 if bounded else None
            row[f"{latency}_{name}_ratio_high"] = ratio + 0.25 if bounded else None
    return row


def test_headline_lists_every_consumer_count_and_every_fleet_scale():
    latency = [config_row("runtime", mode, consumers, 1, 5.0) for mode in ("mafka3", "mafka4") for consumers in (1, 8, 32)]
    latency.append(config_row("runtime", "mafka3", 64, 1, 5.0))  # Mafka4 never ran 64
    latency[0]["few_tp999_samples"] = True
    for mode in ("mafka3", "mafka4"):
        for topics in (100, 1000):
            for scale, rank in ((1.0, 1), (4.0, 2)):
                latency.append(config_row("fleet_model", mode, int(topics * 3 * scale), topics, 9.0,
                                          consumers_scale=scale, consumers_scale_rank=rank))
    ratios = [ratio_row("runtime", consumers, 1, 1.5 + consumers / 100, True) for consumers in (1, 8, 32)]
    ratios += [ratio_row("fleet_model", int(topics * 3 * scale), topics, 1.1, False, (topics // 10, topics // 15))
               for topics in (100, 1000) for scale in (1.0, 4.0)]
    lines = headline(latency, ratios)
    assert lines[0] == ("* runtime, consumers=1: Mafka3 / Mafka4 tp999 = 1.510 [1.260, 1.760] produce, 1.510 [1.260, "
                        "1.760] end-to-end; tp99 = 1.510 [1.260, 1.760] produce, 1.510 [1.260, 1.760] end-to-end. "
                        "Note: the tp999 of mafka3 rests on few samples.")
    assert [line.split(":")[0] for line in lines] == [
        "* runtime, consumers=1", "* runtime, consumers=8", "* runtime, consumers=32", "* runtime, consumers=64",
        "* fleet_model, consumer scale x1", "* fleet_model, consumer scale x4"]
    assert "only mafka3 rows" in lines[3]
    assert "at the largest fleet (topics=1000, consumers=3000), 1.515 to 1.667 over 2 fleet sizes" in lines[4]
    assert "(topics=1000, consumers=12000)" in lines[5]


def test_fleet_rows_take_their_scale_from_the_summary_or_else_a_rank(tmp_path):
    rows = [{"source": "runtime", "mode": "mafka3", "consumers": 4, "topics": 1, "experiment_ids": "s"}]
    rows += [{"source": "fleet_model", "mode": mode, "consumers": consumers, "topics": topics, "experiment_ids": "f"}
             for mode in ("mafka3", "mafka4") for topics, consumers in ((100, 310), (100, 1240), (1000, 2900), (1000, 11600))]
    table = pa.Table.from_pylist(rows)
    ranked = with_scales(table, tmp_path).to_pylist()  # no fleet_summary.json
    assert [row["consumers_scale_rank"] for row in ranked] == [None, 1, 2, 1, 2, 1, 2, 1, 2]
    assert [scale_label(row) for row in ranked[1:3]] == ["scale #1", "scale #2"]
    summary = {"experiment_id": "f", "runs": [
        {"design": mode, "topics": topics, "consumers": consumers, "consumers_scale": scale}
        for mode in ("mafka3", "mafka4")
        for topics, consumers, scale in ((100, 310, 1.0), (100, 1240, 4.0), (1000, 2900, 1.0), (1000, 11600, 4.0))]}
    (tmp_path / "fleet_summary.json").write_text(json.dumps(summary))
    scaled = with_scales(table, tmp_path).to_pylist()
    assert [row["consumers_scale"] for row in scaled] == [None, 1.0, 4.0, 1.0, 4.0, 1.0, 4.0, 1.0, 4.0]
    assert [scale_label(row) for row in scaled[1:3]] == ["x1", "x4"]
    (tmp_path / "other").mkdir()
    summary["runs"][1]["consumers_scale"] = 5.0  # a second summary disagrees about one configuration
    (tmp_path / "other" / "fleet_summary.json").write_text(json.dumps(summary))
    disputed = with_scales(table, tmp_path).to_pylist()
    assert disputed[2]["consumers_scale"] is None and disputed[1]["consumers_scale"] == 1.0


def stage_rows() -> list[dict]:
    rows = []
    for mode, read in (("mafka3", ["fetch"]), ("mafka4", ["feeding", "vp_hw_wait", "fetch"])):
        for consumers in (1, 4):
            for path, stages in (("produce", ["accumulator", "isr_wait", "ack_return"]),
                                 ("end_to_end", ["accumulator", "isr_wait", *read])):
                for position, stage in enumerate([*stages, "total"]):
                    rows.append({"mode": mode, "consumers": consumers, "topics": 1, "path": path, "position": position,
                                 "stage": stage, "duration_ms_mean": 1.0, "duration_ms_tail_mean": 2.0,
                                 "duration_ms_tp99": 3.0})
    return rows


def test_stage_columns_follow_the_longest_path():
    rows = [row for row in stage_rows() if row["path"] == "end_to_end"]
    assert stage_order(rows) == ["accumulator", "isr_wait", "feeding", "vp_hw_wait", "fetch", "total"]


@pytest.mark.parametrize("draw", ["runtime", "fleet_nodes", "fleet_latency", "stages"])
def test_plots_draw_pngs_from_table_rows(tmp_path: Path, draw: str):
    runtime = [config_row("runtime", mode, consumers, 1, 5.0 * consumers) for mode in ("mafka3", "mafka4")
               for consumers in (1, 2, 4, 8, 16, 32)]
    fleet = [config_row("fleet_model", mode, consumers, topics, 9.0, consumers_scale=None, consumers_scale_rank=rank)
             for mode in ("mafka3", "mafka4") for topics in (1000, 5000)
             for rank, consumers in ((1, topics * 3), (2, topics * 12))]
    path = tmp_path / f"{draw}.png"
    {"runtime": lambda: report_plots.plot_runtime_latency(runtime, path),
     "fleet_nodes": lambda: report_plots.plot_fleet_nodes(fleet, path),
     "fleet_latency": lambda: report_plots.plot_fleet_latency(fleet, path),
     "stages": lambda: report_plots.plot_stage_breakdown(stage_rows(), path)}[draw]()
    assert path.read_bytes().startswith(b"\x89PNG")


def test_a_calibrations_per_trial_figures_stay_in_its_file(tmp_path):
    (tmp_path / "fleet").mkdir()
    document = {"derived": {"produce_request_cpu_us": 1363.7}, "raw": {"format": 2, "produce": {"trials": [1, 2]}}}
    (tmp_path / "fleet" / "calibration.json").write_text(json.dumps(document))
    [(name, contents)] = load_calibrations(tmp_path)
    assert name == "fleet/calibration.json" and contents["derived.produce_request_cpu_us"] == 1363.7
    assert contents["raw"] == "per-trial figures: the 'raw' object of calibration.json"
    assert not any(key.startswith("raw.") for key in contents)


def test_the_setup_section_states_every_difference_between_the_modes_with_the_recorded_settings():
    text = setup_section({"nodes": 4, "physical_partitions": 2, "replication_factor": 2, "read_replicas": 1,
                          "pin_cpus": True})
    for difference in ("**partitions**: Mafka3 has N physical partitions, one per consumer",
                       "Mafka4 has 2 physical partitions for every N and N virtual partitions with 1 replica(s) each",
                       "**node roles**: in Mafka3 all 4 nodes are brokers",
                       "in Mafka4 2 write nodes host the replicas and 2 read nodes host the VPs",
                       "**read path**", "**CPU pinning**: the usable CPUs are split into a write set",
                       "Mafka3's first 2 brokers run on the write set and the others on the read set",
                       "**group protocol**", "**clusters**", "replication factor and min_insync_replicas 2"):
        assert difference in text, difference
    unpinned = setup_section({"pin_cpus": False})
    assert "**CPU pinning**: off in these runs (`--no-pin`)" in unpinned
    assert "`physical_partitions` physical partitions" in unpinned, "a setting not recorded is named, not guessed"
    assert "unless the runs were made with `--no-pin`" in setup_section({})


# The setup section's words for runs that recorded no client layout (reports/2026-11-26-compare among them).
LEGACY_CONSUMERS = ("N consumers of one group (threads of the experiment's driver, the same `Consumer` code and "
                    "defaults)")
LEGACY_PINNING = ("use all the cores. The driver (producer and consumers), the controller and etcd are not pinned in "
                  "either mode;")


def test_runs_without_a_recorded_layout_keep_the_old_words():
    text = setup_section({"nodes": 4, "pin_cpus": True})
    assert LEGACY_CONSUMERS in text and LEGACY_PINNING in text
    assert "process of its own" not in text


@pytest.mark.parametrize("pin_cpus, pin_services, clients", [
    (True, False, "the producer (the experiment's driver) ran on the write set, every consumer's process (with the "
                  "driver's thread that collects what they polled) on the read set, and the cluster's shared services "
                  "(the daemon, Ray's head with the controller, etcd) unpinned;"),
    (True, True, "the producer (the experiment's driver) ran on the write set, every consumer's process (with the "
                 "driver's thread that collects what they polled) on the read set, and the cluster's shared services "
                 "(the daemon, Ray's head with the controller, etcd) on the read set;"),
    (False, False, "the producer (the experiment's driver) ran unpinned, every consumer's process (with the driver's "
                   "thread that collects what they polled) unpinned, and the cluster's shared services (the daemon, "
                   "Ray's head with the controller, etcd) unpinned;"),
])
def test_the_setup_section_words_the_layout_a_run_recorded(pin_cpus, pin_services, clients):
    from simulations.scaling.experiment import ScalingSettings

    recorded = ScalingSettings(pin_cpus=pin_cpus, pin_services=pin_services).to_json()
    text = setup_section({key: recorded[key] for key in SETUP_KEYS})
    assert "N consumers of one group (each a process of its own, the same `Consumer` code and defaults)" in text
    assert "use all the cores. The clients had the same layout in both modes: " + clients in text
    assert LEGACY_CONSUMERS not in text and LEGACY_PINNING not in text


def test_the_setup_section_words_the_order_a_run_recorded_and_old_runs_keep_theirs():
    from simulations.scaling.experiment import ScalingSettings

    recorded = ScalingSettings().to_json()
    text = setup_section({key: recorded[key] for key in SETUP_KEYS})
    assert ("* **clusters**: every repetition of each mode runs on a fresh cluster of its own, and the modes take "
            "turns by repetition (repetition 0 of each mode, then repetition 1, ...)") in text
    # reports/2026-11-26-compare and every run before 2026-12-04: all of one mode, then the other.
    old = setup_section({"nodes": 4, "pin_cpus": True})
    assert "* **clusters**: each mode runs on a fresh cluster of its own, one mode's runs after the other's." in old
    assert "take turns" not in old


COUNTS = {f"{latency}_count{suffix}": 100 for latency in LATENCIES for suffix in ("", "_min")}


def runtime_row(mode: str, consumers: int, tp999: float, **extra) -> dict:
    """A runtime row of ``latency_by_config`` with every column the report reads."""
    return config_row("runtime", mode, consumers, 1, tp999, **{
        "rows": 100, "few_tp999_samples": True, "write_nodes": 2, "read_nodes": 2, "node_counts_vary": False,
        "repetitions": 3, **COUNTS, **extra})


def rendered_report(tmp_path: Path, profiles: frozenset[str], lane_rows: tuple = (), lane_ratios: tuple = (),
                    experiment: dict | None = None) -> str:
    """``report.md``'s text for one runtime configuration of each mode, of runs of ``profiles``, with
    ``lane_rows`` and ``lane_ratios`` added to ``latency_by_config`` and ``mode_ratios``."""
    from types import SimpleNamespace

    from simulations.analysis.report import render_markdown

    latency = [runtime_row(mode, 4, 5.0) for mode in ("mafka3", "mafka4")] + list(lane_rows)
    tables = {"latency_by_config": latency, "mode_ratios": [ratio_row("runtime", 4, 1, 1.5, True), *lane_ratios],
              "latency_by_repetition": [], "stage_latency": [], "scale_ratios": []}
    names = ("latency_by_config", "latency_by_repetition", "mode_ratios", "ratio_intervals", "scale_ratios",
             "stage_latency")
    table_paths = {name: (tmp_path / f"{name}.parquet", tmp_path / f"{name}.csv") for name in names}
    facts = [{"seed": 7, "git_commit": "abc", "experiment_id": "e", "sample_rate": 1.0}]
    bootstrap = SimpleNamespace(bootstrap_replicates=400, bootstrap_block_ms=1000.0, bootstrap_seed=1)
    return render_markdown(events_dir=tmp_path, file_count=2, facts=facts, tables=tables, table_paths=table_paths,
                           omb_paths={}, settings=bootstrap, experiment=experiment or {}, profiles=profiles,
                           calibrations=[],
                           plots={}, skipped={}, out_dir=tmp_path)


def test_a_quick_report_says_on_its_first_line_that_its_tails_rest_on_few_samples(tmp_path):
    quick = rendered_report(tmp_path, frozenset({"quick"})).splitlines()
    assert quick[0] == ("**These runs are of the quick profile (`--quick`): one repetition of each configuration, so "
                        "every tail percentile (tp99, tp999) rests on few samples, those of one run, and has no spread "
                        "over repetitions; quote a report of the full profile, not this one.**")
    assert quick[2] == "# Mafka3 vs Mafka4: consumer scaling"
    mixed = rendered_report(tmp_path, frozenset({"quick", "full"})).splitlines()
    assert mixed[0].startswith("**Some of these runs are of the quick profile (`--quick`): one repetition")
    for profiles in (frozenset({"full"}), frozenset()):  # full runs, or no settings.json at all
        text = rendered_report(tmp_path, profiles)
        assert text.splitlines()[0] == "# Mafka3 vs Mafka4: consumer scaling" and "quick profile" not in text


LANES_TITLE = "## Lanes: queue merging"


def lane_rows() -> list[dict]:
    """Both modes at 4 consumers with 2 lanes, and Mafka4 alone with 64 (Mafka3 did not fit)."""
    mafka3 = runtime_row("mafka3", 4, 50.0, lanes=2, physical_partitions=12, virtual_partitions=0, actors=24)
    mafka4 = [runtime_row("mafka4", 4, 8.0, lanes=lanes, physical_partitions=2, virtual_partitions=4 + lanes,
                          actors=6) for lanes in (2, 64)]
    return [mafka3, *mafka4]


def without_path(text: str, tmp_path: Path) -> str:
    return text.replace(str(tmp_path), "DIR")  # pytest names tmp_path after the test


def test_a_report_without_lane_runs_never_names_lanes(tmp_path):
    experiment = {"consumers": [4], "lanes": [2, 64], "mafka3_lanes_max": 16, "replication_factor": 2}
    for recorded in ({}, experiment):  # settings that ask for lanes do not make a section without lane rows
        text = without_path(rendered_report(tmp_path, frozenset({"full"}), experiment=recorded), tmp_path)
        assert "lane" not in text.lower()


def test_lane_runs_get_their_own_section_and_stay_out_of_the_sections_from_before_lanes(tmp_path):
    ratios = [ratio_row("runtime", 4, 1, 6.25, True, lanes=2)]
    ratios[0].update(physical_partitions_ratio=6.0, actors_ratio=4.0)
    experiment = {"consumers": [4], "lanes": [2, 64], "mafka3_lanes_max": 16, "replication_factor": 2}
    text = without_path(rendered_report(tmp_path, frozenset({"full"}), lane_rows(), ratios, experiment), tmp_path)
    plain = without_path(rendered_report(tmp_path, frozenset({"full"})), tmp_path)
    before, lanes = text.split(LANES_TITLE)
    lanes, after = lanes.split("\n## ", 1)
    # The result and the tables from before lanes are the trunk's, as without lane runs.
    assert before.split("## Result")[1].split("## Integrity")[0] == plain.split("## Result")[1].split("## Integrity")[0]
    latency_table = before.split("## Latency and nodes per configuration")[1].split("## Mafka3 / Mafka4")[0]
    assert latency_table.count("| runtime |") == 2 and "50.000" not in latency_table
    assert 'Runs without lanes only; the lane runs are under "Lanes: queue merging".' in latency_table
    # The integrity table lists every run, with its lane count.
    integrity = before.split("## Integrity")[1].split("## Runs")[0]
    assert "| source | mode | consumers | topics | lanes | runs |" in integrity and integrity.count("| runtime |") == 5
    assert "runtime mafka3 consumers=4 topics=1 lanes=2; " in integrity
    assert "the producer sends round robin over `lanes` named lanes" in lanes
    assert "reads the trunk topic and every lane topic (a Consumer per topic in its process)" in lanes
    assert "stage breakdown leaves them out" in lanes
    assert ("| mode | consumers | lanes | physical_partitions | virtual_partitions | actors | runs used | produce tp999 "
            "| end-to-end tp999 |") in lanes
    assert "| mafka3 | 4 | 2 | 12 | 0 | 24 | 3 | 50.000 (45.000–55.000) | 50.000 (45.000–55.000) |" in lanes
    assert "| mafka4 | 4 | 64 | 2 | 68 | 6 | 3 | 8.000 (7.200–8.800) | 8.000 (7.200–8.800) |" in lanes
    assert "| consumers | lanes | produce tp999 | end-to-end tp999 | physical_partitions | actors |" in lanes
    assert "| 4 | 2 | 6.250 [6.000, 6.500] | 6.250 [6.000, 6.500] | 6.000 | 4.000 |" in lanes
    assert "Mafka3 was not run with more than 16 lanes" in lanes
    assert "| 4 | 64 | not run | 260 | 520 |" in lanes
    assert after.startswith("Where the latency goes: stages")


def test_a_lane_section_from_settings_written_before_lanes_has_no_not_run_rows(tmp_path):
    text = rendered_report(tmp_path, frozenset({"full"}), lane_rows(), experiment={"replication_factor": 2})
    lanes = text.split(LANES_TITLE)[1].split("\n## ")[0]
    assert "| mafka4 | 4 | 64 |" in lanes and "not run" not in lanes
    assert "No lane configuration ran in both modes, so no Mafka3 / Mafka4 ratio." in lanes


def test_mafka3_lane_counts_above_its_most_are_not_run_and_say_what_they_would_take():
    from simulations.analysis.report import mafka3_lanes_not_run

    experiment = {"consumers": [1, 4, 32], "lanes": [0, 4, 16, 100], "mafka3_lanes_max": 4, "replication_factor": 3}
    rows = mafka3_lanes_not_run(experiment, frozenset())
    assert [(row["consumers"], row["lanes"]) for row in rows] == [(1, 16), (4, 16), (32, 16), (1, 100), (4, 100),
                                                                  (32, 100)]
    assert rows[2] == {"consumers": 32, "lanes": 16, "physical_partitions": 17 * 32, "replica_actors": 17 * 32 * 3}
    assert rows[3] == {"consumers": 1, "lanes": 100, "physical_partitions": 101, "replica_actors": 303}
    ran = mafka3_lanes_not_run(experiment, frozenset({(4, 16)}))
    assert (4, 16) not in {(row["consumers"], row["lanes"]) for row in ran} and len(ran) == 5, \
        "a configuration with Mafka3 rows (an older run beside this one) was run"
    unknown = mafka3_lanes_not_run({key: value for key, value in experiment.items() if key != "replication_factor"},
                                   frozenset())
    assert unknown[0]["replica_actors"] is None and unknown[0]["physical_partitions"] == 17
    for missing in ("consumers", "lanes", "mafka3_lanes_max"):
        older = {key: value for key, value in experiment.items() if key != missing}
        assert mafka3_lanes_not_run(older, frozenset()) == [], missing
    assert mafka3_lanes_not_run({**experiment, "mafka3_lanes_max": 100}, frozenset()) == []
