//! What block-style targets (rbd, null) share: fio's `rw` names and one
//! job's walk over its region, like fio's offset_increment = size/numjobs:
//! sequential jobs walk their region from its start and wrap, random jobs
//! pick aligned offsets inside it.

use crate::io::OpKind;
use crate::rng::Rng;
use serde::{Deserialize, Serialize};

// fio's names, `rw` included.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    Read,
    Write,
    Randread,
    Randwrite,
    /// Sequential mix.
    Rw,
    Randrw,
}

impl Rw {
    pub fn random(self) -> bool {
        matches!(self, Rw::Randread | Rw::Randwrite | Rw::Randrw)
    }

    /// The mode issues writes.
    pub fn writes(self) -> bool {
        !matches!(self, Rw::Read | Rw::Randread)
    }

    /// The mode issues reads.
    pub fn reads(self) -> bool {
        !matches!(self, Rw::Write | Rw::Randwrite)
    }

    /// The op kinds this mode issues, in report order.
    pub fn kinds(self) -> Vec<OpKind> {
        match self {
            Rw::Read | Rw::Randread => vec![OpKind::Read],
            Rw::Write | Rw::Randwrite => vec![OpKind::Write],
            Rw::Rw | Rw::Randrw => vec![OpKind::Read, OpKind::Write],
        }
    }
}

pub fn fifty() -> u32 {
    50
}
pub fn four_k() -> u64 {
    4096
}
pub fn one_u32() -> u32 {
    1
}

/// The rules rbd and null share; `at` prefixes the field names in messages.
pub fn validate(rwmixread: u32, numjobs: u32) -> Result<(), String> {
    if rwmixread > 100 {
        return Err(format!("target.rwmixread is a percentage 0..100, got {rwmixread}"));
    }
    if numjobs == 0 || numjobs > 1024 {
        return Err(format!("target.numjobs must be 1..1024, got {numjobs}"));
    }
    Ok(())
}

/// One job's region: `blocks` blocks of `bs` bytes from byte `start`.
pub struct Job {
    /// What the op touches (image index for rbd, job index for null).
    pub obj: u64,
    pub start: u64,
    pub blocks: u64,
    cursor: u64,
}

impl Job {
    pub fn new(obj: u64, start: u64, blocks: u64) -> Self {
        Job { obj, start, blocks: blocks.max(1), cursor: 0 }
    }

    /// The next op of this job: (kind, byte offset).
    #[inline]
    pub fn next(&mut self, rw: Rw, mix: u32, bs: u64, rng: &mut Rng) -> (OpKind, u64) {
        let block = if rw.random() {
            rng.below(self.blocks)
        } else {
            let b = self.cursor;
            self.cursor = (self.cursor + 1) % self.blocks;
            b
        };
        let kind = match rw {
            Rw::Read | Rw::Randread => OpKind::Read,
            Rw::Write | Rw::Randwrite => OpKind::Write,
            Rw::Rw | Rw::Randrw => {
                if (rng.below(100) as u32) < mix {
                    OpKind::Read
                } else {
                    OpKind::Write
                }
            }
        };
        (kind, self.start + block * bs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_wraps_and_random_stays_inside() {
        let mut rng = Rng::new(1);
        let mut j = Job::new(0, 8192, 3);
        let offs: Vec<u64> = (0..4).map(|_| j.next(Rw::Write, 50, 4096, &mut rng).1).collect();
        assert_eq!(offs, [8192, 12288, 16384, 8192]);
        let mut j = Job::new(0, 4096, 10);
        for _ in 0..1000 {
            let (k, o) = j.next(Rw::Randread, 50, 512, &mut rng);
            assert_eq!(k, OpKind::Read);
            assert!((4096..4096 + 5120).contains(&o) && o % 512 == 0, "{o}");
        }
        let reads = (0..1000).filter(|_| j.next(Rw::Randrw, 70, 512, &mut rng).0 == OpKind::Read).count();
        assert!((600..800).contains(&reads), "{reads}");
        assert_eq!(Rw::Randrw.kinds(), [OpKind::Read, OpKind::Write]);
    }

    #[test]
    fn shared_rules() {
        assert!(validate(50, 1).is_ok());
        assert!(validate(101, 1).unwrap_err().contains("rwmixread"));
        assert!(validate(50, 0).unwrap_err().contains("numjobs"));
        assert!(validate(50, 1025).unwrap_err().contains("numjobs"));
    }
}
