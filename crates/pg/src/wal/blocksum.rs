//! WAL block summaries: what a span of WAL changed, per relation fork. For each fork, the lowest
//! length it was cut to in the span (0: created or dropped) and the blocks written since; the
//! databases created or dropped whole; whether any of it was written at `wal_level = minimal`
//! (then changes may be missing from WAL) or holds a record that changes relation files in a way
//! sheaf does not know. The rules follow PostgreSQL's own WAL summarizer (docs/notes/wal-summaries.md),
//! with the fixes it needed: a FILE_COPY database is a whole new database, the visibility map's
//! limit is its own length, WAL at `wal_level = minimal` spoils a summary, and summaries are merged
//! in LSN order (a truncation forgets the blocks written before it, not those after).

use std::collections::{BTreeMap, BTreeSet};

use sheaf_core::{Error, Result};

use crate::wal::read::{Locator, Record, RM_DBASE, RM_SMGR, RM_XACT, RM_XLOG, XLR_SPECIAL_REL_UPDATE};

/// Forks.
pub const MAIN: u8 = 0;
/// The free-space map: not WAL-logged; never summarized (stored whole).
pub const FSM: u8 = 1;
/// The visibility map.
pub const VM: u8 = 2;
/// Heap blocks one visibility-map page covers (8 KiB pages).
const HEAPBLOCKS_PER_VM_PAGE: u32 = (8192 - 24) * 4;

/// What a span of WAL did to one relation fork.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForkChanges {
    /// The lowest length (in blocks) it was cut to; 0: created or dropped. Every block at or past it
    /// that exists must be read.
    pub limit: Option<u32>,
    /// Blocks written (after the last cut below them).
    pub blocks: BTreeSet<u32>,
}

/// What a span of WAL changed. See the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockSummary {
    /// Timeline of the WAL summarized.
    pub timeline: u32,
    /// The first record summarized starts here...
    pub start: u64,
    /// ...and the next record after the last one starts here.
    pub end: u64,
    /// Per (relation, fork).
    pub forks: BTreeMap<(Locator, u8), ForkChanges>,
    /// (tablespace, database) created or dropped whole: every file in it is new.
    pub databases: BTreeSet<(u32, u32)>,
    /// WAL written at `wal_level = minimal` was seen: changes may be missing.
    pub minimal: bool,
    /// Records that change relation files in ways this summary cannot follow.
    pub unknown: Vec<String>,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    b.get(at..at + 4).map(|x| u32::from_le_bytes(x.try_into().expect("4 bytes")))
}

impl BlockSummary {
    fn limit(&mut self, l: Locator, fork: u8, n: u32) {
        let e = self.forks.entry((l, fork)).or_default();
        e.limit = Some(e.limit.map_or(n, |old| old.min(n)));
        e.blocks.retain(|&b| b < n);
    }

    fn mark(&mut self, l: Locator, fork: u8, block: u32) {
        self.forks.entry((l, fork)).or_default().blocks.insert(block);
    }

