//! Reading WAL: pages checked as PostgreSQL checks them, records put back together across pages
//! and segments, each record's CRC checked, and what a block summary needs of it decoded: its
//! resource manager and info, every block it references (relation, fork, block) and its main data.
//! Full-page images are stepped over, never decompressed. The layout is documented in
//! docs/notes/wal-summaries.md (PostgreSQL 14 to 18 share it; the page magic tells them apart).
//!
//! [`Decoder`] is fed whole pages in order (from a segment file or an archived object as it
//! streams) and hands out records as they complete. It stops at the end of valid WAL and says why;
//! what that means (the end of a segment being written, or damage) is the caller's to judge.

use sheaf_core::{Error, Result};

use crate::cluster::system::SystemId;

/// WAL page size (XLOG_BLCKSZ); servers built with another are refused.
pub const PAGE: usize = 8192;
const SHORT_HEADER: usize = 24;
const LONG_HEADER: usize = 40;
const RECORD_HEADER: usize = 24;
const XLP_FIRST_IS_CONTRECORD: u16 = 0x0001;
const XLP_LONG_HEADER: u16 = 0x0002;
const XLP_FIRST_IS_OVERWRITE_CONTRECORD: u16 = 0x0008;
const XLP_ALL_FLAGS: u16 = 0x000F;

/// The system identifier a segment's first page carries in its long header (`XLogLongPageHeaderData`:
/// magic, info, timeline, page address, remaining length, then the system identifier at byte 24);
/// `None` for a page without the long header, or too short to hold it.
pub fn long_header_system_id(page: &[u8]) -> Option<SystemId> {
    let info = page.get(2..4).map(|b| u16::from_le_bytes([b[0], b[1]]))?;
    let id = page.get(24..32)?;
    (info & XLP_LONG_HEADER != 0).then(|| SystemId(u64::from_le_bytes(id.try_into().expect("8 bytes"))))
}

/// Resource manager ids a summary looks at.
pub const RM_XLOG: u8 = 0;
/// Transactions (commit and abort drop relations).
pub const RM_XACT: u8 = 1;
/// Storage (relation files created and truncated).
pub const RM_SMGR: u8 = 2;
/// Databases (created and dropped whole).
pub const RM_DBASE: u8 = 4;
/// `xl_info` bit: the record changes relation files in ways its block references do not show.
pub const XLR_SPECIAL_REL_UPDATE: u8 = 0x01;
/// RM_XLOG info of a WAL switch: the rest of the segment is unused.
pub const XLOG_SWITCH: u8 = 0x40;

/// The WAL format of each PostgreSQL major version, by page magic.
pub fn version_of_magic(magic: u16) -> Option<u32> {
    match magic {
        0xD10D => Some(14),
        0xD110 => Some(15),
        0xD113 => Some(16),
        0xD116 => Some(17),
        0xD118 => Some(18),
        _ => None,
    }
}

/// A relation file's identity in WAL: tablespace, database and relation file node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Locator {
    /// Tablespace OID.
    pub spc: u32,
    /// Database OID (0 for shared relations).
    pub db: u32,
    /// Relation file node.
    pub rel: u32,
}

/// A block a record references.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRef {
    /// Which relation.
    pub locator: Locator,
    /// Fork: 0 main, 1 free-space map, 2 visibility map, 3 init.
    pub fork: u8,
    /// Block number within the fork (across its 1 GiB segments).
    pub block: u32,
}

/// A decoded record.
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// Where it starts.
    pub lsn: u64,
    /// Where the next record starts (after a WAL switch: the next segment).
    pub next: u64,
    /// `xl_info`: the resource manager's bits above, XLogInsert's below.
    pub info: u8,
    /// Resource manager.
    pub rmid: u8,
    /// Blocks referenced, in block-id order.
    pub blocks: Vec<BlockRef>,
    /// The main data.
    pub main: Vec<u8>,
    /// The WAL's PostgreSQL major, by its page magic.
    pub version: u32,
}

/// Why decoding stopped before the bytes ran out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct End {
    /// Where the record that could not be read would have started.
    pub at: u64,
    /// What was found there.
    pub why: String,
}

struct Partial {
    start: u64,
    total: usize,
    bytes: Vec<u8>,
}

