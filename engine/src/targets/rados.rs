//! RADOS objects through librados aio: write (full or at an offset), read
//! (whole or part, seq or rand), remove. A write stage leaves
//! `<prefix>.meta` so a later read or remove with the same prefix knows the
//! object set.

use super::{Fatal, Target, object_name};
use crate::ceph::{Connection, Session};
use crate::errno::ErrKind;
use crate::ffi::*;
use crate::io::{OpKind, Slot};
use crate::rng::Rng;
use crate::spec::{Load, Spec};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::ffi::{CString, c_char, c_void};

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RadosOp {
    Write,
    Read,
    Remove,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    #[default]
    Seq,
    Rand,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RadosSpec {
    #[serde(default)]
    pub connection: Connection,
    pub pool: String,
    pub op: RadosOp,
    #[serde(default)]
    pub pattern: Pattern,
    /// Object names are `<prefix>.<n>`, metadata goes to `<prefix>.meta`.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Bytes per object (write); reads and removes take it from the metadata object.
    #[serde(default)]
    pub object_size: Option<u64>,
    /// Bytes per op; default: the whole object.
    #[serde(default)]
    pub op_size: Option<u64>,
    /// Size of the object set (write); null: new objects until the run ends.
    #[serde(default)]
    pub objects: Option<u64>,
    /// Write every object of the set in full before the measured run (not measured).
    #[serde(default)]
    pub prefill: bool,
    /// Writes carry an allocation hint (expected object and write size,
    /// sequential/append-only/immutable), as rados bench's writes do.
    #[serde(default)]
    pub alloc_hint: bool,
    /// Seq reads: one pass over the set, even when time-bounded (rados bench seq).
    #[serde(default)]
    pub once: bool,
}

impl RadosSpec {
    pub fn validate(&mut self, load: &Load, verify: bool) -> Result<(), String> {
        self.connection.validate("target.connection")?;
        if self.pool.is_empty() {
            return Err("target.pool must not be empty".into());
        }
        let bounded = load.bounded();
        if let Some(p) = &self.prefix
            && (p.is_empty() || p.contains('/') || p.len() > 200)
        {
            return Err(format!("target.prefix {p:?} must be 1..200 characters without '/'"));
        }
        if self.objects == Some(0) {
            return Err("target.objects must be positive when given".into());
        }
        if self.object_size == Some(0) || self.op_size == Some(0) {
            return Err("target.object_size and target.op_size must be positive".into());
        }
        match self.op {
            RadosOp::Write => {
                let os = *self.object_size.get_or_insert(4 << 20);
                let op = *self.op_size.get_or_insert(os);
                if op > os || !os.is_multiple_of(op) {
                    return Err(format!("target.op_size ({op}) must divide target.object_size ({os})"));
                }
                if os > (90 << 20) {
                    return Err(format!("target.object_size {os} is above the OSD's 90 MiB object limit"));
                }
                if self.pattern == Pattern::Rand && self.objects.is_none() {
                    return Err("rados rand writes need target.objects (the size of the object set)".into());
                }
                if !bounded && self.objects.is_none() {
                    return Err(
                        "a rados write needs an end: load.duration_s, load.ops, load.bytes or target.objects".into()
                    );
                }
                if self.prefix.is_none() {
                    self.prefix = Some(default_prefix());
                }
                if self.once {
                    return Err("target.once applies to seq reads only".into());
                }
            }
            RadosOp::Read | RadosOp::Remove => {
                if self.prefix.is_none() {
                    return Err(format!(
                        "rados {} needs target.prefix (the prefix of an earlier write)",
                        if self.op == RadosOp::Read { "read" } else { "remove" }
                    ));
                }
                if self.prefill {
                    return Err("target.prefill applies to writes only".into());
                }
                if self.alloc_hint {
                    return Err("target.alloc_hint applies to writes only".into());
                }
                if self.once && (self.op != RadosOp::Read || self.pattern != Pattern::Seq) {
                    return Err("target.once applies to seq reads only".into());
                }
                if self.op == RadosOp::Remove && self.pattern == Pattern::Rand {
                    return Err("rados remove is sequential only".into());
                }
                if self.op == RadosOp::Remove && verify {
                    return Err("verify does not apply to remove".into());
                }
                if let (Some(os), Some(op)) = (self.object_size, self.op_size)
                    && (op > os || !os.is_multiple_of(op))
                {
                    return Err(format!("target.op_size ({op}) must divide target.object_size ({os})"));
                }
            }
        }
        if verify && self.op_size.is_some_and(|o| o < 64) {
            return Err("verify needs target.op_size >= 64".into());
        }
        Ok(())
    }
}

fn default_prefix() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format!("fathom.{t}.{}", std::process::id())
}

