// Zero-copy rados writes and reads for fathom-engine.
//
// librados' C API copies every write payload into a new buffer
// (rados_aio_write, rados_write_op_write: bl.append(buf, len)), and every
// read reply into the caller's buffer. At rados bench's default 4 MiB op
// size those copies are the largest client cost after the messenger's own.
// The C++ API takes bufferlists: a write's can point at the caller's memory,
// a read's receives the messenger's buffers as they are, as in rados bench.
// These few functions are the only C++ in the engine; everything else stays
// on the C API. The completion is the C API's rados_completion_t (the same
// object as AioCompletion::pc), so its callback, return value and release
// stay on the C side.
#include <algorithm>
#include <cerrno>
#include <new>
#include <rados/librados.h>
#include <rados/librados.hpp>

namespace {

// Wraps the C completion without owning it: ~AioCompletion would release it,
// so the wrapper lives in caller-provided storage that is never destroyed.
using CompletionStorage = unsigned char[sizeof(librados::AioCompletion)];
librados::AioCompletion *wrap(void *storage, rados_completion_t c) {
  return new (storage) librados::AioCompletion(static_cast<librados::AioCompletionImpl *>(c));
}

}  // namespace

extern "C" {

// A C++ view of a C ioctx, kept for the life of the target.
void *fathom_zc_ioctx(rados_ioctx_t io) {
  auto *ctx = new (std::nothrow) librados::IoCtx;
  if (ctx) librados::IoCtx::from_rados_ioctx_t(io, *ctx);
  return ctx;
}

void fathom_zc_ioctx_release(void *ctx) { delete static_cast<librados::IoCtx *>(ctx); }

// Write `len` bytes at `buf` to `oid` at `off` (the whole object when `full`),
// or, when `hint_flags` is non-zero, rados bench's write: one op of an
// allocation hint and a write at `off`. `buf` must stay unchanged until the
// completion fires: the request points at it instead of copying it.
int fathom_zc_aio_write(void *ctx, const char *oid, rados_completion_t c, char *buf, size_t len, uint64_t off,
                        int full, uint64_t hint_object_size, uint64_t hint_op_size, uint32_t hint_flags) {
  auto *io = static_cast<librados::IoCtx *>(ctx);
  alignas(librados::AioCompletion) CompletionStorage storage;
  auto *comp = wrap(storage, c);
  try {
    librados::bufferlist bl = librados::bufferlist::static_from_mem(buf, len);
    const std::string name(oid);
    if (hint_flags == 0) return full ? io->aio_write_full(name, comp, bl) : io->aio_write(name, comp, bl, len, off);
    librados::ObjectWriteOperation op;
    op.set_alloc_hint2(hint_object_size, hint_op_size, hint_flags);
    op.write(off, bl);
    return io->aio_operate(name, comp, &op);
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  }
}

// A bufferlist for one slot's reads, kept for the life of the target.
void *fathom_zc_bl_new() { return new (std::nothrow) librados::bufferlist; }

// Read up to `len` bytes of `oid` at `off` into `bl` (emptied first); the
// messenger's buffers are handed over, not copied.
int fathom_zc_aio_read(void *ctx, const char *oid, rados_completion_t c, void *bl, size_t len, uint64_t off) {
  auto *io = static_cast<librados::IoCtx *>(ctx);
  auto *b = static_cast<librados::bufferlist *>(bl);
  alignas(librados::AioCompletion) CompletionStorage storage;
  auto *comp = wrap(storage, c);
  try {
    b->clear();
    return io->aio_read(std::string(oid), comp, b, len, off);
  } catch (const std::bad_alloc &) {
    return -ENOMEM;
  }
}

// After a read completed: copy up to `len` bytes of it to `buf` (when not
// null: only verification needs the data), then let the buffers go.
void fathom_zc_bl_take(void *bl, char *buf, size_t len) {
  auto *b = static_cast<librados::bufferlist *>(bl);
  if (buf) b->begin().copy(std::min<size_t>(len, b->length()), buf);
  b->clear();
}

}  // extern "C"