    /// Take one record (of WAL `version`, PostgreSQL's major) into the summary.
    pub fn add(&mut self, r: &Record, version: u32) {
        let op = r.info & 0xF0;
        let bad = |what: &str| format!("{what} at {:X}", r.lsn);
        match r.rmid {
            RM_XLOG => {
                // wal_level, where the record carries it: minimal means changes may have skipped WAL.
                let level_at = match op {
                    0x60 => Some(20),
                    0x00 if version >= 17 => Some(20),
                    0x90 if version >= 17 => Some(16),
                    0xE0 if version >= 17 => Some(0),
                    _ => None,
                };
                if let Some(at) = level_at {
                    if u32_at(&r.main, at) == Some(0) {
                        self.minimal = true;
                    }
                }
            }
            RM_SMGR => match op {
                0x10 => match (u32_at(&r.main, 0), u32_at(&r.main, 4), u32_at(&r.main, 8), u32_at(&r.main, 12)) {
                    (Some(spc), Some(db), Some(rel), Some(fork)) if fork != u32::from(FSM) && fork <= 3 => self.limit(Locator { spc, db, rel }, fork as u8, 0),
                    (Some(_), Some(_), Some(_), Some(_)) => {}
                    _ => self.unknown.push(bad("a short storage-create record")),
                },
                0x20 => match (u32_at(&r.main, 0), u32_at(&r.main, 4), u32_at(&r.main, 8), u32_at(&r.main, 12), u32_at(&r.main, 16)) {
                    (Some(blkno), Some(spc), Some(db), Some(rel), Some(flags)) => {
                        let l = Locator { spc, db, rel };
                        if flags & 1 != 0 {
                            self.limit(l, MAIN, blkno);
                        }
                        if flags & 2 != 0 {
                            self.limit(l, VM, blkno.div_ceil(HEAPBLOCKS_PER_VM_PAGE));
                        }
                    }
                    _ => self.unknown.push(bad("a short truncate record")),
                },
                _ => {}
            },
            RM_DBASE => {
                // PostgreSQL 15 added the WAL_LOG strategy and renumbered: 14 has create 0x00, drop 0x10.
                let (create, drop) = if version >= 15 { (&[0x00u8, 0x10][..], 0x20u8) } else { (&[0x00u8][..], 0x10u8) };
                if create.contains(&op) {
                    match (u32_at(&r.main, 0), u32_at(&r.main, 4)) {
                        (Some(db), Some(spc)) => {
                            self.databases.insert((spc, db));
                        }
                        _ => self.unknown.push(bad("a short database-create record")),
                    }
                } else if op == drop {
                    match (u32_at(&r.main, 0), u32_at(&r.main, 4)) {
                        (Some(db), Some(n)) => {
                            for i in 0..n as usize {
                                match u32_at(&r.main, 8 + 4 * i) {
                                    Some(spc) => {
                                        self.databases.insert((spc, db));
                                    }
                                    None => self.unknown.push(bad("a short database-drop record")),
                                }
                            }
                        }
                        _ => self.unknown.push(bad("a short database-drop record")),
                    }
                } else if r.info & XLR_SPECIAL_REL_UPDATE != 0 {
                    self.unknown.push(bad(&format!("database record {op:#04x}")));
                }
            }
            RM_XACT => {
                // Commit, abort, and their prepared forms drop relations.
                if matches!(r.info & 0x70, 0x00 | 0x20 | 0x30 | 0x40) {
                    match dropped_relations(r) {
                        Some(rels) => {
                            for l in rels {
                                for fork in [MAIN, VM, 3] {
                                    self.limit(l, fork, 0);
                                }
                            }
                        }
                        None => self.unknown.push(bad("a transaction record that does not parse")),
                    }
                }
            }
            other if r.info & XLR_SPECIAL_REL_UPDATE != 0 => self.unknown.push(bad(&format!("resource manager {other} changing relation files"))),
            _ => {}
        }
        for b in &r.blocks {
            if b.fork != FSM {
                self.mark(b.locator, b.fork, b.block);
            }
        }
        if self.start == 0 && self.end == 0 {
            self.start = r.lsn;
        }
        self.end = r.next;
    }

    /// Add `later`, which starts where this ends, as if its records had been added one by one: its
    /// cuts forget the blocks written before them, not those after.
    ///
    /// # Errors
    /// `later` does not start where this ends (a gap or an overlap), or is of another timeline.
    pub fn merge(&mut self, later: &BlockSummary) -> Result<()> {
        self.merge_onto(later, false)
    }

    /// As [`BlockSummary::merge`], and `later` may be of a newer timeline that branched from this
    /// one where this ends (the first segment of that timeline, summarized from the branch's
    /// segment on): the merged summary is then of that timeline.
    ///
    /// # Errors
    /// As [`BlockSummary::merge`]; an older timeline.
    pub fn follow(&mut self, later: &BlockSummary) -> Result<()> {
        self.merge_onto(later, true)
    }

    fn merge_onto(&mut self, later: &BlockSummary, newer_timeline: bool) -> Result<()> {
        let timeline_ok = later.timeline == self.timeline || (newer_timeline && later.timeline > self.timeline);
        if self.end != 0 && (later.start != self.end || !timeline_ok) {
            return Err(Error::invalid(format!(
                "WAL summaries do not follow each other: one ends at {:X} on timeline {}, the next starts at {:X} on timeline {}",
                self.end, self.timeline, later.start, later.timeline
            )));
        }
        if self.end == 0 {
            self.start = later.start;
        }
        self.timeline = later.timeline;
        for (k, c) in &later.forks {
            if let Some(n) = c.limit {
                self.limit(k.0, k.1, n);
            }
            self.forks.entry(*k).or_default().blocks.extend(c.blocks.iter().copied());
        }
        self.databases.extend(later.databases.iter().copied());
        self.minimal |= later.minimal;
        self.unknown.extend(later.unknown.iter().cloned());
        self.end = later.end;
        Ok(())
    }
}