pub struct Rados {
    session: Session,
    io: rados_ioctx_t,
    /// The same ioctx seen from C++, for writes and reads that do not copy the payload.
    zc: *mut c_void,
    /// Per slot, the bufferlist its reads land in; made at the slot's first
    /// read and never freed (an op that timed out may still complete into it).
    read_bls: Vec<*mut c_void>,
    /// Copy what a read returned into the slot's buffer: only verification looks at it.
    copy_reads: bool,
    pool: String,
    op: RadosOp,
    pattern: Pattern,
    prefix: String,
    object_size: u64,
    op_size: u64,
    /// Object set size (write: from the spec; read/remove: from the meta object).
    objects: Option<u64>,
    /// Revisit the set when the run is bounded by time/ops/bytes rather than by the set.
    wrap: bool,
    chunks: u64,
    cursor: u64,
    prefill: bool,
    in_prefill: bool,
    /// Highest object index written successfully, plus one.
    written: u64,
    removed: u64,
    alloc_hint: bool,
    /// How long a metadata op may take: a full or paused cluster blocks it forever.
    meta_timeout_s: f64,
}

unsafe extern "C" fn on_complete(_c: rados_completion_t, arg: *mut c_void) {
    // SAFETY: arg is the &'static Done of the slot that issued the op.
    unsafe { (*(arg as *const crate::io::Done)).complete() }
}

/// librados' ALLOC_HINT_FLAG_{SEQUENTIAL_WRITE, SEQUENTIAL_READ, APPEND_ONLY,
/// IMMUTABLE}: what rados bench sends with each write.
const HINT_FLAGS: u32 = 1 | 4 | 16 | 32;

fn meta_name(prefix: &str) -> CString {
    CString::new(format!("{prefix}.meta")).expect("prefix has no NUL")
}

impl Rados {
    pub fn open(r: &RadosSpec, spec: &Spec) -> Result<Self, Fatal> {
        let (time_bounded, meta_timeout_s, copy_reads) = (spec.load.bounded(), spec.stall_timeout_s, spec.verify);
        let pool = r.pool.as_str();
        let slots = spec.load.iodepth as u64;
        let op_bytes = r.op_size.or(r.object_size).unwrap_or(4 << 20);
        let session =
            Session::connect(&r.connection, (slots, slots.saturating_mul(op_bytes)), &format!("pool {pool:?}"))?;
        let io = session.ioctx(pool)?;
        // SAFETY: io is a valid ioctx; the view holds its own reference.
        let zc = unsafe { fathom_zc_ioctx(io) };
        if zc.is_null() {
            // SAFETY: io is valid and unused.
            unsafe { rados_ioctx_destroy(io) };
            return Err(Fatal::ceph(-libc::ENOMEM, "cannot allocate the I/O context"));
        }
        let prefix = r.prefix.clone().expect("validated: prefix set");
        let mut t = Rados {
            session,
            io,
            zc,
            read_bls: Vec::new(),
            copy_reads,
            pool: pool.to_string(),
            op: r.op,
            pattern: r.pattern,
            prefix,
            object_size: r.object_size.unwrap_or(0),
            op_size: r.op_size.unwrap_or(0),
            objects: r.objects,
            wrap: time_bounded,
            chunks: 1,
            cursor: 0,
            prefill: r.prefill,
            in_prefill: false,
            written: 0,
            removed: 0,
            alloc_hint: r.alloc_hint,
            meta_timeout_s,
        };
        if r.op != RadosOp::Write {
            let meta = t.read_meta()?;
            let count = meta["objects"].as_u64().unwrap_or(0);
            let osz = meta["object_size"].as_u64().unwrap_or(0);
            if count == 0 || osz == 0 {
                return Err(Fatal::ceph(
                    -libc::ENOENT,
                    format!(
                        "nothing to read for prefix {} in pool {}: the write stage wrote no objects",
                        t.prefix, pool
                    ),
                ));
            }
            t.objects = Some(count);
            t.object_size = r.object_size.unwrap_or(osz);
            t.op_size = r.op_size.unwrap_or(t.object_size);
            if t.op_size > t.object_size || !t.object_size.is_multiple_of(t.op_size) {
                return Err(Fatal::spec(format!(
                    "rados.op_size ({}) must divide the object size ({}) of prefix {}",
                    t.op_size, t.object_size, t.prefix
                )));
            }
            // Reads bounded by time/ops/bytes revisit the set; otherwise one pass. Remove: one pass.
            t.wrap = r.op == RadosOp::Read && time_bounded && !r.once;
        }
        t.chunks = t.object_size / t.op_size;
        t.session.opened();
        Ok(t)
    }

