// Zero-copy rados writes for fathom-engine.
//
// librados' C API copies every write payload into a new buffer
// (rados_aio_write, rados_write_op_write: bl.append(buf, len)). At rados
// bench's default 4 MiB op size that copy is the largest client cost after
// the messenger's own. The C++ API takes a bufferlist, which can point at
// the caller's memory, as rados bench does. These few functions are the only
// C++ in the engine; everything else stays on the C API. The completion is
// the C API's rados_completion_t (same object as AioCompletion::pc), so its
// callback, return value and release stay on the C side.
#include <cerrno>
#include <new>
#include <rados/librados.h>
#include <rados/librados.hpp>

extern "C" {

// A C++ view of a C ioctx, kept for the life of the target.
void *fathom_zc_ioctx(rados_ioctx_t io) {
  auto *ctx = new (std::nothrow) librados::IoCtx;
  if (ctx) librados::IoCtx::from_rados_ioctx_t(io, *ctx);
  return ctx;
}

void fathom_zc_ioctx_release(void *ctx) { delete static_cast<librados::IoCtx *>(ctx); }

// Write `len` bytes at `buf` to `oid` at `off` (or the whole object when
// `full`), with rados bench's allocation hint when `hint_flags` is non-zero.
// `buf` must stay unchanged until the completion fires: the request points
// at it instead of copying it.
int fathom_zc_aio_write(void *ctx, const char *oid, rados_completion_t c, char *buf, size_t len, uint64_t off,
                        int full, uint64_t hint_object_size, uint64_t hint_op_size, uint32_t hint_flags) {
  auto *io = static_cast<librados::IoCtx *>(ctx);
  // Wraps the C completion without owning it: ~AioCompletion would release
  // it, so the wrapper lives in storage that is never destroyed.
  alignas(librados::AioCompletion) unsigned char storage[sizeof(librados::AioCompletion)];
  auto *comp = new (storage) librados::AioCompletion(static_cast<librados::AioCompletionImpl *>(c));
  try {
    librados::bufferlist bl = librados::bufferlist::static_from_mem(buf, len);
    const std::string name(oid);
    if (hint_flags == 0) return full ? io->aio_write_full(name, comp, bl) : io->aio_write(name, comp, bl, len, off);
    librados::ObjectWriteOperation op;
    op.set_alloc_hint2(hint_object_size, hint_op_size, hint_flags);
    if (full)
      op.write_full(bl);
    else
      op.write(off, bl);
    return io->aio_operate(name, comp, &op);
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  }
}

}  // extern "C"
