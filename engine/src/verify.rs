//! Verify mode: every block of a written buffer starts with a header
//! (magic, block length, object, offset, generation, checksum) followed by
//! pseudo-random payload; reads check each block they get back. Blocks are
//! 512 bytes when the op length allows it, so a read need not line up with
//! the write that produced the data.

const MAGIC: u32 = 0x4d48_5446; // "FTHM"
pub const HEADER: usize = 40;

pub fn block_len(len: usize) -> usize {
    if len.is_multiple_of(512) { 512 } else { len }
}

fn hash(words: impl Iterator<Item = u64>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for w in words {
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3).rotate_left(23);
    }
    h ^ (h >> 29)
}

fn words(b: &[u8]) -> impl Iterator<Item = u64> + '_ {
    b.chunks(8).map(|c| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        u64::from_le_bytes(w)
    })
}

fn checksum(block: &[u8]) -> u64 {
    hash(words(&block[..32]).chain(words(&block[HEADER..])))
}

/// Fill `buf` (one op) for object `obj` at byte `offset`, generation `gen`.
pub fn fill(buf: &mut [u8], obj: u64, offset: u64, generation: u64) {
    let bl = block_len(buf.len());
    for (i, b) in buf.chunks_mut(bl).enumerate() {
        let off = offset + (i * bl) as u64;
        let mut x = generation ^ off.rotate_left(17) ^ obj.rotate_left(41);
        let blen = b.len();
        for c in b[HEADER.min(blen)..].chunks_mut(8) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let w = (x ^ (x >> 33)).to_le_bytes();
            c.copy_from_slice(&w[..c.len()]);
        }
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&(blen as u32).to_le_bytes());
        b[8..16].copy_from_slice(&obj.to_le_bytes());
        b[16..24].copy_from_slice(&off.to_le_bytes());
        b[24..32].copy_from_slice(&generation.to_le_bytes());
        let c = checksum(b);
        b[32..40].copy_from_slice(&c.to_le_bytes());
    }
}

#[derive(Debug, PartialEq)]
pub struct Mismatch {
    pub offset: u64,
    pub reason: String,
}

/// Check the blocks of a read of `obj` at `offset`. Blocks that are all zero
/// were never written (sparse object or image) and are not counted.
/// Returns (blocks checked, first mismatch).
pub fn check(buf: &[u8], obj: u64, offset: u64) -> (u64, Option<Mismatch>) {
    let bl = block_len(buf.len());
    let mut checked = 0;
    for (i, b) in buf.chunks(bl).enumerate() {
        let off = offset + (i * bl) as u64;
        if b.iter().all(|&x| x == 0) {
            continue;
        }
        checked += 1;
        let u32_at = |p: usize| u32::from_le_bytes(b[p..p + 4].try_into().unwrap());
        let u64_at = |p: usize| u64::from_le_bytes(b[p..p + 8].try_into().unwrap());
        let reason = if b.len() < HEADER || u32_at(0) != MAGIC {
            Some("no verify header (data not written by a verify run, or overwritten)".to_string())
        } else if u32_at(4) as usize != b.len() {
            Some(format!("block length {} in header, {} read", u32_at(4), b.len()))
        } else if u64_at(8) != obj || u64_at(16) != off {
            Some(format!("header names object {} offset {}", u64_at(8), u64_at(16)))
        } else if u64_at(32) != checksum(b) {
            Some(format!("checksum mismatch (generation {})", u64_at(24)))
        } else {
            None
        };
        if let Some(reason) = reason {
            return (checked, Some(Mismatch { offset: off, reason }));
        }
    }
    (checked, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check_passes_and_corruption_is_found() {
        let mut b = vec![0u8; 4096];
        fill(&mut b, 7, 8192, 99);
        assert_eq!(check(&b, 7, 8192), (8, None));
        // A read of the second half only, at its own offset.
        assert_eq!(check(&b[2048..], 7, 8192 + 2048).1, None);
        // Wrong place.
        assert!(check(&b, 8, 8192).1.is_some());
        b[1000] ^= 1;
        let (_, m) = check(&b, 7, 8192);
        assert_eq!(m.unwrap().offset, 8192 + 512);
        // Unwritten (zero) data is skipped.
        assert_eq!(check(&[0u8; 1024], 1, 0), (0, None));
        // Odd sizes use a single block.
        let mut odd = vec![0u8; 100];
        fill(&mut odd, 1, 0, 1);
        assert_eq!(check(&odd, 1, 0), (1, None));
    }
}
