"""Drop-in replacements for `rados bench` and `rbd bench`, driven by fathom-engine.

output.py   pure formatting and statistics (rados bench / rbd bench layouts, JSON)
engine.py   running one engine point and turning its failure into a clear error
rados.py    `fathom bench rados` (write / seq / rand) and `fathom cleanup`
rbd.py      `fathom bench rbd`
record.py   keeping every bench as a run in the results store
multihost.py  one bench on many client hosts (--client, --clients-file), merged exactly
"""
