"""Study sections, registered by name: a suite names the ones its report carries (`report: [files-study]`).

A run records the studies it belongs to in its environment record, under ENV_KEY: a suite run from its suite's
`report:` when it is created, an imported published table from `fathom import table` (the 2014 table, the RGW
gains table), a run stored before store schema 5 by the workload-name rule that found study runs then
(fathom.results.migrate._studies_5). A study's module gets the runs that name it, measured and published alike, and
picks its own points among theirs. The SLO search's section is not a study of a suite: the run's `slo` keys it.

Why the env and not a field of its own: the env is what a run records once about itself for its readers (the
SLO search is there too), imports already write theirs, readers have it with the run (RunData.env, `fathom
show`), and a key needs no new column in the store.
"""

from __future__ import annotations

from collections.abc import Callable

from fathom.analysis.data import RunData
from fathom.report import files_study, rgw_study
from fathom.report.doc import Section
from fathom.results.studies import ENV_KEY, FILES_STUDY, RGW_STUDY

# name -> the study's sections, in report order (fathom.results.studies.NAMES: the names a suite may give)
STUDIES: dict[str, Callable[[list[RunData]], list[Section]]] = {
    FILES_STUDY: files_study.sections,
    RGW_STUDY: rgw_study.sections,
}


def named(run: RunData) -> list[str]:
    """The studies a run names; for a group of runs (`a,b`: env is name -> env), those any of them names."""
    envs = list(run.env.values()) if len(run.ids) > 1 else [run.env]
    out: list[str] = []
    for env in envs:
        for n in (env.get(ENV_KEY) or []) if isinstance(env, dict) else []:
            if n not in out:
                out.append(n)
    return out


def sections(runs: list[RunData]) -> list[Section]:
    """Each registered study's sections, built from the runs that name it (none: the study is left out)."""
    out: list[Section] = []
    for name, build in STUDIES.items():
        mine = [r for r in runs if name in named(r)]
        if mine:
            out.extend(build(mine))
    return out
