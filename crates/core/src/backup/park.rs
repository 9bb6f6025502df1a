//! Work the readers' queues cannot take yet. The listing never waits for the readers: what a full
//! queue cannot take waits here, a few batches per queue in memory and the rest on disk
//! ([`Fifo`]), so that memory stays bounded however far the walk runs ahead. Running ahead is
//! the point: one device's slow reader, or a tree of a million small files, holds back no other
//! root's reader, which starts as soon as the walk reaches its first file (a PostgreSQL
//! cluster's tablespaces are walked after its data directory, each read by its own reader).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;
use std::sync::Arc;

use crossbeam_channel::{Sender, TrySendError};

use super::check::{CheckCtx, ChunkCheck};
use super::delta::{Changes, FileChanges};
use super::job::Work;
use crate::error::{Error, Result};
use crate::spill::Fifo;

/// Work waiting for the readers, per queue. See the module documentation.
pub(super) struct Parked {
    lanes: Vec<Lane>,
    /// The checks and filters that waiting work refers to on disk, by their place here.
    shared: Shared,
    buf: Vec<u8>,
}

/// One queue's waiting work: the oldest in memory, then on disk.
#[derive(Default)]
struct Lane {
    held: VecDeque<Vec<Work>>,
    disk: Fifo,
}

/// What work on disk refers to and cannot carry: the checks (a few, shared by every file) by
/// their place here, and what makes a file's scan filter again (one per file: never held).
struct Shared {
    checks: Vec<Arc<dyn ChunkCheck>>,
    changes: Option<Arc<dyn Changes>>,
    /// Each root's name, by id, for [`Changes::of`].
    roots: Vec<String>,
    /// Where a resumable backup records files its checks find fault with.
    suspects: Option<Arc<super::resume::Suspects>>,
}

impl Parked {
    /// For a backup whose incremental `changes` (if any) make each file's filter, over roots
    /// named `roots` (by id).
    pub(super) fn new(changes: Option<Arc<dyn Changes>>, roots: Vec<String>, suspects: Option<Arc<super::resume::Suspects>>) -> Parked {
        Parked { lanes: Vec::new(), shared: Shared { checks: Vec::new(), changes, roots, suspects }, buf: Vec::new() }
    }

    /// Batches held in memory per queue; the rest of a queue's backlog waits on disk.
    const HELD: usize = 8;

    /// Hand `w` to queue `q`, or keep it until the queue has room; then send whatever waits and
    /// the queues take now. Never waits. False when the readers are gone.
    ///
    /// # Errors
    /// The work cannot be written to or read from disk (a full `TMPDIR`).
    pub(super) fn send(&mut self, queues: &[Sender<Vec<Work>>], q: usize, w: Vec<Work>) -> Result<bool> {
        if self.lanes.len() <= q {
            self.lanes.resize_with(q + 1, Lane::default);
        }
        let lane = &mut self.lanes[q];
        if lane.held.is_empty() && lane.disk.is_empty() {
            match queues[q].try_send(w) {
                Ok(()) => {}
                Err(TrySendError::Full(w)) => lane.held.push_back(w),
                Err(TrySendError::Disconnected(_)) => return Ok(false),
            }
        } else if lane.disk.is_empty() && lane.held.len() < Self::HELD {
            lane.held.push_back(w);
        } else {
            self.shared.encode(w, &mut self.buf)?;
            lane.disk.push(&self.buf)?;
        }
        self.settle(queues, false)
    }

    /// Send everything still waiting, as the queues take it.
    ///
    /// # Errors
    /// As [`Parked::send`].
    pub(super) fn drain(&mut self, queues: &[Sender<Vec<Work>>]) -> Result<bool> {
        self.settle(queues, true)
    }

    /// Send what the queues take now, oldest first per queue; with `wait`, until nothing waits.
    fn settle(&mut self, queues: &[Sender<Vec<Work>>], wait: bool) -> Result<bool> {
        let Parked { lanes, shared, buf } = self;
        loop {
            let mut waiting = false;
            for (q, lane) in lanes.iter_mut().enumerate() {
                loop {
                    if lane.held.is_empty() {
                        while lane.held.len() < Self::HELD && lane.disk.pop(buf)? {
                            lane.held.push_back(shared.decode(buf)?);
                        }
                    }
                    let Some(w) = lane.held.pop_front() else { break };
                    match queues[q].try_send(w) {
                        Ok(()) => {}
                        Err(TrySendError::Full(w)) => {
                            lane.held.push_front(w);
                            waiting = true;
                            break;
                        }
                        Err(TrySendError::Disconnected(_)) => return Ok(false),
                    }
                }
            }
            if !wait || !waiting {
                return Ok(true);
            }
            let mut sel = crossbeam_channel::Select::new();
            for (q, lane) in lanes.iter().enumerate() {
                if !lane.held.is_empty() {
                    sel.send(&queues[q]);
                }
            }
            sel.ready();
        }
    }
}