    /// The bufferlist for slot `i`'s reads (null if it cannot be allocated).
    fn read_bl(&mut self, i: usize) -> *mut c_void {
        if self.read_bls.len() <= i {
            self.read_bls.resize(i + 1, std::ptr::null_mut());
        }
        if self.read_bls[i].is_null() {
            // SAFETY: plain allocation; the list lives for the rest of the process.
            self.read_bls[i] = unsafe { fathom_zc_bl_new() };
        }
        self.read_bls[i]
    }

    fn read_meta(&self) -> Result<Value, Fatal> {
        let name = meta_name(&self.prefix);
        let buf: &'static mut [u8] = Box::leak(vec![0u8; 65536].into_boxed_slice());
        let (ptr, len) = (buf.as_mut_ptr() as *mut c_char, buf.len());
        // SAFETY: valid ioctx; the buffer is leaked, so it outlives the op (see bounded).
        let r = self.bounded(|c| unsafe { rados_aio_read(self.io, name.as_ptr(), c, ptr, len, 0) });
        if r == -libc::ENOENT {
            return Err(Fatal::ceph(
                r,
                format!(
                    "nothing to read for prefix {} in pool {}: run a write with no cleanup first",
                    self.prefix, self.pool
                ),
            ));
        }
        self.sync("reading", r)?;
        serde_json::from_slice(&buf[..r as usize])
            .map_err(|e| Fatal::ceph(-libc::EINVAL, format!("{}.meta is not fathom metadata: {e}", self.prefix)))
    }

    /// One metadata op through aio, waited for at most `meta_timeout_s`: a
    /// plain synchronous call would block forever on a full or paused
    /// cluster. Returns the op's result, or -ETIMEDOUT; then the completion
    /// stays with the library (librados copies the name and written data at
    /// issue; a read buffer must be leaked by the caller).
    fn bounded(&self, issue: impl FnOnce(rados_completion_t) -> i32) -> i32 {
        let mut c: rados_completion_t = std::ptr::null_mut();
        // SAFETY: a completion without callback, released once when complete.
        unsafe {
            let r = rados_aio_create_completion2(std::ptr::null_mut(), None, &mut c);
            if r < 0 {
                return r;
            }
            let r = issue(c);
            if r < 0 {
                rados_aio_release(c);
                return r;
            }
            let deadline = crate::clock::mono_ns() + (self.meta_timeout_s * 1e9) as u64;
            let mut nap = 100u64;
            while rados_aio_is_complete(c) == 0 {
                if crate::clock::mono_ns() >= deadline {
                    return -libc::ETIMEDOUT;
                }
                std::thread::sleep(std::time::Duration::from_micros(nap));
                nap = (nap * 2).min(20_000);
            }
            let r = rados_aio_get_return_value(c);
            rados_aio_release(c);
            r
        }
    }

