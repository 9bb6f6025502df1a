//! The manifest region of a version-4 set: entries in pages, so that it can be written and read
//! in bounded pieces, and one file found without reading the others.
//!
//! ```text
//! region := page* head index tail
//! page   := zstd(JSON array of up to PAGE_ENTRIES entries, in file-id order)   sealed: counter 1 + k
//! head   := zstd(JSON of the manifest, its entries left out)                     sealed: counter 1 + P
//! index  := per page: count u32, offset u64, length u32, crc32c u32, root u16,
//!           key length u32, key (the first entry's path bytes)                   sealed: counter 2 + P
//! tail   := head offset u64, head length u32, index length u32, entry count u64,
//!           page count u32, flags u32, crc32c of head and index u32,
//!           crc32c of the tail's first 36 bytes u32, magic "SHFPAGES"           48 bytes, clear
//! ```
//!
//! Offsets are from the region's start; a page's crc32c is of its stored (sealed) bytes, so a
//! reader checks each piece it reads without reading the rest. Pages come first: a backup writes
//! them as files are done, and the head (totals, warnings, the source's facts) last. Flag 1 says
//! the entries are in key order (root, then path compared name by name: tree order), so a file is
//! found by a binary search over the index's first keys and one page read; without it (a source
//! that lists some files apart, such as PostgreSQL's pg_control and WAL), every page is searched.

use std::cmp::Ordering;
use std::io::Write;

use super::{Entry, Manifest};
use crate::crypto::{Cipher, NONCE_MANIFEST};
use crate::error::{Error, Result};

/// Entries per page: a page of small files' entries is about 100 KiB of JSON, 15 KiB stored.
pub const PAGE_ENTRIES: usize = 2048;

/// The tail's length.
pub const TAIL_LEN: usize = 48;

const MAGIC: &[u8; 8] = b"SHFPAGES";

/// Flag: entries are in key order.
const SORTED: u32 = 1;

/// Where one page is and what it starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageMeta {
    /// File id of its first entry.
    pub first_id: u64,
    /// Entries in it.
    pub count: u32,
    /// Offset from the region's start.
    pub offset: u64,
    /// Stored length.
    pub len: u32,
    /// crc32c of the stored bytes.
    pub crc: u32,
    /// Its first entry's root.
    pub root: u16,
    /// Its first entry's path bytes.
    pub first: Vec<u8>,
}

/// Order of two entries' keys: root, then path name by name (tree order, names by their bytes).
pub fn key_order(a: (u16, &[u8]), b: (u16, &[u8])) -> Ordering {
    a.0.cmp(&b.0).then_with(|| a.1.split(|c| *c == b'/').cmp(b.1.split(|c| *c == b'/')))
}

fn seal(cipher: Option<&Cipher>, counter: u64, plain: Vec<u8>) -> Vec<u8> {
    match cipher {
        Some(c) => c.seal_region(NONCE_MANIFEST, counter, &plain),
        None => plain,
    }
}

fn zstd_json<T: serde::Serialize + ?Sized>(what: &str, v: &T) -> Result<Vec<u8>> {
    let io = |e: std::io::Error| Error::new(crate::error::ErrorKind::Io, format!("manifest {what}: {e}"));
    let mut z = zstd::stream::write::Encoder::new(Vec::new(), 3).map_err(io)?;
    serde_json::to_writer(&mut z, v).map_err(|e| Error::invalid(format!("manifest {what}: {e}")))?;
    z.finish().map_err(io)
}

/// Writes a region: entries pushed in file-id order, then [`RegionWriter::finish`] with the head.
pub struct RegionWriter<'c, W: Write> {
    out: W,
    cipher: Option<&'c Cipher>,
    pos: u64,
    pages: Vec<PageMeta>,
    pending: Vec<Entry>,
    count: u64,
    sorted: bool,
    /// The key of the last entry of the last page written.
    last: Option<(u16, Vec<u8>)>,
}

