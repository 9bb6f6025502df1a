//! Another host's files through its agent, as the backup engine opens them ([`Files`]).
//!
//! Each open file holds a connection of a pool (one per reader thread, so several reads are in
//! flight at once) and streams: opening asks for the file's stat and its first
//! [`FIRST`] bytes in one round trip (most of a cluster's small files come whole with it), and
//! sequential reads keep up to [`AHEAD`] bytes requested beyond what has been consumed, so the
//! link never waits on a round trip. A read elsewhere drops what is in flight and starts again
//! there. A link that fails is dialled again and the read resumed where it stood, up to
//! [`RETRIES`] times, then the read fails naming the agent and the cause.
//!
//! When the agent compresses ([`AgentFiles::compressing`], `--compress-on agent`), a large file's
//! chunks are asked for compressed ([`Request::ReadChunks`]) and handed to the engine as they
//! came ([`SourceFile::read_stored_at`]), kept ahead the same way; small files still come raw,
//! whole with the stat, to be packed on the backup host.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sheaf_core::codec::CodecSpec;
use sheaf_core::format::{PACK_LIMIT, ZERO_FRAME};
use sheaf_core::manifest::EntryKind;
use sheaf_core::retry::Backoff;
use sheaf_core::source::{FileStat, Files, Listed, Listing, SourceFile, StoredChunk};
use sheaf_core::{Error, ErrorKind, Result};

use crate::client::{AgentClient, Answer, ListPart};
use crate::proto::{ChunkHead, HelloReply, ReadEnd, Request, WireListed};

/// Bytes asked for with the stat at open.
pub const FIRST: u64 = 256 << 10;
/// Bytes kept requested ahead of a sequential reader.
pub const AHEAD: u64 = 8 << 20;
/// One request's bytes.
const WINDOW: u64 = 4 << 20;
/// Times a failed link is dialled again before a read fails.
pub const RETRIES: u32 = 3;

struct Inner {
    addr: String,
    tls_dir: PathBuf,
    idle: Mutex<Vec<AgentClient>>,
    /// How long a connection waits for the agent ([`AgentClient::connect_within`]).
    timeout: Duration,
    /// The codec the agent compresses large files with, when it does.
    squeeze: Option<String>,
    /// File bytes received from the agent, raw or compressed: what crossed the link.
    received: AtomicU64,
}

impl Inner {
    fn take(&self) -> Result<AgentClient> {
        if let Some(c) = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok(c);
        }
        AgentClient::connect_within(&self.addr, &self.tls_dir, self.timeout)
    }

    fn give(&self, c: AgentClient) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push(c);
    }

    /// A new connection (never a pooled one: after a failed link those may be dead too).
    fn dial(&self) -> Result<AgentClient> {
        AgentClient::connect_within(&self.addr, &self.tls_dir, self.timeout)
    }
}

/// How a read whose link failed is tried again: on a new connection, resumed where the stream
/// stood, after 0.5, 1 and 2 s; only what [`Error::is_transient`] says (the link's failures,
/// never a refusal).
const RECONNECT: Backoff = Backoff::new(1 + RETRIES, Duration::from_millis(500), Duration::from_secs(4));

/// Where an agent is and how a backup reads through it (`sheaf backup --agent`, `--tls-dir`,
/// `--agent-timeout`, `--compress-on agent`).
#[derive(Clone, Debug)]
pub struct AgentAt {
    /// `HOST:PORT`.
    pub addr: String,
    /// The folder `sheaf agent --init-certs` made: the CA's certificate and this host's.
    pub tls_dir: PathBuf,
    /// The longest wait for the agent, for the connection and then each answer's next bytes.
    pub timeout: Duration,
    /// The agent compresses large files' chunks with this codec ([`AgentFiles::compressing`]).
    pub compress: Option<CodecSpec>,
}

