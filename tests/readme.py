"""The README and the documentation pages as tests read them: their fenced blocks, the marker
above a block that cannot run here (or that a test of its own runs), and the synopses of the
commands' options. The pages are read in the site's order (mkdocs.yml's nav), after the
README, so that a page may use what an earlier one made."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SITE = ROOT / "mkdocs.yml"

FENCE = re.compile(r"^```(\w*)\s*$")
# Above a block: <!-- not run here: what it needs; checked: how it is checked instead -->
MARKER = re.compile(r"^<!-- not run here: (?P<needs>.+?)(?:; checked: (?P<checked>.+?))? -->$")
# Above a block a test of its own runs (with what it needs that the page leaves to the reader):
# <!-- run by tests/test_x.py -->
RUN_BY = re.compile(r"^<!-- run by (?P<test>tests/\w+\.py) -->$")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_=]*$")  # FILE, DIR, N, COLUMN=MEASUREMENT
# A value of each placeholder's kind that the parser takes (any other: "x").
EXAMPLES = {"N": "1", "MS": "1", "PORT": "1", "CODE": "FR", "FAULTS": "malformed=0.1"}


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    needs: str | None = None  # from the marker: what these machines lack to run it
    checked: str | None = None
    run_by: str | None = None  # the test module that runs it, where one of its own does
    page: str = "README"  # where it is: README or the page's path under docs/

    @property
    def commands(self) -> list[str]:
        """Shell commands, one per logical line: continuations joined, comment lines dropped;
        each is run by bash as it stands."""
        found: list[str] = []
        current = ""
        for raw in self.text.splitlines():
            if not current and (not raw.strip() or raw.lstrip().startswith("#")):
                continue
            if raw.rstrip().endswith("\\"):
                current += raw.strip()[:-1].rstrip() + " "
                continue
            found.append((current + raw.strip()).strip())
            current = ""
        return found

    @property
    def name(self) -> str:
        first = self.commands[0] if self.commands else self.text.strip().splitlines()[0]
        where = "" if self.page == "README" else Path(self.page).stem + "-"
        return f"{where}line{self.line}-" + "-".join(shlex.split(first, comments=True)[:3])


def pages() -> list[Path]:
    """The README, then every page of the site in its nav's order."""
    import yaml

    def walk(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, dict):
            return [page for value in node.values() for page in walk(value)]
        if isinstance(node, list):
            return [page for item in node for page in walk(item)]
        return []

    nav = yaml.safe_load(SITE.read_text())["nav"]
    return [README, *(ROOT / "docs" / page for page in walk(nav))]


def blocks(path: Path = README) -> list[Block]:
    """The fenced blocks of ``path``: the README or a page under a tree's docs/ (this tree's,
    or another's: a benchmark comparing with an earlier revision reads that one's pages)."""
    docs = next((parent for parent in path.parents if parent.name == "docs"), None)
    page = "README" if path == README or docs is None else str(path.relative_to(docs))
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(k for k in range(index + 1, len(lines)) if lines[k].startswith("```"))
        above = lines[index - 1].strip() if index else ""
        marker, run_by = MARKER.match(above), RUN_BY.match(above)
        found.append(Block(index + 1, opening.group(1), "\n".join(lines[index + 1:end]),
                           marker.group("needs") if marker else None,
                           marker.group("checked") if marker else None,
                           run_by.group("test") if run_by else None, page))
        index = end + 1
    return found


def synopses(block: Block, program: str = "kpi-forecast") -> list[list[str]]:
    """A text block's command synopses as argument lists a parser can take: brackets dropped,
    the first of alternatives (``auto|cpu|cuda``) kept, placeholders (``FILE``, ``N``) replaced
    by a value of their kind. One synopsis per line that starts with ``program``; indented
    lines continue it."""
    found: list[list[str]] = []
    for raw in block.text.splitlines():
        if raw.startswith(program + " "):
            found.append([])
        elif not found or not raw.startswith(" "):
            continue
        for word in shlex.split(raw.replace("[", " ").replace("]", " ")):
            word = word.split("|", 1)[0]
            found[-1].append(EXAMPLES.get(word, "x") if PLACEHOLDER.match(word) else word)
    return [argv[1:] for argv in found]
