//! fathom-sampler: `fathom-engine --sample` without the engine, so without
//! Ceph's libraries (see src/sample.rs for the records, src/lib.rs for the
//! sharing). Usage: fathom-sampler [--interval S] [--duration S]
//! [--threads-of NAME]..., --help, --version.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    fathom_engine::sample::main("fathom-sampler", &args)
}