impl Shared {
    /// The place of check `c` (the same object, not an equal one), added when new: a backup has
    /// one or two, so a search is quick.
    fn check_at(&mut self, c: &Arc<dyn ChunkCheck>) -> u32 {
        let at = self.checks.iter().position(|a| std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(c))).unwrap_or_else(|| {
            self.checks.push(c.clone());
            self.checks.len() - 1
        });
        at as u32
    }

    /// A batch as bytes: each work's fields, its check by its place here, a scan by the entry's
    /// path (its filter is made again when read back).
    ///
    /// # Errors
    /// A scan without the entry's path (a bug).
    fn encode(&mut self, batch: Vec<Work>, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        put_u32(out, batch.len() as u32);
        for w in batch {
            put_u32(out, w.file_id);
            out.extend_from_slice(&w.dev.0.to_le_bytes());
            out.extend_from_slice(&w.dev.1.to_le_bytes());
            out.extend_from_slice(&w.size.to_le_bytes());
            put_bytes(out, w.path.as_os_str().as_bytes());
            match &w.check {
                None => out.push(0),
                Some(c) => {
                    out.push(1);
                    put_u32(out, self.check_at(&c.check));
                    out.extend_from_slice(&c.root.to_le_bytes());
                    put_bytes(out, c.rel.as_bytes());
                    put_bytes(out, c.abs.as_os_str().as_bytes());
                }
            }
            match &w.changes {
                None => out.push(0),
                Some(FileChanges::Whole) => out.push(1),
                Some(FileChanges::Scan(_)) => {
                    out.push(2);
                    let rel = w.rel.as_ref().ok_or_else(|| Error::invalid("internal: a file to scan without its path"))?;
                    put_bytes(out, rel.as_bytes());
                }
                Some(FileChanges::Ranges(r)) => {
                    out.push(3);
                    put_u32(out, r.len() as u32);
                    for r in r {
                        out.extend_from_slice(&r.start.to_le_bytes());
                        out.extend_from_slice(&r.end.to_le_bytes());
                    }
                }
            }
        }
        Ok(())
    }

    /// A batch [`Shared::encode`] made.
    fn decode(&self, b: &[u8]) -> Result<Vec<Work>> {
        let mut r = Cursor { b, at: 0 };
        let n = r.u32()? as usize;
        let mut batch = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let file_id = r.u32()?;
            let dev = (u16::from_le_bytes(r.take()?), u64::from_le_bytes(r.take()?));
            let size = u64::from_le_bytes(r.take()?);
            let path = r.path()?;
            let check = match r.u8()? {
                0 => None,
                _ => {
                    let check = self.checks.get(r.u32()? as usize).ok_or_else(bad)?.clone();
                    let root = u16::from_le_bytes(r.take()?);
                    let rel = String::from_utf8(r.bytes()?.to_vec()).map_err(|_| bad())?;
                    let suspects = self.suspects.clone().map(|s| (s, self.roots.get(usize::from(root)).cloned().unwrap_or_default()));
                    Some(Arc::new(CheckCtx { check, root, rel, abs: r.path()?, suspects }))
                }
            };
            let mut rel = None;
            let changes = match r.u8()? {
                0 => None,
                1 => Some(FileChanges::Whole),
                2 => {
                    let p = String::from_utf8(r.bytes()?.to_vec()).map_err(|_| bad())?;
                    let root = self.roots.get(usize::from(dev.0)).ok_or_else(bad)?;
                    let scan = self.changes.as_ref().ok_or_else(bad)?.of(root, &p, size);
                    rel = Some(p);
                    // The same question gets the same answer: anything but a scan is a bug.
                    matches!(scan, FileChanges::Scan(_)).then_some(scan).ok_or_else(bad).map(Some)?
                }
                _ => {
                    let n = r.u32()? as usize;
                    let mut ranges = Vec::with_capacity(n.min(1 << 16));
                    for _ in 0..n {
                        ranges.push(u64::from_le_bytes(r.take()?)..u64::from_le_bytes(r.take()?));
                    }
                    Some(FileChanges::Ranges(ranges))
                }
            };
            batch.push(Work { file_id, path, dev, size, check, changes, rel });
        }
        Ok(batch)
    }
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len() as u32);
    out.extend_from_slice(b);
}

