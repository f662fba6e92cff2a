"""fathom's Kubernetes parts: the engine image, Ceph access for pods, the objects fathom makes and removes, the
server sampler's DaemonSet. The engine transport that runs a point's engines in pods is fathom.engines.k8s."""
