//! The Ceph client session of the Ceph targets (rados, rbd): the spec's
//! `connection` section, connecting with bounded time, naming what went
//! wrong, and the shutdown. Targets without Ceph never touch this module.

use crate::ffi::*;
use crate::targets::Fatal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::{CString, c_char};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// ceph.conf path; null reads the library default search path (CEPH_CONF, /etc/ceph).
    #[serde(default)]
    pub conf: Option<String>,
    /// Full entity name ("client.admin"); `id` is the short form ("admin").
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
    /// A path: the key itself never appears in a spec, so the start record may echo it.
    #[serde(default)]
    pub keyring: Option<String>,
    /// Extra client config (rbd_cache=false, objecter_inflight_ops=...), applied after
    /// the conf file and after the engine's own defaults, so they win.
    #[serde(default)]
    pub options: BTreeMap<String, serde_json::Value>,
    /// Bound on reaching the monitors and on each monitor command.
    #[serde(default = "connect_timeout")]
    pub timeout_s: f64,
    /// Apply the engine's client tuning defaults (see PROTOCOL.md).
    #[serde(default = "yes")]
    pub engine_defaults: bool,
    /// Where the Ceph client libraries must come from (a directory prefix);
    /// null: wherever the loader found them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_dir: Option<String>,
}

fn connect_timeout() -> f64 {
    10.0
}
fn yes() -> bool {
    true
}

impl Default for Connection {
    fn default() -> Self {
        Connection {
            conf: None,
            name: None,
            id: None,
            keyring: None,
            options: BTreeMap::new(),
            timeout_s: connect_timeout(),
            engine_defaults: true,
            library_dir: None,
        }
    }
}

impl Connection {
    /// `at`: where the section sits in the spec ("target.connection"), for the messages.
    pub fn validate(&self, at: &str) -> Result<(), String> {
        if self.name.is_some() && self.id.is_some() {
            return Err(format!("{at}: give name or id, not both"));
        }
        if let Some(n) = &self.name
            && !n.contains('.')
        {
            return Err(format!("{at}.name {n:?} must be a full entity name like client.admin"));
        }
        crate::spec::positive(&format!("{at}.timeout_s"), self.timeout_s)?;
        for (k, v) in &self.options {
            if !(v.is_string() || v.is_number() || v.is_boolean()) {
                return Err(format!("{at}.options.{k} must be a string, number or boolean"));
            }
        }
        Ok(())
    }
}

/// A connected librados client, owned by one target and shut down in its
/// `close()`. Until `opened()`, a watchdog ends the process if connecting
/// and opening the target (pool, images) take longer than
/// `2 * timeout_s + 10` s: no librados call may hang the engine.
pub struct Session {
    pub h: rados_t,
    opened: &'static AtomicBool,
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

impl Session {
    /// Connect for a run that may have `need` = (ops, bytes) in flight.
    /// `opening` says what the target opens next, for the watchdog's message
    /// ("pool \"bench\"").
    pub fn connect(c: &Connection, need: (u64, u64), opening: &str) -> Result<Session, Fatal> {
        let opened: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let limit = c.timeout_s * 2.0 + 10.0;
        crate::process::watchdog(
            limit,
            opened,
            "ETIMEDOUT",
            format!("connecting to the cluster and opening {opening} did not finish within {limit} s"),
            3,
        );
        match connect(c, need) {
            Ok(h) => Ok(Session { h, opened }),
            Err(f) => {
                opened.store(true, Ordering::SeqCst);
                Err(f)
            }
        }
    }

    /// The target is open: disarm the connect watchdog.
    pub fn opened(&self) {
        self.opened.store(true, Ordering::SeqCst);
    }

    pub fn ioctx(&self, pool: &str) -> Result<rados_ioctx_t, Fatal> {
        ioctx(self.h, pool)
    }

    /// Only with every ioctx and image closed and nothing in flight.
    pub fn shutdown(&mut self) {
        if !self.h.is_null() {
            // SAFETY: the caller closed everything made from this handle.
            unsafe { rados_shutdown(self.h) };
            self.h = std::ptr::null_mut();
        }
    }
}

/// `need`: (ops, bytes) the run may have in flight. A submission over the
/// objecter's throttle blocks inside librados (on whichever thread submits),
/// so the throttle is raised to twice the need unless the user set it.
fn connect(c: &Connection, need: (u64, u64)) -> Result<rados_t, Fatal> {
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
                return Err(Fatal::ceph(r, "no ceph config found (set target.connection.conf or CEPH_CONF)"));
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
    Ok(h)
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

fn ioctx(h: rados_t, pool: &str) -> Result<rados_ioctx_t, Fatal> {
    let p = cstr(pool)?;
    let mut io: rados_ioctx_t = std::ptr::null_mut();
    // SAFETY: connected handle, out-pointer valid.
    let r = unsafe { rados_ioctx_create(h, p.as_ptr(), &mut io) };
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
    use super::Connection;

    #[test]
    fn connection_rules() {
        let c = |j: &str| serde_json::from_str::<Connection>(j).unwrap().validate("target.connection");
        assert!(c("{}").is_ok());
        let e = c(r#"{"name":"client.admin","id":"admin"}"#).unwrap_err();
        assert!(e.contains("not both"), "{e}");
        let e = c(r#"{"name":"admin"}"#).unwrap_err();
        assert!(e.contains("target.connection.name"), "{e}");
        let e = c(r#"{"timeout_s":0}"#).unwrap_err();
        assert!(e.contains("timeout_s"), "{e}");
        let e = c(r#"{"options":{"rbd_cache":[1]}}"#).unwrap_err();
        assert!(e.contains("options.rbd_cache"), "{e}");
        assert!(c(r#"{"options":{"rbd_cache":false,"objecter_inflight_ops":8,"x":"y"}}"#).is_ok());
        let e = serde_json::from_str::<Connection>(r#"{"keyfile":"/k"}"#).unwrap_err().to_string();
        assert!(e.contains("keyfile"), "{e}");
    }

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
