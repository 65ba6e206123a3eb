"""README.md as tests read it: its fenced blocks, the marker above a block that cannot run here,
and the synopses of the commands' options."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

FENCE = re.compile(r"^```(\w*)\s*$")
# Above a block: <!-- not run here: what it needs; checked: how it is checked instead -->
MARKER = re.compile(r"^<!-- not run here: (?P<needs>.+?)(?:; checked: (?P<checked>.+?))? -->$")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z_=]*$")  # FILE, DIR, N, COLUMN=MEASUREMENT


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    needs: str | None = None  # from the marker: what these machines lack to run it
    checked: str | None = None

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
        return f"line{self.line}-" + "-".join(shlex.split(first, comments=True)[:3])


def blocks(path: Path = README) -> list[Block]:
    lines = path.read_text().splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(k for k in range(index + 1, len(lines)) if lines[k].startswith("```"))
        marker = MARKER.match(lines[index - 1].strip()) if index else None
        found.append(Block(index + 1, opening.group(1), "\n".join(lines[index + 1:end]),
                           marker.group("needs") if marker else None,
                           marker.group("checked") if marker else None))
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
            found[-1].append(("1" if word == "N" else "x") if PLACEHOLDER.match(word) else word)
    return [argv[1:] for argv in found]