impl<'c, W: Write> RegionWriter<'c, W> {
    /// A region written to `out`, sealed with `cipher` when the set is encrypted.
    pub fn new(out: W, cipher: Option<&'c Cipher>) -> Self {
        RegionWriter { out, cipher, pos: 0, pages: Vec::new(), pending: Vec::with_capacity(PAGE_ENTRIES), count: 0, sorted: true, last: None }
    }

    /// The next entry (its file id is the count pushed before it).
    ///
    /// # Errors
    /// When `out` fails.
    pub fn push(&mut self, e: Entry) -> Result<()> {
        // Compared with the entry before it: in this page, or the last of the page before.
        let before = self.pending.last().map(|p| (p.root, p.path_bytes())).or_else(|| self.last.as_ref().map(|(r, p)| (*r, p.as_slice())));
        if before.is_some_and(|b| key_order(b, (e.root, e.path_bytes())) != Ordering::Less) {
            self.sorted = false;
        }
        self.pending.push(e);
        self.count += 1;
        if self.pending.len() == PAGE_ENTRIES {
            self.flush_page()?;
        }
        Ok(())
    }

    fn write(&mut self, b: &[u8]) -> Result<()> {
        self.out.write_all(b).map_err(|e| Error::new(crate::error::ErrorKind::Io, format!("manifest: {e}")))?;
        self.pos += b.len() as u64;
        Ok(())
    }

    fn flush_page(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let k = self.pages.len() as u64;
        let stored = seal(self.cipher, 1 + k, zstd_json("page", &self.pending)?);
        let first = &self.pending[0];
        let meta = PageMeta {
            first_id: self.count - self.pending.len() as u64,
            count: self.pending.len() as u32,
            offset: self.pos,
            len: u32::try_from(stored.len()).map_err(|_| Error::invalid("manifest page over 4 GiB"))?,
            crc: crc32c::crc32c(&stored),
            root: first.root,
            first: first.path_bytes().to_vec(),
        };
        self.write(&stored)?;
        self.pages.push(meta);
        self.last = self.pending.last().map(|l| (l.root, l.path_bytes().to_vec()));
        self.pending.clear();
        Ok(())
    }

    /// Write the last page, the head (a manifest whose entries were pushed here, its own list
    /// left empty), the index and the tail.
    ///
    /// # Errors
    /// When `out` fails.
    pub fn finish(mut self, head: &Manifest) -> Result<W> {
        self.flush_page()?;
        let p = self.pages.len() as u64;
        debug_assert!(head.entries.is_empty(), "the entries go in pages");
        let head_bytes = seal(self.cipher, 1 + p, zstd_json("head", head)?);
        let index_bytes = seal(self.cipher, 2 + p, encode_index(&self.pages));
        let head_off = self.pos;
        let mut crc = crc32c::crc32c(&head_bytes);
        crc = crc32c::crc32c_append(crc, &index_bytes);
        self.write(&head_bytes)?;
        self.write(&index_bytes)?;
        let mut t = [0u8; TAIL_LEN];
        t[0..8].copy_from_slice(&head_off.to_le_bytes());
        t[8..12].copy_from_slice(&(head_bytes.len() as u32).to_le_bytes());
        t[12..16].copy_from_slice(&(index_bytes.len() as u32).to_le_bytes());
        t[16..24].copy_from_slice(&self.count.to_le_bytes());
        t[24..28].copy_from_slice(&(p as u32).to_le_bytes());
        t[28..32].copy_from_slice(&(if self.sorted { SORTED } else { 0 }).to_le_bytes());
        t[32..36].copy_from_slice(&crc.to_le_bytes());
        let tail_crc = crc32c::crc32c(&t[..36]);
        t[36..40].copy_from_slice(&tail_crc.to_le_bytes());
        t[40..48].copy_from_slice(MAGIC);
        self.write(&t)?;
        Ok(self.out)
    }
}

fn encode_index(pages: &[PageMeta]) -> Vec<u8> {
    let mut b = Vec::with_capacity(pages.len() * 64);
    for p in pages {
        b.extend_from_slice(&p.count.to_le_bytes());
        b.extend_from_slice(&p.offset.to_le_bytes());
        b.extend_from_slice(&p.len.to_le_bytes());
        b.extend_from_slice(&p.crc.to_le_bytes());
        b.extend_from_slice(&p.root.to_le_bytes());
        b.extend_from_slice(&(p.first.len() as u32).to_le_bytes());
        b.extend_from_slice(&p.first);
    }
    b
}

