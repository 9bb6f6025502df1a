//! PostgreSQL's data page checksum (`pg_checksum_page`), written from its published description:
//! the 8 KiB page is read as 64 rows of 32 little-endian u32 lanes; each lane runs an FNV-1a
//! variant, `h = (h ^ v) * FNV_PRIME ^ ((h ^ v) >> 17)`, from its own seed, over its column and then
//! two rounds of zeros; the lanes are xor-folded, the block number is mixed in, and the result is
//! reduced to 1..=65535. The checksum field itself (bytes 8..10) counts as zero.

use crate::cluster::lsn::Lsn;

/// PostgreSQL's page size (sheaf supports the default build only).
pub const PAGE_SIZE: usize = 8192;

const LANES: usize = 32;
const FNV_PRIME: u32 = 16_777_619;
/// The lanes' initial states, fixed by PostgreSQL's on-disk format.
const SEEDS: [u32; LANES] = [
    0x5B1F36E9, 0xB8525960, 0x02AB50AA, 0x1DE66D2A, 0x79FF467A, 0x9BB9F8A3, 0x217E7CD2, 0x83E13D2C, 0xF8D4474F, 0xE39EB970, 0x42C6AE16, 0x993216FA, 0x7B093B5D, 0x98DAFF3C,
    0xF718902A, 0x0B1C9CDB, 0xE58F764B, 0x187636BC, 0x5D7B3BB1, 0xE73DE7DE, 0x92BEC979, 0xCCA6C0B2, 0x304A0979, 0x85AA43D4, 0x783125BB, 0x6CA8EAA2, 0xE407EAC6, 0x4B5CFC3E,
    0x9FBF8C76, 0x15CA20BE, 0xF2CA9FD3, 0x959BD756,
];

#[inline(always)]
fn round(h: u32, v: u32) -> u32 {
    let t = h ^ v;
    t.wrapping_mul(FNV_PRIME) ^ (t >> 17)
}

/// The checksum PostgreSQL stores in `pd_checksum` for `page` at block number `blkno` (counted from
/// the start of the relation fork, across its 1 GiB segments).
pub fn page_checksum(page: &[u8; PAGE_SIZE], blkno: u32) -> u16 {
    let mut sums = SEEDS;
    for (r, row) in page.chunks_exact(4 * LANES).enumerate() {
        for (j, sum) in sums.iter_mut().enumerate() {
            let mut v = u32::from_le_bytes(row[4 * j..4 * j + 4].try_into().expect("4 bytes"));
            if r == 0 && j == 2 {
                // Lane 2 of row 0 holds pd_checksum (low half) and pd_flags (high half).
                v &= 0xFFFF_0000;
            }
            *sum = round(*sum, v);
        }
    }
    let mut folded = 0u32;
    for sum in sums {
        folded ^= round(round(sum, 0), 0);
    }
    ((folded ^ blkno) % 65535 + 1) as u16
}

/// What a page's header says, as far as verification needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageFacts {
    /// `pd_lsn`.
    pub lsn: Lsn,
    /// `pd_checksum`.
    pub stored: u16,
    /// `pd_upper == 0`: a new, never-initialised page, which carries no checksum.
    pub is_new: bool,
}

/// Read the header fields of `page`.
pub fn page_facts(page: &[u8; PAGE_SIZE]) -> PageFacts {
    let hi = u32::from_le_bytes(page[0..4].try_into().expect("4"));
    let lo = u32::from_le_bytes(page[4..8].try_into().expect("4"));
    PageFacts { lsn: Lsn((u64::from(hi) << 32) | u64::from(lo)), stored: u16::from_le_bytes([page[8], page[9]]), is_new: u16::from_le_bytes([page[14], page[15]]) == 0 }
}

/// The verdict on one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The checksum matches.
    Ok,
    /// All zeros or never initialised: nothing to check.
    New,
    /// Written at or after the backup began: WAL replay will rewrite it, so it is not checked.
    Recent,
    /// The checksum does not match.
    Mismatch {
        /// What the page says.
        stored: u16,
        /// What the bytes give.
        computed: u16,
    },
}

/// Check one page of a relation fork. Pages whose LSN is at or after `start_lsn` are being written
/// while the backup runs and are not judged.
pub fn verify_page(page: &[u8; PAGE_SIZE], blkno: u32, start_lsn: Lsn) -> Verdict {
    let f = page_facts(page);
    if f.is_new {
        return Verdict::New;
    }
    if f.lsn >= start_lsn {
        return Verdict::Recent;
    }
    let computed = page_checksum(page, blkno);
    if computed == f.stored {
        Verdict::Ok
    } else {
        Verdict::Mismatch { stored: f.stored, computed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page laid out like PostgreSQL's: header, line pointers, tuples at the end.
    fn page(lsn: u64, seed: u8) -> Box<[u8; PAGE_SIZE]> {
        let mut p = Box::new([0u8; PAGE_SIZE]);
        p[0..4].copy_from_slice(&((lsn >> 32) as u32).to_le_bytes());
        p[4..8].copy_from_slice(&(lsn as u32).to_le_bytes());
        p[12..14].copy_from_slice(&40u16.to_le_bytes());
        p[14..16].copy_from_slice(&4000u16.to_le_bytes());
        p[16..18].copy_from_slice(&8192u16.to_le_bytes());
        p[18..20].copy_from_slice(&0x2004u16.to_le_bytes());
        for (i, b) in p[4000..].iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
        }
        p
    }

    #[test]
    fn stored_checksum_verifies_and_a_flip_does_not() {
        let mut p = page(0x1_0000_0100, 3);
        let c = page_checksum(&p, 7);
        p[8..10].copy_from_slice(&c.to_le_bytes());
        assert_eq!(page_checksum(&p, 7), c, "the checksum field does not feed the checksum");
        assert_eq!(verify_page(&p, 7, Lsn(u64::MAX)), Verdict::Ok);
        assert!(matches!(verify_page(&p, 8, Lsn(u64::MAX)), Verdict::Mismatch { .. }), "block number is mixed in");
        p[5000] ^= 1;
        assert!(matches!(verify_page(&p, 7, Lsn(u64::MAX)), Verdict::Mismatch { .. }));
        assert_eq!(verify_page(&p, 7, Lsn(0x1_0000_0100)), Verdict::Recent, "pages written since the start are not judged");
        assert_eq!(verify_page(&Box::new([0u8; PAGE_SIZE]), 0, Lsn(u64::MAX)), Verdict::New);
    }

    #[test]
    fn flags_take_part_but_the_checksum_field_does_not() {
        let mut p = page(5, 1);
        let a = page_checksum(&p, 0);
        p[10] ^= 1; // pd_flags
        assert_ne!(page_checksum(&p, 0), a);
        p[10] ^= 1;
        p[8] ^= 0xFF; // pd_checksum
        assert_eq!(page_checksum(&p, 0), a);
        assert!((1..=65535).contains(&a));
    }
}
