"""Client hosts: where a point's engines run, as a suite or the command line names them, and how each is reached.

clients.py    client hosts: a suite's `clients:`, `--client`, `--clients-file` (ClientChoice)
transport.py  the transport seam: an engine on a host started and talked to (Local: this host; TABLE: the others)
ssh.py        the `ssh` transport: hosts over OpenSSH (asyncssh), the engine uploaded and checked there
pods.py       the `k8s` transport: the run's Kubernetes pods, each engine started through the API's exec stream
netns.py      client hosts in network namespaces with their own sshd, for tests and `make bench-hosts`
k8s/          fathom's Kubernetes parts apart from the transport: API connection, Ceph access, objects, the image
"""