fn decode_index(b: &[u8], pages: usize, entries: u64, region: u64) -> Result<Vec<PageMeta>> {
    let bad = || Error::corrupt("manifest: page index does not parse");
    let mut out = Vec::with_capacity(pages.min(1 << 20));
    let (mut at, mut first_id, mut end) = (0usize, 0u64, 0u64);
    let take = |at: &mut usize, n: usize| -> Result<&[u8]> {
        let s = b.get(*at..*at + n).ok_or_else(bad)?;
        *at += n;
        Ok(s)
    };
    for _ in 0..pages {
        let count = u32::from_le_bytes(take(&mut at, 4)?.try_into().map_err(|_| bad())?);
        let offset = u64::from_le_bytes(take(&mut at, 8)?.try_into().map_err(|_| bad())?);
        let len = u32::from_le_bytes(take(&mut at, 4)?.try_into().map_err(|_| bad())?);
        let crc = u32::from_le_bytes(take(&mut at, 4)?.try_into().map_err(|_| bad())?);
        let root = u16::from_le_bytes(take(&mut at, 2)?.try_into().map_err(|_| bad())?);
        let klen = u32::from_le_bytes(take(&mut at, 4)?.try_into().map_err(|_| bad())?) as usize;
        let first = take(&mut at, klen)?.to_vec();
        // Pages tile the region's start, each at most PAGE_ENTRIES entries.
        if count == 0 || count as usize > PAGE_ENTRIES || offset != end || offset + u64::from(len) > region {
            return Err(Error::corrupt("manifest: page index places a page where none can be"));
        }
        end = offset + u64::from(len);
        out.push(PageMeta { first_id, count, offset, len, crc, root, first });
        first_id += u64::from(count);
    }
    if at != b.len() || first_id != entries {
        return Err(Error::corrupt("manifest: page index does not add up to the entry count"));
    }
    Ok(out)
}

/// A version-4 manifest region opened: the head and the page index read and checked, the pages
/// read when asked for.
pub struct PagedRegion {
    /// The manifest without its entries.
    pub head: Manifest,
    /// Where each page is.
    pub pages: Vec<PageMeta>,
    /// Entries in all pages.
    pub entry_count: u64,
    /// Entries are in key order.
    pub sorted: bool,
}

/// Reads `len` bytes at an offset of the region.
pub type ReadAt<'a> = &'a dyn Fn(u64, &mut [u8]) -> Result<()>;

fn open_piece(cipher: Option<&Cipher>, counter: u64, mut stored: Vec<u8>, what: &str) -> Result<Vec<u8>> {
    match cipher {
        Some(c) => {
            let n = c.open_region(NONCE_MANIFEST, counter, &mut stored).map_err(|e| Error::corrupt(format!("manifest {what}: {e}")))?;
            stored.truncate(n);
            Ok(stored)
        }
        None => Ok(stored),
    }
}

fn unzstd(what: &str, b: &[u8]) -> Result<Vec<u8>> {
    zstd::stream::decode_all(b).map_err(|e| Error::corrupt(format!("manifest {what}: does not decompress: {e}")))
}

