"""Put a benchmark's section into docs/benchmarks.md: replace the section with that heading, or append it."""

from __future__ import annotations

from pathlib import Path


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
