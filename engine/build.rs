// Link librados/librbd by soname so the build needs only the runtime packages
// (librados2, librbd1), never the -dev packages with their headers.
fn main() {
    println!("cargo:rustc-link-lib=dylib:+verbatim=librados.so.2");
    println!("cargo:rustc-link-lib=dylib:+verbatim=librbd.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
