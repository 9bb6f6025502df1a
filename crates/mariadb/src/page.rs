//! InnoDB's page checksums, checked on every page as it is read ([`InnoPages`]), with the
//! algorithm each tablespace was written with (its flags, on page 0):
//!
//! - **full_crc32** (10.5's default, flag bit 4): CRC-32C of bytes `[0, size - 4)` in the last 4;
//!   unless page-compressed, bytes `size - 8 .. size - 4` repeat the low 4 bytes of the page LSN.
//! - **crc32** (older tablespaces): `crc32c([4, 26)) ^ crc32c([38, size - 8))`, stored at 0 and at
//!   `size - 8`; the page LSN's low 4 bytes at `size - 4`. `0xDEADBEEF` (checksums off) passes.
//!
//! An all-zero page (allocated, never written) passes. A page that does not check out is read
//! again from the file, up to ten times 100 ms apart, and the good read replaces the bad in what
//! is stored ([`sheaf_core::ChunkCheck::mend`]): a page torn by the server's write in progress.
//! InnoDB's redo log cannot repair a torn page (PostgreSQL's full-page writes can), so one that
//! never checks out fails the backup. ROW_FORMAT=COMPRESSED and page-compressed pages are
//! counted as not checked.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use sheaf_core::ChunkCheck;

/// FSP_SPACE_FLAGS: in page 0, at the file space header (38) + 16.
const FLAGS_AT: usize = 54;
const FULL_CRC32: u32 = 1 << 4;
/// Bytes 4..8: the page's number in its tablespace.
const PAGE_NO_AT: usize = 4;
const LSN_LOW_AT: usize = 20;
const PAGE_TYPE_AT: usize = 24;
const NO_CHECKSUM: u32 = 0xDEAD_BEEF;
const READS: usize = 10;

/// How a tablespace's pages are checksummed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// full_crc32 pages of `size` bytes; `compressed`: page_compressed (bits 5..7).
    FullCrc32 { size: usize, compressed: bool },
    /// crc32 (or innodb, or none) pages of `size` bytes.
    Crc32 { size: usize },
    /// ROW_FORMAT=COMPRESSED: physical pages of `size`, not checked.
    Zip { size: usize },
}

impl Format {
    /// The page size.
    pub fn size(self) -> usize {
        match self {
            Format::FullCrc32 { size, .. } | Format::Crc32 { size } | Format::Zip { size } => size,
        }
    }

    /// The format page 0's flags name; `default_size` is the server's `innodb_page_size`.
    pub fn of_flags(flags: u32, default_size: usize) -> Format {
        if flags & FULL_CRC32 != 0 {
            let ssize = flags & 0xf;
            let size = if ssize == 0 { default_size } else { 512 << ssize };
            return Format::FullCrc32 { size, compressed: (flags >> 5) & 7 != 0 };
        }
        let zip = (flags >> 1) & 0xf;
        let ssize = (flags >> 6) & 0xf;
        let size = if ssize == 0 { default_size } else { 512 << ssize };
        if zip != 0 {
            return Format::Zip { size: 512 << zip };
        }
        Format::Crc32 { size }
    }
}