fn bad() -> Error {
    Error::corrupt("internal: work waiting on disk for the readers does not decode")
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn bytes_n(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self.b.get(self.at..self.at + n).ok_or_else(bad)?;
        self.at += n;
        Ok(s)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.bytes_n(N)?.try_into().expect("N bytes"))
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.take::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take()?))
    }

    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.bytes_n(n)
    }

    fn path(&mut self) -> Result<PathBuf> {
        Ok(PathBuf::from(OsString::from_vec(self.bytes()?.to_vec())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::delta::UnitFilter;
    use crossbeam_channel::bounded;

    struct NoCheck;
    impl ChunkCheck for NoCheck {
        fn wants(&self, _: u16, _: &str) -> bool {
            true
        }
        fn check(&self, _: u16, _: &str, _: &std::path::Path, _: u64, _: &[u8]) -> Vec<String> {
            Vec::new()
        }
    }

    /// A file's own filter, telling which file it was made for.
    struct Own(usize);
    impl UnitFilter for Own {
        fn unit(&self) -> usize {
            self.0
        }
        fn changed(&self, _: u64, _: &[u8]) -> bool {
            true
        }
    }

    /// Makes each file's filter from its root's name, its path and its size, as an incremental's
    /// changes do.
    struct PerFile;
    impl Changes for PerFile {
        fn of(&self, root: &str, rel: &str, size: u64) -> FileChanges {
            FileChanges::Scan(Arc::new(Own(root.len() * 1_000_000 + rel.len() * 1000 + (size >> 20) as usize)))
        }
    }

    fn roots() -> Vec<String> {
        vec![String::new(), "pg_tblspc/16400".into(), "pg_tblspc/7".into()]
    }

    fn work(id: u32, check: &Arc<dyn ChunkCheck>) -> Work {
        let path = PathBuf::from(OsString::from_vec(format!("/d/f{id}\u{e9}").into_bytes()));
        let (dev, size, rel) = (((id % 3) as u16, u64::from(id) * 7), u64::from(id) << 20, format!("base/{}", "x".repeat(id as usize % 7)));
        Work {
            file_id: id,
            dev,
            size,
            check: (id % 2 == 0).then(|| Arc::new(CheckCtx { check: check.clone(), root: 2, rel: format!("base/{id}"), abs: path.clone(), suspects: None })),
            changes: match id % 4 {
                0 => None,
                1 => Some(FileChanges::Whole),
                2 => Some(PerFile.of(&roots()[usize::from(dev.0)], &rel, size)),
                _ => Some(FileChanges::Ranges(vec![0..8192, u64::from(id)..u64::from(id) + 9])),
            },
            rel: (id % 4 == 2).then_some(rel),
            path,
        }
    }

    /// What a reader sees of a work item: enough to tell any field lost on the way to disk.
    fn seen(w: &Work, check: &Arc<dyn ChunkCheck>) -> String {
        let c = w.check.as_ref().map(|c| (std::ptr::addr_eq(Arc::as_ptr(&c.check), Arc::as_ptr(check)), c.root, c.rel.clone(), c.abs.clone()));
        let ch = match &w.changes {
            None => "none".to_string(),
            Some(FileChanges::Whole) => "whole".into(),
            Some(FileChanges::Scan(f)) => format!("scan {}", f.unit()),
            Some(FileChanges::Ranges(r)) => format!("{r:?}"),
        };
        format!("{} {:?} {} {:?} {c:?} {ch} {:?}", w.file_id, w.dev, w.size, w.path, w.rel)
    }

    #[test]
    fn work_that_waits_on_disk_reaches_the_readers_whole_and_in_order_and_the_walk_never_waits() {
        let check: Arc<dyn ChunkCheck> = Arc::new(NoCheck);
        // Two queues of one batch each and nobody reading yet: all but the first of each waits.
        let (tx0, rx0) = bounded::<Vec<Work>>(1);
        let (tx1, rx1) = bounded::<Vec<Work>>(1);
        let queues = [tx0, tx1];
        let mut parked = Parked::new(Some(Arc::new(PerFile)), roots(), None);
        let mut sent = [Vec::new(), Vec::new()];
        for id in 0..200u32 {
            let q = (id % 5 == 0) as usize;
            let batch: Vec<Work> = (0..3).map(|k| work(id * 3 + k, &check)).collect();
            sent[q].extend(batch.iter().map(|w| seen(w, &check)));
            assert!(parked.send(&queues, q, batch).unwrap(), "the walk goes on while every queue is full");
        }
        assert!(!parked.lanes[0].disk.is_empty(), "most of queue 0's work waits on disk");
        assert!(parked.lanes.iter().all(|l| l.held.len() <= Parked::HELD));
        let c = &check;
        let got = std::thread::scope(|s| {
            let read = |rx: crossbeam_channel::Receiver<Vec<Work>>| s.spawn(move || rx.iter().flatten().map(|w| seen(&w, c)).collect::<Vec<_>>());
            let (r0, r1) = (read(rx0), read(rx1));
            assert!(parked.drain(&queues).unwrap());
            drop(queues);
            [r0.join().unwrap(), r1.join().unwrap()]
        });
        assert_eq!(got, sent);
        assert!(parked.lanes.iter().all(|l| l.held.is_empty() && l.disk.is_empty()));
        assert_eq!(parked.shared.checks.len(), 1, "one check, whatever the files");
        // A scan whose question has another answer when read back is refused, never read whole.
        let mut p = Parked::new(Some(Arc::new(PerFile)), roots(), None);
        let mut buf = Vec::new();
        p.shared.encode(vec![work(2, &check)], &mut buf).unwrap();
        p.shared.changes = None;
        assert!(p.shared.decode(&buf).is_err());
    }
}