impl AgentAt {
    /// Connect: the agent's files, compressed there when asked.
    ///
    /// # Errors
    /// As [`AgentFiles::connect_within`] and [`AgentFiles::compressing`].
    pub fn connect(&self) -> Result<AgentFiles> {
        let files = AgentFiles::connect_within(&self.addr, &self.tls_dir, self.timeout)?;
        match self.compress {
            Some(codec) => files.compressing(codec),
            None => Ok(files),
        }
    }
}

/// A host's files through its agent.
#[derive(Clone)]
pub struct AgentFiles {
    inner: Arc<Inner>,
    /// What the agent said at hello.
    pub hello: HelloReply,
}

fn listed(w: WireListed, abs: PathBuf, rel: String, root: u16) -> Listed {
    let mut entry = w.entry;
    entry.root = root;
    entry.path = rel;
    Listed { entry, abs, dev: w.dev, ino: w.ino, nlink: w.nlink }
}

/// A tree on the agent's host as the agent walks it: one connection held until the listing's
/// end, one batch of entries in memory.
struct AgentWalk {
    inner: Arc<Inner>,
    /// Given back to the pool at the end; dropped after an error (it may be out of step).
    client: Option<AgentClient>,
    root: PathBuf,
    root_id: u16,
    batch: std::vec::IntoIter<WireListed>,
    warnings: Vec<String>,
}

impl Iterator for AgentWalk {
    type Item = Result<Listed>;

