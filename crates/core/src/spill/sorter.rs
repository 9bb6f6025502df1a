//! Records sorted in runs on disk and merged back in order ([`Sorter`], [`Sorted`], [`Merged`]):
//! chunk references in file order, 22 bytes each.

use crate::error::{Error, ErrorKind, Result};
use crate::format::IndexEntry;
use crate::manifest::ChunkRef;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::*;

/// Records kept in memory before a sorted run goes to disk: 4 MiB of chunk references.
const RUN: usize = 1 << 17;

/// A record [`Sorter`] sorts: its order, and a fixed-length encoding for the runs on disk.
pub(crate) trait Record: Ord + Copy {
    /// Encoded length.
    const LEN: usize;
    /// Append the encoding to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Decode `LEN` bytes.
    fn decode(b: &[u8]) -> Self;
}

const CHUNK_REF_LEN: usize = 4 + 8 + 4 + 4 + 2;

impl Record for ChunkRef {
    const LEN: usize = CHUNK_REF_LEN;

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.file_id.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.crc.to_le_bytes());
        out.extend_from_slice(&(self.stripe as u16).to_le_bytes());
    }

    fn decode(b: &[u8]) -> ChunkRef {
        ChunkRef {
            file_id: u32::from_le_bytes(le(b, 0)),
            offset: u64::from_le_bytes(le(b, 4)),
            len: u32::from_le_bytes(le(b, 12)),
            crc: u32::from_le_bytes(le(b, 16)),
            stripe: usize::from(u16::from_le_bytes(le(b, 20))),
        }
    }
}

/// An index entry ordered by (file, offset): a set's chunks file by file, for a chain's block map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByFile(pub(crate) IndexEntry);

impl Ord for ByFile {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        let key = |e: &IndexEntry| (e.file_id, e.offset, e.frame_pos, e.frame_off, e.raw_len, e.stored_len, e.raw_crc, e.hash);
        key(&self.0).cmp(&key(&o.0))
    }
}

impl PartialOrd for ByFile {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Record for ByFile {
    const LEN: usize = crate::format::INDEX_ENTRY_LEN;

    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode_into(out);
    }

    fn decode(b: &[u8]) -> ByFile {
        ByFile(IndexEntry::decode_one(b))
    }
}

/// Records (chunk references as a stripe writer records them, in the order frames finish),
/// handed back in order: sorted in memory a run at a time, each run written to a temporary file,
/// the runs merged when read back. Memory: one run, and a read buffer per run when merging.
pub(crate) struct Sorter<T: Record> {
    /// Never write a run: for records whose index is held in memory anyway.
    in_memory: bool,
    buf: Vec<T>,
    file: Option<File>,
    /// (start, count) of each run written.
    runs: Vec<(u64, u64)>,
    end: u64,
}

/// Chunk references, sorted by (file, offset).
pub(crate) type ChunkSorter = Sorter<ChunkRef>;

impl<T: Record> Default for Sorter<T> {
    fn default() -> Self {
        Sorter { in_memory: false, buf: Vec::new(), file: None, runs: Vec::new(), end: 0 }
    }
}

impl<T: Record> Sorter<T> {
    /// Add a reference.
    ///
    /// # Errors
    /// A full run cannot be written.
    pub(crate) fn push(&mut self, c: T) -> Result<()> {
        self.buf.push(c);
        if self.buf.len() >= RUN && !self.in_memory {
            self.spill()?;
        }
        Ok(())
    }

    /// A sorter that keeps everything in memory (no temporary file needed).
    pub(crate) fn in_memory() -> Self {
        Sorter { in_memory: true, ..Default::default() }
    }

