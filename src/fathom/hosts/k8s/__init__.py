"""fathom's Kubernetes parts apart from the engine transport (fathom.hosts.pods: client hosts as pods).

api.py      one API connection (kubernetes_asyncio's REST and websocket clients), K8sError
access.py   Ceph access for pods: the run's conf and keyring, or a Rook cluster's own objects
objects.py  what fathom makes for a run (owner, pods, Secret): names, labels, journal entry, waiting with
            the kubelet's and scheduler's reasons, removal, the API's failures as named errors
journaled.py single objects (the sampler's DaemonSet): journaled, made, removed while they are fathom's
image.py    `fathom k8s image`: an OCI image archive with fathom-engine and the Ceph client libraries it loads
(Server figures from a DaemonSet are fathom.servers.k8s.)
"""
