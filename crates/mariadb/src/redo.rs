//! InnoDB's redo log (MariaDB 10.8 and later: one circular file, `ib_logfile0`) and its copy.
//!
//! The file: a 512-byte header block (format `Phys`, the LSN at which its records start, the
//! creator, a CRC-32C), two checkpoint blocks at 4096 and 8192 (checkpoint LSN, end LSN,
//! CRC-32C at +60), then records from 12288, circular: the byte of LSN `l` is at
//! `12288 + (l - first_lsn) % (size - 12288)`.
//!
//! **The copy.** [`Head::read`] takes the first 12288 bytes when the backup starts; its newest
//! checkpoint `X` is where recovery will begin. A [`Follower`] thread then copies the log from `X`
//! as the server writes it (up to `Innodb_lsn_flushed`, every byte of which is in the file),
//! until the backup's end LSN, into a spill file, as mariabackup does: a new head whose records
//! start at `X` ([`Head::for_copy`]), then the mini-transactions of `[X, end)` in LSN order, each
//! checked ([`Framer`]: its CRC-32C, and the sequence bit of the pass through the file it was
//! written in) and its sequence byte set to 1, so that the restore's log ([`rebuild`]) holds
//! them from its start without ever wrapping, however much the server wrote during the backup.
//!
//! **Overwrites.** The server writes LSN `l + capacity` where LSN `l` was. After reading the bytes
//! from `a` on, the follower asks for `Innodb_lsn_current`: if it has reached `a + capacity`, what
//! was read may have been overwritten while it was read, and the backup fails, naming the log's
//! size and the fix, rather than keep a log that cannot recover (a mini-transaction read over
//! would fail its checksum or sequence bit too). The least headroom seen (`a + capacity -
//! current`) is reported, so that a DBA sees how close a backup came.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sheaf_core::{Error, ErrorKind, Result};

use crate::server::Server;

/// Where records start, and the size of what [`Head`] keeps.
pub const START: u64 = 12288;
/// The header's format word: "Phys" (10.8's), bit 31 set when the log is encrypted.
const FORMAT_10_8: u32 = 0x5068_7973;
const CHECKPOINTS: [u64; 2] = [4096, 8192];
/// Bytes read from the log at once.
const READ: usize = 1 << 20;
/// The server writes the log in blocks of this much, the last one padded past its LSN.
const BLOCK: u64 = 4096;
/// How often [`Follower::finish`] looks whether the copy is through.
const POLL: Duration = Duration::from_millis(10);

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The log's first 12288 bytes, read when the backup starts, and what they say.
#[derive(Clone, Debug)]
pub struct Head {
    /// The bytes, as read.
    pub bytes: Vec<u8>,
    /// The LSN of the byte at [`START`].
    pub first_lsn: u64,
    /// The file's size.
    pub file_size: u64,
    /// The newest valid checkpoint's LSN: where recovery begins, and the copy.
    pub checkpoint: u64,
    /// The end LSN written with it: where its `FILE_CHECKPOINT` record is.
    pub checkpoint_end: u64,
    /// The header's creator, e.g. `MariaDB 10.11.19`.
    pub creator: String,
}