    fn spill(&mut self) -> Result<()> {
        self.buf.sort_unstable();
        let mut bytes = Vec::with_capacity(self.buf.len() * T::LEN);
        for c in &self.buf {
            c.encode(&mut bytes);
        }
        if self.file.is_none() {
            self.file = Some(temp()?);
        }
        let f = self.file.as_ref().expect("just made");
        f.write_all_at(&bytes, self.end).map_err(|e| io_err("cannot write the chunk list", e))?;
        self.runs.push((self.end, self.buf.len() as u64));
        self.end += bytes.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Every reference of every sorter, in (file, offset) order.
    pub(crate) fn merge(sorters: Vec<Sorter<T>>) -> Merged<T> {
        let mut sources = Vec::new();
        for mut s in sorters {
            s.buf.sort_unstable();
            let file = s.file.take().map(Arc::new);
            for &(start, count) in &s.runs {
                let file = file.clone().expect("a run has a file");
                sources.push(Run::Disk { file, pos: start, left: count, buf: Vec::new(), at: 0 });
            }
            if !s.buf.is_empty() {
                sources.push(Run::Memory(std::mem::take(&mut s.buf).into_iter()));
            }
        }
        let mut m = Merged { heap: BinaryHeap::new(), sources, error: None };
        for k in 0..m.sources.len() {
            m.refill(k);
        }
        m
    }
}

impl<T: Record> Sorter<T> {
    /// Everything pushed, sorted once to be read in order as often as asked ([`Sorted::read`]):
    /// in memory when it never filled a run, else merged into one temporary file.
    ///
    /// # Errors
    /// A temporary file that cannot be written or read.
    pub(crate) fn into_sorted(mut self) -> Result<Sorted<T>> {
        if self.runs.is_empty() {
            self.buf.sort_unstable();
            return Ok(Sorted::Memory(self.buf));
        }
        let file = temp()?;
        let mut merged = Sorter::merge(vec![self]);
        let mut out = BufWriter::with_capacity(1 << 16, &file);
        let (mut count, mut bytes) = (0u64, Vec::with_capacity(T::LEN));
        for r in merged.by_ref() {
            bytes.clear();
            r.encode(&mut bytes);
            out.write_all(&bytes).map_err(|e| io_err("cannot write a sorted list", e))?;
            count += 1;
        }
        if let Some(e) = merged.error() {
            return Err(e);
        }
        out.flush().map_err(|e| io_err("cannot write a sorted list", e))?;
        drop(out);
        Ok(Sorted::Disk { file: Arc::new(file), count })
    }
}

/// Records in order, to be read from the start as often as asked ([`Sorter::into_sorted`]).
pub(crate) enum Sorted<T: Record> {
    /// At most one run's worth.
    Memory(Vec<T>),
    /// `count` records in a temporary file.
    Disk { file: Arc<File>, count: u64 },
}

impl<T: Record> Sorted<T> {
    /// The records from the first; [`Merged::error`] says why it ended early, if it did.
    pub(crate) fn read(&self) -> Merged<T> {
        let source = match self {
            Sorted::Memory(v) => Run::Memory(v.clone().into_iter()),
            Sorted::Disk { file, count } => Run::Disk { file: file.clone(), pos: 0, left: *count, buf: Vec::new(), at: 0 },
        };
        let mut m = Merged { heap: BinaryHeap::new(), sources: vec![source], error: None };
        m.refill(0);
        m
    }
}

enum Run<T> {
    Memory(std::vec::IntoIter<T>),
    Disk { file: Arc<File>, pos: u64, left: u64, buf: Vec<u8>, at: usize },
}

impl<T: Record> Run<T> {
    fn next(&mut self) -> Result<Option<T>> {
        match self {
            Run::Memory(it) => Ok(it.next()),
            Run::Disk { file, pos, left, buf, at } => {
                if *at >= buf.len() {
                    if *left == 0 {
                        return Ok(None);
                    }
                    // 64 KiB of references at a time from each run.
                    let n = (*left).min(((64 << 10) / T::LEN) as u64);
                    buf.resize(n as usize * T::LEN, 0);
                    if read_at_most(file, buf, *pos)? != buf.len() {
                        return Err(Error::new(ErrorKind::Io, "a temporary file of chunk references ended early"));
                    }
                    *pos += buf.len() as u64;
                    *left -= n;
                    *at = 0;
                }
                let c = T::decode(&buf[*at..*at + T::LEN]);
                *at += T::LEN;
                Ok(Some(c))
            }
        }
    }
}

/// [`ChunkSorter::merge`]: an iterator over references in order. A temporary file that cannot
/// be read ends it early; [`Merged::error`] then says why.
pub(crate) struct Merged<T: Record> {
    heap: BinaryHeap<Reverse<(T, usize)>>,
    sources: Vec<Run<T>>,
    error: Option<Error>,
}

impl<T: Record> Merged<T> {
    fn refill(&mut self, k: usize) {
        match self.sources[k].next() {
            Ok(Some(c)) => self.heap.push(Reverse((c, k))),
            Ok(None) => {}
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// Why the merge ended early, if it did.
    pub(crate) fn error(&mut self) -> Option<Error> {
        self.error.take()
    }
}

impl<T: Record> Iterator for Merged<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.error.is_some() {
            return None;
        }
        let Reverse((c, k)) = self.heap.pop()?;
        self.refill(k);
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    struct N(u32);

    impl Record for N {
        const LEN: usize = 4;
        fn encode(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0.to_le_bytes());
        }
        fn decode(b: &[u8]) -> N {
            N(u32::from_le_bytes(le(b, 0)))
        }
    }

