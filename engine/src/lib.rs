//! The engine's parts that link nothing of Ceph, shared by the crate's two
//! binaries: `fathom-engine` (src/main.rs, the load generator: librados,
//! librbd, libstdc++) and `fathom-sampler` (src/bin/fathom-sampler.rs, the
//! host sampler alone, uploaded to cluster hosts where Ceph may run only in
//! containers). A module here may use nothing of main.rs's modules (out,
//! process, ffi, targets...): tests/test_hostsample.py checks with ldd that
//! fathom-sampler needs no Ceph library.
//!
//! build.rs's link directives reach both binaries; the linker's --as-needed
//! (rustc's default on Linux) keeps a library the sampler calls nothing of
//! out of its dynamic dependencies.

pub mod clock;
pub mod sample;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