impl Head {
    /// Parse `bytes` (the first 12288 of a log file of `file_size` bytes named `path`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for another format (before 10.8, encrypted);
    /// [`ErrorKind::Corrupt`] for a header or checkpoints that do not check out.
    pub fn parse(bytes: Vec<u8>, file_size: u64, path: &Path) -> Result<Head> {
        let shown = path.display();
        if bytes.len() < START as usize || file_size <= START {
            return Err(Error::corrupt(format!("{shown}: shorter than a redo log's 12288-byte header")));
        }
        let format = be32(&bytes, 0);
        if format == FORMAT_10_8 | 1 << 31 {
            return Err(Error::invalid(format!(
                "{shown}: the redo log is encrypted (innodb_encrypt_log): sheaf does not read an encrypted redo log yet; back this server up with mariadb-backup"
            )));
        }
        if format != FORMAT_10_8 {
            return Err(Error::invalid(format!("{shown}: not the redo log format of MariaDB 10.8 and later (format word {format:#010x}, not \"Phys\")")));
        }
        if crc32c::crc32c(&bytes[..508]) != be32(&bytes, 508) {
            return Err(Error::corrupt(format!("{shown}: the redo log header's checksum does not match")));
        }
        let first_lsn = be64(&bytes, 8);
        if first_lsn < START {
            return Err(Error::corrupt(format!("{shown}: the redo log header's first LSN {first_lsn} is below {START}")));
        }
        let creator = String::from_utf8_lossy(&bytes[16..48]).trim_end_matches('\0').to_string();
        let (checkpoint, checkpoint_end) = CHECKPOINTS
            .iter()
            .map(|&at| &bytes[at as usize..at as usize + 64])
            .filter(|b| crc32c::crc32c(&b[..60]) == be32(b, 60))
            .map(|b| (be64(b, 0), be64(b, 8)))
            .filter(|&(lsn, end)| lsn >= first_lsn && end >= lsn)
            .max()
            .ok_or_else(|| Error::corrupt(format!("{shown}: neither of the redo log's checkpoint blocks checks out")))?;
        Ok(Head { bytes, first_lsn, file_size, checkpoint, checkpoint_end, creator })
    }

    /// Read the head of the log at `path`.
    ///
    /// # Errors
    /// It cannot be read (named, with who sheaf runs as); [`Head::parse`]'s.
    pub fn read(path: &Path) -> Result<Head> {
        let f = File::open(path).map_err(|e| unreadable(path, e))?;
        let size = f.metadata().map_err(|e| unreadable(path, e))?.len();
        let mut bytes = vec![0u8; START as usize];
        f.read_exact_at(&mut bytes, 0).map_err(|e| unreadable(path, e))?;
        Head::parse(bytes, size, path)
    }

    /// The head of the copy: this one's format and creator, its records starting at the
    /// checkpoint (`first_lsn`), which its first checkpoint block names with the end LSN the
    /// server wrote beside it (where its `FILE_CHECKPOINT` record is); the second block empty.
    pub fn for_copy(&self) -> Vec<u8> {
        let mut h = self.bytes.clone();
        h[8..16].copy_from_slice(&self.checkpoint.to_be_bytes());
        let crc = crc32c::crc32c(&h[..508]);
        h[508..512].copy_from_slice(&crc.to_be_bytes());
        h[512..].fill(0);
        let c = CHECKPOINTS[0] as usize;
        h[c..c + 8].copy_from_slice(&self.checkpoint.to_be_bytes());
        h[c + 8..c + 16].copy_from_slice(&self.checkpoint_end.to_be_bytes());
        let crc = crc32c::crc32c(&h[c..c + 60]);
        h[c + 60..c + 64].copy_from_slice(&crc.to_be_bytes());
        h
    }

    /// The sequence bit of the mini-transaction whose terminator is at `lsn`: 1 on the first pass
    /// through the file, flipped at each wrap.
    pub fn sequence_bit(&self, lsn: u64) -> u8 {
        u8::from((lsn - self.first_lsn) / self.capacity() % 2 == 0)
    }

    /// The bytes the records may fill before they wrap.
    pub fn capacity(&self) -> u64 {
        self.file_size - START
    }

    /// Where the byte of `lsn` is in the file.
    pub fn offset_of(&self, lsn: u64) -> u64 {
        START + (lsn - self.first_lsn) % self.capacity()
    }
}

/// The error for a server file sheaf cannot read, with the fix.
pub fn unreadable(path: &Path, e: std::io::Error) -> Error {
    let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
        format!(
            "; sheaf reads the server's files directly: run it on the server's host as the user the server runs as (or root), or give user {} read access to the data directory",
            sheaf_core::host::user_name(sheaf_core::host::effective_ids().0)
        )
    } else {
        String::new()
    };
    Error::io(ErrorKind::Source, format!("cannot read {}{hint}", path.display()), e)
}

/// The most bytes one mini-transaction may take (InnoDB's own limit is 1 MiB of records).
const MTR_MAX: usize = 8 << 20;