impl PagedRegion {
    /// Open the region of `region_len` bytes that `read` reads: its tail, head and page index.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Corrupt`] for anything that does not check or parse.
    pub fn open(read: ReadAt, region_len: u64, cipher: Option<&Cipher>) -> Result<Self> {
        if region_len < TAIL_LEN as u64 {
            return Err(Error::corrupt("manifest: shorter than its tail"));
        }
        let mut t = [0u8; TAIL_LEN];
        read(region_len - TAIL_LEN as u64, &mut t)?;
        if &t[40..48] != MAGIC || crc32c::crc32c(&t[..36]) != u32::from_le_bytes(t[36..40].try_into().expect("4 bytes")) {
            return Err(Error::corrupt("manifest: its tail does not check (not a paged manifest, or damaged)"));
        }
        let u32_at = |i: usize| u32::from_le_bytes(t[i..i + 4].try_into().expect("4 bytes"));
        let head_off = u64::from_le_bytes(t[0..8].try_into().expect("8 bytes"));
        let (head_len, index_len) = (u64::from(u32_at(8)), u64::from(u32_at(12)));
        let entry_count = u64::from_le_bytes(t[16..24].try_into().expect("8 bytes"));
        let page_count = u64::from(u32_at(24));
        if head_off + head_len + index_len + TAIL_LEN as u64 != region_len {
            return Err(Error::corrupt("manifest: its tail places the head and index where they cannot be"));
        }
        let mut both = vec![0u8; (head_len + index_len) as usize];
        read(head_off, &mut both)?;
        if crc32c::crc32c(&both) != u32_at(32) {
            return Err(Error::corrupt("manifest: head or page index checksum mismatch"));
        }
        let index_stored = both.split_off(head_len as usize);
        let head_plain = unzstd("head", &open_piece(cipher, 1 + page_count, both, "head")?)?;
        let mut head: Manifest = serde_json::from_slice(&head_plain).map_err(|e| Error::corrupt(format!("manifest head: does not parse: {e}")))?;
        head.entries = Vec::new();
        let index = open_piece(cipher, 2 + page_count, index_stored, "page index")?;
        let pages = decode_index(&index, page_count as usize, entry_count, head_off)?;
        if pages.last().map_or(0, |p| p.offset + u64::from(p.len)) != head_off {
            return Err(Error::corrupt("manifest: pages do not end where the head begins"));
        }
        Ok(PagedRegion { head, pages, entry_count, sorted: u32_at(28) & SORTED != 0 })
    }

    /// The entries of page `k`, checked.
    ///
    /// # Errors
    /// [`crate::error::ErrorKind::Corrupt`] when it does not check or parse, or holds another count.
    pub fn page(&self, k: usize, read: ReadAt, cipher: Option<&Cipher>) -> Result<Vec<Entry>> {
        let p = &self.pages[k];
        let mut stored = vec![0u8; p.len as usize];
        read(p.offset, &mut stored)?;
        if crc32c::crc32c(&stored) != p.crc {
            return Err(Error::corrupt(format!("manifest page {k}: checksum mismatch")));
        }
        let plain = unzstd(&format!("page {k}"), &open_piece(cipher, 1 + k as u64, stored, &format!("page {k}"))?)?;
        let entries: Vec<Entry> = serde_json::from_slice(&plain).map_err(|e| Error::corrupt(format!("manifest page {k}: does not parse: {e}")))?;
        if entries.len() != p.count as usize {
            return Err(Error::corrupt(format!("manifest page {k}: {} entries where its index says {}", entries.len(), p.count)));
        }
        Ok(entries)
    }

    /// The file id and entry of `(root, path)`: one page read when the entries are in key order,
    /// else each in turn until it is found.
    ///
    /// # Errors
    /// As [`PagedRegion::page`].
    pub fn find(&self, root: u16, path: &[u8], read: ReadAt, cipher: Option<&Cipher>) -> Result<Option<(u64, Entry)>> {
        let candidates: Vec<usize> = if self.sorted {
            // The last page whose first key is not after the one sought.
            let n = self.pages.partition_point(|p| key_order((p.root, &p.first), (root, path)) != Ordering::Greater);
            n.checked_sub(1).into_iter().collect()
        } else {
            (0..self.pages.len()).collect()
        };
        for k in candidates {
            let entries = self.page(k, read, cipher)?;
            if let Some(i) = entries.iter().position(|e| e.root == root && e.path_bytes() == path) {
                let id = self.pages[k].first_id + i as u64;
                return Ok(entries.into_iter().nth(i).map(|e| (id, e)));
            }
        }
        Ok(None)
    }