/// Records out of pages fed in order.
pub struct Decoder {
    seg_size: u64,
    system_identifier: Option<SystemId>,
    magic: Option<u16>,
    /// The next page expected.
    expect_page: Option<u64>,
    /// Where the next record starts, once known.
    next: Option<u64>,
    /// Start of the record before, for its successor's back link.
    prev: Option<u64>,
    partial: Option<Partial>,
    /// Set once valid WAL has ended.
    end: Option<End>,
    /// The record handed to `emit`, its buffers kept from record to record.
    record: Record,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
fn maxalign(n: u64) -> u64 {
    n.next_multiple_of(8)
}

impl Decoder {
    /// Where a record starting at `lsn` really starts: past the page header when `lsn` is a page's
    /// first byte (so that one position has one name, wherever it was computed).
    fn past_header(&self, lsn: u64) -> u64 {
        match lsn % PAGE as u64 {
            0 if lsn % self.seg_size == 0 => lsn + LONG_HEADER as u64,
            0 => lsn + SHORT_HEADER as u64,
            _ => lsn,
        }
    }
}

impl Decoder {
    /// A decoder for WAL of `seg_size`-byte segments, of the cluster `system_identifier` when known.
    pub fn new(seg_size: u64, system_identifier: Option<SystemId>) -> Decoder {
        Decoder { seg_size, system_identifier, magic: None, expect_page: None, next: None, prev: None, partial: None, end: None, record: Record::default() }
    }

    /// Start at a known record boundary (a summary's end) instead of the first one of the first page.
    pub fn start_at(&mut self, lsn: u64) {
        self.next = Some(self.past_header(lsn));
    }

    /// The page magic seen (the server's WAL version).
    pub fn magic(&self) -> Option<u16> {
        self.magic
    }

    /// Where valid WAL ended, if it has.
    pub fn end(&self) -> Option<&End> {
        self.end.as_ref()
    }

    /// Where the next record starts, when known.
    pub fn next_record(&self) -> Option<u64> {
        self.next
    }

    /// The start of the record still being put together across pages, if any.
    pub fn pending(&self) -> Option<u64> {
        self.partial.as_ref().map(|p| p.start)
    }

    fn stop(&mut self, at: u64, why: String) {
        self.partial = None;
        self.end.get_or_insert(End { at, why });
    }

