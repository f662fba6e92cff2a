"""A suite: a study written down (YAML), its models and checks, the points it plans. Models only: fathom.run runs them.

spec.py      suite files: loading (built-in or file), parsing, the checks between a suite's parts; Suite, SloSpec
workload.py  a workload's fields (fio's names) and which can be swept, its sweep and steady-state models, its validation
prep.py      the `prep:` models (pools, images, hygiene, RGW placements) that fathom.cluster.prep and .rgw carry out
checks.py    a suite file's problems at file:line; each workload checked against the suite it was merged from
plan.py      sweeps expanded into the ordered points a run measures, with stable keys (resume)
labels.py    labels on runs (a suite's `labels:`, `--label KEY=VALUE`): parsing, checks, order
faults.py    a workload's fault schedule: Fault, the actions, the schedule's checks (fathom.run.faults runs it)
steady.py    steady state: criteria and their pure check on a merged series (fathom.run.steady watches it)
"""
