//! A decompressor thread's lane of the restore's writer: the thread's direct writes kept in
//! flight on an io_uring of its own, so that the disk writes while the thread decompresses.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{OpenFile, Slot, Writer, SMALL_WRITE};
use crate::aligned::{is_aligned, ALIGN};
use crate::error::{io_at, Error, ErrorKind, Result};
use crate::restore::scan::{Decoded, Lane, Piece};

/// Chunk buffers one decompressor thread keeps in flight: while the disk writes them, the thread
/// decompresses the next chunks (a thread that waited for each of its writes left the CPU idle
/// for every write and the disk idle for every decompression).
pub(super) const IN_FLIGHT: usize = 6;

/// Writes one thread keeps in flight: a chunk that newer sets of a chain cut into goes out as
/// several writes from its one buffer.
const WRITES: usize = 32;

/// A write the kernel is doing: its buffer and file stay alive until it completes.
struct InFlight {
    slot: Arc<Slot>,
    offset: u64,
    file: Arc<OpenFile>,
    /// The chunk (a file's last one zero-padded to the block), shared by the writes of its pieces.
    data: Arc<Decoded>,
    /// What of it this write writes.
    range: std::ops::Range<usize>,
    /// The file's bytes it counts as written (a padded tail counts its true length).
    counts: u64,
}

/// One decompressor thread's writes. Packed chunks (small files, through the page cache) and
/// files without direct I/O are written at once; whole chunks of direct files go to the disk
/// asynchronously through an io_uring of the thread's own, or synchronously where the kernel
/// offers none (disabled, or refused by a sandbox).
pub(super) struct WriteLane<'w, 'a> {
    writer: &'w Writer<'a>,
    ring: Option<io_uring::IoUring>,
    /// Indexed by the request's user data.
    flight: Vec<Option<InFlight>>,
    /// Writes in flight.
    busy: usize,
    /// Chunk buffers in flight (at most [`IN_FLIGHT`]).
    buffers: usize,
}

impl<'w, 'a> WriteLane<'w, 'a> {
    pub(super) fn new(writer: &'w Writer<'a>) -> Self {
        let ring = if writer.uring { io_uring::IoUring::new(WRITES.next_power_of_two() as u32).ok() } else { None };
        WriteLane { writer, ring, flight: (0..WRITES).map(|_| None).collect(), busy: 0, buffers: 0 }
    }