    /// Feed the page that starts at `lsn`; `emit` gets every record that completes on it.
    ///
    /// # Errors
    /// Pages out of order, a page of another cluster or of a WAL format sheaf does not know, or
    /// `emit`'s error. The end of valid WAL is not an error: see [`Decoder::end`].
    pub fn feed(&mut self, lsn: u64, page: &[u8], emit: &mut dyn FnMut(&Record) -> Result<()>) -> Result<()> {
        if self.end.is_some() {
            return Ok(());
        }
        if page.len() != PAGE || lsn % PAGE as u64 != 0 {
            return Err(Error::invalid(format!("internal: a WAL page at {lsn:X} of {} bytes", page.len())));
        }
        if let Some(want) = self.expect_page {
            if lsn != want {
                return Err(Error::invalid(format!("internal: WAL page {lsn:X} fed where {want:X} was due")));
            }
        }
        self.expect_page = Some(lsn + PAGE as u64);
        // A WAL switch left the rest of its segment unused.
        if self.next.is_some_and(|n| n > lsn + PAGE as u64 - 1) {
            return Ok(());
        }
        let magic = u16_at(page, 0);
        let info = u16_at(page, 2);
        let pageaddr = u64_at(page, 8);
        let rem_len = u32_at(page, 16) as usize;
        if pageaddr != lsn || info & !XLP_ALL_FLAGS != 0 || self.magic.is_some_and(|m| m != magic) {
            // A recycled segment's old page, or zeros: WAL ends here.
            self.stop(self.next.unwrap_or(lsn), format!("page {lsn:X} is not the next page of this WAL (its header says {pageaddr:X}, magic {magic:#06x})"));
            return Ok(());
        }
        if self.magic.is_none() {
            if version_of_magic(magic).is_none() {
                return Err(Error::invalid(format!("WAL page magic {magic:#06x} is of a PostgreSQL version sheaf does not read (14 to 18)")));
            }
            self.magic = Some(magic);
        }
        let long = info & XLP_LONG_HEADER != 0;
        if lsn % self.seg_size == 0 {
            if !long {
                self.stop(lsn, format!("the first page of segment at {lsn:X} lacks its long header"));
                return Ok(());
            }
            let (sysid, seg, blcksz) = (long_header_system_id(page).unwrap_or_default(), u32_at(page, 32), u32_at(page, 36));
            if let Some(want) = self.system_identifier.filter(|s| *s != sysid) {
                return Err(Error::invalid(format!("WAL at {lsn:X} is of cluster {sysid}, not {want}")));
            }
            if u64::from(seg) != self.seg_size || blcksz as usize != PAGE {
                return Err(Error::invalid(format!("WAL at {lsn:X} has {seg}-byte segments of {blcksz}-byte pages; expected {} and {PAGE}", self.seg_size)));
            }
        }
        let hs = if long { LONG_HEADER } else { SHORT_HEADER };
        let mut pos;
        if let Some(mut p) = self.partial.take() {
            if info & XLP_FIRST_IS_OVERWRITE_CONTRECORD != 0 {
                // The record was abandoned (a crash or a promotion mid-record): the page starts
                // afresh with the record that says so.
                pos = hs;
            } else if info & XLP_FIRST_IS_CONTRECORD == 0 || rem_len != p.total - p.bytes.len() {
                self.stop(p.start, format!("the record at {:X} does not continue on page {lsn:X}", p.start));
                return Ok(());
            } else {
                let n = rem_len.min(PAGE - hs);
                p.bytes.extend_from_slice(&page[hs..hs + n]);
                if p.bytes.len() < p.total {
                    self.partial = Some(p);
                    return Ok(());
                }
                let next = lsn + maxalign((hs + n) as u64);
                self.complete(p.start, next, &p.bytes, emit)?;
                if self.end.is_some() {
                    return Ok(());
                }
                // A WAL switch split across the page boundary sends the next record to the next
                // segment: past this page, which must not set it back to its own end.
                let n = self.next.expect("set by complete");
                if n >= lsn + PAGE as u64 {
                    return Ok(());
                }
                pos = (n - lsn) as usize;
            }
        } else {
            match self.next {
                Some(n) if n >= lsn && n < lsn + PAGE as u64 => pos = ((n - lsn) as usize).max(hs),
                Some(n) => return Err(Error::invalid(format!("internal: WAL page {lsn:X} fed while the next record is at {n:X}"))),
                None if info & XLP_FIRST_IS_CONTRECORD != 0 => {
                    // Reading from the middle: the first record starts after the one continued here.
                    let skip = maxalign(rem_len as u64) as usize;
                    if skip >= PAGE - hs {
                        return Ok(());
                    }
                    pos = hs + skip;
                }
                None => pos = hs,
            }
        }
        while pos + 8 <= PAGE {
            let start = lsn + pos as u64;
            self.next = Some(start);
            let total = u32_at(page, pos) as usize;
            if total < RECORD_HEADER {
                self.stop(start, if total == 0 { "no record follows (the WAL written so far ends here)".into() } else { format!("a record length of {total}") });
                return Ok(());
            }
            if total > 1020 << 20 {
                self.stop(start, format!("a record length of {total}, past PostgreSQL's limit"));
                return Ok(());
            }
            if pos + total <= PAGE {
                let next = start + maxalign(total as u64);
                self.complete(start, next, &page[pos..pos + total], emit)?;
                if self.end.is_some() {
                    return Ok(());
                }
                let n = self.next.expect("set by complete");
                if n >= lsn + PAGE as u64 {
                    return Ok(());
                }
                pos = (n - lsn) as usize;
            } else {
                self.partial = Some(Partial { start, total, bytes: page[pos..].to_vec() });
                return Ok(());
            }
        }
        self.next = Some(self.past_header(lsn + PAGE as u64));
        Ok(())
    }

