//! RBD images through librbd aio. `numjobs` streams per image, `iodepth`
//! slots per stream. Each job owns an equal, block-aligned region of its
//! image (like fio's offset_increment = size/numjobs): sequential jobs walk
//! their region and wrap, random jobs pick aligned offsets inside it.

use super::block::{self, Job, Rw};
use super::{Fatal, Target};
use crate::ceph::{Connection, Session};
use crate::errno::ErrKind;
use crate::ffi::*;
use crate::io::{OpKind, Slot};
use crate::rng::Rng;
use crate::spec::{Load, Spec};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::ffi::{CString, c_char, c_void};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RbdSpec {
    #[serde(default)]
    pub connection: Connection,
    pub pool: String,
    pub rw: Rw,
    /// Percentage of reads for rw/randrw.
    #[serde(default = "block::fifty")]
    pub rwmixread: u32,
    #[serde(default = "block::four_k")]
    pub bs: u64,
    pub images: Vec<String>,
    /// Jobs per image.
    #[serde(default = "block::one_u32")]
    pub numjobs: u32,
    /// Bytes of each image to use (from offset 0); null: the whole image.
    #[serde(default)]
    pub size: Option<u64>,
}

impl RbdSpec {
    pub fn validate(&mut self, load: &Load, _verify: bool) -> Result<(), String> {
        self.connection.validate("target.connection")?;
        if self.pool.is_empty() {
            return Err("target.pool must not be empty".into());
        }
        if self.images.is_empty() || self.images.iter().any(|i| i.is_empty()) {
            return Err("target.images must list at least one image name".into());
        }
        if self.bs == 0 || !self.bs.is_multiple_of(512) || self.bs > (64 << 20) {
            return Err(format!("target.bs must be a multiple of 512 up to 64 MiB, got {}", self.bs));
        }
        block::validate(self.rwmixread, self.numjobs)?;
        if let Some(sz) = self.size
            && sz < self.bs * self.numjobs as u64
        {
            return Err(format!("target.size ({sz}) must hold at least one block per job"));
        }
        if !load.bounded() {
            return Err("an rbd run needs an end: load.duration_s, load.ops or load.bytes".into());
        }
        Ok(())
    }
}

struct Image {
    name: String,
    h: rbd_image_t,
}

pub struct Rbd {
    session: Session,
    io: rados_ioctx_t,
    images: Vec<Image>,
    jobs: Vec<Job>,
    bs: u64,
    rw: Rw,
    mix: u32,
}

unsafe extern "C" fn on_complete(_c: rbd_completion_t, arg: *mut c_void) {
    // SAFETY: arg is the &'static Done of the slot that issued the op.
    unsafe { (*(arg as *const crate::io::Done)).complete() }
}

impl Rbd {
    pub fn open(r: &RbdSpec, spec: &Spec) -> Result<Self, Fatal> {
        let slots = r.images.len() as u64 * r.numjobs as u64 * spec.load.iodepth as u64;
        let pool = r.pool.as_str();
        let session = Session::connect(&r.connection, (slots, slots.saturating_mul(r.bs)), &format!("pool {pool:?}"))?;
        let io = session.ioctx(pool)?;
        let mut t = Rbd { session, io, images: Vec::new(), jobs: Vec::new(), bs: r.bs, rw: r.rw, mix: r.rwmixread };
        for (i, name) in r.images.iter().enumerate() {
            let cname = CString::new(name.as_str()).map_err(|_| Fatal::spec("image name contains NUL"))?;
            let mut h: rbd_image_t = std::ptr::null_mut();
            // SAFETY: valid ioctx, name, out-pointer; no snapshot.
            let rc = unsafe { rbd_open(io, cname.as_ptr(), &mut h, std::ptr::null()) };
            if rc < 0 {
                let msg = if rc == -libc::ENOENT {
                    format!("rbd image {name:?} does not exist in pool {pool:?}")
                } else {
                    format!("cannot open rbd image {pool}/{name}: {}", crate::errno::describe(rc))
                };
                return Err(Fatal::ceph(rc, msg));
            }
            t.images.push(Image { name: name.clone(), h });
            let mut size = 0u64;
            // SAFETY: open image.
            unsafe { rbd_get_size(h, &mut size) };
            let usable = r.size.map_or(size, |s| s.min(size));
            let per_job = usable / r.numjobs as u64 / r.bs;
            if per_job == 0 {
                return Err(Fatal::spec(format!(
                    "rbd image {name:?} ({usable} bytes used) is too small for {} jobs of {}-byte blocks",
                    r.numjobs, r.bs
                )));
            }
            for j in 0..r.numjobs as u64 {
                t.jobs.push(Job::new(i as u64, j * per_job * r.bs, per_job));
            }
        }
        t.session.opened();
        Ok(t)
    }
}

impl Target for Rbd {
    fn kinds(&self) -> Vec<OpKind> {
        self.rw.kinds()
    }

    fn buf_len(&self) -> usize {
        self.bs as usize
    }