/// Splits the log into mini-transactions as it is copied. Each one is `[records][terminator]
/// [CRC-32C]`: a record's first byte holds its length in the low four bits (0: a varint
/// follows, and the record is 15 + its value bytes long after that first byte); a byte of 0 or 1
/// where a record would start is the terminator, the sequence bit of the pass through the file;
/// the CRC-32C (big-endian) covers the records. Each one's terminator and checksum are checked,
/// its terminator set to 1, and it is written out; an unfinished one waits for the rest.
pub(crate) struct Framer {
    pending: Vec<u8>,
    /// The LSN of `pending[0]`: through here, every mini-transaction is written out.
    lsn: u64,
}

/// Where the terminator of the mini-transaction at the start of `b` is (`None`: not all read).
fn terminator(b: &[u8]) -> Option<usize> {
    let mut j = 0;
    loop {
        let first = *b.get(j)?;
        if first <= 1 {
            return Some(j);
        }
        let mut len = usize::from(first & 0xf);
        if len == 0 {
            let v = *b.get(j + 1)?;
            let (n, base, head): (usize, u64, u64) = match v {
                0..=0x7f => (1, 0, u64::from(v)),
                0x80..=0xbf => (2, 0x80, u64::from(v & 0x3f)),
                0xc0..=0xdf => (3, 0x4080, u64::from(v & 0x1f)),
                0xe0..=0xef => (4, 0x20_4080, u64::from(v & 0x0f)),
                _ => (5, 0x1020_4080, 0),
            };
            let rest = b.get(j + 2..j + 1 + n)?;
            let value = rest.iter().fold(head, |acc, &x| acc << 8 | u64::from(x)) + base;
            len = usize::try_from(value + 15).unwrap_or(usize::MAX);
        }
        j = j.checked_add(1 + len)?;
        if j > MTR_MAX {
            // Not a mini-transaction: the caller finds it too long.
            return Some(usize::MAX);
        }
    }
}

impl Framer {
    /// A framer for the log from `lsn` on.
    pub(crate) fn new(lsn: u64) -> Framer {
        Framer { pending: Vec::new(), lsn }
    }

    /// The LSN through which whole mini-transactions have been written out.
    pub(crate) fn lsn(&self) -> u64 {
        self.lsn
    }

    /// Take `bytes` (the log's next bytes, as read) and write out every mini-transaction now whole.
    ///
    /// # Errors
    /// One that does not check out (written over while it was read, or damaged), named by LSN;
    /// `out`'s.
    pub(crate) fn push(&mut self, bytes: &[u8], head: &Head, out: &mut impl Write) -> Result<()> {
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        while let Some(t) = terminator(&self.pending[at..]) {
            let lsn = self.lsn + at as u64;
            if t == usize::MAX {
                return Err(Error::corrupt(format!("the redo log at LSN {lsn}: no mini-transaction ends within {}", sheaf_core::size::format_size(MTR_MAX as u64))));
            }
            let end = at + t;
            let Some(crc) = self.pending.get(end + 1..end + 5) else { break };
            let stored = be32(crc, 0);
            let want = head.sequence_bit(lsn + t as u64);
            if t == 0 || self.pending[end] != want || crc32c::crc32c(&self.pending[at..end]) != stored {
                return Err(Error::corrupt(format!(
                    "the redo log's mini-transaction at LSN {lsn} does not check out ({}): it was written over while sheaf read it, or the log is damaged",
                    if t == 0 {
                        "empty".to_string()
                    } else if self.pending[end] != want {
                        format!("sequence bit {}, not {want}", self.pending[end])
                    } else {
                        "its CRC-32C differs".to_string()
                    }
                )));
            }
            let io = |e| Error::io(ErrorKind::Io, "cannot write the redo log's copy (TMPDIR)", e);
            out.write_all(&self.pending[at..end]).map_err(io)?;
            out.write_all(&[1]).map_err(io)?;
            out.write_all(crc).map_err(io)?;
            at = end + 5;
        }
        self.pending.drain(..at);
        self.lsn += at as u64;
        Ok(())
    }
}

