"""Running a suite: one attempt of a run, point by point, with the companions beside each point's engine.

work.py      what a run is to run: the command line's options (RunOptions); the suite planned, or the run resumed (Work)
runner.py    one attempt in phases: clients, cluster, prepare, points (or an SLO search's probes), teardown
attempt.py   one attempt, and the run's state record: data tag, attempts, data lost, the undo journal
point.py     one point: prepare, health gate, engine and companions (telemetry, progress), health after, one store
faults.py    a fault schedule as it runs: its checks against the cluster, the executor, FaultCompanion
steady.py    the steady-state watch (SteadyStateCompanion): stops a point once its series has settled
probes.py    `fathom slo`: the search as a run, each probe a point built once the last was judged
resume.py    which finished writes a remaining read needs; what a resumed attempt writes again
reattach.py  what a run was attached with, kept for --resume and named by the resume command fathom prints
progress.py  live progress on stderr (point, elapsed, ETA, IOPS, latency), which the live view observes
envinfo.py   facts a result depends on, recorded with every run: versions, build, host, cluster config
"""
