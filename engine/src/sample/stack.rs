//! Which network interfaces sit under another: a bridge's ports, a bond's
//! members, a VLAN's or macvlan's parent. Linux links each to the device
//! stacked on it (/sys/class/net/IF/upper_NAME), and the upper device counts
//! the same bytes again, so the consumer (fathom.hostsample.nics) counts only
//! the interfaces at the top of their stack. Read from sysfs, which shows the
//! network namespace it was mounted in: the host's, where sshd runs.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

pub struct Stack {
    root: PathBuf,
    /// interface -> the interfaces stacked on it, sorted (read once per `every` samples)
    uppers: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    every: u64,
    samples: u64,
}

impl Stack {
    /// `root`: /sys/class/net; `every`: samples between re-reads (interfaces are enslaved and released
    /// while the sampler runs).
    pub fn new(root: impl Into<PathBuf>, every: u64) -> Stack {
        Stack { root: root.into(), uppers: HashMap::new(), every: every.max(1), samples: 0 }
    }

    /// Called once per sample, before `uppers`.
    pub fn tick(&mut self) {
        if self.samples.is_multiple_of(self.every) {
            self.uppers.clear();
        }
        self.samples += 1;
    }

    /// The interfaces stacked on `name` (empty: it is at the top of its stack, or sysfs does not show it).
    pub fn uppers(&mut self, name: &[u8]) -> &[Vec<u8>] {
        if !self.uppers.contains_key(name) {
            let dir = self.root.join(std::ffi::OsStr::from_bytes(name));
            let mut found: Vec<Vec<u8>> = std::fs::read_dir(dir)
                .map(|rd| {
                    rd.filter_map(|e| e.ok())
                        .filter_map(|e| e.file_name().as_bytes().strip_prefix(b"upper_").map(<[u8]>::to_vec))
                        .collect()
                })
                .unwrap_or_default();
            found.sort();
            self.uppers.insert(name.to_vec(), found);
        }
        &self.uppers[name]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uppers_from_sysfs_links_and_reread_every_n_samples() {
        let root = std::env::temp_dir().join(format!("fathom-stack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["br0", "veth0", "eth0"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::create_dir_all(root.join("veth0/upper_br0")).unwrap(); // a link in sysfs; a name is all that counts
        std::fs::create_dir_all(root.join("br0/lower_veth0")).unwrap();
        let mut s = Stack::new(&root, 2);
        s.tick();
        assert_eq!(s.uppers(b"veth0"), [b"br0".to_vec()]);
        assert!(s.uppers(b"br0").is_empty() && s.uppers(b"eth0").is_empty());
        assert!(s.uppers(b"gone").is_empty()); // not in sysfs: nothing known on it
        std::fs::create_dir_all(root.join("eth0/upper_bond0")).unwrap();
        s.tick();
        assert!(s.uppers(b"eth0").is_empty()); // read at most once per `every` samples
        s.tick();
        assert_eq!(s.uppers(b"eth0"), [b"bond0".to_vec()]);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
