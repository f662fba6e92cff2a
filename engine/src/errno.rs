//! Op error kinds: an errno, an HTTP status with its S3 error code, a TLS
//! failure, or the engine's own op timeout. `name()` is the key of the
//! summary's `errors` entries and the `kind` of error records.

/// Why one op failed. Each kind keeps its own count and latency histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrKind {
    /// A positive errno (ENOENT = 2); the sign of a library's -errno is dropped.
    Errno(i32),
    /// An HTTP status and the service's error code ("SlowDown").
    Http { status: u16, code: String },
    /// A TLS failure, named by what failed ("handshake").
    Tls(String),
    /// No completion within op_timeout_s (reported as ETIMEDOUT, as in protocol 1).
    Timeout,
}

impl ErrKind {
    /// From a library return value (-errno or errno).
    pub fn errno(r: i32) -> Self {
        ErrKind::Errno(r.abs())
    }

    pub fn name(&self) -> String {
        match self {
            ErrKind::Errno(e) => name(*e),
            ErrKind::Http { status, code } if code.is_empty() => format!("HTTP {status}"),
            ErrKind::Http { status, code } => format!("HTTP {status} {code}"),
            ErrKind::Tls(what) => format!("TLS {what}"),
            ErrKind::Timeout => "ETIMEDOUT".into(),
        }
    }

    /// A few words for a sentence ("No such file or directory").
    pub fn describe(&self) -> String {
        match self {
            ErrKind::Errno(e) => describe(*e),
            ErrKind::Http { status, .. } => format!("HTTP status {status}"),
            ErrKind::Tls(what) => format!("TLS failure: {what}"),
            ErrKind::Timeout => "no completion within op_timeout_s".into(),
        }
    }
}

pub fn name(errno: i32) -> String {
    let n = match errno.abs() {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::EROFS => "EROFS",
        libc::ERANGE => "ERANGE",
        libc::EDEADLK => "EDEADLK",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOTSUP => "EOPNOTSUPP",
        libc::ENOTCONN => "ENOTCONN",
        libc::ESHUTDOWN => "ESHUTDOWN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::EPIPE => "EPIPE",
        libc::EPROTO => "EPROTO",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECANCELED => "ECANCELED",
        libc::EDQUOT => "EDQUOT",
        libc::ENODATA => "ENODATA",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EILSEQ => "EILSEQ",
        libc::EALREADY => "EALREADY",
        libc::EINPROGRESS => "EINPROGRESS",
        libc::ESTALE => "ESTALE",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::EDOM => "EDOM",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        _ => return format!("E{}", errno.abs()),
    };
    n.to_string()
}

/// Human text for an errno, from the C library.
pub fn describe(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno.abs()).to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert_eq!(super::name(-2), "ENOENT");
        assert_eq!(super::name(110), "ETIMEDOUT");
        assert_eq!(super::name(-9999), "E9999");
    }

    #[test]
    fn kinds_have_one_name_each() {
        use super::ErrKind;
        assert_eq!(ErrKind::errno(-2).name(), "ENOENT");
        assert_eq!(ErrKind::errno(-2), ErrKind::Errno(2));
        assert_eq!(ErrKind::Timeout.name(), "ETIMEDOUT");
        assert_eq!(ErrKind::Http { status: 503, code: "SlowDown".into() }.name(), "HTTP 503 SlowDown");
        assert_eq!(ErrKind::Http { status: 500, code: String::new() }.name(), "HTTP 500");
        assert_eq!(ErrKind::Tls("handshake".into()).name(), "TLS handshake");
        assert!(ErrKind::errno(-2).describe().contains("No such file"));
    }
}