    #[test]
    fn a_sorted_list_reads_in_order_again_and_again_from_memory_or_disk() {
        for n in [0u32, 5, RUN as u32 * 2 + 7] {
            let mut s = Sorter::default();
            // A scrambled order: multiplying by an odd number is a bijection mod 2^32.
            for i in 0..n {
                s.push(N(i.wrapping_mul(2_654_435_761) % (n.max(1) * 3))).unwrap();
            }
            let sorted = s.into_sorted().unwrap();
            assert_eq!(matches!(sorted, Sorted::Disk { .. }), n > RUN as u32, "{n} records");
            for _ in 0..2 {
                let mut r = sorted.read();
                let got: Vec<N> = r.by_ref().collect();
                assert!(r.error().is_none());
                assert_eq!(got.len(), n as usize);
                assert!(got.windows(2).all(|w| w[0] <= w[1]), "{n} records in order");
            }
        }
    }

    #[test]
    fn chunk_references_merge_in_order_across_runs_and_sorters() {
        // More than a run in one sorter, a little in another: disk and memory runs together.
        let mut a = ChunkSorter::default();
        let mut b = ChunkSorter::default();
        let n = RUN * 2 + 100;
        let mut want = Vec::new();
        for i in 0..n as u64 {
            // A scrambled order of (file, offset).
            let k = (i * 2_654_435_761) % n as u64;
            let c = ChunkRef { file_id: (k / 3) as u32, offset: (k % 3) * 10, len: 10, crc: k as u32, stripe: (k % 2) as usize };
            want.push(c);
            if i % 5 == 0 { &mut b } else { &mut a }.push(c).unwrap();
        }
        assert_eq!(a.runs.len(), 1, "one run went to disk");
        want.sort_unstable();
        let mut m = ChunkSorter::merge(vec![a, b]);
        let got: Vec<ChunkRef> = m.by_ref().collect();
        assert!(m.error().is_none());
        assert_eq!(got.len(), want.len());
        assert!(got == want, "merged in (file, offset) order");
    }

    #[test]
    fn index_entries_sort_by_file_through_runs_on_disk() {
        let mut s: Sorter<ByFile> = Sorter::default();
        let n = RUN + 10;
        for i in (0..n as u64).rev() {
            s.push(ByFile(IndexEntry { file_id: (i % 7) as u32, offset: i, frame_pos: i * 3, raw_len: 1, stored_len: 2, raw_crc: 3, frame_off: 4, hash: u128::from(i) << 64 }))
                .unwrap();
        }
        assert_eq!(s.runs.len(), 1, "one run went to disk");
        let mut m = Sorter::merge(vec![s]);
        let got: Vec<IndexEntry> = m.by_ref().map(|b| b.0).collect();
        assert!(m.error().is_none());
        assert_eq!(got.len(), n);
        assert!(got.windows(2).all(|w| (w[0].file_id, w[0].offset) < (w[1].file_id, w[1].offset)), "by file, then offset");
        assert!(got.iter().all(|e| e.frame_pos == e.offset * 3 && e.hash == u128::from(e.offset) << 64), "every field back");
    }
}
