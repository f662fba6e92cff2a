"""fathom's Kubernetes parts apart from the engine transport (fathom.engines.k8s, client hosts as pods).

image.py   `fathom k8s image`: an OCI image archive with fathom-engine and the Ceph client libraries it links
"""