    /// A whole record's bytes: check and decode it, hand it on, and set where the next one starts.
    fn complete(&mut self, start: u64, next: u64, bytes: &[u8], emit: &mut dyn FnMut(&Record) -> Result<()>) -> Result<()> {
        let crc = u32_at(bytes, 20);
        let computed = crc32c::crc32c_append(crc32c::crc32c(&bytes[RECORD_HEADER..]), &bytes[..20]);
        if crc != computed {
            self.stop(start, format!("the record at {start:X} fails its CRC"));
            return Ok(());
        }
        let prev = u64_at(bytes, 8);
        if self.prev.is_some_and(|p| p != prev) || self.prev.is_none() && prev >= start {
            self.stop(start, format!("the record at {start:X} does not link back to the one before it"));
            return Ok(());
        }
        let (info, rmid) = (bytes[16], bytes[17]);
        let version = self.magic.and_then(version_of_magic).unwrap_or(18);
        // Decoded into the buffers of the record before: no allocation per record.
        let mut record = std::mem::take(&mut self.record);
        if let Err(why) = decode(bytes, version, &mut record.blocks, &mut record.main) {
            self.record = record;
            self.stop(start, format!("the record at {start:X} does not decode: {why}"));
            return Ok(());
        }
        let next = if rmid == RM_XLOG && info & 0xF0 == XLOG_SWITCH { start.div_ceil(self.seg_size).max(1) * self.seg_size } else { next };
        record.lsn = start;
        record.next = self.past_header(next);
        record.info = info;
        record.rmid = rmid;
        record.version = version;
        self.prev = Some(start);
        self.next = Some(record.next);
        let emitted = emit(&record);
        self.record = record;
        emitted
    }
}

/// Block references and main data of a whole record (header included), of WAL `version`, into
/// `blocks` and `main` (emptied first).
fn decode(rec: &[u8], version: u32, blocks: &mut Vec<BlockRef>, main: &mut Vec<u8>) -> std::result::Result<(), String> {
    blocks.clear();
    main.clear();
    let mut at = RECORD_HEADER;
    let total = rec.len();
    let need = |at: usize, n: usize| if at + n <= total { Ok(()) } else { Err(format!("a header runs past the record's end at byte {at}")) };
    let mut data_total = 0usize;
    let mut main_len = 0usize;
    let mut last_locator: Option<Locator> = None;
    let mut last_id: i32 = -1;
    let compressed_mask = if version >= 15 { 0x1C } else { 0x02 };
    while total - at > data_total {
        need(at, 1)?;
        let id = rec[at];
        at += 1;
        match id {
            255 => {
                need(at, 1)?;
                main_len = rec[at] as usize;
                at += 1;
                data_total += main_len;
                break;
            }
            254 => {
                need(at, 4)?;
                main_len = u32_at(rec, at) as usize;
                at += 4;
                data_total += main_len;
                break;
            }
            253 => {
                need(at, 2)?;
                at += 2;
            }
            252 => {
                need(at, 4)?;
                at += 4;
            }
            0..=32 => {
                if i32::from(id) <= last_id {
                    return Err(format!("block id {id} out of order"));
                }
                last_id = i32::from(id);
                need(at, 3)?;
                let fork_flags = rec[at];
                let data_len = u16_at(rec, at + 1) as usize;
                at += 3;
                let fork = fork_flags & 0x0F;
                if (fork_flags & 0x20 != 0) != (data_len > 0) {
                    return Err("block data flag and length disagree".into());
                }
                data_total += data_len;
                if fork_flags & 0x10 != 0 {
                    need(at, 5)?;
                    let bimg_len = u16_at(rec, at) as usize;
                    let bimg_info = rec[at + 4];
                    at += 5;
                    if bimg_info & compressed_mask != 0 && bimg_info & 0x01 != 0 {
                        need(at, 2)?;
                        at += 2;
                    }
                    data_total += bimg_len;
                }
                let locator = if fork_flags & 0x80 != 0 {
                    last_locator.ok_or("a block refers to the relation before it, and there is none")?
                } else {
                    need(at, 12)?;
                    let l = Locator { spc: u32_at(rec, at), db: u32_at(rec, at + 4), rel: u32_at(rec, at + 8) };
                    at += 12;
                    l
                };
                need(at, 4)?;
                let block = u32_at(rec, at);
                at += 4;
                last_locator = Some(locator);
                if fork > 3 {
                    return Err(format!("fork {fork}"));
                }
                blocks.push(BlockRef { locator, fork, block });
            }
            other => return Err(format!("block id {other}")),
        }
    }
    if total - at != data_total {
        return Err(format!("{} bytes of data where the headers promise {data_total}", total - at));
    }
    main.extend_from_slice(&rec[total - main_len..]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record's bytes: header (with a good CRC), one block reference, main data.
    fn record(prev: u64, rmid: u8, info: u8, block: Option<(Locator, u8, u32)>, main: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        if let Some((l, fork, b)) = block {
            body.push(0u8);
            body.push(fork | 0x20);
            body.extend_from_slice(&4u16.to_le_bytes());
            for v in [l.spc, l.db, l.rel, b] {
                body.extend_from_slice(&v.to_le_bytes());
            }
        }
        body.push(255);
        body.push(main.len() as u8);
        if block.is_some() {
            body.extend_from_slice(b"data");
        }
        body.extend_from_slice(main);
        let total = (RECORD_HEADER + body.len()) as u32;
        let mut r = Vec::new();
        r.extend_from_slice(&total.to_le_bytes());
        r.extend_from_slice(&7u32.to_le_bytes());
        r.extend_from_slice(&prev.to_le_bytes());
        r.push(info);
        r.push(rmid);
        r.extend_from_slice(&[0, 0]);
        r.extend_from_slice(&[0; 4]);
        r.extend_from_slice(&body);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&r[RECORD_HEADER..]), &r[..20]);
        r[20..24].copy_from_slice(&crc.to_le_bytes());
        r
    }