    fn sync(&self, what: &str, r: i32) -> Result<(), Fatal> {
        if r == -libc::ETIMEDOUT {
            return Err(Fatal::ceph(
                r,
                format!(
                    "{what} {}.meta in pool {} did not finish within {} s: is the cluster full or paused? \
                     (see `ceph health detail`)",
                    self.prefix, self.pool, self.meta_timeout_s
                ),
            ));
        }
        if r < 0 {
            return Err(Fatal::ceph(r, format!("{what} {}.meta failed: {}", self.prefix, crate::errno::describe(r))));
        }
        Ok(())
    }
}

impl Target for Rados {
    fn kinds(&self) -> Vec<OpKind> {
        vec![match self.op {
            RadosOp::Write => OpKind::Write,
            RadosOp::Read => OpKind::Read,
            RadosOp::Remove => OpKind::Remove,
        }]
    }

    fn buf_len(&self) -> usize {
        if self.op == RadosOp::Remove { 0 } else { self.object_size.max(self.op_size) as usize }
    }

    fn jobs(&self) -> u32 {
        1
    }

    fn begin_prefill(&mut self) -> bool {
        if self.op == RadosOp::Write && self.prefill && self.objects.is_some() {
            self.in_prefill = true;
            self.cursor = 0;
            true
        } else {
            false
        }
    }

    fn begin_main(&mut self) {
        self.in_prefill = false;
        self.cursor = 0;
    }

    fn next_op(&mut self, s: &mut Slot, rng: &mut Rng) -> bool {
        let (kind, obj, off, len) = if self.in_prefill {
            let n = self.cursor;
            if n >= self.objects.unwrap_or(0) {
                return false;
            }
            self.cursor += 1;
            (OpKind::Write, n, 0, self.object_size)
        } else {
            let kind = self.kinds()[0];
            let (obj, chunk) = match (self.pattern, self.objects) {
                (Pattern::Rand, Some(n)) => (rng.below(n), rng.below(self.chunks)),
                (_, objects) => {
                    let mut n = self.cursor;
                    if let Some(count) = objects {
                        let total = count * self.chunks;
                        if n >= total {
                            if !self.wrap {
                                return false;
                            }
                            n %= total;
                        }
                    }
                    self.cursor += 1;
                    (n / self.chunks, n % self.chunks)
                }
            };
            let len = if kind == OpKind::Remove { 0 } else { self.op_size };
            (kind, obj, chunk * self.op_size, len)
        };
        s.kind = kind;
        s.obj = obj;
        s.offset = off;
        s.len = len as usize;
        object_name(&mut s.name, self.prefix.as_bytes(), obj);
        true
    }

    fn submit(&mut self, s: &mut Slot) -> Result<(), ErrKind> {
        let mut c: rados_completion_t = std::ptr::null_mut();
        // SAFETY: the callback argument is the slot's &'static Done; name and
        // buffer live in the slot, which is never freed (see io.rs), and the
        // buffer is not touched again until the op completes: writes point at it.
        unsafe {
            let r = rados_aio_create_completion2(s.done.arg(), Some(on_complete), &mut c);
            if r < 0 {
                return Err(ErrKind::errno(r));
            }
            let oid = s.name.as_ptr() as *const c_char;
            let buf = s.buf.as_mut_ptr() as *mut c_char;
            let r = match s.kind {
                OpKind::Write => {
                    // With hints, rados bench's write: [set-alloc-hint, write at offset] in one op;
                    // `full` applies to plain writes only.
                    let (osz, opsz, flags) =
                        if self.alloc_hint { (self.object_size, self.op_size, HINT_FLAGS) } else { (0, 0, 0) };
                    let full = (!self.alloc_hint && s.len as u64 == self.object_size) as i32;
                    fathom_zc_aio_write(self.zc, oid, c, buf, s.len, s.offset, full, osz, opsz, flags)
                }
                OpKind::Read => {
                    let bl = self.read_bl(s.done.index as usize);
                    if bl.is_null() {
                        rados_aio_release(c);
                        return Err(ErrKind::Errno(libc::ENOMEM));
                    }
                    fathom_zc_aio_read(self.zc, oid, c, bl, s.len, s.offset)
                }
                _ => rados_aio_remove(self.io, oid, c),
            };
            if r < 0 {
                rados_aio_release(c);
                return Err(ErrKind::errno(r));
            }
        }
        s.handle = c;
        Ok(())
    }