/// What the follower copied.
#[derive(Debug)]
pub struct RedoCopy {
    /// The spill: [`Head::bytes`], then the log from the checkpoint to `end_lsn`.
    pub file: tempfile::NamedTempFile,
    /// The LSN the copy begins at (the start's checkpoint).
    pub start_lsn: u64,
    /// The LSN it ends at (at least the backup's end LSN).
    pub end_lsn: u64,
    /// The least headroom seen: how many bytes the server could still have written before it
    /// overwrote what was not yet copied.
    pub least_headroom: u64,
}

struct State {
    copied: AtomicU64,
    stop: AtomicBool,
    failed: Mutex<Option<Error>>,
    least_headroom: AtomicU64,
}

/// The thread that copies the redo log as the server writes it.
pub struct Follower {
    head: Head,
    state: Arc<State>,
    thread: Option<JoinHandle<Result<tempfile::NamedTempFile>>>,
}

impl Follower {
    /// Start copying the log at `path` from `head`'s checkpoint, asking `server` (a connection of
    /// its own) how far the server has written.
    ///
    /// # Errors
    /// The spill cannot be made.
    pub fn start(path: &Path, head: Head, mut server: Server, poll: Duration) -> Result<Follower> {
        let file = File::open(path).map_err(|e| unreadable(path, e))?;
        let mut spill =
            tempfile::Builder::new().prefix("sheaf-redo.").tempfile().map_err(|e| Error::io(ErrorKind::Io, "cannot make a file for the redo log's copy (TMPDIR)", e))?;
        spill.write_all(&head.for_copy()).map_err(|e| Error::io(ErrorKind::Io, "cannot write the redo log's copy (TMPDIR)", e))?;
        let state = Arc::new(State { copied: AtomicU64::new(head.checkpoint), stop: AtomicBool::new(false), failed: Mutex::new(None), least_headroom: AtomicU64::new(u64::MAX) });
        let (h, s, p) = (head.clone(), state.clone(), path.to_path_buf());
        let thread = std::thread::Builder::new()
            .name("redo".into())
            .spawn(move || {
                let out = follow(&file, &p, &h, &mut server, spill, &s, poll);
                if let Err(e) = &out {
                    *s.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(Error::new(e.kind(), e.to_string()));
                }
                out
            })
            .map_err(|e| Error::io(ErrorKind::Io, "cannot start the redo log's follower", e))?;
        Ok(Follower { head, state, thread: Some(thread) })
    }

