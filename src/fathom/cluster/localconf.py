"""The disposable local cluster's ceph.conf and RGW's TLS certificate (fathom.cluster.local writes them)."""

from __future__ import annotations

import errno
import os
import random
import socket
import subprocess
from pathlib import Path
from typing import Any

from fathom.errors import ClusterError, UsageError

LOOPBACK = "127.0.0.1"
RGW_NAME = "client.rgw.fathom"


def conf_text(root: Path, st: dict[str, Any]) -> str:
    """The disposable cluster's ceph.conf: everything under root, its options from its state."""
    r = root
    store = st["objectstore"]
    conf = f"""# written by fathom for the disposable cluster in {r}
[global]
fsid = {st['fsid']}
mon_host = {st['mon_host']}
{network_lines(st.get("bind") or LOOPBACK, [pl["addr"] for pl in (st.get("places") or {}).values()])}
ms_bind_ipv4 = true
ms_bind_ipv6 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
mon_warn_on_insecure_global_id_reclaim = false
mon_warn_on_insecure_global_id_reclaim_allowed = false
keyring = {r}/keyring
run_dir = {r}/run
admin_socket = {r}/run/$cluster-$name.asok
log_file = {r}/log/$name.log
crash_dir = {r}/crash
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_max_pg_per_osd = 1000
osd_crush_chooseleaf_type = 0
mon_data_avail_warn = 2
mon_data_avail_crit = 1
mgr_initial_modules = iostat
[client]
log_file = {r}/log/$name.log
admin_socket = {r}/run/$cluster-$name.$pid.asok
[mon]
mon_data = {r}/mon.$id
mon_cluster_log_file = {r}/log/cluster.log
[mgr]
mgr_data = {r}/mgr.$id
keyring = {r}/mgr.$id/keyring
[osd]
osd_data = {r}/$name
keyring = {r}/$name/keyring
osd_objectstore = {store}
bluestore_block_path = {r}/$name/block.data
bluestore_block_create = true
bluestore_block_size = {st['osd_size']}
bluestore_fsck_on_mount = false
memstore_device_bytes = {st['osd_size']}
osd_check_max_object_name_len_on_startup = false
osd_class_update_on_start = false
[mds]
mds_data = {r}/$name
keyring = {r}/$name/keyring
"""
    for name in rgw_names(st):
        # tcp_nodelay=1: otherwise a small GET's body waits behind its headers for the client's delayed ACK (~40 ms)
        addr = rgw_addr(st, name)
        frontend = f"beast endpoint={addr}:{st['rgw_port']}{tls_frontend(st, root / 'rgw', addr)} tcp_nodelay=1"
        conf += f"""[{name}]
rgw_frontends = {frontend}
rgw_data = {r}/rgw
rgw_dynamic_resharding = false
"""
    for section, opts in (st.get("settings") or {}).items():
        conf += f"[{section}]\n" + "".join(f"{k} = {v}\n" for k, v in opts.items())
    return conf


def rgw_names(st: dict[str, Any]) -> list[str]:
    """The cluster's RGWs: one (RGW_NAME) on this host, or one per emulated host (`client.rgw.<hostname>`),
    started in that host as its OSDs are, as the RGW study ran its gateways on the storage nodes."""
    if not st.get("rgw"):
        return []
    hosts = (st.get("box") or {}).get("hosts") or []
    return [f"client.rgw.{h['hostname']}" for h in hosts] if hosts else [RGW_NAME]


def rgw_addr(st: dict[str, Any], name: str) -> str:
    """The address an RGW listens on: its host's, or the cluster's bind address."""
    place = (st.get("places") or {}).get(name)
    return place["addr"] if place else st.get("bind") or LOOPBACK


def rgw_keyring(root: Path, name: str) -> Path:
    """An RGW's keyring (the one of a cluster from before emulated hosts keeps its path)."""
    return root / "rgw" / ("keyring" if name == RGW_NAME else f"{name}.keyring")


