//! RBD images through librbd aio. `numjobs` streams per image, `iodepth`
//! slots per stream. Each job owns an equal, block-aligned region of its
//! image (like fio's offset_increment = size/numjobs): sequential jobs walk
//! their region and wrap, random jobs pick aligned offsets inside it.

use super::{Fatal, Target};
use crate::ceph::Cluster;
use crate::ffi::*;
use crate::io::{OpKind, Slot};
use crate::rng::Rng;
use crate::spec::{RbdSpec, Rw};
use serde_json::{Value, json};
use std::ffi::{CString, c_char, c_void};

struct Image {
    name: String,
    h: rbd_image_t,
}

struct Job {
    image: usize,
    start: u64,
    blocks: u64,
    cursor: u64,
}

pub struct Rbd {
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
    pub fn open(cl: &Cluster, pool: &str, r: &RbdSpec) -> Result<Self, Fatal> {
        let io = crate::ceph::ioctx(cl, pool)?;
        let mut t = Rbd { io, images: Vec::new(), jobs: Vec::new(), bs: r.bs, rw: r.rw, mix: r.rwmixread };
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
                t.jobs.push(Job { image: i, start: j * per_job * r.bs, blocks: per_job, cursor: 0 });
            }
        }
        Ok(t)
    }
}

impl Target for Rbd {
    fn kinds(&self) -> Vec<OpKind> {
        match self.rw {
            Rw::Read | Rw::Randread => vec![OpKind::Read],
            Rw::Write | Rw::Randwrite => vec![OpKind::Write],
            Rw::Rw | Rw::Randrw => vec![OpKind::Read, OpKind::Write],
        }
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
        let block = if self.rw.random() {
            rng.below(j.blocks)
        } else {
            let b = j.cursor;
            j.cursor = (j.cursor + 1) % j.blocks;
            b
        };
        s.kind = match self.rw {
            Rw::Read | Rw::Randread => OpKind::Read,
            Rw::Write | Rw::Randwrite => OpKind::Write,
            Rw::Rw | Rw::Randrw => {
                if (rng.below(100) as u32) < self.mix {
                    OpKind::Read
                } else {
                    OpKind::Write
                }
            }
        };
        s.obj = j.image as u64;
        s.offset = j.start + block * self.bs;
        s.len = self.bs as usize;
        true
    }

    fn submit(&mut self, s: &mut Slot) -> Result<(), i32> {
        let img = self.images[s.obj as usize].h;
        let mut c: rbd_completion_t = std::ptr::null_mut();
        // SAFETY: the callback argument is the slot's &'static Done; the
        // buffer lives in the slot, which is never freed (see io.rs).
        unsafe {
            let r = rbd_aio_create_completion(s.done.arg(), Some(on_complete), &mut c);
            if r < 0 {
                return Err(r);
            }
            let buf = s.buf.as_mut_ptr() as *mut c_char;
            let r = match s.kind {
                OpKind::Write => rbd_aio_write(img, s.offset, s.len, buf, c),
                _ => rbd_aio_read(img, s.offset, s.len, buf, c),
            };
            if r < 0 {
                rbd_aio_release(c);
                return Err(r);
            }
        }
        s.handle = c;
        Ok(())
    }

    fn reap(&mut self, s: &mut Slot) -> i64 {
        // SAFETY: completed handle from submit, released once.
        let r = unsafe {
            let r = rbd_aio_get_return_value(s.handle);
            rbd_aio_release(s.handle);
            r
        };
        s.handle = std::ptr::null_mut();
        if r < 0 { r as i64 } else { s.len as i64 }
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
    }
}