/// The relations a commit or abort record drops, from its main data (time, then the sections its
/// xinfo flags announce, in order; only those before the relations matter).
fn dropped_relations(r: &Record) -> Option<Vec<Locator>> {
    let m = &r.main;
    let mut at = 8;
    let xinfo = if r.info & 0x80 != 0 {
        let x = u32_at(m, at)?;
        at += 4;
        x
    } else {
        0
    };
    if xinfo & 1 != 0 {
        at += 8;
    }
    if xinfo & 2 != 0 {
        let n = u32_at(m, at)? as usize;
        at += 4 + 4 * n;
    }
    let mut out = Vec::new();
    if xinfo & 4 != 0 {
        let n = u32_at(m, at)? as usize;
        at += 4;
        for i in 0..n {
            let b = at + 12 * i;
            out.push(Locator { spc: u32_at(m, b)?, db: u32_at(m, b + 4)?, rel: u32_at(m, b + 8)? });
        }
    }
    Some(out)
}

const MAGIC: &[u8; 8] = b"SHEAFSUM";
const VERSION: u32 = 1;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        let s = self.b.get(self.at..self.at + n).ok_or_else(|| Error::corrupt("WAL summary: cut short"))?;
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::corrupt("WAL summary: a number runs on"))
    }
}

impl BlockSummary {
    /// The stored form: a magic, the span, the flags, then per fork its limit and its blocks as
    /// ascending differences (a few bytes per block).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.timeline.to_le_bytes());
        out.extend_from_slice(&self.start.to_le_bytes());
        out.extend_from_slice(&self.end.to_le_bytes());
        out.extend_from_slice(&u32::from(self.minimal).to_le_bytes());
        put_varint(&mut out, self.unknown.len() as u64);
        for u in &self.unknown {
            put_varint(&mut out, u.len() as u64);
            out.extend_from_slice(u.as_bytes());
        }
        put_varint(&mut out, self.databases.len() as u64);
        for (spc, db) in &self.databases {
            out.extend_from_slice(&spc.to_le_bytes());
            out.extend_from_slice(&db.to_le_bytes());
        }
        put_varint(&mut out, self.forks.len() as u64);
        for ((l, fork), c) in &self.forks {
            for v in [l.spc, l.db, l.rel] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.push(*fork);
            out.extend_from_slice(&c.limit.unwrap_or(u32::MAX).to_le_bytes());
            put_varint(&mut out, c.blocks.len() as u64);
            let mut last = 0u64;
            for &b in &c.blocks {
                put_varint(&mut out, u64::from(b) - last);
                last = u64::from(b);
            }
        }
        out
    }

    /// Read the stored form back.
    ///
    /// # Errors
    /// [`sheaf_core::ErrorKind::Corrupt`] for anything that is not a summary this sheaf wrote.
    pub fn from_bytes(b: &[u8]) -> Result<BlockSummary> {
        let mut c = Cursor { b, at: 0 };
        if c.take(8)? != MAGIC {
            return Err(Error::corrupt("not a sheaf WAL summary"));
        }
        let v = c.u32()?;
        if v != VERSION {
            return Err(Error::corrupt(format!("WAL summary version {v}: this sheaf reads {VERSION}")));
        }
        let mut s = BlockSummary { timeline: c.u32()?, start: c.u64()?, end: c.u64()?, minimal: c.u32()? != 0, ..Default::default() };
        for _ in 0..c.varint()? {
            let n = c.varint()? as usize;
            s.unknown.push(String::from_utf8_lossy(c.take(n)?).into_owned());
        }
        for _ in 0..c.varint()? {
            let (spc, db) = (c.u32()?, c.u32()?);
            s.databases.insert((spc, db));
        }
        for _ in 0..c.varint()? {
            let l = Locator { spc: c.u32()?, db: c.u32()?, rel: c.u32()? };
            let fork = c.take(1)?[0];
            let limit = c.u32()?;
            let mut blocks = BTreeSet::new();
            let mut last = 0u64;
            for _ in 0..c.varint()? {
                last += c.varint()?;
                blocks.insert(u32::try_from(last).map_err(|_| Error::corrupt("WAL summary: a block number past 2^32"))?);
            }
            s.forks.insert((l, fork), ForkChanges { limit: (limit != u32::MAX).then_some(limit), blocks });
        }
        if c.at != b.len() {
            return Err(Error::corrupt("WAL summary: bytes after its end"));
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(lsn: u64, rmid: u8, info: u8, main: Vec<u8>, blocks: &[(Locator, u8, u32)]) -> Record {
        Record {
            lsn,
            next: lsn + 64,
            info,
            rmid,
            version: 18,
            blocks: blocks.iter().map(|&(locator, fork, block)| crate::wal::read::BlockRef { locator, fork, block }).collect(),
            main,
        }
    }

    fn le(vals: &[u32]) -> Vec<u8> {
        vals.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    const T: Locator = Locator { spc: 1663, db: 5, rel: 16384 };

    #[test]
    fn cuts_forget_earlier_writes_but_not_later_ones() {
        let mut s = BlockSummary::default();
        s.add(&rec(100, 10, 0, vec![], &[(T, MAIN, 3), (T, MAIN, 9), (T, FSM, 1)]), 18);
        // Truncate to 5 blocks, heap and visibility map.
        s.add(&rec(200, RM_SMGR, 0x20, le(&[5, T.spc, T.db, T.rel, 3]), &[]), 18);
        s.add(&rec(300, 10, 0, vec![], &[(T, MAIN, 7)]), 18);
        let main = &s.forks[&(T, MAIN)];
        assert_eq!(main.limit, Some(5));
        assert_eq!(main.blocks.iter().copied().collect::<Vec<_>>(), vec![3, 7], "9 was cut away, 7 written after");
        assert_eq!(s.forks[&(T, VM)].limit, Some(1), "the visibility map's own length, not the heap's");
        assert!(!s.forks.contains_key(&(T, FSM)));
        assert_eq!((s.start, s.end), (100, 364));

        // Merged in LSN order, two halves give what one pass gave.
        let (mut a, mut b) = (BlockSummary::default(), BlockSummary::default());
        a.add(&rec(100, 10, 0, vec![], &[(T, MAIN, 3), (T, MAIN, 9)]), 18);
        b.add(&rec(164, RM_SMGR, 0x20, le(&[5, T.spc, T.db, T.rel, 1]), &[]), 18);
        b.add(&rec(228, 10, 0, vec![], &[(T, MAIN, 7)]), 18);
        a.merge(&b).unwrap();
        assert_eq!(a.forks[&(T, MAIN)].blocks.iter().copied().collect::<Vec<_>>(), vec![3, 7]);
        let mut gap = BlockSummary::default();
        gap.add(&rec(999, 10, 0, vec![], &[]), 18);
        assert!(a.merge(&gap).is_err(), "a gap is refused");
    }

    #[test]
    fn creates_drops_databases_and_minimal_wal_are_recorded() {
        let mut s = BlockSummary::default();
        s.add(&rec(100, RM_SMGR, 0x10, le(&[T.spc, T.db, 20000, 0]), &[]), 18);
        s.add(&rec(200, RM_DBASE, 0x00, le(&[16500, 1663, 1, 1663]), &[]), 18);
        s.add(&rec(300, RM_DBASE, 0x20, le(&[16501, 2, 1663, 16400]), &[]), 18);
        // A commit dropping one relation: time, xinfo (relations), count, locator.
        let mut commit = vec![0u8; 8];
        commit.extend(le(&[4, 1, T.spc, T.db, T.rel]));
        s.add(&rec(400, RM_XACT, 0x80, commit, &[]), 18);
        assert_eq!(s.forks[&(Locator { rel: 20000, ..T }, MAIN)].limit, Some(0));
        assert_eq!(s.databases.iter().copied().collect::<Vec<_>>(), vec![(1663, 16500), (1663, 16501), (16400, 16501)]);
        assert_eq!(s.forks[&(T, MAIN)].limit, Some(0));
        assert_eq!(s.forks[&(T, 3)].limit, Some(0), "the init fork too");
        assert!(!s.minimal);
        // PostgreSQL 14 numbers database records otherwise: 0x10 is a drop there.
        let mut old = BlockSummary::default();
        old.add(&rec(100, RM_DBASE, 0x10, le(&[16502, 1, 1663]), &[]), 14);
        assert!(old.databases.contains(&(1663, 16502)));
        // A parameter change to wal_level = minimal (its 6th field).
        s.add(&rec(500, RM_XLOG, 0x60, le(&[100, 8, 0, 0, 64, 0, 0]), &[]), 15);
        assert!(s.minimal);
        s.add(&rec(600, 99, XLR_SPECIAL_REL_UPDATE, vec![], &[]), 18);
        assert_eq!(s.unknown.len(), 1);

        let back = BlockSummary::from_bytes(&s.to_bytes()).unwrap();
        assert_eq!(back, s);
        let mut bad = s.to_bytes();
        bad.truncate(bad.len() - 1);
        assert!(BlockSummary::from_bytes(&bad).is_err());
    }
}
