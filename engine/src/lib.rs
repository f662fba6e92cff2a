//! The engine's parts that link nothing of Ceph, shared by the crate's two
//! binaries: `fathom-engine` (src/main.rs, the load generator: librados,
//! librbd, libstdc++) and `fathom-sampler` (src/bin/fathom-sampler.rs, the
//! host sampler alone, uploaded to cluster hosts where Ceph may run only in
//! containers). A module here may use nothing of main.rs's modules (out,
//! process, ffi, targets...) nor any crate but serde_json and libc: make
//! builds the sampler without the `engine` feature (so without the load
//! generator's crates and build.rs's C++ and Ceph linking), statically
//! against musl, and tests/test_hostsample.py checks from its ELF headers
//! that it needs no interpreter and no library, then runs it in a chroot
//! holding nothing but itself and /proc.

pub mod clock;
pub mod sample;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