    /// The error that stopped the follower, if it stopped (for failing the backup early).
    pub fn failure(&self) -> Option<Error> {
        self.state.failed.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|e| Error::new(e.kind(), e.to_string()))
    }

    /// The LSN copied so far.
    pub fn copied(&self) -> u64 {
        self.state.copied.load(Ordering::Acquire)
    }

    /// Wait until the log is copied through `end_lsn` (within `wait`), then stop.
    ///
    /// # Errors
    /// The follower's failure (an overwrite, named), or the log not reaching `end_lsn` in time.
    pub fn finish(mut self, end_lsn: u64, wait: Duration) -> Result<RedoCopy> {
        let t0 = Instant::now();
        while self.copied() < end_lsn && self.failure().is_none() && t0.elapsed() < wait {
            std::thread::sleep(POLL);
        }
        let short = self.copied() < end_lsn;
        self.state.stop.store(true, Ordering::Release);
        let joined = self.thread.take().expect("running").join().map_err(|_| Error::new(ErrorKind::Io, "the redo log's follower panicked"))?;
        let file = joined?;
        if short {
            return Err(Error::new(
                ErrorKind::Source,
                format!(
                    "the redo log was copied to LSN {} but the backup ends at {end_lsn}, and the server did not write the rest to ib_logfile0 within {} s",
                    self.copied(),
                    wait.as_secs()
                ),
            ));
        }
        Ok(RedoCopy { file, start_lsn: self.head.checkpoint, end_lsn: self.copied(), least_headroom: self.state.least_headroom.load(Ordering::Relaxed) })
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn follow(file: &File, path: &Path, head: &Head, server: &mut Server, spill: tempfile::NamedTempFile, state: &State, poll: Duration) -> Result<tempfile::NamedTempFile> {
    let mut out = BufWriter::with_capacity(READ, spill);
    let mut buf = vec![0u8; READ];
    let capacity = head.capacity();
    let mut framer = Framer::new(head.checkpoint);
    // Read through here; whole mini-transactions are written through `framer.lsn()`.
    let mut read = head.checkpoint;
    let opened = file.metadata().map(|m| (m.dev(), m.ino())).ok();
    loop {
        let stopping = state.stop.load(Ordering::Acquire);
        // SET GLOBAL innodb_log_file_size replaces the file: this one is written no more.
        if std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino())) != opened {
            return Err(Error::new(
                ErrorKind::Source,
                format!(
                    "{} was replaced during the backup (the redo log resized: SET GLOBAL innodb_log_file_size?): the backup cannot follow the log across it; run it again",
                    path.display()
                ),
            ));
        }
        let flushed = server.status("Innodb_lsn_flushed")?;
        let from = read;
        while read < flushed {
            let at = head.offset_of(read);
            // One read never crosses the file's end, where the log wraps.
            let n = (flushed - read).min(READ as u64).min(head.file_size - at) as usize;
            file.read_exact_at(&mut buf[..n], at).map_err(|e| unreadable(path, e))?;
            let chunk = read;
            read += n as u64;
            // What was just read from `chunk` on must not have been written over meanwhile: the
            // server writes whole blocks, up to one past its LSN.
            let current = server.status("Innodb_lsn_current")?;
            let headroom = (chunk + capacity).saturating_sub(current + BLOCK);
            state.least_headroom.fetch_min(headroom, Ordering::Relaxed);
            if headroom == 0 {
                return Err(overwritten(head, chunk, current));
            }
            framer.push(&buf[..n], head, &mut out)?;
        }
        if read > from {
            out.flush().map_err(|e| Error::io(ErrorKind::Io, "cannot write the redo log's copy (TMPDIR)", e))?;
            state.copied.store(framer.lsn(), Ordering::Release);
        } else {
            // Nothing new: still, the log must not have run past what is not yet copied.
            let current = server.status("Innodb_lsn_current")?;
            let headroom = (read + capacity).saturating_sub(current + BLOCK);
            state.least_headroom.fetch_min(headroom, Ordering::Relaxed);
            if headroom == 0 {
                return Err(overwritten(head, read, current));
            }
        }
        if stopping {
            break;
        }
        // Asleep in short steps, so that a stop is seen at once.
        let t = Instant::now();
        while t.elapsed() < poll && !state.stop.load(Ordering::Acquire) {
            std::thread::sleep(poll.min(POLL));
        }
    }
    out.into_inner().map_err(|e| Error::io(ErrorKind::Io, "cannot write the redo log's copy (TMPDIR)", e.into_error()))
}

fn overwritten(head: &Head, at: u64, current: u64) -> Error {
    Error::new(
        ErrorKind::Source,
        format!(
            "the server wrote {} of redo log past LSN {at} before sheaf had copied it, and ib_logfile0 holds {} (innodb_log_file_size): the log wrapped over what the backup needs, and a backup without it could not recover; raise innodb_log_file_size (SET GLOBAL innodb_log_file_size = ... in 10.11 and later, at least the log written during a backup), or back up when the load is lighter",
            sheaf_core::size::format_size(current - at),
            sheaf_core::size::format_size(head.capacity())
        ),
    )
}

/// The size of the restored `ib_logfile0`: the source's, or more when the copy is longer, so
/// that the log from the checkpoint never wraps and the server, once it has recovered, finds its
/// checkpoint age well inside the log (twice the copy, in whole MiB; a log the age nears is
/// "insufficient" to it).
pub fn restored_size(source_size: u64, redo_bytes: u64) -> u64 {
    source_size.max((START + 2 * redo_bytes).div_ceil(1 << 20) * (1 << 20) + (1 << 20))
}

