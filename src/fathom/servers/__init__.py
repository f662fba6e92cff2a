"""Server hosts: the cluster's hosts sampled over SSH by fathom-sampler, on the point's timeline.

    fathom run SUITE --conf /etc/ceph/ceph.conf --server-host root@10.0.0.21 --server-host root@10.0.0.22
    fathom run SUITE --conf ... --server-host cluster        # every host the cluster's metadata names

Each host gets the sampler binary (uploaded by SFTP when missing or different, hash-checked, as client hosts
get the engine; it links no Ceph library, so cephadm and Rook hosts run it), started once for the run:
`fathom-sampler --interval 1` streams raw cumulative counters over its SSH channel until fathom stops it by
pid (or, fathom gone, until its next write finds nobody reading). Host keys follow the client hosts' rules.

- Clocks: each host's offset to this one is measured over SSH before sampling (the reply with the shortest
  round trip; good to half of it) and every sample is moved onto this host's clock by it. An offset beyond
  `max_clock_offset_s` is an error naming the fix (sync the clocks).
- Attribution: a host is matched to the cluster's metadata by its hostname or the address fathom reached it
  at. Only the daemons the metadata places on that host count there, never what its /proc shows: a process
  named osd.1 on a host the metadata does not put osd.1 on is not counted there. It is listed as `foreign`
  (another cluster's) unless it is the very process counted for osd.1 on its own host, seen through a
  shared PID namespace (same boot, pid and start time). Of several processes with one name, the one whose
  pid the daemon's addresses carry (their nonce) is taken. Daemons the metadata places on a host where no
  process has their name are `missing`, with why. Gateways and clients (nfs-ganesha, ceph-fuse, rbd-fuse), which
  the metadata places nowhere, count only when tied to the run or the cluster (attribution.Ours: a pid fathom
  started, the cluster's fsid in their cephadm unit, on this host the run's conf in their command line); the
  others are `foreign` too.
- fathom's own host is never sampled over SSH: a host the metadata names that is this one (by hostname or
  address), and a --server-host at one of this host's addresses, is sampled here from /proc, each daemon's
  process picked as `fathom cluster status` picks it (inventory.local_process: by the pid its addresses
  carry, else by the address it listens on, else by its name when one process alone has it), so another
  cluster's mon.a on this host is not counted.
- Loss: a host whose connection or sampler ends mid-run is flagged in each point it touches (an event,
  `server_lost`) and its samples up to the loss are kept; the other hosts go on.

The companion (ServerSource) hands each point its hosts' per-interval records (hostsample.interval_samples:
usage.summarize reads them, per host, then summed) tagged `via: ssh`, and an event saying what it
covered and what was missing.
"""

from fathom.hosts.clients import ClientHost
from fathom.servers.attribution import Attribution, Ours, attribute, match_host, not_counted, this_host_identities
from fathom.servers.group import Coverage, Servers, ServerSource, _remote, connect
from fathom.servers.host import ServerHost, remove_samplers
from fathom.binaries import SAMPLER, sampler_path
from fathom.servers.named import DISCOVER, SOURCE, ServersSpec, discovered, servers_file, \
    servers_from_args

__all__ = ["DISCOVER", "SAMPLER", "SOURCE", "Attribution", "ClientHost", "Coverage", "Ours", "ServerHost",
           "ServerSource", "Servers", "ServersSpec", "_remote", "attribute", "connect", "discovered", "match_host",
           "not_counted", "remove_samplers", "sampler_path", "servers_file", "servers_from_args",
           "this_host_identities"]
