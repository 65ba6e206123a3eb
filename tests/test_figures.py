"""Every figure the docs quote comes from a benchmark's results file: each run writes one (its
figures and tables, the command, the revision, the date and the machine), its section on a page
opens with that file's measured line, pages quote figures through the site's macros
(benchmarks/results.py), the README's results against the files, and a figure typed by hand
on a page fails here."""

from __future__ import annotations

import math
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import serving
from benchmarks.results import DOCS, RESULTS, ROOT, Results, define_env, every, load, revision
from benchmarks.suite_time import outcome
from kpi_forecast.model.precision import FLOAT16_BOUND, INT8_BOUND, UNIT_ROUNDOFF
from kpi_forecast.model.recalibration import _PARTS

RUNS = every()
PAGES = sorted(p for p in DOCS.rglob("*.md") if "reference" not in p.parts)
SECTION = re.compile(r"<!-- (\S+):start -->(.*?)<!-- \1:end -->", re.S)
README = (ROOT / "README.md").read_text()
RESULTS_TABLE = re.compile(r"^\| \| Milan MAE .*?(?=\n\n)", re.S | re.M)


def test_every_results_file_says_what_ran_where_when_and_on_which_tree() -> None:
    assert len(RUNS) >= 15
    for run in RUNS:
        module = re.search(r"-m benchmarks\.(\w+)", run.command)
        assert module and (ROOT / "benchmarks" / f"{module[1]}.py").is_file(), run.name
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", run.date), run.name
        assert re.match(r"\d+ cores \(.+\)|NVIDIA ", run.machine), run.name
        commit = re.fullmatch(r"([0-9a-f]{7,40})(-dirty)?", run.revision)
        assert commit, run.name
        assert subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit[1]}^{{commit}}"]
                              ).returncode == 0, run.name
        for table in run.tables:
            assert (RESULTS / f"{table}.csv").is_file(), (run.name, table)
        assert run.figures or run.tables, run.name


def test_every_table_belongs_to_one_run() -> None:
    owners: dict[str, list[str]] = {}
    for run in RUNS:
        for table in run.tables:
            owners.setdefault(table, []).append(run.name)
    for csv in RESULTS.glob("*.csv"):
        assert len(owners.get(csv.stem, [])) == 1, (csv.name, owners.get(csv.stem))


def test_every_benchmark_make_runs_writes_a_results_file() -> None:
    makefile = (ROOT / "Makefile").read_text()
    modules = set(re.findall(r"-m benchmarks\.(\w+)", makefile))
    written = {re.search(r"-m benchmarks\.(\w+)", run.command)[1] for run in RUNS}
    assert modules <= written, modules - written


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_a_runs_section_opens_with_its_measured_line(run: Results) -> None:
    text = (DOCS / run.page).read_text()
    sections = dict(SECTION.findall(text))
    if run.section in sections:
        assert run.measured in sections[run.section]
    else:  # inserted when the site is built
        assert f'measured("{run.name}")' in text


def test_every_section_on_a_page_is_a_runs() -> None:
    claimed = {(run.page, run.section) for run in RUNS}
    for page in PAGES:
        for name, _ in SECTION.findall(page.read_text()):
            assert (str(page.relative_to(DOCS)), name) in claimed, (page, name)