    /// Wait for at least `want` writes to complete (0: only those done already), and settle them.
    fn reap(&mut self, want: usize) -> Result<()> {
        let Some(ring) = &mut self.ring else { return Ok(()) };
        if want > 0 {
            loop {
                match ring.submit_and_wait(want) {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => return Err(Error::io(ErrorKind::Io, "io_uring: cannot wait for writes", e)),
                }
            }
        }
        let done: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
        let mut first_err = None;
        for (key, res) in done {
            let Some(w) = self.flight.get_mut(key as usize).and_then(Option::take) else { continue };
            self.busy -= 1;
            // The last write from its buffer: the buffer is free once this one settles.
            if Arc::strong_count(&w.data) == 1 {
                self.buffers -= 1;
            }
            if let Err(e) = self.settle(w, res) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// A completed write: what the kernel did not write (a short write, or all of it where it
    /// refused direct I/O after all: EINVAL) is written synchronously, falling back to the page
    /// cache as [`write_direct`] does; then the chunk counts.
    fn settle(&self, w: InFlight, res: i32) -> Result<()> {
        let path = &w.slot.path;
        let written = match res {
            r if r == -libc::EINVAL => 0,
            r if r < 0 => return Err(io_at(ErrorKind::Target, "cannot write", path, std::io::Error::from_raw_os_error(-r))),
            r => r as usize,
        };
        if written < w.range.len() {
            self.writer.write(&w.file, path, &w.data[w.range.start + written..w.range.end], w.offset + written as u64)?;
        }
        drop(w.data);
        self.writer.done(&w.slot, w.counts)
    }
}

impl WriteLane<'_, '_> {
    /// Take a buffer slot for a chunk about to go out: wait until fewer than [`IN_FLIGHT`] are.
    fn take_buffer(&mut self) -> Result<()> {
        while self.buffers >= IN_FLIGHT && self.busy > 0 {
            self.reap(1)?;
        }
        self.buffers += 1;
        Ok(())
    }

    /// Hand the buffer slot of `data` back if none of its writes is in flight any more.
    fn release_buffer(&mut self, data: &Arc<Decoded>) {
        if Arc::strong_count(data) == 1 {
            self.buffers -= 1;
        }
    }

    /// Start writing `range` of `data` (aligned for direct I/O) at `offset` of file `id`; it counts
    /// as `counts` of the file's bytes when it completes.
    fn submit(&mut self, slot: &Arc<Slot>, file: &Arc<OpenFile>, data: &Arc<Decoded>, range: std::ops::Range<usize>, offset: u64, counts: u64) -> Result<()> {
        if self.busy == WRITES {
            self.reap(1)?;
        }
        let key = self.flight.iter().position(Option::is_none).expect("a free slot after reaping");
        use std::os::unix::io::AsRawFd;
        let op =
            io_uring::opcode::Write::new(io_uring::types::Fd(file.file.as_raw_fd()), data[range.clone()].as_ptr(), range.len() as u32).offset(offset).build().user_data(key as u64);
        let ring = self.ring.as_mut().expect("only with a ring");
        // SAFETY: the buffer and the descriptor live in `flight` until the kernel reports the write
        // complete (`reap`), and the lane waits for every write before it is dropped.
        unsafe { ring.submission().push(&op) }.map_err(|_| Error::new(ErrorKind::Io, "internal: io_uring submission queue full"))?;
        self.flight[key] = Some(InFlight { slot: slot.clone(), offset, file: file.clone(), data: data.clone(), range, counts });
        self.busy += 1;
        self.writer.uring_used.store(true, Ordering::Relaxed);
        if let Err(e) = ring.submit() {
            if e.raw_os_error() != Some(libc::EINTR) && e.raw_os_error() != Some(libc::EAGAIN) && e.raw_os_error() != Some(libc::EBUSY) {
                return Err(Error::io(ErrorKind::Io, "io_uring: cannot submit a write", e));
            }
        }
        Ok(())
    }
}

impl Lane for WriteLane<'_, '_> {
    fn chunk(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> Result<()> {
        // A hollow file's chunks (in a packed frame read for another file) are dropped too.
        let Some(slot) = self.writer.slot(file_id)? else { return Ok(()) };
        let handle = self.writer.handle(&slot, data.map(<[u8]>::len))?;
        if let (Some(data), Some(f)) = (data, &handle) {
            self.writer.write(f, &slot.path, data, offset)?;
        }
        drop(handle);
        self.writer.done(&slot, len as u64)
    }

    fn owned(&mut self, file_id: u32, offset: u64, mut data: Decoded) -> Result<()> {
        let Some(slot) = self.writer.slot(file_id)? else { return Ok(()) };
        let Some(file) = self.writer.handle(&slot, Some(data.len()))? else {
            return Err(Error::new(ErrorKind::Io, format!("internal: a chunk of {} came after its last", slot.path.display())));
        };
        // A direct file's last, partial block goes out zero-padded to the block, in the chunk's own
        // buffer (a whole number of blocks long: direct I/O needs a transfer size that is); the
        // file is trimmed back when it is done. The write counts as the chunk's own length.
        let len = data.len();
        if file.direct && len % ALIGN != 0 {
            data.set_len(len.next_multiple_of(ALIGN));
            data[len..].fill(0);
            file.padded.store(true, Ordering::Release);
        }
        if self.ring.is_none() || !file.direct || !is_aligned(&data, offset) || data.len() > u32::MAX as usize {
            self.writer.write(&file, &slot.path, &data, offset)?;
            drop(file);
            return self.writer.done(&slot, len as u64);
        }
        self.take_buffer()?;
        let data = Arc::new(data);
        self.submit(&slot, &file, &data, 0..data.len(), offset, len as u64)?;
        self.release_buffer(&data);
        drop(data);
        self.reap(0)
    }

    fn owned_pieces(&mut self, data: Decoded, pieces: &[Piece]) -> Result<()> {
        let data = Arc::new(data);
        let mut held = false;
        // The file of the piece before (a frame's pieces are mostly one file's, or each its own).
        let mut last: Option<(u32, Arc<Slot>, Option<Arc<OpenFile>>)> = None;
        for (file_id, offset, r) in pieces {
            if last.as_ref().is_none_or(|(id, _, _)| id != file_id) {
                // A hollow file's pieces (in a frame read for another file) are dropped.
                let Some(slot) = self.writer.slot(*file_id)? else {
                    last = None;
                    continue;
                };
                let file = self.writer.handle(&slot, Some(r.len()))?;
                last = Some((*file_id, slot, file));
            }
            let Some((_, slot, file)) = &last else { continue };
            let (slot, Some(file)) = (slot.clone(), file.clone()) else {
                // Created and let go already: counted, as a chunk is.
                self.writer.done(slot, r.len() as u64)?;
                continue;
            };
            // Small or unaligned pieces (a page an incremental changed, a file's tail) go through
            // the page cache; large aligned ones straight to the disk, several in flight.
            let direct = self.ring.is_some() && file.direct && r.len() >= SMALL_WRITE && is_aligned(&data[r.clone()], *offset) && r.len() <= u32::MAX as usize;
            if !direct {
                self.writer.write(&file, &slot.path, &data[r.clone()], *offset)?;
                self.writer.done(&slot, r.len() as u64)?;
                continue;
            }
            if !held {
                self.take_buffer()?;
                held = true;
            }
            self.submit(&slot, &file, &data, r.clone(), *offset, r.len() as u64)?;
        }
        if held {
            self.release_buffer(&data);
        }
        drop(data);
        self.reap(0)
    }

    fn finish(&mut self) -> Result<()> {
        let mut first_err = None;
        while self.busy > 0 {
            let before = self.busy;
            if let Err(e) = self.reap(1) {
                first_err.get_or_insert(e);
                if self.busy == before {
                    // The wait itself failed: `drop` deals with what is still in flight.
                    break;
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for WriteLane<'_, '_> {
    /// The kernel may still be writing from buffers this lane owns: wait for every write before
    /// they are freed (an error path that left early gets here too).
    fn drop(&mut self) {
        let Some(ring) = &mut self.ring else { return };
        while self.flight.iter().any(Option::is_some) {
            if let Err(e) = ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    // Waiting is impossible: leak the buffers rather than free memory in use.
                    std::mem::forget(std::mem::take(&mut self.flight));
                    return;
                }
            }
            for c in ring.completion() {
                if let Some(slot) = self.flight.get_mut(c.user_data() as usize) {
                    *slot = None;
                }
            }
        }
    }
}