    /// The whole manifest, every page read (for readers that hold it whole).
    ///
    /// # Errors
    /// As [`PagedRegion::page`].
    pub fn whole(self, read: ReadAt, cipher: Option<&Cipher>) -> Result<Manifest> {
        let mut entries = Vec::with_capacity(self.entry_count.min(1 << 24) as usize);
        for k in 0..self.pages.len() {
            entries.extend(self.page(k, read, cipher)?);
        }
        let mut m = self.head;
        m.entries = entries;
        m.check_references()?;
        Ok(m)
    }
}

/// Make a region's own checksums good again after a change (for fuzzing and tests, as
/// [`crate::format::reseal`] does for a stripe): the tail's, the head's and index's, and, when the
/// index is not sealed, each page's.
pub fn reseal(region: &mut [u8]) {
    let n = region.len();
    if n < TAIL_LEN || &region[n - 8..] != MAGIC {
        return;
    }
    let t = n - TAIL_LEN;
    let u32_at = |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    let head_off = u64::from_le_bytes(region[t..t + 8].try_into().expect("8 bytes")) as usize;
    let (head_len, index_len) = (u32_at(region, t + 8) as usize, u32_at(region, t + 12) as usize);
    let (entries, pages) = (u64::from_le_bytes(region[t + 16..t + 24].try_into().expect("8 bytes")), u32_at(region, t + 24) as usize);
    let Some(end) = head_off.checked_add(head_len).and_then(|x| x.checked_add(index_len)).filter(|&e| e == t) else { return };
    let index_at = head_off + head_len;
    if let Ok(mut metas) = decode_index(&region[index_at..end], pages, entries, head_off as u64) {
        for m in &mut metas {
            m.crc = crc32c::crc32c(&region[m.offset as usize..(m.offset + u64::from(m.len)) as usize]);
        }
        region[index_at..end].copy_from_slice(&encode_index(&metas));
    }
    let crc = crc32c::crc32c(&region[head_off..end]);
    region[t + 32..t + 36].copy_from_slice(&crc.to_le_bytes());
    let c = crc32c::crc32c(&region[t..t + 36]);
    region[t + 36..t + 40].copy_from_slice(&c.to_le_bytes());
}