/// Write `ib_logfile0` in `datadir` from a copy (`redo`: the copy's head, then `redo_bytes` of log
/// from `start_lsn`, each mini-transaction checked and its sequence byte 1), `file_size` bytes
/// long; the copy stays (the caller removes it once the log has served).
///
/// # Errors
/// The copy is not what its facts say; the log cannot be written.
pub fn rebuild(datadir: &Path, redo: &Path, start_lsn: u64, redo_bytes: u64, file_size: u64) -> Result<PathBuf> {
    let mut from = File::open(redo).map_err(|e| Error::io(ErrorKind::Io, format!("cannot read {}", redo.display()), e))?;
    let copied = from.metadata().map_err(|e| Error::io(ErrorKind::Io, format!("cannot read {}", redo.display()), e))?.len();
    if copied != START + redo_bytes || copied > file_size {
        return Err(Error::corrupt(format!("{}: {copied} bytes, not the {} the backup recorded (its head and {redo_bytes} of log)", redo.display(), START + redo_bytes)));
    }
    let mut bytes = vec![0u8; START as usize];
    from.read_exact(&mut bytes).map_err(|e| Error::io(ErrorKind::Corrupt, format!("{}: shorter than a redo log's header", redo.display()), e))?;
    let head = Head::parse(bytes, file_size, redo)?;
    if head.checkpoint != start_lsn || head.first_lsn != start_lsn {
        return Err(Error::corrupt(format!("{}: its checkpoint is LSN {}, the backup's start {start_lsn}", redo.display(), head.checkpoint)));
    }
    let path = datadir.join("ib_logfile0");
    let io = |e| Error::io(ErrorKind::Io, format!("cannot write {}", path.display()), e);
    let mut out = std::fs::OpenOptions::new().create(true).write(true).truncate(true).mode(0o660).open(&path).map_err(io)?;
    out.write_all(&head.bytes).map_err(io)?;
    std::io::copy(&mut from, &mut out).map_err(io)?;
    // Zeros past the end: a terminator of the wrong sequence bit, where recovery stops.
    out.set_len(file_size).map_err(io)?;
    out.sync_all().map_err(io)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A head as a 10.11 server writes one: `first_lsn`, and checkpoints `a` (at 4096) and `b`.
    pub(crate) fn head_bytes(first_lsn: u64, a: u64, b: u64) -> Vec<u8> {
        let mut h = vec![0u8; START as usize];
        h[..4].copy_from_slice(&FORMAT_10_8.to_be_bytes());
        h[8..16].copy_from_slice(&first_lsn.to_be_bytes());
        h[16..32].copy_from_slice(b"MariaDB 10.11.19");
        let crc = crc32c::crc32c(&h[..508]);
        h[508..512].copy_from_slice(&crc.to_be_bytes());
        for (at, lsn) in [(4096usize, a), (8192, b)] {
            h[at..at + 8].copy_from_slice(&lsn.to_be_bytes());
            h[at + 8..at + 16].copy_from_slice(&lsn.to_be_bytes());
            let crc = crc32c::crc32c(&h[at..at + 60]);
            h[at + 60..at + 64].copy_from_slice(&crc.to_be_bytes());
        }
        h
    }

    #[test]
    fn the_newest_valid_checkpoint_is_where_the_copy_begins() {
        let p = Path::new("ib_logfile0");
        let h = Head::parse(head_bytes(12288, 44420, 44404), 1 << 20, p).unwrap();
        assert_eq!((h.first_lsn, h.checkpoint, h.creator.as_str()), (12288, 44420, "MariaDB 10.11.19"));
        // A torn checkpoint block (its CRC wrong) is passed over for the other.
        let mut torn = head_bytes(12288, 50000, 44404);
        torn[4096] ^= 1;
        assert_eq!(Head::parse(torn, 1 << 20, p).unwrap().checkpoint, 44404);
        let mut old = head_bytes(12288, 1, 2);
        old[..4].copy_from_slice(&1u32.to_be_bytes());
        assert!(Head::parse(old, 1 << 20, p).unwrap_err().to_string().contains("not the redo log format"));
        let mut bad = head_bytes(12288, 44420, 44404);
        bad[20] ^= 1;
        assert!(Head::parse(bad, 1 << 20, p).unwrap_err().to_string().contains("header's checksum"));
    }

    /// A mini-transaction of `records`, its terminator `seq` and CRC-32C.
    fn mtr(records: &[u8], seq: u8) -> Vec<u8> {
        let mut m = records.to_vec();
        m.push(seq);
        m.extend_from_slice(&crc32c::crc32c(records).to_be_bytes());
        m
    }

    /// Records: one of 5 bytes after its first (length in the nibble), and one of 15 + 200 bytes
    /// after its first (nibble 0, a two-byte varint of 200: 0x80 | 0, 200 - 0x80).
    fn records() -> Vec<u8> {
        let mut r = vec![0x35, 1, 2, 3, 4, 5];
        r.extend_from_slice(&[0x20, 0x80, 200 - 0x80]);
        r.extend(std::iter::repeat_n(7u8, 215 - 2));
        r
    }

    #[test]
    fn mini_transactions_are_framed_checked_and_set_to_the_first_pass() {
        // first_lsn 12288, a log of 4096 bytes' capacity: LSNs from 16384 are in the second pass,
        // whose sequence bit is 0.
        let head = Head::parse(head_bytes(12288, 16000, 12288), START + 4096, Path::new("ib_logfile0")).unwrap();
        assert_eq!((head.sequence_bit(16383), head.sequence_bit(16384)), (1, 0));
        let a = mtr(&records(), 1);
        let mut log = a.clone();
        // The next one ends in the second pass.
        let b = mtr(&[0x11, 9], 0);
        log.extend_from_slice(&b);
        let start = 16384 - a.len() as u64;
        let mut f = Framer::new(start);
        let mut out = Vec::new();
        // Fed a byte at a time: nothing is written before a mini-transaction is whole.
        for (i, byte) in log.iter().enumerate() {
            f.push(&[*byte], &head, &mut out).unwrap();
            if i + 1 < a.len() {
                assert!(out.is_empty());
            }
        }
        assert_eq!(f.lsn(), start + log.len() as u64);
        let mut want = a.clone();
        want.extend_from_slice(&mtr(&[0x11, 9], 1));
        assert_eq!(out, want, "every terminator set to 1, the rest as read");
        // Written over: an old pass's bit, or a CRC that does not match.
        let mut f = Framer::new(16384);
        let e = f.push(&mtr(&[0x11, 9], 1), &head, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("sequence bit 1, not 0"), "{e}");
        let mut bad = mtr(&[0x11, 9], 0);
        bad[1] ^= 1;
        let e = Framer::new(16384).push(&bad, &head, &mut Vec::new()).unwrap_err().to_string();
        assert!(e.contains("CRC-32C"), "{e}");
    }

    #[test]
    fn the_copy_starts_a_log_at_its_checkpoint_that_rebuilds_without_wrapping() {
        let dir = tempfile::tempdir().unwrap();
        let head = Head::parse(head_bytes(12288, 13000, 12288), START + 1000, Path::new("ib_logfile0")).unwrap();
        let copy = head.for_copy();
        let h = Head::parse(copy.clone(), START + 1000, Path::new("copy")).unwrap();
        assert_eq!((h.first_lsn, h.checkpoint, h.checkpoint_end), (13000, 13000, 13000));
        assert!(copy[8192..8256].iter().all(|&b| b == 0), "the second checkpoint block is empty");
        // 3000 bytes of log: three times the source's capacity.
        let log: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8 + 2).collect();
        let spill = dir.path().join("redo");
        std::fs::write(&spill, [copy.clone(), log.clone()].concat()).unwrap();
        let size = restored_size(START + 1000, log.len() as u64);
        assert_eq!(size, 2 << 20);
        assert_eq!(restored_size(64 << 20, 50 << 20), 102 << 20, "twice the copy and the head, in MiB, and a MiB");
        assert_eq!(restored_size(96 << 20, 1 << 20), 96 << 20, "the source's when it is larger");
        let out = rebuild(dir.path(), &spill, 13000, 3000, size).unwrap();
        let got = std::fs::read(out).unwrap();
        assert_eq!(got.len() as u64, size);
        assert_eq!(&got[..START as usize], &copy[..]);
        assert_eq!(&got[START as usize..START as usize + 3000], &log[..]);
        assert!(got[START as usize + 3000..].iter().all(|&b| b == 0));
        assert!(spill.exists(), "the copy stays until the caller is done with it");
        assert!(rebuild(dir.path(), &spill, 13000, 2999, size).unwrap_err().to_string().contains("not the"), "a copy of another length is refused");
    }
}