    fn reap(&mut self, s: &mut Slot) -> Result<u64, ErrKind> {
        // SAFETY: the handle came from submit and completed; released once.
        let r = unsafe {
            let r = rados_aio_get_return_value(s.handle);
            rados_aio_release(s.handle);
            if s.kind == OpKind::Read {
                let bl = self.read_bls[s.done.index as usize];
                let want = self.copy_reads && r > 0;
                let buf = if want { s.buf.as_mut_ptr() as *mut c_char } else { std::ptr::null_mut() };
                fathom_zc_bl_take(bl, buf, s.buf.len());
            }
            r
        };
        s.handle = std::ptr::null_mut();
        match (s.kind, r) {
            (_, r) if r < 0 => Err(ErrKind::errno(r)),
            (OpKind::Read, n) => Ok(n as u64),
            _ => Ok(s.len as u64),
        }
    }

    fn on_success(&mut self, s: &Slot) {
        match s.kind {
            OpKind::Write => self.written = self.written.max(s.obj + 1),
            OpKind::Remove => self.removed += 1,
            _ => {}
        }
    }

    fn describe(&self, s: &Slot) -> String {
        let n = s.name.len().saturating_sub(1);
        String::from_utf8_lossy(&s.name[..n]).into_owned()
    }

    fn finish(&mut self) -> Result<Vec<(String, Value)>, Fatal> {
        let meta = meta_name(&self.prefix);
        match self.op {
            RadosOp::Write => {
                // A prefilled set is complete; otherwise up to the highest object written.
                let count = if self.prefill { self.objects.unwrap_or(self.written) } else { self.written };
                let m = json!({"fathom_meta": 1, "objects": count, "object_size": self.object_size,
                               "op_size": self.op_size, "prefix": self.prefix});
                let text = m.to_string();
                if count > 0 {
                    let (ptr, len) = (text.as_ptr() as *const c_char, text.len());
                    // SAFETY: valid ioctx, name and text; librados copies them at issue.
                    let r = self.bounded(|c| unsafe { rados_aio_write_full(self.io, meta.as_ptr(), c, ptr, len) });
                    self.sync("writing", r)?;
                }
                Ok(vec![(
                    "objects".into(),
                    json!({"prefix": self.prefix, "count": count, "object_size": self.object_size,
                           "op_size": self.op_size, "meta": format!("{}.meta", self.prefix)}),
                )])
            }
            RadosOp::Remove => {
                // SAFETY: valid ioctx and name, copied at issue.
                let r = self.bounded(|c| unsafe { rados_aio_remove(self.io, meta.as_ptr(), c) });
                if r != -libc::ENOENT {
                    self.sync("removing", r)?;
                }
                Ok(vec![("objects".into(), json!({"prefix": self.prefix, "removed": self.removed}))])
            }
            RadosOp::Read => Ok(vec![(
                "objects".into(),
                json!({"prefix": self.prefix, "count": self.objects, "object_size": self.object_size,
                       "op_size": self.op_size}),
            )]),
        }
    }

