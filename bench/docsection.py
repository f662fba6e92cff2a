"""Put a benchmark's section into docs/benchmarks.md: replace the section with that heading, or append it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def update_docs(path: Path, heading: str, section: str) -> None:
    """Replace the lines from `heading` up to the next `## ` heading with `section` (appended when absent)."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == heading), None)
    if start is None:
        new = text.rstrip("\n") + "\n\n" + section
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        new = "\n".join(lines[:start] + section.rstrip("\n").splitlines() + ([""] + lines[end:] if end < len(lines)
                                                                            else [])) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new)


def publish(text: str, heading: str, docs: Path | None, json_path: Path | None, data: Any) -> None:
    """A benchmark's end: its section printed and put into docs (when given), its figures as JSON (when given)."""
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(data, indent=1) + "\n")
    print(text)
    if docs:
        update_docs(docs, heading, text)
