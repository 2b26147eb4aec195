"""The README's result tables are exactly what ``simulations.analysis.readme_figures`` renders from the
report they cite (``reports/...`` in this repository): a hand-edited figure fails here."""

from __future__ import annotations

from pathlib import Path

from simulations.analysis.readme_figures import readme_block, render

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_figures_are_the_cited_reports():
    report_dir, body = readme_block((ROOT / "README.md").read_text())
    assert (ROOT / report_dir / "report.md").exists(), f"the README cites {report_dir}, which holds no report.md"
    assert body == render(report_dir, ROOT), f"regenerate the block: python3 -m simulations.analysis.readme_figures {report_dir}"