# Numbers on the pages that are not measurements: each with the code's value it states (checked
# to the digits shown) or why it is not a figure.
NOT_MEASURED: dict[tuple[str, str], float | str] = {
    ("README.md", "0.80"): "the P10-P90 band's nominal coverage",
    ("README.md", "10 ms"): serving.BUDGET_MS,
    ("decisions/recalibration.md", "0.80"): "the P10-P90 band's nominal coverage",
    ("decisions/low-rank-skip.md", "3.6"): "weights counted from the shapes",
    ("model.md", "3.6"): "weights counted from the shapes",
    ("decisions/precision-bounds.md", "12.8"): 5e-2 / UNIT_ROUNDOFF["bfloat16"],
    ("forecasting.md", "0.05"): 1 / _PARTS,
    ("performance.md", "2x"): "the GPU check's target",
    ("ric.md", "100 x"): "a unit conversion",
    ("ric.md", "0.001"): "a unit conversion",
    ("ric.md", "0.125"): "a unit conversion",
    ("serving.md", "0.5"): "the first retry's delay, from the log line it quotes",
    ("training.md", "15 %"): "the validation share of the time span",
    ("training.md", "6.25"): FLOAT16_BOUND * 1e3,
    ("training.md", "0.102"): INT8_BOUND,
    ("training.md", "1.3"): "the rows of the example's data set, in millions",
}
FIGURE = re.compile(r"(?<![\w.\-/#~^])(\d[\d,]*\.\d+|\d[\d,]*(?:\.\d+)?\s?(?:ms|us|µs|MB|MiB|GB|"
                    r"GiB|%|x)(?!\w))")


def prose(text: str) -> str:
    """What a reader reads as typed: no front matter, code, run sections or macros."""
    for pattern in (r"\A---\n.*?\n---\n", r"```.*?```", SECTION.pattern, r"\{\{.*?\}\}",
                    r"`[^`]*`", r"\]\([^)]*\)", RESULTS_TABLE.pattern,
                    r"\b\d+\.\d+\.\d+(?:\.\d+)*\b", r"(?:Python|TS|python:)\s?\d+\.\d+"):
        text = re.sub(pattern, "", text, flags=re.S | re.M)
    return text


def test_no_page_quotes_a_figure_by_hand() -> None:
    found = []
    for path in [*PAGES, ROOT / "README.md"]:
        page = "README.md" if path.name == "README.md" and path.parent == ROOT else str(
            path.relative_to(DOCS))
        for figure in FIGURE.findall(prose(path.read_text())):
            stated = NOT_MEASURED.get((page, figure))
            if stated is None:
                found.append((page, figure))
            elif not isinstance(stated, str):
                digits = len(figure.split(".")[1]) if "." in figure else 0
                number = float(re.match(r"[\d.]+", figure)[0])
                assert round(stated, digits) == number, (page, figure, stated)
    assert not found, f"figures typed by hand (insert them from a results file): {found}"


def test_the_readmes_results_are_the_peers_results_files() -> None:
    peers = next(run for run in RUNS if run.name == "peers")
    assert f"`make bench-peers`, {peers.date}" in README
    summary = pd.read_csv(RESULTS / "peers_summary.csv").set_index(["dataset", "protocol",
                                                                      "model"])
    names = {"kpi-forecast": "kpi-forecast", "NHITS (neuralforecast)": "nhits",
             "PatchTST (neuralforecast)": "patchtst", "MSTL (statsforecast)": "mstl",
             "seasonal naive, a day": "seasonal_naive_day"}
    rows = RESULTS_TABLE.search(README)[0].splitlines()[2:]
    assert len(rows) == len(names)
    for line in rows:
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        milan = summary.loc[("milan", "day_ahead", names[cells[0]])]
        assert [f"{milan['mae']:.3f}", f"{milan['mase']:.3f}", f"{milan['coverage']:.3f}"] \
            == cells[1:4], cells
        assert cells[4] == (f"{milan['predict_ms_one']:.1f} ms" if milan["predict_ms_one"] < 100
                            else f"{milan['predict_ms_one']:.0f} ms"), cells
        sample = summary.loc[("sample", "day_ahead")]
        assert cells[5] == (f"{sample.loc[names[cells[0]], 'mae']:.0f}"
                            if cells[5] else ""), cells


def test_the_readmes_serving_claims_are_the_serving_and_e2_results() -> None:
    load = pd.read_csv(RESULTS / "serving_load.csv").set_index("phase")
    steady = load.loc[["200 requests/s"]]  # each run at the steady load
    assert "200 forecasts a second within a 10 ms budget with\nnothing shed" in README
    assert (steady["offered_rps"] == 200).all() and (steady["shed_503"] == 0).all()
    assert (steady["server_within_budget"] == 1.0).all()
    scale = pd.read_csv(RESULTS / "e2_scale.csv").set_index("phase").loc["one replica"]
    assert "E2 ingestion of 10^4 cells reporting every second within the reporting period" \
        in README.replace("\n", " ")
    assert scale["offered_per_s"] == 10_000 and scale["a_p99_lag_s"] < 1.0


