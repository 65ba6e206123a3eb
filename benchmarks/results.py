"""A benchmark's results file, the one source of every figure the docs quote: its figures and
tables with the command, the revision of the tree it ran on, the date and the machine.

A run writes ``docs/benchmarks/<name>.json`` beside its tables (CSV, same folder); the section
it writes on a page opens with :attr:`Results.measured`, and the docs site inserts figures from
these files when it is built (:func:`define_env`, the mkdocs-macros entry point). Only the
standard library: the GPU check imports this on a node with nothing installed, and mkdocs loads
it by path.
"""

import csv
import datetime as dt
import json
import math
import os
import platform
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "benchmarks"


def machine() -> str:
    """The cores, the CPU's model name and the Python that ran."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def revision(root: Path = ROOT) -> str:
    """The commit of the tree at ``root`` (``git describe --always``), ``-dirty`` where tracked
    files other than the results (docs/benchmarks/, which a run writes before it describes
    itself) differ from it: the code that was measured."""
    git = ["git", "-C", str(root)]
    try:
        described = subprocess.run([*git, "describe", "--always"], capture_output=True,
                                   text=True, timeout=30, check=True).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--",
                                  ".", f":(exclude){RESULTS.relative_to(ROOT)}"],
                                 capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return described + ("-dirty" if changed.strip() else "")


@dataclass
class Results:
    name: str  # the file's stem: docs/benchmarks/<name>.json
    command: str  # as a user types it, from the repository root
    page: str  # the docs page (under docs/) that holds the run's section
    section: str  # the section's marker name on that page
    figures: dict[str, Any] = field(default_factory=dict)  # headline figures, by name
    tables: list[str] = field(default_factory=list)  # CSV files of docs/benchmarks
    date: str = field(default_factory=lambda: dt.date.today().isoformat())
    machine: str = field(default_factory=machine)
    revision: str = field(default_factory=revision)

    @property
    def measured(self) -> str:
        """The line a run's section opens with."""
        return (f"Measured {self.date} on {self.machine}, revision `{self.revision}`, with "
                f"`{self.command}`")

    def write(self, folder: Path = RESULTS) -> Path:
        path = folder / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2, default=float) + "\n")
        return path


def load(name: str, folder: Path = RESULTS) -> Results:
    return Results(**json.loads((folder / f"{name}.json").read_text()))


def every(folder: Path = RESULTS) -> list[Results]:
    return [load(p.stem, folder) for p in sorted(folder.glob("*.json"))]


def table(name: str, folder: Path = RESULTS) -> list[dict[str, str]]:
    with (folder / f"{name}.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def formatted(value: Any, fmt: str) -> str:
    """``value`` in ``fmt``; a text as it is; an empty cell or NaN is no figure, and raises."""
    if value == "":
        raise ValueError("no such figure: an empty cell")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return value
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("no such figure: NaN")
    return format(value, fmt)


def define_env(env: Any) -> None:
    """mkdocs-macros: what a page that sets ``render_macros: true`` may quote. Each raises on a
    file, row or column that is not there, and the strict build fails."""

    def measured(name: str) -> str:
        return load(name).measured

    def figure(name: str, *keys: str, fmt: str = ".3g") -> str:
        """A figure of the results file; nested ones by each key in turn."""
        value: Any = load(name).figures
        for key in keys:
            value = value[key]
        return formatted(value, fmt)

    def cell(name: str, row: str, column: str, fmt: str = ".3g") -> str:
        """The value in ``column`` of the row whose first column is ``row``."""
        rows = [r for r in table(name) if next(iter(r.values())) == row]
        if len(rows) != 1:
            raise KeyError(f"{name}.csv: {len(rows)} rows named {row!r}")
        return formatted(rows[0][column], fmt)

    def span(name: str, column: str, fmt: str = ".2f", row: str | None = None) -> str:
        """The lowest and highest value of ``column`` (of the rows whose first column is
        ``row``, if given): ``low to high``."""
        values = [float(r[column]) for r in table(name) if r[column] != ""
                  and (row is None or next(iter(r.values())) == row)]
        return f"{formatted(min(values), fmt)} to {formatted(max(values), fmt)}"

    def markdown(name: str) -> str:
        """The whole table, as a markdown table."""
        rows = table(name)
        head = list(rows[0])
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r[c] for c in head) + " |" for r in rows]
        return "\n".join(lines)

    for macro in (measured, figure, cell, span, markdown):
        env.macro(macro)
