"""Every figure in README.md and docs/performance.md traces to a file in ``reports/``.

The rule, which a hand-edited or an uncited figure breaks:

1. **Figures live in generated blocks.** A block runs from ``<!-- figures: DIR [KIND] -->`` to
   ``<!-- /figures -->`` and names the report directory DIR (``reports/<date>-<topic>``) it is
   rendered from. Its body must be exactly what ``simulations.analysis.performance_doc.render_block``
   renders from DIR's raw files today: change one digit and this test fails.
2. **Outside the blocks, no measured quantity** unless its paragraph cites a file of
   ``reports/`` (a markdown link to the file, or to its directory, meaning its ``README.md``) whose
   text holds the same figure, word for word. A measured quantity is a number with the unit of
   a measurement (``MEASURED``): a rate (msgs/s, MB/s, ``686.7k``), a multiple (``1.11x``, ``5
   times``), a CPU cost (µs, ns), a decimal duration or any duration in ms or minutes, a
   percentage, a load average, a percentile's value, a decimal size or one in decimal units
   (KB, MB), a fraction of cores. Code is searched too (a figure in a command's comment is a
   figure). Settings are not measurements, and are written so that they do not look like one:
   as a name and its value (``linger_ms=5``, ``--duration-s 30``), in whole seconds (``every
   5 s``) or in binary units (``64 MiB``).
3. ``docs/performance.md`` is generated whole: it must equal ``render_document()`` (its drift test
   is in ``test_performance_doc.py``), so the prose between its blocks is the generator's.

The index ``reports/README.md`` lists every report directory, and says whether its raw data is
there as the directory holds it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulations.analysis.performance_doc import render_block
from simulations.analysis.readme_figures import BLOCK

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "performance.md")

_NUMBER = r"\d[\d,]*(?:\.\d+)?"
_RANGE = rf"{_NUMBER}(?:\s*[-–]\s*{_NUMBER})?"
MEASURED = {
    "rate": rf"{_RANGE}\s*k?\s*(?:msgs?/s|messages/s|records/s|[KMG]i?B/s)",
    "thousands": rf"\b{_NUMBER}k\b",
    "multiple": rf"\b{_RANGE}\s*(?:x|×)(?!\w)|\b{_NUMBER}\s+times\b",
    "cpu cost": rf"\b{_RANGE}\s*(?:µs|us|ns)\b",
    "duration": rf"\b\d+\.\d+(?:\s*[-–]\s*{_NUMBER})?\s*(?:s|min|seconds|minutes)\b|\b{_RANGE}\s*(?:ms|min|minutes)\b",
    "percentage": rf"\b{_RANGE}\s*%",
    "load average": rf"\bload(?: average)?(?: of)?\s+{_NUMBER}",
    "percentile": rf"\bt?p(?:50|99|99\.9|999)\s*(?:of|is|was|=|:)?\s*{_NUMBER}",
    "size": rf"\b\d+\.\d+\s*(?:bytes|B|KB|MB|GB|KiB|MiB|GiB)\b|\b{_NUMBER}\s*(?:KB|MB|GB)\b",
    "cores": rf"\b\d+\.\d+(?:e-?\d+)?\s*(?:cores?|of a core)\b",
}
_MEASURED = re.compile("|".join(f"(?:{pattern})" for pattern in MEASURED.values()))
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _normalized(text: str) -> str:
    return " ".join(text.replace("–", "-").split())


def figures_outside_blocks(text: str) -> list[tuple[str, str]]:
    """Each measured quantity outside blocks, with the paragraph it stands in."""
    found = []
    for paragraph in re.split(r"\n\s*\n", BLOCK.sub("", text)):
        found += [(match.group(0), paragraph) for match in _MEASURED.finditer(paragraph)]
    return found


def cited_files(paragraph: str, document: Path, root: Path) -> list[Path]:
    """The files of ``reports/`` a paragraph links to (a directory meaning its README.md)."""
    files = []
    for target in _LINK.findall(paragraph):
        path = (document.parent / target.split("#")[0]).resolve()
        if path.is_dir():
            path = path / "README.md"
        if (root / "reports").resolve() in path.parents and path.is_file():
            files.append(path)
    return files


def uncited_figures(text: str, document: Path, root: Path) -> list[str]:
    """Every measured quantity outside blocks whose paragraph cites no report file holding it."""
    problems = []
    for figure, paragraph in figures_outside_blocks(text):
        cited = cited_files(paragraph, document, root)
        if not any(_normalized(figure) in _normalized(path.read_text()) for path in cited):
            where = ", ".join(str(path.relative_to(root.resolve())) for path in cited) or "no report file"
            problems.append(f"{figure!r} (cites {where}) in: {_normalized(paragraph)[:120]}")
    return problems


def block_differences(text: str, root: Path) -> list[str]:
    """Every block whose directory is not a report directory, or whose body is not what it renders."""
    problems = []
    for match in BLOCK.finditer(text):
        report_dir, kind = Path(match["dir"]), match["kind"]
        if report_dir.parts[:1] != ("reports",) or not (root / report_dir).is_dir():
            problems.append(f"a block names {report_dir}, which is no directory of reports/")
        elif match["body"] != render_block(kind, report_dir, root):
            problems.append(f"the block of {report_dir} {kind or ''} is not what it renders: regenerate it "
                            f"(python3 -m simulations.analysis.performance_doc; the README's: python3 -m "
                            f"simulations.analysis.readme_figures {report_dir})")
    return problems


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_block_is_what_its_report_renders(document):
    text = document.read_text()
    assert BLOCK.search(text), f"{document.name} has no figures block"
    assert block_differences(text, ROOT) == []


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_no_figure_outside_the_blocks_lacks_a_report_holding_it(document):
    assert uncited_figures(document.read_text(), document, ROOT) == []


# --- the checks catch what they are for ---------------------------------------------------------


COMPARE = "reports/2026-12-04-compare"


def test_a_hand_edited_figure_in_a_block_fails():
    text = (ROOT / "README.md").read_text()
    edited = text.replace("| 32 | 109.4", "| 32 | 109.5", 1)
    assert edited != text
    assert block_differences(edited, ROOT) and not block_differences(text, ROOT)


def test_a_block_naming_no_report_directory_fails():
    text = "<!-- figures: results/compare -->\nanything\n<!-- /figures -->\n"
    assert block_differences(text, ROOT) == ["a block names results/compare, which is no directory of reports/"]


@pytest.mark.parametrize("sentence", [
    "```bash\nmafka4 fleet calibrate   # ~8 min here\n```", "Run `mafka4 bench produce` (about 1.32x).",
    "Four consumers read 686.7k msgs/s.", "The Producer ran 1.11x Redis.", "A lock costs about 0.4 us here.",
    "The paced p99.9 was 11.7 and 13.2.", "Packing was 5 times slower.", "At load 1.85 at each start.",
    "The collector took 15-16% of the run.", "A VP takes 21.5 KB of RSS.", "The suite takes 18-19 min here.",
    "A stall of 40-65 ms.", "Drained 4.7 s after the last acknowledgement.", "Idle, 0.0053 cores.",
])
def test_a_measured_quantity_without_a_citation_fails(sentence):
    assert uncited_figures(f"Prose.\n\n{sentence}\n", ROOT / "README.md", ROOT)


@pytest.mark.parametrize("sentence", [
    "Offsets are committed every 5 s, and `linger_ms=5` waits.", "Batches of 1 MiB, a buffer of 64 MiB.",
    "Run `mafka4 bench consume --messages 1000000 --duration-s 30`.", "It keeps 3 etcd members and RF=2.",
    "Python 3.11, ray 2.60.0, protobuf 7.x.", "Consumer scale x4 at 40,000 topics.",
    "`--system-config='{\"max_direct_call_object_size\": 4194304}'` and `--auto-compaction-retention 3600s`",
])
def test_settings_are_not_measurements(sentence):
    assert figures_outside_blocks(f"{sentence}\n") == []


def test_a_figure_counts_as_cited_only_where_the_cited_file_holds_it():
    cited = "The suite takes about 18-19 min here ([report](reports/2026-11-27-test-suite-time/)).\n"
    assert uncited_figures(cited, ROOT / "README.md", ROOT) == []
    wrong = cited.replace("18-19", "15-16")
    assert uncited_figures(wrong, ROOT / "README.md", ROOT)
    elsewhere = "The suite takes about 18-19 min here ([report](reports/2026-11-25-read-path-costs/README.md)).\n"
    assert uncited_figures(elsewhere, ROOT / "README.md", ROOT)


def test_a_citation_from_docs_resolves_from_the_docs_directory():
    text = "The suite takes about 18-19 min ([report](../reports/2026-11-27-test-suite-time/README.md)).\n"
    assert uncited_figures(text, ROOT / "docs" / "performance.md", ROOT) == []


# --- the index of reports/ ----------------------------------------------------------------------


def _index_rows() -> dict[str, list[str]]:
    rows = {}
    for line in (ROOT / "reports" / "README.md").read_text().splitlines():
        link = re.search(r"\]\(([^)/]+)/?\)", line)
        if line.startswith("|") and link:
            rows[link.group(1)] = [cell.strip() for cell in line.strip("|").split("|")]
    return rows


def test_the_index_lists_every_report_directory_once_with_its_date():
    rows = _index_rows()
    directories = sorted(path.name for path in (ROOT / "reports").iterdir() if path.is_dir())
    assert sorted(rows) == directories
    for name, cells in rows.items():
        assert cells[0] == name[:10], f"{name}: the index gives the date {cells[0]}"
        assert (ROOT / "reports" / name / "README.md").is_file(), f"reports/{name} has no README.md"


def test_the_index_says_raw_data_is_there_exactly_when_the_directory_holds_some():
    for name, cells in _index_rows().items():
        raw = any(path.suffix in {".json", ".csv", ".jsonl"} for path in (ROOT / "reports" / name).rglob("*"))
        assert cells[-1].startswith("yes" if raw else "no"), f"reports/{name}: the index says {cells[-1]!r}"