    fn next(&mut self) -> Option<Result<Listed>> {
        loop {
            if let Some(w) = self.batch.next() {
                let rel = w.entry.path.clone();
                let abs = if rel.is_empty() { self.root.clone() } else { self.root.join(&rel) };
                return Some(Ok(listed(w, abs, rel, self.root_id)));
            }
            match self.client.as_mut()?.list_part() {
                Ok(ListPart::Entries(b)) => self.batch = b.into_iter(),
                Ok(ListPart::End(w)) => {
                    self.warnings.extend(w);
                    self.inner.give(self.client.take().expect("checked above"));
                    return None;
                }
                Err(e) => {
                    self.client = None;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl Listing for AgentWalk {
    fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }
}

impl AgentFiles {
    /// Connect to the agent at `addr` with the certificates in `tls_dir`.
    ///
    /// # Errors
    /// As [`AgentClient::connect`].
    pub fn connect(addr: &str, tls_dir: &Path) -> Result<AgentFiles> {
        Self::connect_within(addr, tls_dir, crate::client::TIMEOUT)
    }

    /// As [`AgentFiles::connect`], each connection waiting at most `timeout` for the agent (a link
    /// silent that long fails the read, which is then tried again on a new connection).
    ///
    /// # Errors
    /// As [`AgentClient::connect`].
    pub fn connect_within(addr: &str, tls_dir: &Path, timeout: Duration) -> Result<AgentFiles> {
        let first = AgentClient::connect_within(addr, tls_dir, timeout)?;
        let hello = first.hello.clone();
        let inner = Arc::new(Inner { addr: addr.to_string(), tls_dir: tls_dir.to_path_buf(), idle: Mutex::new(vec![first]), timeout, squeeze: None, received: AtomicU64::new(0) });
        Ok(AgentFiles { inner, hello })
    }

    /// These files with the agent compressing large files' chunks with `codec` (not `auto`: the
    /// agent keeps one level), for a link slower than the codec.
    ///
    /// # Errors
    /// `auto` or `none`: nothing for the agent to do, or a level it cannot steer.
    pub fn compressing(self, codec: CodecSpec) -> Result<AgentFiles> {
        if codec.is_auto() {
            return Err(Error::invalid("--compress-on agent compresses at one level: give --compression a codec and level (e.g. zstd:low), not auto"));
        }
        if codec.kind == sheaf_core::CodecKind::None {
            return Err(Error::invalid("--compress-on agent with --compression none: there is nothing for the agent to compress; leave --compress-on out, or choose a codec"));
        }
        let idle = std::mem::take(&mut *self.inner.idle.lock().unwrap_or_else(|p| p.into_inner()));
        let inner = Arc::new(Inner {
            addr: self.inner.addr.clone(),
            tls_dir: self.inner.tls_dir.clone(),
            idle: Mutex::new(idle),
            timeout: self.inner.timeout,
            squeeze: Some(codec.to_string()),
            received: AtomicU64::new(0),
        });
        Ok(AgentFiles { inner, hello: self.hello })
    }

    /// File bytes received from the agent so far, raw or compressed as they crossed the link.
    pub fn received(&self) -> u64 {
        self.inner.received.load(Ordering::Relaxed)
    }

    /// One request (a stat, a folder's names, a small file), and while the link fails, the same
    /// again on a new connection, as [`RECONNECT`] says: each is asked whole, so asking again is
    /// safe (`f` starts its answer afresh each time).
    fn with<T>(&self, what: &str, mut f: impl FnMut(&mut AgentClient) -> Result<T>) -> Result<T> {
        RECONNECT
            .run(|n| {
                let mut c = if n == 0 { self.inner.take()? } else { self.inner.dial()? };
                let r = f(&mut c);
                // After an error the connection may be out of step (a broken link): not reused.
                if r.is_ok() {
                    self.inner.give(c);
                }
                r
            })
            .map_err(|e| if e.is_transient() { e.context(format!("{what} (gave up after {RETRIES} new connections)")) } else { e })
    }
}

impl Files for AgentFiles {
    fn walk(&self, root: &Path, root_id: u16) -> Result<Box<dyn Listing>> {
        let mut client = self.inner.take()?;
        client.start_list(&root.display().to_string())?;
        Ok(Box::new(AgentWalk { inner: self.inner.clone(), client: Some(client), root: root.to_path_buf(), root_id, batch: Vec::new().into_iter(), warnings: Vec::new() }))
    }

    fn each_name(&self, dir: &Path, each: &mut dyn FnMut(&std::ffi::OsStr)) -> Result<()> {
        self.with(&format!("listing {}", dir.display()), |c| c.names(&dir.display().to_string(), |n| each(std::ffi::OsStr::new(n))))
    }

    fn list_one(&self, abs: &Path, rel: String, root_id: u16) -> Result<Option<Listed>> {
        match self.with(&format!("reading {}", abs.display()), |c| c.stat(&abs.display().to_string())) {
            Ok(w) => Ok(Some(listed(w, abs.to_path_buf(), rel, root_id))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read_small(&self, abs: &Path) -> Result<Option<Vec<u8>>> {
        let path = abs.display().to_string();
        let read = || -> Result<Option<Vec<u8>>> {
            let mut out = Vec::new();
            match self.with(&format!("reading {path}"), |c| {
                out.clear();
                c.read(&path, 0, 16 << 20, |d| {
                    out.extend_from_slice(d);
                    Ok(())
                })
            }) {
                Ok(_) => Ok(Some(out)),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        };
        sheaf_core::source::settled(read, &format!("{path} on the agent's host"))
    }

    fn host(&self) -> Option<String> {
        Some(format!("the agent at {}", self.inner.addr))
    }

    fn open(&self, path: &Path) -> Result<Box<dyn SourceFile>> {
        let mut f = RemoteFile {
            inner: self.inner.clone(),
            path: path.display().to_string(),
            conn: None,
            stat: FileStat::default(),
            stats_given: 0,
            pos: 0,
            asked_to: 0,
            inflight: VecDeque::new(),
            buffered: Vec::new(),
            used: 0,
            eof: None,
            changed: false,
            chunked: false,
            chunk: 0,
            chunks: VecDeque::new(),
            arrive: 0,
        };
        f.retrying(RemoteFile::open).map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                Error::new(ErrorKind::NotFound, format!("{} vanished before it was read", path.display()))
            } else {
                e
            }
        })?;
        Ok(Box::new(f))
    }
}

/// A file open on the agent's host, streamed.
struct RemoteFile {
    inner: Arc<Inner>,
    path: String,
    conn: Option<AgentClient>,
    /// Its stat at open.
    stat: FileStat,
    stats_given: u32,
    /// The offset of the next byte the stream delivers (`buffered[used..]` starts there).
    pos: u64,
    /// The end of the last range asked for.
    asked_to: u64,
    /// Ranges asked for whose end has not arrived: (start, end).
    inflight: VecDeque<(u64, u64)>,
    buffered: Vec<u8>,
    used: usize,
    /// Where the file ended, when a read came back short.
    eof: Option<u64>,
    /// A read's end said the file changed, or it was another size when opened again.
    changed: bool,
    /// What is in flight is compressed chunks ([`Request::ReadChunks`]), not raw bytes.
    chunked: bool,
    /// Raw bytes per chunk asked for.
    chunk: u32,
    /// Chunks arrived and not yet taken: (offset, the frame's payload).
    chunks: VecDeque<(u64, Vec<u8>)>,
    /// The offset of the next chunk to arrive.
    arrive: u64,
}

impl RemoteFile {
    fn conn(&mut self) -> Result<&mut AgentClient> {
        if self.conn.is_none() {
            self.conn = Some(self.inner.take()?);
        }
        Ok(self.conn.as_mut().expect("just set"))
    }

    fn ask(&mut self, from: u64, len: u64) -> Result<()> {
        let path = self.path.clone();
        self.conn()?.send(&Request::Read { path, offset: from, len })?;
        self.inflight.push_back((from, from + len));
        self.asked_to = from + len;
        Ok(())
    }

    fn ask_chunks(&mut self, from: u64, len: u64) -> Result<()> {
        let (path, chunk) = (self.path.clone(), self.chunk);
        let codec = self.inner.squeeze.clone().unwrap_or_default();
        self.conn()?.send(&Request::ReadChunks { path, offset: from, len, chunk, codec })?;
        self.inflight.push_back((from, from + len));
        self.asked_to = from + len;
        Ok(())
    }

    /// Stat and the first bytes, in one round trip (when the agent compresses, only what a file
    /// packed on this side can hold: a larger one comes compressed).
    fn open(&mut self) -> Result<()> {
        let path = self.path.clone();
        self.conn()?.send(&Request::Stat { path })?;
        self.ask(0, if self.inner.squeeze.is_some() { PACK_LIMIT } else { FIRST })?;
        let c = self.conn.as_mut().expect("connected");
        let stat = match c.answer()? {
            Answer::Reply(b) => serde_json::from_slice::<WireListed>(b).map_err(|e| self.garbled(&format!("a stat that does not parse ({e})")))?,
            Answer::Refused(e) => {
                let e = e.into_error(&self.inner.addr);
                self.drain()?;
                return Err(e);
            }
            _ => return Err(self.garbled("an answer out of turn")),
        };
        if stat.entry.kind == EntryKind::Symlink {
            self.drain()?;
            return Err(Error::new(ErrorKind::Source, format!("{} became a symbolic link while the backup ran", self.path)));
        }
        self.stat = FileStat {
            len: stat.entry.size,
            mtime: stat.entry.mtime_ns.div_euclid(1_000_000_000),
            mtime_nsec: stat.entry.mtime_ns.rem_euclid(1_000_000_000),
            is_file: stat.entry.kind == EntryKind::File,
        };
        if !self.stat.is_file {
            self.drain()?;
        }
        Ok(())
    }

    /// Read and drop every answer still in flight, so the connection is in step again.
    fn drain(&mut self) -> Result<()> {
        while !self.inflight.is_empty() {
            self.next_frame()?;
        }
        self.buffered.clear();
        self.used = 0;
        self.chunks.clear();
        Ok(())
    }

    /// The next frame of the stream, into `buffered` (data) or closing the oldest range (end).
    fn next_frame(&mut self) -> Result<()> {
        let addr = self.inner.addr.clone();
        let garbled = |what: &str| Error::new(ErrorKind::Source, format!("agent at {addr}: {what}"));
        let c = self.conn.as_mut().ok_or_else(|| garbled("no connection"))?;
        match c.answer()? {
            Answer::Data(d) => {
                if self.used == self.buffered.len() {
                    self.buffered.clear();
                    self.used = 0;
                }
                self.buffered.extend_from_slice(d);
                self.inner.received.fetch_add(d.len() as u64, Ordering::Relaxed);
            }
            Answer::Chunk(d) => {
                self.inner.received.fetch_add(d.len() as u64, Ordering::Relaxed);
                let (head, _) = ChunkHead::decode(d).ok_or_else(|| garbled("a chunk frame cut short"))?;
                self.chunks.push_back((self.arrive, d.to_vec()));
                self.arrive += u64::from(head.raw_len);
            }
            Answer::End(ReadEnd { read, size_at_open, changed }) => {
                let (start, end) = self.inflight.pop_front().ok_or_else(|| garbled("an end out of turn"))?;
                // The next range's chunks start where this one was asked to end (after a short
                // one, past a gap: not taken).
                self.arrive = end;
                if changed || size_at_open != self.stat.len {
                    self.changed = true;
                }
                if start + read < end {
                    self.eof = Some(self.eof.map_or(start + read, |e: u64| e.min(start + read)));
                }
            }
            Answer::Refused(e) => {
                self.inflight.pop_front();
                return Err(e.into_error(&addr));
            }
            Answer::Reply(_) | Answer::List(_) => return Err(garbled("an answer out of turn")),
        }
        Ok(())
    }

    /// Restart the stream at `offset`, of raw bytes or of `chunk`-byte compressed chunks: what
    /// is in flight is dropped.
    fn restart(&mut self, offset: u64, chunk: Option<u32>) -> Result<()> {
        self.drain()?;
        self.pos = offset;
        self.asked_to = offset;
        self.arrive = offset;
        self.eof = None;
        self.chunked = chunk.is_some();
        self.chunk = chunk.unwrap_or(0);
        Ok(())
    }

    /// The compressed chunk of `want` raw bytes at `offset`, into `out`.
    fn chunk_once(&mut self, out: &mut [u8], offset: u64, want: usize) -> Result<StoredChunk> {
        let last = offset + want as u64 >= self.stat.len;
        if !self.chunked || offset != self.pos || (want as u32 != self.chunk && !last) {
            self.restart(offset, Some(want as u32))?;
        }
        // Ahead in whole chunks, so that every range starts on a chunk the engine asks for.
        let chunk = u64::from(self.chunk.max(1));
        let window = (WINDOW / chunk).max(1) * chunk;
        let ahead = (AHEAD / chunk).max(2) * chunk;
        let want_end = offset + want as u64;
        let cap = if self.eof.is_some() { self.asked_to } else { self.stat.len.max(want_end) };
        let goal = (offset + ahead).min(cap);
        while self.asked_to < goal {
            let len = window.min(goal - self.asked_to);
            self.ask_chunks(self.asked_to, len)?;
        }
        loop {
            if let Some((at, frame)) = self.chunks.pop_front() {
                if at != self.pos {
                    // Past a range that came back short: the file ended there.
                    self.chunks.clear();
                    return Ok(StoredChunk { raw_len: 0, codec: ZERO_FRAME, stored_len: 0, raw_crc: 0 });
                }
                let (head, stored) = ChunkHead::decode(&frame).expect("checked on arrival");
                let raw_len = head.raw_len as usize;
                if raw_len > want || stored.len() > out.len() {
                    return Err(self.garbled(&format!("a chunk of {raw_len} bytes ({} stored) where {want} were asked", stored.len())));
                }
                out[..stored.len()].copy_from_slice(stored);
                self.pos += raw_len as u64;
                return Ok(StoredChunk { raw_len, codec: head.codec, stored_len: stored.len(), raw_crc: head.raw_crc });
            }
            if self.eof.is_some_and(|e| self.pos >= e) || self.inflight.is_empty() {
                return Ok(StoredChunk { raw_len: 0, codec: ZERO_FRAME, stored_len: 0, raw_crc: 0 });
            }
            self.next_frame()?;
        }
    }

    fn read_once(&mut self, buf: &mut [u8], offset: u64) -> Result<usize> {
        if offset != self.pos || self.chunked {
            self.restart(offset, None)?;
        }
        let want_end = offset + buf.len() as u64;
        // Keep the stream asked ahead, within the file's size at open (or what this read wants
        // past it), unless a read already met the end.
        let cap = if self.eof.is_some() { self.asked_to } else { self.stat.len.max(want_end) };
        let goal = (want_end + AHEAD).min(cap);
        while self.asked_to < goal {
            let len = WINDOW.min(goal - self.asked_to);
            self.ask(self.asked_to, len)?;
        }
        let mut got = 0;
        while got < buf.len() {
            let have = self.buffered.len() - self.used;
            if have > 0 {
                let n = have.min(buf.len() - got);
                buf[got..got + n].copy_from_slice(&self.buffered[self.used..self.used + n]);
                self.used += n;
                got += n;
                self.pos += n as u64;
                continue;
            }
            if self.eof.is_some_and(|e| self.pos >= e) || self.inflight.is_empty() {
                break;
            }
            self.next_frame()?;
        }
        Ok(got)
    }
}

impl SourceFile for RemoteFile {
    fn stat(&mut self) -> Result<FileStat> {
        self.stats_given += 1;
        if self.stats_given == 1 || !self.changed {
            return Ok(self.stat);
        }
        // Changed while read: what it is now.
        self.drain()?;
        let path = self.path.clone();
        let c = self.conn()?;
        let w = c.stat(&path)?;
        Ok(FileStat {
            len: w.entry.size,
            mtime: w.entry.mtime_ns.div_euclid(1_000_000_000),
            mtime_nsec: w.entry.mtime_ns.rem_euclid(1_000_000_000),
            is_file: w.entry.kind == EntryKind::File,
        })
    }

    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<usize> {
        self.retrying(|f| f.read_once(buf, offset))
    }

    fn read_stored_at(&mut self, out: &mut [u8], offset: u64, want: usize) -> Option<Result<StoredChunk>> {
        self.inner.squeeze.as_ref()?;
        Some(self.retrying(|f| f.chunk_once(out, offset, want)))
    }
}

impl RemoteFile {
    /// What the agent sent that this side cannot take (permanent: the link did not fail).
    fn garbled(&self, what: &str) -> Error {
        Error::new(ErrorKind::Source, format!("agent at {}: {}: {what}", self.inner.addr, self.path))
    }

    /// `op`, and while it fails with a transient error (the link's), the same again on a new
    /// connection, resuming where the stream stood, as [`RECONNECT`] says.
    fn retrying<T>(&mut self, mut op: impl FnMut(&mut RemoteFile) -> Result<T>) -> Result<T> {
        let path = self.path.clone();
        RECONNECT
            .run(|n| {
                if n > 0 {
                    self.conn = None;
                    self.inflight.clear();
                    self.buffered.clear();
                    self.chunks.clear();
                    self.used = 0;
                    self.asked_to = self.pos;
                    self.arrive = self.pos;
                    self.eof = None;
                    self.conn = Some(self.inner.dial()?);
                }
                op(self)
            })
            .map_err(|e| if e.is_transient() { e.context(format!("reading {path} (gave up after {RETRIES} new connections)")) } else { e })
    }
}

impl Drop for RemoteFile {
    fn drop(&mut self) {
        // Back to the pool only in step: what is in flight is read first (at most AHEAD bytes).
        if self.conn.is_some() && self.drain().is_ok() {
            if let Some(c) = self.conn.take() {
                self.inner.give(c);
            }
        }
    }
}
