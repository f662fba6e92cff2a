//! Which Ceph client libraries this process loaded, and whether they are the
//! ones the spec asked for. The engine links librados and librbd by soname
//! and loads libcephfs by soname, so one binary runs on any Ceph's libraries
//! (fathom runs it through another root's loader for another release's
//! client); a spec's `connection.library_dir` says where they must come from,
//! and a library loaded from anywhere else is refused before any op.

use crate::targets::Fatal;
use std::collections::BTreeMap;

/// The sonames the engine may load, by the name the start record uses.
const SONAMES: &[(&str, &str)] =
    &[("librados", "librados.so.2"), ("librbd", "librbd.so.1"), ("libcephfs", "libcephfs.so.2")];

/// Each Ceph library mapped into this process: name -> file path.
pub fn loaded() -> BTreeMap<String, String> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    from_maps(&maps)
}

fn from_maps(maps: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in maps.lines() {
        // address perms offset dev inode path: the path is the sixth field, and may hold spaces
        let Some(path) = line.splitn(6, char::is_whitespace).nth(5).map(str::trim) else {
            continue;
        };
        let file = path.rsplit('/').next().unwrap_or("");
        for (name, soname) in SONAMES {
            if file.starts_with(soname) && !out.contains_key(*name) {
                out.insert(name.to_string(), path.to_string());
            }
        }
    }
    out
}

/// Refuse libraries from outside `dir` (a directory prefix, without a trailing slash or with).
pub fn check(dir: &str, libs: &BTreeMap<String, String>) -> Result<(), Fatal> {
    let prefix = format!("{}/", dir.trim_end_matches('/'));
    let wrong: Vec<String> =
        libs.iter().filter(|(_, p)| !p.starts_with(&prefix)).map(|(n, p)| format!("{n} from {p}")).collect();
    if wrong.is_empty() {
        return Ok(());
    }
    Err(Fatal {
        kind: "client_library".into(),
        message: format!(
            "the spec asks for the Ceph client libraries of {dir}, but this engine loaded {}",
            wrong.join(", ")
        ),
        code: 2,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "7f00-7f01 r--p 00000000 fd:01 123 /r/usr/lib/x86_64-linux-gnu/librados.so.2.0.0\n\
        7f01-7f02 r-xp 00001000 fd:01 123 /r/usr/lib/x86_64-linux-gnu/librados.so.2.0.0\n\
        7f02-7f03 r--p 00000000 fd:01 124 /usr/lib/x86_64-linux-gnu/librbd.so.1.16.0\n\
        7f03-7f04 rw-p 00000000 00:00 0 \n\
        7f04-7f05 r--p 00000000 fd:01 125 /usr/lib/x86_64-linux-gnu/libradosstriper.so.1.0.0\n";

    #[test]
    fn maps_name_each_library_once() {
        let l = from_maps(MAPS);
        assert_eq!(l.len(), 2);
        assert_eq!(l["librados"], "/r/usr/lib/x86_64-linux-gnu/librados.so.2.0.0");
        assert_eq!(l["librbd"], "/usr/lib/x86_64-linux-gnu/librbd.so.1.16.0");
    }

    #[test]
    fn a_library_from_elsewhere_is_refused_by_name() {
        let l = from_maps(MAPS);
        let e = check("/r", &l).unwrap_err();
        assert_eq!(e.kind, "client_library");
        assert!(e.message.contains("librbd from /usr/lib/x86_64-linux-gnu/librbd.so.1.16.0"), "{}", e.message);
        assert!(!e.message.contains("librados from"), "{}", e.message);
        assert!(check("/", &l).is_ok());
        // a sibling directory sharing the prefix is not inside it
        assert!(check("/r/usr/lib/x86", &from_maps(MAPS)).is_err());
    }
}