def tls_frontend(st: dict[str, Any], d: Path, addr: str | None = None) -> str:
    """beast's TLS endpoint beside the plain one (one RGW serves both, so TLS on/off needs no restart)."""
    if not st.get("rgw_tls_port"):
        return ""
    return (f" ssl_endpoint={addr or st.get('bind') or LOOPBACK}:{st['rgw_tls_port']} ssl_certificate={d}/rgw.crt"
            f" ssl_private_key={d}/rgw.key")


def network_lines(addr: str, placed: list[str] | None = None) -> str:
    """public_network (and public_addr off loopback): every daemon on exactly that address, or on its place's.
    The network holds the places' addresses too: from Reef on, the mon reports an OSD whose address is outside
    it as unreachable (OSD_UNREACHABLE)."""
    if addr == LOOPBACK:
        return "public_network = 127.0.0.0/8"
    nets = ", ".join(f"{a}/32" for a in dict.fromkeys([addr, *(placed or [])]))
    return f"public_network = {nets}\npublic_addr = {addr}"


def make_rgw_certificate(d: Path, addr: str | list[str] = "127.0.0.1") -> None:
    """A throwaway CA and a leaf certificate for the cluster's address (or its RGWs' addresses) signed by it
    (IP SANs, CA:FALSE).

    A self-signed certificate would be a CA used as the server's own, which rustls/webpki refuses.
    """
    addrs = [addr] if isinstance(addr, str) else list(addr)
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    sans = ",".join(f"IP:{a}" for a in addrs)
    (d / "leaf.cnf").write_text(f"subjectAltName={sans}\nbasicConstraints=critical,CA:FALSE\n"
                                "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n")
    steps = [
        ["openssl", "req", "-x509", *ec, "-days", "365", "-subj", "/CN=fathom local cluster CA",
         "-keyout", "ca.key", "-out", "ca.crt", "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign"],
        ["openssl", "req", *ec, "-subj", f"/CN={addrs[0]}", "-keyout", "rgw.key", "-out", "rgw.csr"],
        ["openssl", "x509", "-req", "-in", "rgw.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
         "-days", "365", "-out", "rgw.crt", "-extfile", "leaf.cnf"],
    ]
    for argv in steps:
        proc = subprocess.run(argv, cwd=d, capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise ClusterError(f"making RGW's TLS certificate failed: {' '.join(argv[:3])}: {proc.stderr.strip()}",
                               hint="check that openssl works")
    for key in ("ca.key", "rgw.key"):
        os.chmod(d / key, 0o600)


PORT_MIN = 10000  # the lowest port a local cluster's daemons (and fathom's servers) are given


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of source ports for outgoing connections (net.ipv4.ip_local_port_range)."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(host: str = LOOPBACK, avoid: set[int] | None = None) -> int:
    """A port nothing listens on now, below the kernel's ephemeral range. A port the kernel picks (a bind to port
    0) is an ephemeral one: between this check and the daemon's bind, any outgoing connection on the host may be
    given it as its source port (a mon failed to start so, "Address already in use", with clusters beside it).
    Ports below that range are only ever taken by a bind that names them."""
    low = ephemeral_range()[0]
    for _ in range(200 if low - PORT_MIN >= 1000 else 0):
        port = random.randrange(PORT_MIN, low)
        if avoid and port in avoid:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    continue
                raise  # not an address of this host: the caller says so
        return port
    for _ in range(50):  # no room below the ephemeral range on this host: the kernel's pick
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if not avoid or port not in avoid:
            return port
    raise ClusterError("could not find a free loopback port")


def bind_address(addr: str) -> str:
    """An IPv4 address of this host that daemons can listen on; UsageError otherwise."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        raise UsageError(f"--bind: {addr!r} is not an IP address") from None
    if ip.version != 4:
        raise UsageError(f"--bind: {addr} is IPv6; the local cluster binds IPv4 only")
    try:
        free_port(str(ip))
    except OSError as exc:
        raise UsageError(f"--bind: cannot listen on {addr}: {exc.strerror or exc}",
                         hint="give an address of one of this host's interfaces (`ip -br addr`)") from None
    return str(ip)
