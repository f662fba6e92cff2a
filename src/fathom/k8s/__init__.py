"""fathom on Kubernetes: the objects it makes for a run (journaled, labelled, removed), the sampler DaemonSet."""