@pytest.mark.parametrize(("output", "expected"), [
    ("tests ...\n881 passed, 2 warnings in 1138.46s (0:18:58)\n",
     {"suite_s": 1138.46, "passed": 881, "failed": 0, "skipped": 0, "error": 0}),
    ("===== 1 failed, 880 passed, 3 skipped, 2 errors in 12.50s =====",
     {"suite_s": 12.5, "passed": 880, "failed": 1, "skipped": 3, "error": 2}),
])
def test_the_suite_time_reads_pytests_summary(output: str, expected: dict) -> None:
    assert outcome(output) == expected


def test_a_run_with_no_summary_has_no_suite_time() -> None:
    assert math.isnan(outcome("make: *** [Makefile:49: test] Error 1")["suite_s"])


class Macros:
    """What mkdocs-macros hands ``define_env``: the macros it registers, by name."""

    def __init__(self) -> None:
        self.registered: dict = {}

    def macro(self, function) -> None:
        self.registered[function.__name__] = function


@pytest.fixture(scope="module")
def macros() -> dict:
    env = Macros()
    define_env(env)
    return env.registered


def test_the_macros_insert_what_the_files_hold(macros: dict) -> None:
    milan = pd.read_csv(RESULTS / "milan_day_ahead.csv").set_index("model")
    assert macros["cell"]("milan_day_ahead", "kpi-forecast", "coverage", ".3f") \
        == f"{milan.loc['kpi-forecast', 'coverage']:.3f}"
    cases = pd.read_csv(RESULTS / "generalisation.csv")["MAE / better naive"]
    assert macros["span"]("generalisation", "MAE / better naive") \
        == f"{cases.min():.2f} to {cases.max():.2f}"
    run = load("side_by_side_forecast-operation")
    ratio = run.figures["after / before"]["goodput at 2x capacity, over capacity"]
    assert macros["figure"]("side_by_side_forecast-operation", "after / before",
                            "goodput at 2x capacity, over capacity", fmt=".2f") == f"{ratio:.2f}"
    assert macros["measured"]("peers") == load("peers").measured


def test_a_figure_the_files_do_not_hold_fails_the_build(macros: dict) -> None:
    with pytest.raises(KeyError):
        macros["cell"]("milan_day_ahead", "no such model", "coverage")
    with pytest.raises(KeyError):
        macros["figure"]("milan_accuracy", "no such figure")
    with pytest.raises(FileNotFoundError):
        macros["measured"]("no_such_run")
    with pytest.raises(ValueError):  # a seasonal naive has no coverage: no figure to quote
        macros["cell"]("milan_day_ahead", "seasonal_naive_day", "coverage")


def test_a_runs_revision_is_dirty_for_changed_code_not_for_its_own_results(
        tmp_path: Path) -> None:
    """A run writes its tables before it describes itself: those do not make the measured code
    dirty; any other tracked change does."""
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "docs" / "benchmarks").mkdir(parents=True)
    table, code = tmp_path / "docs" / "benchmarks" / "run.csv", tmp_path / "code.py"
    table.write_text("a\n1\n")
    code.write_text("x = 1\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    commit = revision(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{7,40}", commit)
    table.write_text("a\n2\n")
    assert revision(tmp_path) == commit
    code.write_text("x = 2\n")
    assert revision(tmp_path) == f"{commit}-dirty"


def test_every_page_that_quotes_a_figure_renders_its_macros() -> None:
    """A page's macros run only where its front matter asks (the site renders none by
    default): without it, the reader would see the call instead of the figure."""
    for page in PAGES:
        text = page.read_text()
        if re.search(r"(?<!`)\{\{ (figure|cell|span|markdown)\(", text):  # not quoted
            assert text.startswith("---\nrender_macros: true\n"), page.relative_to(DOCS)