    /// Pages of one segment starting at `base`, holding `records` back to back from the first
    /// record position, continuing across pages as the server writes them.
    fn pages(base: u64, seg: u64, records: &[Vec<u8>]) -> Vec<(u64, Vec<u8>)> {
        let mut stream: Vec<u8> = Vec::new();
        for r in records {
            stream.extend_from_slice(r);
            stream.resize(stream.len().next_multiple_of(8), 0);
        }
        let mut out = Vec::new();
        let mut lsn = base;
        let mut at = 0;
        let mut rem_for_next = 0u32;
        while at < stream.len() || out.is_empty() {
            let long = lsn % seg == 0;
            let hs = if long { LONG_HEADER } else { SHORT_HEADER };
            let mut page = vec![0u8; PAGE];
            page[0..2].copy_from_slice(&0xD118u16.to_le_bytes());
            let mut info = if long { XLP_LONG_HEADER } else { 0 };
            if rem_for_next > 0 {
                info |= XLP_FIRST_IS_CONTRECORD;
            }
            page[2..4].copy_from_slice(&info.to_le_bytes());
            page[4..8].copy_from_slice(&1u32.to_le_bytes());
            page[8..16].copy_from_slice(&lsn.to_le_bytes());
            page[16..20].copy_from_slice(&rem_for_next.to_le_bytes());
            if long {
                page[24..32].copy_from_slice(&42u64.to_le_bytes());
                page[32..36].copy_from_slice(&(seg as u32).to_le_bytes());
                page[36..40].copy_from_slice(&(PAGE as u32).to_le_bytes());
            }
            let n = (PAGE - hs).min(stream.len() - at);
            page[hs..hs + n].copy_from_slice(&stream[at..at + n]);
            at += n;
            // Bytes of the record that spills onto the next page (the server's xlp_rem_len).
            rem_for_next = 0;
            if at < stream.len() {
                let mut s = 0;
                for r in records {
                    let len = r.len();
                    if s + len > at {
                        rem_for_next = (s + len - at) as u32;
                        break;
                    }
                    s = (s + len).next_multiple_of(8);
                }
            }
            out.push((lsn, page));
            lsn += PAGE as u64;
        }
        out
    }

