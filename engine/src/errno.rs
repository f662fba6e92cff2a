//! Errno numbers to names ("ENOENT"), the error kinds of the protocol.

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
}
