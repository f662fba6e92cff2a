// Link librados/librbd by soname, so the build needs the runtime packages
// (librados2, librbd1) and, for the one C++ file, only libradospp-dev's headers.
// Without the `engine` feature (the sampler alone, linked statically against
// musl) there is nothing to compile or link: the sampler calls no Ceph.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "cxx/rados_zc.cc";
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CXX");
    if std::env::var_os("CARGO_FEATURE_ENGINE").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("rados_zc.o");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let status = Command::new(&cxx)
        .args(["-O2", "-g", "-fPIC", "-std=c++17", "-Wall", "-Wextra", "-c", src, "-o"])
        .arg(&obj)
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C++ compiler `{cxx}` ({e}): install g++ (make install does)"));
    if !status.success() {
        panic!(
            "compiling {src} failed: it needs <rados/librados.hpp> from libradospp-dev and g++ \
             (make install installs both)"
        );
    }
    let lib = out.join("libfathom_zc.a");
    let _ = std::fs::remove_file(&lib);
    let status = Command::new("ar").arg("crs").arg(&lib).arg(&obj).status().expect("cannot run ar (binutils)");
    assert!(status.success(), "ar failed to archive {}", obj.display());
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=fathom_zc");
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-link-lib=dylib:+verbatim=librados.so.2");
    println!("cargo:rustc-link-lib=dylib:+verbatim=librbd.so.1");
}