    #[test]
    fn records_come_back_across_pages_with_their_blocks_and_data() {
        let seg = 1 << 20;
        let l = Locator { spc: 1663, db: 5, rel: 16384 };
        let first = record(0, 10, 0x00, Some((l, 0, 3)), b"heap insert");
        // Long enough to cross two page boundaries, with a long main data header.
        let mut big_main = vec![1u8; 20_000];
        big_main[0] = 2;
        let mut long = Vec::new();
        let mut body = vec![0u8, 2 | 0x20];
        body.extend_from_slice(&4u16.to_le_bytes());
        for v in [l.spc, l.db, l.rel, 7] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.push(254);
        body.extend_from_slice(&(big_main.len() as u32).to_le_bytes());
        body.extend_from_slice(b"data");
        body.extend_from_slice(&big_main);
        let total = (RECORD_HEADER + body.len()) as u32;
        long.extend_from_slice(&total.to_le_bytes());
        long.extend_from_slice(&[0; 4]);
        let second_start = 40 + (first.len() as u64).next_multiple_of(8);
        long.extend_from_slice(&40u64.to_le_bytes());
        long.extend_from_slice(&[0, 20, 0, 0, 0, 0, 0, 0]);
        long.extend_from_slice(&body);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&long[RECORD_HEADER..]), &long[..20]);
        long[20..24].copy_from_slice(&crc.to_le_bytes());
        // Two page headers (24 bytes each) lie inside the long record.
        let third_start = (second_start + long.len() as u64 + 2 * SHORT_HEADER as u64).next_multiple_of(8);
        let third = record(second_start, 1, 0x00, None, b"commit");
        let ps = pages(0, seg, &[first, long, third]);
        assert!(ps.len() >= 3, "the long record crosses pages");
        let mut d = Decoder::new(seg, Some(SystemId(42)));
        let mut got = Vec::new();
        for (lsn, p) in &ps {
            d.feed(*lsn, p, &mut |r| {
                got.push(r.clone());
                Ok(())
            })
            .unwrap();
        }
        assert_eq!(got.len(), 3, "{:?}", d.end());
        assert_eq!(got[0].lsn, 40);
        assert_eq!(got[0].blocks, vec![BlockRef { locator: l, fork: 0, block: 3 }]);
        assert_eq!(got[0].main, b"heap insert");
        assert_eq!((got[1].lsn, got[1].rmid, got[1].blocks[0].fork, got[1].blocks[0].block), (second_start, 20, 2, 7));
        assert_eq!(got[1].main, big_main);
        assert_eq!((got[2].lsn, got[2].main.as_slice()), (third_start, &b"commit"[..]));
        // After the last record: zeros, the end of the WAL written so far.
        assert!(d.end().unwrap().why.contains("ends here"), "{:?}", d.end());
    }

    /// A WAL switch record that starts 16 bytes before a page's end and ends on the next page
    /// (PostgreSQL splits it there, about two switches in a thousand): the next record is the
    /// next segment's first, and the zeroed pages after the switch are not the end of the WAL.
    #[test]
    fn a_switch_split_across_pages_sends_the_next_record_to_the_next_segment() {
        let seg = 1 << 20;
        // 33 records of 240 bytes and one of 216 from 40 fill the first page to 16 bytes short.
        let mut records = Vec::new();
        let (mut start, mut prev) = (40u64, 0u64);
        for m in std::iter::repeat_n(214usize, 33).chain([190]) {
            let r = record(prev, RM_XACT, 0, None, &vec![7u8; m]);
            prev = start;
            start += (r.len() as u64).next_multiple_of(8);
            records.push(r);
        }
        assert_eq!(start, PAGE as u64 - 16);
        records.push(record(prev, RM_XLOG, XLOG_SWITCH, None, b""));
        let ps = pages(0, seg, &records);
        assert_eq!(ps.len(), 2, "the switch continues on the second page");
        let mut d = Decoder::new(seg, Some(SystemId(42)));
        let mut got = Vec::new();
        for (lsn, p) in &ps {
            d.feed(*lsn, p, &mut |r| {
                got.push((r.lsn, r.rmid, r.info));
                Ok(())
            })
            .unwrap();
        }
        // The rest of the segment: zeros, as the server leaves it after a switch.
        d.feed(2 * PAGE as u64, &vec![0u8; PAGE], &mut |_| Ok(())).unwrap();
        assert_eq!(got.last(), Some(&(PAGE as u64 - 16, RM_XLOG, XLOG_SWITCH)));
        assert!(d.end().is_none(), "{:?}", d.end());
        assert_eq!(d.next_record(), Some(seg + LONG_HEADER as u64));
    }

    #[test]
    fn a_damaged_record_ends_the_wal_and_a_foreign_cluster_is_refused() {
        let seg = 1 << 20;
        let l = Locator { spc: 1663, db: 5, rel: 1 };
        let a = record(0, 10, 0, Some((l, 0, 1)), b"x");
        let b_start = 40 + (a.len() as u64).next_multiple_of(8);
        let b = record(40, 10, 0, Some((l, 0, 2)), b"y");
        let mut ps = pages(0, seg, &[a, b]);
        let at = b_start as usize + 30;
        ps[0].1[at] ^= 1;
        let mut d = Decoder::new(seg, None);
        let mut n = 0;
        d.feed(0, &ps[0].1, &mut |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 1);
        assert!(d.end().unwrap().why.contains("CRC"), "{:?}", d.end());
        let mut other = Decoder::new(seg, Some(SystemId(7)));
        assert!(other.feed(0, &ps[0].1, &mut |_| Ok(())).unwrap_err().to_string().contains("cluster 42"));
    }
}