    fn jobs(&self) -> u32 {
        self.jobs.len() as u32
    }

    fn next_op(&mut self, s: &mut Slot, rng: &mut Rng) -> bool {
        let last = self.jobs.len() - 1;
        let j = &mut self.jobs[(s.job as usize).min(last)];
        let (kind, offset) = j.next(self.rw, self.mix, self.bs, rng);
        s.kind = kind;
        s.obj = j.obj;
        s.offset = offset;
        s.len = self.bs as usize;
        true
    }

    fn submit(&mut self, s: &mut Slot) -> Result<(), ErrKind> {
        let img = self.images[s.obj as usize].h;
        let mut c: rbd_completion_t = std::ptr::null_mut();
        // SAFETY: the callback argument is the slot's &'static Done; the
        // buffer lives in the slot, which is never freed (see io.rs).
        unsafe {
            let r = rbd_aio_create_completion(s.done.arg(), Some(on_complete), &mut c);
            if r < 0 {
                return Err(ErrKind::errno(r));
            }
            let buf = s.buf.as_mut_ptr() as *mut c_char;
            let r = match s.kind {
                OpKind::Write => rbd_aio_write(img, s.offset, s.len, buf, c),
                _ => rbd_aio_read(img, s.offset, s.len, buf, c),
            };
            if r < 0 {
                rbd_aio_release(c);
                return Err(ErrKind::errno(r));
            }
        }
        s.handle = c;
        Ok(())
    }

    fn reap(&mut self, s: &mut Slot) -> Result<u64, ErrKind> {
        // SAFETY: completed handle from submit, released once.
        let r = unsafe {
            let r = rbd_aio_get_return_value(s.handle);
            rbd_aio_release(s.handle);
            r
        };
        s.handle = std::ptr::null_mut();
        if r < 0 { Err(ErrKind::errno(r as i32)) } else { Ok(s.len as u64) }
    }

    fn describe(&self, s: &Slot) -> String {
        self.images.get(s.obj as usize).map_or_else(String::new, |i| i.name.clone())
    }

    fn finish(&mut self) -> Result<Vec<(String, Value)>, Fatal> {
        let images: Vec<Value> = self.images.iter().map(|i| json!(i.name)).collect();
        Ok(vec![("images".into(), Value::Array(images))])
    }

    fn close(&mut self) {
        for i in &self.images {
            // SAFETY: nothing in flight; each image closed once.
            unsafe { rbd_close(i.h) };
        }
        // SAFETY: images closed first.
        unsafe { rados_ioctx_destroy(self.io) };
        self.session.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use crate::spec::parse;

    fn rbd(target: &str, load: &str) -> Result<crate::spec::Spec, String> {
        parse(&format!(r#"{{"target":{{"kind":"rbd","pool":"p","rw":"randwrite"{target}}},"load":{load}}}"#))
    }

    #[test]
    fn defaults_and_echo() {
        let s = rbd(r#","images":["a"]"#, r#"{"duration_s":1}"#).unwrap();
        let t = serde_json::to_value(&s.target).unwrap();
        assert_eq!(t["kind"], "rbd");
        assert_eq!((t["bs"].as_u64(), t["numjobs"].as_u64(), t["rwmixread"].as_u64()), (Some(4096), Some(1), Some(50)));
        assert_eq!(t["connection"]["timeout_s"], 10.0);
        assert_eq!(t["connection"]["engine_defaults"], true);
    }

    #[test]
    fn rules() {
        let d = r#"{"duration_s":1}"#;
        for (target, load, field) in [
            (r#","images":[]"#, d, "images"),
            (r#","images":[""]"#, d, "images"),
            (r#","images":["a"],"bs":1000"#, d, "bs"),
            (r#","images":["a"],"bs":0"#, d, "bs"),
            (r#","images":["a"],"bs":134217728"#, d, "bs"),
            (r#","images":["a"],"rwmixread":101"#, d, "rwmixread"),
            (r#","images":["a"],"numjobs":0"#, d, "numjobs"),
            (r#","images":["a"],"numjobs":2,"size":4096"#, d, "size"),
            (r#","images":["a"]"#, "{}", "end"),
            (r#","images":["a"],"connection":{"name":"admin"}"#, d, "connection.name"),
            (r#","images":["a"],"object_size":4096"#, d, "object_size"),
        ] {
            let e = rbd(target, load).unwrap_err();
            assert!(e.contains(field), "{target}: {e}");
        }
        let e =
            parse(r#"{"target":{"kind":"rbd","pool":"","rw":"read","images":["a"]},"load":{"ops":1}}"#).unwrap_err();
        assert!(e.contains("pool"), "{e}");
        let e = parse(r#"{"target":{"kind":"rbd","rw":"read","images":["a"]},"load":{"ops":1}}"#).unwrap_err();
        assert!(e.contains("pool"), "{e}");
        assert!(rbd(r#","images":["a"],"numjobs":2,"size":8192"#, r#"{"ops":1}"#).is_ok());
    }
}
