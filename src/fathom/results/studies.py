"""The study sections' names: what a suite's `report:` may name and what a run records in its environment.

A run records the studies it belongs to in its environment, under ENV_KEY (a suite run from its suite's
`report:`, an imported published table from `fathom import table`, a run stored before store schema 5 by
fathom.results.migrate._studies_5). The names live here, below both the suite (which checks them) and the report
(fathom.report.studies: each name's sections), so that the suite model does not import the report.
"""

from __future__ import annotations

from collections.abc import Iterable

from fathom.fields import suggest

ENV_KEY = "report"  # the run's env key listing its study names (fathom.results.migrate._studies_5 writes the same)
FILES_STUDY = "files-study"
RGW_STUDY = "rgw-study"
NAMES = (FILES_STUDY, RGW_STUDY)  # in report order; fathom.report.studies.STUDIES has a builder for each


def check(names: Iterable[str]) -> list[str]:
    """A suite's `report:` names, each once; ValueError (for the suite's validator) naming the known ones."""
    out: list[str] = []
    for n in names:
        if n not in NAMES:
            raise ValueError(f"unknown study {n!r}" + suggest(str(n), NAMES, "studies", NAMES))
        if n not in out:
            out.append(n)
    return out
