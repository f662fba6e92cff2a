//! PUT bodies sent with sendfile(2) over plain TCP. Without verify every PUT
//! sends from one shared buffer; that buffer is a memfd mapped into memory,
//! so any body bytes hyper hands to the socket are also a range of a file,
//! and the kernel sends them from its own pages instead of copying them in
//! from user memory. On loopback that copy was over half of a 4 MiB PUT's
//! client CPU. TLS encrypts in user space, so its connections write as usual.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, ready};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

struct Mapped {
    base: usize,
    len: usize,
    fd: RawFd,
}

static BODY: OnceLock<Mapped> = OnceLock::new();

/// The shared body: `len` bytes for the process's life, backed by a memfd
/// and filled by `fill`. None when memfds are not available (the caller
/// then uses plain memory, and writes).
pub fn body(len: usize, fill: impl FnOnce(&mut [u8])) -> Option<&'static [u8]> {
    if len == 0 || BODY.get().is_some() {
        return None;
    }
    // SAFETY: plain system calls on a new descriptor; the mapping is never unmapped, so the
    // slice lives for the process.
    unsafe {
        let fd = libc::memfd_create(c"fathom-s3-body".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let p = (libc::ftruncate(fd, len as libc::off_t) == 0)
            .then(|| {
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
            })
            .filter(|&p| p != libc::MAP_FAILED);
        let Some(p) = p else {
            libc::close(fd);
            return None;
        };
        let buf = std::slice::from_raw_parts_mut(p as *mut u8, len);
        fill(buf);
        let _ = BODY.set(Mapped { base: p as usize, len, fd });
        Some(buf)
    }
}

/// Where a slice lies in the shared body's file, if it does.
fn in_body(s: &[u8]) -> Option<(RawFd, libc::off_t)> {
    let m = BODY.get()?;
    let p = s.as_ptr() as usize;
    (p >= m.base && p + s.len() <= m.base + m.len).then(|| (m.fd, (p - m.base) as libc::off_t))
}

/// A plain TCP connection whose writes of shared-body bytes go out by sendfile.
pub struct Stream(pub TcpStream);

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        let tcp = &mut self.get_mut().0;
        let Some(i) = bufs.iter().position(|b| !b.is_empty()) else { return Poll::Ready(Ok(0)) };
        if let Some((file, off)) = in_body(&bufs[i]) {
            let (sock, len) = (tcp.as_raw_fd(), bufs[i].len());
            loop {
                ready!(tcp.poll_write_ready(cx))?;
                let sent = tcp.try_io(Interest::WRITABLE, || {
                    let mut off = off;
                    // SAFETY: valid descriptors; the kernel reads the file range, the offset is ours.
                    let n = unsafe { libc::sendfile(sock, file, &mut off, len) };
                    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
                });
                match sent {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    r => return Poll::Ready(r),
                }
            }
        }
        // What comes before the next body slice (the request head) goes out in one writev.
        let end = bufs[i..].iter().position(|b| in_body(b).is_some()).map_or(bufs.len(), |k| i + k);
        Pin::new(tcp).poll_write_vectored(cx, &bufs[i..end])
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_slices_inside_the_body_are_file_ranges() {
        let b = body(8192, |b| b.iter_mut().enumerate().for_each(|(i, x)| *x = i as u8)).expect("a memfd body");
        assert_eq!(b[300], 44);
        let (fd, off) = in_body(&b[4096..8192]).unwrap();
        assert!(fd >= 0 && off == 4096);
        assert!(in_body(&[0u8; 16]).is_none());
        // the file holds what the mapping holds
        let mut got = [0u8; 4];
        // SAFETY: a valid descriptor and buffer.
        assert_eq!(unsafe { libc::pread(fd, got.as_mut_ptr().cast(), 4, 300) }, 4);
        assert_eq!(got, [44, 45, 46, 47]);
    }
}