    fn close(&mut self) {
        // SAFETY: nothing is in flight when close is called.
        unsafe {
            fathom_zc_ioctx_release(self.zc);
            rados_ioctx_destroy(self.io)
        };
        self.session.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{CallbackSched, parse};
    use crate::targets::TargetSpec;

    fn spec(target: &str, rest: &str) -> Result<Spec, String> {
        parse(&format!(r#"{{"protocol":2,"target":{{"kind":"rados","pool":"p"{target}}}{rest}}}"#))
    }

    fn rados(s: &Spec) -> &RadosSpec {
        match &s.target {
            TargetSpec::Rados(r) => r,
            other => panic!("not rados: {other:?}"),
        }
    }

    const W: &str = r#","op":"write","object_size":4096"#;
    const D: &str = r#","load":{"duration_s":1}"#;

    #[test]
    fn minimal_write_gets_defaults() {
        let s = spec(W, D).unwrap();
        let r = rados(&s);
        assert_eq!(r.op_size, Some(4096));
        assert!(r.prefix.as_ref().unwrap().starts_with("fathom."));
        assert_eq!(r.pattern, Pattern::Seq);
        assert_eq!(r.connection, Connection::default());
        let s = spec(r#","op":"write","objects":2"#, "").unwrap();
        assert_eq!((rados(&s).object_size, rados(&s).op_size), (Some(4 << 20), Some(4 << 20)));
        assert_eq!(s.callback_sched, CallbackSched::Batch);
    }

    #[test]
    fn rules_name_the_field() {
        for (target, rest, field) in [
            (r#","op":"write","object_size":4096,"op_size":3000"#, D, "op_size"),
            (r#","op":"write","object_size":4096,"op_size":8192"#, D, "op_size"),
            (r#","op":"write","object_size":0"#, D, "object_size"),
            (r#","op":"write","object_size":100663296"#, D, "90 MiB"),
            (r#","op":"write","pattern":"rand""#, D, "objects"),
            (r#","op":"write","objects":0"#, D, "objects"),
            (r#","op":"write""#, "", "end"),
            (r#","op":"write","prefix":"a/b""#, D, "prefix"),
            (r#","op":"write","prefix":"""#, D, "prefix"),
            (r#","op":"write","once":true"#, D, "once"),
            (r#","op":"read""#, D, "prefix"),
            (r#","op":"remove""#, D, "prefix"),
            (r#","op":"read","prefix":"x","prefill":true"#, D, "prefill"),
            (r#","op":"read","prefix":"x","alloc_hint":true"#, D, "alloc_hint"),
            (r#","op":"read","prefix":"x","once":true,"pattern":"rand""#, D, "once"),
            (r#","op":"remove","prefix":"x","once":true"#, D, "once"),
            (r#","op":"remove","prefix":"x","pattern":"rand""#, D, "sequential"),
            (r#","op":"read","prefix":"x","object_size":4096,"op_size":3000"#, D, "op_size"),
            (r#","op":"append""#, D, "append"),
            (r#","op":"write","images":["a"]"#, D, "images"),
            (r#","op":"write","connection":{"id":"a","name":"client.a"}"#, D, "not both"),
        ] {
            let e = spec(target, rest).unwrap_err();
            assert!(e.contains(field), "{target}: {e}");
        }
        let e = spec(r#","op":"remove","prefix":"x""#, r#","verify":true"#).unwrap_err();
        assert!(e.contains("verify"), "{e}");
        let e =
            spec(r#","op":"write","object_size":4096,"op_size":32"#, r#","verify":true,"load":{"ops":1}"#).unwrap_err();
        assert!(e.contains("op_size >= 64"), "{e}");
        let e = parse(r#"{"target":{"kind":"rados","pool":"","op":"write","objects":1}}"#).unwrap_err();
        assert!(e.contains("pool"), "{e}");
        let e = parse(r#"{"target":{"kind":"rados","op":"write","objects":1}}"#).unwrap_err();
        assert!(e.contains("pool"), "{e}");
    }

    #[test]
    fn once_and_alloc_hint_belong_to_their_ops() {
        let s = spec(r#","op":"read","prefix":"x","once":true"#, D).unwrap();
        assert!(rados(&s).once);
        let s = spec(r#","op":"write","object_size":4096,"alloc_hint":true"#, D).unwrap();
        assert!(rados(&s).alloc_hint);
        // Reads take sizes from the metadata object: nothing filled in.
        let s = spec(r#","op":"read","prefix":"x""#, D).unwrap();
        assert_eq!((rados(&s).object_size, rados(&s).op_size), (None, None));
    }

    #[test]
    fn normalized_spec_roundtrips() {
        let s = spec(W, D).unwrap();
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(parse(&text).unwrap(), s);
    }
}
