//! Hand-written declarations of the librados and librbd C APIs, Pacific (16.2)
//! symbols only, so the binary runs against any librados.so.2 >= 16.2.
//! Signatures follow rados/librados.h and rbd/librbd.h of 16.2.15. The
//! zero-copy writes and reads (`fathom_zc_*`) are the engine's own C++
//! (cxx/rados_zc.cc).
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

pub type rados_t = *mut c_void;
pub type rados_ioctx_t = *mut c_void;
pub type rados_completion_t = *mut c_void;
pub type rados_callback_t = Option<unsafe extern "C" fn(cb: rados_completion_t, arg: *mut c_void)>;
pub type rbd_image_t = *mut c_void;
pub type rbd_completion_t = *mut c_void;
pub type rbd_callback_t = Option<unsafe extern "C" fn(cb: rbd_completion_t, arg: *mut c_void)>;

unsafe extern "C" {
    pub fn rados_create2(pcluster: *mut rados_t, clustername: *const c_char, name: *const c_char, flags: u64) -> c_int;
    pub fn rados_conf_read_file(cluster: rados_t, path: *const c_char) -> c_int;
    pub fn rados_conf_set(cluster: rados_t, option: *const c_char, value: *const c_char) -> c_int;
    pub fn rados_connect(cluster: rados_t) -> c_int;
    pub fn rados_shutdown(cluster: rados_t);
    pub fn rados_ioctx_create(cluster: rados_t, pool_name: *const c_char, ioctx: *mut rados_ioctx_t) -> c_int;
    pub fn rados_ioctx_destroy(io: rados_ioctx_t);

    pub fn rados_aio_create_completion2(
        cb_arg: *mut c_void,
        cb_complete: rados_callback_t,
        pc: *mut rados_completion_t,
    ) -> c_int;
    pub fn rados_aio_write_full(
        io: rados_ioctx_t,
        oid: *const c_char,
        completion: rados_completion_t,
        buf: *const c_char,
        len: usize,
    ) -> c_int;
    pub fn rados_aio_read(
        io: rados_ioctx_t,
        oid: *const c_char,
        completion: rados_completion_t,
        buf: *mut c_char,
        len: usize,
        off: u64,
    ) -> c_int;
    pub fn rados_aio_remove(io: rados_ioctx_t, oid: *const c_char, completion: rados_completion_t) -> c_int;
    pub fn rados_aio_get_return_value(c: rados_completion_t) -> c_int;
    pub fn rados_aio_is_complete(c: rados_completion_t) -> c_int;
    pub fn rados_aio_release(c: rados_completion_t);

    pub fn rbd_open(io: rados_ioctx_t, name: *const c_char, image: *mut rbd_image_t, snap_name: *const c_char)
    -> c_int;
    pub fn rbd_close(image: rbd_image_t) -> c_int;
    pub fn rbd_get_size(image: rbd_image_t, size: *mut u64) -> c_int;
    pub fn rbd_aio_create_completion(
        cb_arg: *mut c_void,
        complete_cb: rbd_callback_t,
        c: *mut rbd_completion_t,
    ) -> c_int;
    pub fn rbd_aio_write(image: rbd_image_t, off: u64, len: usize, buf: *const c_char, c: rbd_completion_t) -> c_int;
    pub fn rbd_aio_read(image: rbd_image_t, off: u64, len: usize, buf: *mut c_char, c: rbd_completion_t) -> c_int;
    pub fn rbd_aio_get_return_value(c: rbd_completion_t) -> isize;
    pub fn rbd_aio_release(c: rbd_completion_t);
}

unsafe extern "C" {
    pub fn rados_conf_get(cluster: rados_t, option: *const c_char, buf: *mut c_char, len: usize) -> c_int;
}

// cxx/rados_zc.cc: writes that point at the slot's buffer instead of copying
// it, reads that keep the messenger's buffers instead of copying them out.
unsafe extern "C" {
    pub fn fathom_zc_ioctx(io: rados_ioctx_t) -> *mut c_void;
    pub fn fathom_zc_ioctx_release(ctx: *mut c_void);
    #[allow(clippy::too_many_arguments)]
    pub fn fathom_zc_aio_write(
        ctx: *mut c_void,
        oid: *const c_char,
        completion: rados_completion_t,
        buf: *mut c_char,
        len: usize,
        off: u64,
        full: c_int,
        hint_object_size: u64,
        hint_op_size: u64,
        hint_flags: u32,
    ) -> c_int;
    pub fn fathom_zc_bl_new() -> *mut c_void;
    pub fn fathom_zc_aio_read(
        ctx: *mut c_void,
        oid: *const c_char,
        completion: rados_completion_t,
        bl: *mut c_void,
        len: usize,
        off: u64,
    ) -> c_int;
    pub fn fathom_zc_bl_take(bl: *mut c_void, buf: *mut c_char, len: usize);
}
