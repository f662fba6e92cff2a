//! Connecting to a cluster with bounded time, and naming what went wrong.

use crate::ffi::*;
use crate::spec::Connection;
use crate::target::Fatal;
use std::ffi::{CString, c_char};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub struct Cluster {
    pub h: rados_t,
}

/// Client settings the engine applies unless `engine_defaults` is false;
/// user options override them. Reasons are in PROTOCOL.md.
pub const ENGINE_DEFAULTS: &[(&str, &str)] = &[
    // Measure the cluster, not librbd's client cache (which, once fio-style
    // flushes switch it to writeback, acknowledges writes from memory).
    ("rbd_cache", "false"),
    // One completion (asio) thread instead of two: librbd's dispatch and the
    // aio callbacks stop ping-ponging between two threads. Measured: 4 KiB
    // rbd randread QD16 went from ~2.4 to ~1.0 context switches per op and
    // from ~74 to ~44 us of client CPU per op, IOPS not lower.
    ("librados_thread_count", "1"),
];

fn cstr(s: &str) -> Result<CString, Fatal> {
    CString::new(s).map_err(|_| Fatal::spec(format!("{s:?} contains a NUL byte")))
}

fn conf_get(h: rados_t, key: &str) -> String {
    let k = CString::new(key).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: h is a created handle, buf is writable for its length.
    let r = unsafe { rados_conf_get(h, k.as_ptr(), buf.as_mut_ptr() as *mut c_char, buf.len()) };
    if r < 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

fn set(h: rados_t, key: &str, value: &str) -> Result<(), Fatal> {
    let (k, v) = (cstr(key)?, cstr(value)?);
    // SAFETY: valid handle and NUL-terminated strings.
    let r = unsafe { rados_conf_set(h, k.as_ptr(), v.as_ptr()) };
    if r < 0 {
        return Err(Fatal::spec(format!(
            "Ceph option {key}={value:?} was refused: {}",
            if r == -libc::ENOENT { "no such option".to_string() } else { crate::errno::describe(r) }
        )));
    }
    Ok(())
}

pub fn option_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Objecter throttle defaults (objecter_inflight_ops, objecter_inflight_op_bytes).
const INFLIGHT_OPS: u64 = 1024;
const INFLIGHT_BYTES: u64 = 100 << 20;

/// `need`: (ops, bytes) the run may have in flight. A submission over the
/// objecter's throttle blocks inside librados (on whichever thread submits),
/// so the throttle is raised to twice the need unless the user set it.
pub fn connect(c: &Connection, need: (u64, u64)) -> Result<Cluster, Fatal> {
    let name = match (&c.name, &c.id) {
        (Some(n), _) => n.clone(),
        (None, Some(id)) => format!("client.{id}"),
        (None, None) => "client.admin".to_string(),
    };
    let (cluster_name, cname) = (cstr("ceph")?, cstr(&name)?);
    let mut h: rados_t = std::ptr::null_mut();
    // SAFETY: out-pointer and C strings are valid.
    let r = unsafe { rados_create2(&mut h, cluster_name.as_ptr(), cname.as_ptr(), 0) };
    if r < 0 {
        return Err(Fatal::ceph(r, format!("cannot create a client for {name}: {}", crate::errno::describe(r))));
    }
    match &c.conf {
        Some(p) => {
            if !std::path::Path::new(p).is_file() {
                return Err(Fatal::ceph(-libc::ENOENT, format!("ceph config {p:?} does not exist")));
            }
            let cp = cstr(p)?;
            // SAFETY: valid handle and path.
            let r = unsafe { rados_conf_read_file(h, cp.as_ptr()) };
            if r < 0 {
                return Err(Fatal::ceph(r, format!("cannot read ceph config {p:?}: {}", crate::errno::describe(r))));
            }
        }
        None => {
            // SAFETY: NULL means the library's default search path.
            let r = unsafe { rados_conf_read_file(h, std::ptr::null()) };
            if r < 0 {
                return Err(Fatal::ceph(r, "no ceph config found (set connection.conf or CEPH_CONF)"));
            }
        }
    }
    if let Some(k) = &c.keyring {
        if !std::path::Path::new(k).is_file() {
            return Err(Fatal::ceph(-libc::ENOENT, format!("keyring {k:?} does not exist")));
        }
        set(h, "keyring", k)?;
    }
    let t = format!("{}", c.timeout_s.ceil() as u64);
    set(h, "client_mount_timeout", &t)?;
    set(h, "rados_mon_op_timeout", &t)?;
    if c.engine_defaults {
        for (k, v) in ENGINE_DEFAULTS {
            set(h, k, v)?;
        }
    }
    let (ops, bytes) = (need.0.saturating_mul(2), need.1.saturating_mul(2));
    if ops > INFLIGHT_OPS && !c.options.contains_key("objecter_inflight_ops") {
        set(h, "objecter_inflight_ops", &ops.to_string())?;
    }
    if bytes > INFLIGHT_BYTES && !c.options.contains_key("objecter_inflight_op_bytes") {
        set(h, "objecter_inflight_op_bytes", &bytes.to_string())?;
    }
    for (k, v) in &c.options {
        set(h, k, &option_text(v))?;
    }
    let mon_host = conf_get(h, "mon_host");
    // SAFETY: configured handle. Bounded by client_mount_timeout.
    let r = unsafe { rados_connect(h) };
    if r < 0 {
        return Err(connect_error(r, &name, &mon_host, c.timeout_s));
    }
    Ok(Cluster { h })
}

fn connect_error(r: i32, name: &str, mon_host: &str, timeout: f64) -> Fatal {
    match -r {
        libc::ETIMEDOUT | libc::ECONNREFUSED | libc::EHOSTUNREACH => {
            let addrs = mon_addrs(mon_host);
            let refused = !addrs.is_empty()
                && addrs.iter().all(|a| {
                    matches!(TcpStream::connect_timeout(a, Duration::from_millis(500)),
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
                });
            if refused {
                Fatal::ceph(
                    -libc::ECONNREFUSED,
                    format!("connection refused by every monitor ({mon_host}): are the monitors running?"),
                )
            } else {
                Fatal::ceph(-libc::ETIMEDOUT, format!("could not reach the monitors ({mon_host}) within {timeout} s"))
            }
        }
        libc::EACCES | libc::EPERM => Fatal::ceph(
            r,
            format!(
                "permission denied for {name}: the monitors refused its key (check the keyring and the user's caps)"
            ),
        ),
        libc::ENOENT => Fatal::ceph(r, format!("no key for {name}: the keyring was not found or does not hold it")),
        libc::EIO => {
            Fatal::ceph(r, format!("authentication of {name} failed (EIO): is the key in the keyring well formed?"))
        }
        _ => Fatal::ceph(r, format!("cannot connect as {name} to {mon_host}: {}", crate::errno::describe(r))),
    }
}

/// ip:port pairs in a mon_host value such as "[v2:127.0.0.1:3300,v1:127.0.0.1:6789] 10.0.0.2".
pub fn mon_addrs(mon_host: &str) -> Vec<SocketAddr> {
    mon_host
        .split([',', ' ', ';', '[', ']'])
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let s = s.trim_start_matches("v2:").trim_start_matches("v1:");
            let s = s.split('/').next().unwrap_or(s);
            s.parse::<SocketAddr>().ok().or_else(|| format!("{s}:6789").parse::<SocketAddr>().ok())
        })
        .collect()
}

pub fn ioctx(cl: &Cluster, pool: &str) -> Result<rados_ioctx_t, Fatal> {
    let p = cstr(pool)?;
    let mut io: rados_ioctx_t = std::ptr::null_mut();
    // SAFETY: connected handle, out-pointer valid.
    let r = unsafe { rados_ioctx_create(cl.h, p.as_ptr(), &mut io) };
    if r < 0 {
        let msg = if r == -libc::ENOENT {
            format!("pool {pool:?} does not exist")
        } else {
            format!("cannot open pool {pool:?}: {}", crate::errno::describe(r))
        };
        return Err(Fatal::ceph(r, msg));
    }
    Ok(io)
}

#[cfg(test)]
mod tests {
    #[test]
    fn mon_host_forms() {
        let a = super::mon_addrs("[v2:127.0.0.1:3300/0,v1:127.0.0.1:6789/0]");
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].port(), 6789);
        let a = super::mon_addrs("127.0.0.1:40000, 10.0.0.1");
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].port(), 6789);
    }
}