/// A region held in memory as `ReadAt`.
pub fn in_memory(b: &[u8]) -> impl Fn(u64, &mut [u8]) -> Result<()> + '_ {
    move |at, out| {
        let s = usize::try_from(at).ok().and_then(|a| b.get(a..a + out.len())).ok_or_else(|| Error::corrupt("manifest: a piece lies past the region's end"))?;
        out.copy_from_slice(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::EntryKind;

    fn entry(root: u16, path: &str) -> Entry {
        Entry { root, path: path.into(), kind: EntryKind::File, size: 1, ..Default::default() }
    }

    fn region(entries: &[Entry], cipher: Option<&Cipher>) -> (Vec<u8>, Manifest) {
        let mut m = crate::manifest::sample_head();
        let mut w = RegionWriter::new(Vec::new(), cipher);
        for e in entries {
            w.push(e.clone()).unwrap();
        }
        let b = w.finish(&m).unwrap();
        m.entries = entries.to_vec();
        (b, m)
    }

    fn tree(n: usize) -> Vec<Entry> {
        let mut v: Vec<Entry> = (0..n).map(|i| entry(0, &format!("d{:03}/f{:05}", i / 1000, i % 1000))).collect();
        v.push(entry(1, "pg_tblspc/x"));
        v
    }

    #[test]
    fn a_region_reads_back_whole_and_by_page() {
        let entries = tree(5000);
        let (b, m) = region(&entries, None);
        let read = in_memory(&b);
        let r = PagedRegion::open(&read, b.len() as u64, None).unwrap();
        assert_eq!((r.pages.len(), r.entry_count, r.sorted), (3, 5001, true));
        assert_eq!(r.pages[1].first_id, PAGE_ENTRIES as u64);
        assert_eq!(r.page(2, &read, None).unwrap().len(), 5001 - 2 * PAGE_ENTRIES);
        assert_eq!(r.whole(&read, None).unwrap(), m);
    }

    #[test]
    fn one_file_is_found_by_one_page() {
        let entries = tree(5000);
        let (b, _) = region(&entries, None);
        let reads = std::cell::Cell::new(0);
        let mem = in_memory(&b);
        let read = |at: u64, out: &mut [u8]| {
            reads.set(reads.get() + 1);
            mem(at, out)
        };
        let r = PagedRegion::open(&read, b.len() as u64, None).unwrap();
        reads.set(0);
        for (i, e) in entries.iter().enumerate().step_by(997) {
            let (id, found) = r.find(e.root, e.path_bytes(), &read, None).unwrap().expect("found");
            assert_eq!((id, &found), (i as u64, e));
        }
        assert_eq!(reads.get(), entries.len().div_ceil(997), "one read per lookup");
        assert!(r.find(0, b"d001/f00000x", &read, None).unwrap().is_none());
        assert!(r.find(0, b"a", &read, None).unwrap().is_none(), "before the first page");
    }

    #[test]
    fn out_of_order_entries_are_searched_page_by_page() {
        let mut entries = tree(3000);
        entries.push(entry(0, "global/pg_control"));
        let (b, _) = region(&entries, None);
        let read = in_memory(&b);
        let r = PagedRegion::open(&read, b.len() as u64, None).unwrap();
        assert!(!r.sorted);
        assert_eq!(r.find(0, b"global/pg_control", &read, None).unwrap().unwrap().0, 3001);
    }

    #[test]
    fn reseal_makes_a_changed_page_pass_its_checksums_to_the_parser() {
        let (mut b, _) = region(&tree(100), None);
        b[20] ^= 0x10;
        {
            let read = in_memory(&b);
            let r = PagedRegion::open(&read, b.len() as u64, None).unwrap();
            assert!(r.page(0, &read, None).unwrap_err().to_string().contains("checksum mismatch"));
        }
        reseal(&mut b);
        let read = in_memory(&b);
        let r = PagedRegion::open(&read, b.len() as u64, None).unwrap();
        let e = r.page(0, &read, None).unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt);
        assert!(!e.to_string().contains("checksum mismatch"), "past the checksum: {e}");
    }

    #[test]
    fn key_order_is_tree_order() {
        let mut v = vec!["a.b", "a/b", "a", "a/b/c", "ab", "a/c"];
        v.sort_by(|x, y| key_order((0, x.as_bytes()), (0, y.as_bytes())));
        assert_eq!(v, ["a", "a/b", "a/b/c", "a/c", "a.b", "ab"]);
    }

    #[test]
    fn sealed_regions_read_only_with_their_key_and_damage_is_named() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("k"), [7u8; 32]).unwrap();
        let (_, cipher) = crate::crypto::Keys::from_key_file(&d.path().join("k")).unwrap().seal(crate::crypto::Kdf::KeyFile).unwrap();
        let cipher = &*cipher;
        let entries = tree(2500);
        let (b, m) = region(&entries, Some(cipher));
        let read = in_memory(&b);
        let r = PagedRegion::open(&read, b.len() as u64, Some(cipher)).unwrap();
        assert_eq!(r.whole(&read, Some(cipher)).unwrap(), m);
        let e = PagedRegion::open(&read, b.len() as u64, None).and_then(|r| r.whole(&read, None)).expect_err("no key");
        assert_eq!(e.kind(), crate::error::ErrorKind::Corrupt, "{e}");

        // A flipped byte in a page is that page's; in the head, the head's.
        let mut bad = b.clone();
        bad[10] ^= 1;
        let read = in_memory(&bad);
        let r = PagedRegion::open(&read, bad.len() as u64, Some(cipher)).unwrap();
        let e = r.page(0, &read, Some(cipher)).expect_err("damaged page");
        assert!(e.to_string().contains("manifest page 0: checksum mismatch"), "{e}");
        let mut bad = b.clone();
        let at = bad.len() - TAIL_LEN - 3;
        bad[at] ^= 1;
        let read = in_memory(&bad);
        let e = PagedRegion::open(&read, bad.len() as u64, Some(cipher)).err().expect("damaged index");
        assert!(e.to_string().contains("head or page index checksum mismatch"), "{e}");
    }
}