/// What one page's check came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Its checksum matches.
    Ok,
    /// All zero: never written.
    Empty,
    /// Not checked (compressed).
    Unchecked,
    /// The checksum or trailer does not match.
    Bad,
    /// It checks out but holds another page's number (written to the wrong place).
    Misplaced(u32),
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Page types that carry no checksum of their own: old-format page_compressed pages (plain and
/// encrypted).
const PAGE_COMPRESSED: [u16; 2] = [34354, 37401];
/// Old formats: bytes 26..30 hold an encrypted page's key version (page 0 of the system
/// tablespace: the flush LSN's high half instead).
const KEY_VERSION_AT: usize = 26;

/// InnoDB's legacy fold of a byte string (`ut_fold_binary`), in 64-bit arithmetic as `ulint`.
fn fold(bytes: &[u8]) -> u64 {
    const MASK: u64 = 1_463_735_687;
    const MASK2: u64 = 1_653_893_711;
    bytes.iter().fold(0u64, |f, &b| ((((f ^ u64::from(b) ^ MASK2) << 8).wrapping_add(f)) ^ MASK).wrapping_add(u64::from(b)))
}

/// The checksums of the `innodb` algorithm (before 5.6's crc32), which an upgraded server's old
/// pages may still carry: the new one at 0, the old one at `size - 8`.
fn legacy_ok(page: &[u8]) -> bool {
    let size = page.len();
    let new = (fold(&page[4..26]).wrapping_add(fold(&page[38..size - 8]))) as u32;
    let old = fold(&page[..26]) as u32;
    let (at0, at_end) = (be32(page, 0), be32(page, size - 8));
    (at0 == new || at0 == NO_CHECKSUM) && (at_end == old || at_end == be32(page, LSN_LOW_AT) || at_end == NO_CHECKSUM)
}

/// Pages in an extent (FSP_EXTENT_SIZE): 1 MiB of them up to 16 KiB pages, 64 above.
fn extent_pages(size: usize) -> u32 {
    if size <= 16384 {
        ((1 << 20) / size) as u32
    } else {
        64
    }
}

/// Check `page` (page `page_no` of a tablespace in `format`; `system`: the system tablespace,
/// `first` its first file, whose doublewrite buffer, the second and third extents, holds copies of
/// other tablespaces' pages in their formats: not checked, as mariabackup does not).
pub fn verify(page: &[u8], format: Format, page_no: u32, system: bool) -> Verdict {
    verify_in(page, format, page_no, system, false)
}

fn verify_in(page: &[u8], format: Format, page_no: u32, system: bool, first: bool) -> Verdict {
    if page.iter().all(|&b| b == 0) {
        return Verdict::Empty;
    }
    let size = page.len();
    let extent = extent_pages(size);
    if system && first && (extent..3 * extent).contains(&page_no) {
        return Verdict::Unchecked;
    }
    let ok = match format {
        Format::Zip { .. } => return Verdict::Unchecked,
        Format::FullCrc32 { compressed, .. } => {
            if compressed && u16::from_be_bytes([page[PAGE_TYPE_AT], page[PAGE_TYPE_AT + 1]]) & 0x8000 != 0 {
                return Verdict::Unchecked;
            }
            // An encrypted page (a key version in bytes 0..4) keeps no plain LSN in its trailer.
            let encrypted = be32(page, 0) != 0;
            crc32c::crc32c(&page[..size - 4]) == be32(page, size - 4) && (compressed || encrypted || page[size - 8..size - 4] == page[LSN_LOW_AT..LSN_LOW_AT + 4])
        }
        Format::Crc32 { .. } => {
            if PAGE_COMPRESSED.contains(&u16::from_be_bytes([page[PAGE_TYPE_AT], page[PAGE_TYPE_AT + 1]])) {
                return Verdict::Unchecked;
            }
            // Encrypted: the checksum at 0 is of the page before encryption.
            if be32(page, KEY_VERSION_AT) != 0 && !(system && page_no == 0) {
                return Verdict::Unchecked;
            }
            let stored = be32(page, 0);
            let computed = crc32c::crc32c(&page[4..26]) ^ crc32c::crc32c(&page[38..size - 8]);
            let sum_ok = stored == NO_CHECKSUM || (stored == computed && be32(page, size - 8) == computed) || legacy_ok(page);
            sum_ok && page[size - 4..] == page[LSN_LOW_AT..LSN_LOW_AT + 4]
        }
    };
    if !ok {
        return Verdict::Bad;
    }
    let named = be32(page, PAGE_NO_AT);
    if !system && named != page_no {
        return Verdict::Misplaced(named);
    }
    Verdict::Ok
}

/// The tablespace id page 0 of the file at `abs` names (FIL_PAGE_SPACE_ID, bytes 34..38): never
/// used again once its tablespace is dropped, so a file recreated at a name has another.
pub fn space_id(abs: &Path) -> Option<u32> {
    let mut b = [0u8; 4];
    std::fs::File::open(abs).and_then(|f| f.read_exact_at(&mut b, 34)).ok()?;
    Some(u32::from_be_bytes(b))
}

/// Checks InnoDB's pages as they pass through the compressors, reading a torn page again.
pub struct InnoPages {
    page_size: usize,
    /// The system tablespace's files, the first first: the others have no header page, and
    /// take the first's format.
    system: Vec<String>,
    /// Each tablespace's format, read from its page 0 once.
    formats: Mutex<HashMap<PathBuf, Format>>,
    /// Pages checked, pages not (empty, compressed), pages read again and mended.
    pub verified: AtomicU64,
    pub unchecked: AtomicU64,
    pub mended: AtomicU64,
}

/// Whether `rel` (under the data directory) is an InnoDB tablespace: the system tablespace's
/// files (`system`: names from `innodb_data_file_path`), undo tablespaces, or a table's `.ibd`.
pub fn is_tablespace(rel: &str, system: &[String]) -> bool {
    rel.ends_with(".ibd") || is_undo(rel) || system.iter().any(|s| s == rel)
}

fn is_undo(rel: &str) -> bool {
    rel.strip_prefix("undo").is_some_and(|n| n.len() == 3 && n.bytes().all(|b| b.is_ascii_digit()))
}

impl InnoPages {
    /// Checks for a server whose `innodb_page_size` is `page_size`.
    pub fn new(page_size: usize, system: Vec<String>) -> InnoPages {
        InnoPages { page_size, system, formats: Mutex::new(HashMap::new()), verified: AtomicU64::new(0), unchecked: AtomicU64::new(0), mended: AtomicU64::new(0) }
    }

    /// Forget the formats read: files read from now on may be new ones at old names (DDL).
    pub fn forget(&self) {
        self.formats.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    fn format(&self, rel: &str, abs: &Path) -> Option<Format> {
        if let Some(f) = self.formats.lock().unwrap_or_else(|p| p.into_inner()).get(abs) {
            return Some(*f);
        }
        // A later file of the system tablespace: the first file's header says its format.
        let header = match self.system.iter().position(|s| s == rel) {
            Some(k) if k > 0 => abs.with_file_name(&self.system[0]),
            _ => abs.to_path_buf(),
        };
        let mut head = [0u8; FLAGS_AT + 4];
        std::fs::File::open(&header).and_then(|f| f.read_exact_at(&mut head, 0)).ok()?;
        let f = Format::of_flags(be32(&head, FLAGS_AT), self.page_size);
        self.formats.lock().unwrap_or_else(|p| p.into_inner()).insert(abs.to_path_buf(), f);
        Some(f)
    }

    fn judge(&self, rel: &str, abs: &Path, offset: u64, data: &mut [u8], mend: bool) -> Vec<String> {
        let Some(format) = self.format(rel, abs) else {
            // Gone since listed (dropped during the backup): the redo log says so.
            return Vec::new();
        };
        let size = format.size();
        let system = !rel.ends_with(".ibd") && !is_undo(rel);
        let first = self.system.first().is_some_and(|s| s == rel);
        let mut findings = Vec::new();
        if offset % size as u64 != 0 {
            return vec![format!("{rel}: a chunk at {offset} does not begin on a {size}-byte page")];
        }
        for (i, page) in data.chunks_exact_mut(size).enumerate() {
            let page_no = (offset / size as u64) as u32 + i as u32;
            let mut verdict = verify_in(page, format, page_no, system, first);
            if verdict == Verdict::Bad && mend {
                // Torn by a write in progress: read it again until it checks out.
                let at = offset + (i * size) as u64;
                let mut again = vec![0u8; size];
                for _ in 0..READS {
                    std::thread::sleep(Duration::from_millis(100));
                    let Ok(f) = std::fs::File::open(abs) else { break };
                    if f.read_exact_at(&mut again, at).is_err() {
                        // Truncated meanwhile: the redo log says so.
                        verdict = Verdict::Unchecked;
                        break;
                    }
                    let v = verify_in(&again, format, page_no, system, first);
                    if v != Verdict::Bad {
                        page.copy_from_slice(&again);
                        self.mended.fetch_add(1, Ordering::Relaxed);
                        verdict = v;
                        break;
                    }
                }
            }
            match verdict {
                Verdict::Ok => {
                    self.verified.fetch_add(1, Ordering::Relaxed);
                }
                Verdict::Empty | Verdict::Unchecked => {
                    self.unchecked.fetch_add(1, Ordering::Relaxed);
                }
                Verdict::Bad => findings.push(format!("{rel} page {page_no}: its checksum does not match its contents in {READS} reads ({format:?})")),
                Verdict::Misplaced(n) => findings.push(format!("{rel} page {page_no}: it holds page {n}")),
            }
        }
        findings
    }
}

impl ChunkCheck for InnoPages {
    fn wants(&self, _root: u16, rel: &str) -> bool {
        // The check is given only with the tablespaces' batch.
        !rel.is_empty()
    }

    fn check(&self, _root: u16, rel: &str, abs: &Path, offset: u64, data: &[u8]) -> Vec<String> {
        let mut copy = data.to_vec();
        self.judge(rel, abs, offset, &mut copy, false)
    }

    fn mend(&self, _root: u16, rel: &str, abs: &Path, offset: u64, data: &mut [u8]) -> Vec<String> {
        self.judge(rel, abs, offset, data, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: usize = 16384;

    fn full_crc32_page(page_no: u32, lsn: u64, fill: u8) -> Vec<u8> {
        let mut p = vec![fill; SIZE];
        p[PAGE_NO_AT..PAGE_NO_AT + 4].copy_from_slice(&page_no.to_be_bytes());
        p[16..24].copy_from_slice(&lsn.to_be_bytes());
        let low = p[LSN_LOW_AT..LSN_LOW_AT + 4].to_vec();
        p[SIZE - 8..SIZE - 4].copy_from_slice(&low);
        let crc = crc32c::crc32c(&p[..SIZE - 4]);
        p[SIZE - 4..].copy_from_slice(&crc.to_be_bytes());
        p
    }

    fn crc32_page(page_no: u32, lsn: u64) -> Vec<u8> {
        let mut p = vec![7u8; SIZE];
        // The flush LSN (or an encrypted page's key version): 0 on a plain page.
        p[26..34].fill(0);
        p[PAGE_NO_AT..PAGE_NO_AT + 4].copy_from_slice(&page_no.to_be_bytes());
        p[16..24].copy_from_slice(&lsn.to_be_bytes());
        let low = p[LSN_LOW_AT..LSN_LOW_AT + 4].to_vec();
        p[SIZE - 4..].copy_from_slice(&low);
        let sum = crc32c::crc32c(&p[4..26]) ^ crc32c::crc32c(&p[38..SIZE - 8]);
        p[..4].copy_from_slice(&sum.to_be_bytes());
        p[SIZE - 8..SIZE - 4].copy_from_slice(&sum.to_be_bytes());
        p
    }

    #[test]
    fn flags_name_the_format() {
        // 10.11's default: full_crc32, 16 KiB (page_ssize 5).
        assert_eq!(Format::of_flags(0x15, SIZE), Format::FullCrc32 { size: SIZE, compressed: false });
        assert_eq!(Format::of_flags(0x15 | 1 << 5, SIZE), Format::FullCrc32 { size: SIZE, compressed: true });
        // An older tablespace: page_ssize 0 is the server's page size; ZIP_SSIZE 4 is 8 KiB.
        assert_eq!(Format::of_flags(0x21, SIZE), Format::Crc32 { size: SIZE });
        assert_eq!(Format::of_flags(0x29, SIZE), Format::Zip { size: 8192 });
    }

    #[test]
    fn pages_check_out_and_a_flipped_bit_does_not() {
        let f = Format::FullCrc32 { size: SIZE, compressed: false };
        let p = full_crc32_page(3, 0x1234_5678_9abc, 0x11);
        assert_eq!(verify(&p, f, 3, false), Verdict::Ok);
        assert_eq!(verify(&p, f, 4, false), Verdict::Misplaced(3));
        assert_eq!(verify(&p, f, 4, true), Verdict::Ok, "the system tablespace's doublewrite pages hold others' numbers");
        let mut torn = p.clone();
        torn[9000] ^= 0x40;
        assert_eq!(verify(&torn, f, 3, false), Verdict::Bad);
        assert_eq!(verify(&vec![0; SIZE], f, 3, false), Verdict::Empty);
        let c = Format::Crc32 { size: SIZE };
        let p = crc32_page(9, 77);
        assert_eq!(verify(&p, c, 9, false), Verdict::Ok);
        let mut torn = p.clone();
        torn[SIZE - 1] ^= 1;
        assert_eq!(verify(&torn, c, 9, false), Verdict::Bad, "a trailer's LSN from another write");
    }

    #[test]
    fn a_torn_page_is_read_again_and_the_good_read_stored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.ibd");
        let mut page0 = full_crc32_page(0, 5, 0);
        page0[FLAGS_AT..FLAGS_AT + 4].copy_from_slice(&0x15u32.to_be_bytes());
        let crc = crc32c::crc32c(&page0[..SIZE - 4]);
        page0[SIZE - 4..].copy_from_slice(&crc.to_be_bytes());
        let page1 = full_crc32_page(1, 9, 0x22);
        std::fs::write(&path, [page0.clone(), page1.clone()].concat()).unwrap();
        let check = InnoPages::new(SIZE, vec!["ibdata1".into()]);
        // What the reader saw: page 1 half old, half new.
        let mut seen = [page0.clone(), page1.clone()].concat();
        seen[SIZE + 100] ^= 0xff;
        assert!(!check.check(0, "db/t.ibd", &path, 0, &seen).is_empty(), "checking alone finds the torn page");
        assert!(check.mend(0, "db/t.ibd", &path, 0, &mut seen).is_empty());
        assert_eq!(&seen[SIZE..], &page1[..], "the page stored is the one read again");
        assert_eq!(check.mended.load(Ordering::Relaxed), 1);
        // Damaged on disk too: it never checks out, and the backup is told.
        let mut bad = page1.clone();
        bad[50] ^= 1;
        let mut file = page0.clone();
        file.extend_from_slice(&bad);
        std::fs::write(&path, &file).unwrap();
        let mut seen = file.clone();
        let found = check.mend(0, "db/t.ibd", &path, 0, &mut seen);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("db/t.ibd page 1"), "{found:?}");
    }

    #[test]
    fn pages_no_checksum_covers_are_not_failed() {
        let f = Format::FullCrc32 { size: SIZE, compressed: false };
        // An encrypted full_crc32 page: a key version at 0, no plain LSN in the trailer.
        let mut enc = full_crc32_page(3, 99, 0x33);
        enc[..4].copy_from_slice(&7u32.to_be_bytes());
        enc[SIZE - 8] ^= 0xff;
        let crc = crc32c::crc32c(&enc[..SIZE - 4]);
        enc[SIZE - 4..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(verify(&enc, f, 3, false), Verdict::Ok);
        // The doublewrite buffer of the system tablespace's first file: another format's pages.
        let other = crc32_page(9, 77);
        assert_eq!(verify_in(&other, f, 64, true, true), Verdict::Unchecked);
        assert_eq!(verify_in(&other, f, 191, true, true), Verdict::Unchecked);
        assert_eq!(verify_in(&other, f, 192, true, true), Verdict::Bad);
        // Old formats: an encrypted page (a key version at 26), a page_compressed one.
        let c = Format::Crc32 { size: SIZE };
        let mut p = crc32_page(5, 1);
        p[KEY_VERSION_AT..KEY_VERSION_AT + 4].copy_from_slice(&3u32.to_be_bytes());
        assert_eq!(verify(&p, c, 5, false), Verdict::Unchecked);
        let mut p = crc32_page(5, 1);
        p[PAGE_TYPE_AT..PAGE_TYPE_AT + 2].copy_from_slice(&34354u16.to_be_bytes());
        assert_eq!(verify(&p, c, 5, false), Verdict::Unchecked);
        // A page of the innodb algorithm (an upgraded server's), its two folds in place.
        let mut p = vec![5u8; SIZE];
        p[26..34].fill(0);
        p[PAGE_NO_AT..PAGE_NO_AT + 4].copy_from_slice(&4u32.to_be_bytes());
        p[16..24].copy_from_slice(&1234u64.to_be_bytes());
        let low = p[LSN_LOW_AT..LSN_LOW_AT + 4].to_vec();
        p[SIZE - 4..].copy_from_slice(&low);
        let new = (fold(&p[4..26]).wrapping_add(fold(&p[38..SIZE - 8]))) as u32;
        p[..4].copy_from_slice(&new.to_be_bytes());
        let old = fold(&p[..26]) as u32;
        p[SIZE - 8..SIZE - 4].copy_from_slice(&old.to_be_bytes());
        assert_eq!(verify(&p, c, 4, false), Verdict::Ok);
        p[100] ^= 1;
        assert_eq!(verify(&p, c, 4, false), Verdict::Bad);
    }

    #[test]
    fn tablespaces_are_known_by_name() {
        let system = vec!["ibdata1".to_string()];
        for (rel, is) in
            [("ibdata1", true), ("undo001", true), ("shop/orders.ibd", true), ("shop/orders.frm", false), ("aria_log.00000001", false), ("undo1", false), ("ib_logfile0", false)]
        {
            assert_eq!(is_tablespace(rel, &system), is, "{rel}");
        }
    }
}
