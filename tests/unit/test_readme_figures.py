"""The README's result tables are exactly what ``simulations.analysis.readme_figures`` renders from the
report they cite (``reports/...`` in this repository): a hand-edited figure fails here."""

from __future__ import annotations

from pathlib import Path

from simulations.analysis.readme_figures import readme_block, render, scaling_table, without_lanes

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_figures_are_the_cited_reports():
    report_dir, body = readme_block((ROOT / "README.md").read_text())
    assert (ROOT / report_dir / "report.md").exists(), f"the README cites {report_dir}, which holds no report.md"
    assert body == render(report_dir, ROOT), f"regenerate the block: python3 -m simulations.analysis.readme_figures {report_dir}"


def test_the_scaling_within_a_mode_shows_every_mode_latency_and_percentile_with_its_interval(tmp_path):
    columns = "source,mode,topics,latency,percentile,consumers_low,consumers_high,ratio,ratio_low,ratio_high,median_at_low,median_at_high"
    rows = ["runtime,mafka4,1,end_to_end_latency_ms,tp999,1,32,1.5,1.1,2.25,20.0,30.0",
            "runtime,mafka4,1,produce_latency_ms,tp999,1,32,0.8,0.5,1.2,25.0,20.0",
            "runtime,mafka3,1,produce_latency_ms,tp99,1,32,,,,0,12.5",
            "fleet_model,mafka4,1000,produce_latency_ms,tp999,1,32,9,9,9,1,9"]
    (tmp_path / "scale_ratios.csv").write_text("\n".join([columns, *rows]) + "\n")
    assert scaling_table(tmp_path).splitlines()[2:] == [
        "| Mafka3 | produce | p99 | 1 / 32 | 0.0 / 12.5 | – |",
        "| Mafka4 | produce | p99.9 | 1 / 32 | 25.0 / 20.0 | 0.80 [0.50, 1.20] |",
        "| Mafka4 | end-to-end | p99.9 | 1 / 32 | 20.0 / 30.0 | 1.50 [1.10, 2.25] |"]


def test_lane_runs_stay_out_of_the_readme_tables_and_tables_from_before_lanes_render_whole(tmp_path):
    columns = "source,mode,topics,lanes,latency,percentile,consumers_low,consumers_high,ratio,ratio_low,ratio_high,median_at_low,median_at_high"
    rows = ["runtime,mafka4,1,0,produce_latency_ms,tp999,1,32,0.8,0.5,1.2,25.0,20.0",
            "runtime,mafka4,1,8,produce_latency_ms,tp999,1,32,3.0,2.0,4.0,10.0,30.0"]
    (tmp_path / "scale_ratios.csv").write_text("\n".join([columns, *rows]) + "\n")
    assert scaling_table(tmp_path).splitlines()[2:] == [
        "| Mafka4 | produce | p99.9 | 1 / 32 | 25.0 / 20.0 | 0.80 [0.50, 1.20] |"]
    assert without_lanes([{"lanes": "0"}, {"lanes": "8"}, {"source": "runtime"}]) == [{"lanes": "0"}, {"source": "runtime"}]
