"""The documentation's own promises: a short README that reaches the first command early,
current results only in docs/benchmarks.md, and no lab notebook in shipped code or docs
(issue numbers, sessions, dates of work: git history and the issues keep those)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"

# What ships or is read by users: the packages, the chart, the image, the docs.
SHIPPED = ["xapp", "model", "training", "data", "cli", "benchmarks", "helm", "docs"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".json", ".tpl", ".toml", ".txt"}
TOP_LEVEL = ["README.md", "Dockerfile", "Makefile", "pyproject.toml", "mkdocs.yml"]

ISSUE = re.compile(r"\b(issues?|session) #?\d+\b|\(#\d+\)", re.IGNORECASE)
DATE = re.compile(r"\b(20\d\d)-([01]\d)-([0-3]\d)\b")
# A dated line is a result's provenance: when, where and with which command it was measured.
PROVENANCE = re.compile(r"\b(Measured|Run) 20\d\d-|`make bench(-peers)?`, 20\d\d-|"
                        r'^  "date": "20\d\d-')  # the last: a results file's


def shipped_files() -> list[Path]:
    files = [ROOT / name for name in TOP_LEVEL]
    for folder in SHIPPED:
        files += [p for p in (ROOT / folder).rglob("*")
                  if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts]
    return files


def test_the_readme_is_short_and_reaches_the_first_training_early() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines (at most 200)"
    first = next(n for n, line in enumerate(lines, 1) if line.startswith("kpi-forecast train"))
    assert first <= 60, f"the first `kpi-forecast train` is on line {first} (at most 60)"


def test_benchmarks_page_holds_current_results_only() -> None:
    """A section per benchmark, each its current results only (tests/test_figures.py: each
    opens with its results file's measured line)."""
    lines = BENCHMARKS.read_text().splitlines()
    assert len(lines) <= 500, f"docs/benchmarks.md has {len(lines)} lines (at most 500)"


def test_no_issue_numbers_or_dates_of_work_in_shipped_code_and_docs() -> None:
    recent = dt.date.today() - dt.timedelta(days=730)
    found = []
    for path in shipped_files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            if ISSUE.search(line):
                found.append(f"{where}: {line.strip()}")
            for year, month, day in DATE.findall(line):
                try:
                    date = dt.date(int(year), int(month), int(day))
                except ValueError:
                    continue
                if recent <= date <= dt.date.today() and not PROVENANCE.search(line):
                    found.append(f"{where}: {line.strip()}")
    assert not found, "\n".join(found[:20])


def test_the_kpi_table_says_what_the_packaged_descriptor_maps() -> None:
    """docs/ric.md's table of KPIs against controls.e2.kpis' defaults: the measurement, the
    KPI's unit, how a step combines reports and the alternative ratio."""
    from kpi_forecast.xapp.descriptor.controls import DEFAULT_KPIS

    text = (ROOT / "docs" / "ric.md").read_text()
    table = text[text.index("| KPI | measurement"):].split("\n\n", 1)[0].splitlines()[2:]
    rows = {}
    for line in table:
        kpi, measurement, _, unit, within, ratio = (c.strip() for c in line.strip("|").split("|"))
        rows[kpi.strip("`")] = (measurement.split("`")[1], unit.split(" (")[0], within,
                                tuple(ratio.split("`")[1::2]))
    assert rows == {
        name: (source.measurement, source.unit, source.aggregate,
               (source.ratio.numerator, source.ratio.denominator) if source.ratio else ())
        for name, source in DEFAULT_KPIS.items()}
