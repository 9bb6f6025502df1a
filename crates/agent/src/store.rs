//! A repository another host's agent serves, as a [`Store`]: `sheaf://HOST:PORT/NAME`, reached
//! over the same mutual TLS as the agent's cluster files, with this host's client certificate.
//!
//! Names are `NAME/OBJECT`: the repository the agent serves under that name, and an object in it.
//! Connections are pooled (one per stripe written or stream read at a time). A write streams the
//! object's bytes and asks how it stands every [`CHECK_EVERY`] bytes, so that a full disk on the
//! backup host stops a long stripe early; the publish is answered once the backup host has the
//! object durably (data, name and folder synced), so a WAL segment acknowledged to PostgreSQL is
//! on the backup host's disk. Reads and listings whose link fails are asked again on a new
//! connection (reads resume where they stood).

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sheaf_core::retry::Backoff;
use sheaf_core::storage::{checked_range, no_lock, stream_range, Capabilities, Holding, Schemes, Store, Stored, StripeSink, StripeSource, UnfinishedStripe, WriteOptions};
use sheaf_core::{Error, ErrorKind, Result};

use crate::client::{AgentClient, Answer};
use crate::proto::{ReadEnd, Request, WireStored, DATA_CHUNK};

/// Bytes of an object read with its stat when it is opened.
const FIRST: u64 = 256 << 10;
/// Bytes written between two checks of how a write stands.
pub const CHECK_EVERY: u64 = 256 << 20;
/// A pooled connection idle longer than this is closed rather than used (the agent closes one
/// silent for 15 minutes).
const IDLE_MAX: Duration = Duration::from_secs(120);
/// New connections tried after a link fails, before a read, a listing or a removal fails.
const RETRIES: u32 = 3;
const RECONNECT: Backoff = Backoff::new(1 + RETRIES, Duration::from_millis(500), Duration::from_secs(4));

/// The connections to one agent.
struct Pool {
    addr: String,
    tls_dir: PathBuf,
    timeout: Duration,
    idle: Mutex<Vec<(AgentClient, Instant)>>,
}

impl Pool {
    fn take(&self) -> Result<AgentClient> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((c, since)) = idle.pop() {
            if since.elapsed() < IDLE_MAX {
                return Ok(c);
            }
        }
        drop(idle);
        self.dial()
    }

    fn dial(&self) -> Result<AgentClient> {
        AgentClient::connect_within(&self.addr, &self.tls_dir, self.timeout)
    }

    fn give(&self, c: AgentClient) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).push((c, Instant::now()));
    }

    /// `f` on a connection, and while the link fails, again on a new one: `f` asks whole, so
    /// asking again is safe.
    fn with<T>(&self, what: &str, mut f: impl FnMut(&mut AgentClient) -> Result<T>) -> Result<T> {
        RECONNECT
            .run(|n| {
                let mut c = if n == 0 { self.take()? } else { self.dial()? };
                let r = f(&mut c);
                // A refusal leaves the connection in step; a broken link or an answer this side
                // could not take (sheaf's `Source`, from the client) may not.
                if r.as_ref().is_ok() || r.as_ref().is_err_and(|e| !e.is_transient() && e.kind() != ErrorKind::Source) {
                    self.give(c);
                }
                r
            })
            .map_err(|e| as_store(if e.is_transient() { e.context(format!("{what} (gave up after {RETRIES} new connections)")) } else { e }))
    }
}

/// A failure of the link or of the agent's answer, as a store says it: I/O (as a folder or a
/// bucket does), not the `Source` a backup's reads through `--agent` give, which callers take
/// for the cluster's files.
fn as_store(e: Error) -> Error {
    if e.kind() == ErrorKind::Source {
        let transient = e.is_transient();
        Error::new(ErrorKind::Io, e.to_string()).transient(transient)
    } else {
        e
    }
}

/// Repositories served by agents, `sheaf://HOST:PORT/NAME`, with this host's client certificate
/// from `tls_dir`.
pub struct ServedSchemes {
    tls_dir: Option<PathBuf>,
    timeout: Duration,
    stores: Mutex<HashMap<String, Arc<ServedStore>>>,
}

impl ServedSchemes {
    /// With the certificates in `tls_dir` (`--tls-dir`; `None`: a `sheaf://` location is refused,
    /// naming the flag), waiting at most `timeout` for the agent.
    pub fn new(tls_dir: Option<PathBuf>, timeout: Duration) -> ServedSchemes {
        ServedSchemes { tls_dir, timeout, stores: Mutex::new(HashMap::new()) }
    }
}

impl Schemes for ServedSchemes {
    fn resolve(&self, scheme: &str, authority: &str, key: &str) -> Result<(Arc<dyn Store>, String)> {
        if scheme != "sheaf" {
            return Err(Error::invalid(format!("{scheme}:// is not an agent's repository")));
        }
        if authority.rsplit_once(':').is_none_or(|(h, p)| h.is_empty() || p.parse::<u16>().is_err()) {
            return Err(Error::invalid(format!("sheaf://{authority}/{key}: write sheaf://HOST:PORT/NAME, the backup host's agent and the repository it serves as NAME")));
        }
        let Some(tls_dir) = self.tls_dir.clone() else {
            return Err(Error::invalid(format!(
                "sheaf://{authority}/{key} needs --tls-dir DIR (or tls-dir in the config file): the folder with ca.pem, client.pem and client.key that `sheaf agent --init-certs DIR --add-client NAME` made for this host"
            )));
        };
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        let store = stores
            .entry(authority.to_string())
            .or_insert_with(|| Arc::new(ServedStore { pool: Arc::new(Pool { addr: authority.to_string(), tls_dir, timeout: self.timeout, idle: Mutex::new(Vec::new()) }) }))
            .clone();
        Ok((store, key.to_string()))
    }
}

/// The repositories one agent serves.
pub struct ServedStore {
    pool: Arc<Pool>,
}

impl fmt::Debug for ServedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServedStore(sheaf://{})", self.pool.addr)
    }
}

/// `NAME/OBJECT` as the repository's name and the object's.
fn split(name: &str) -> Result<(String, String)> {
    match name.split_once('/') {
        Some((repo, object)) if !repo.is_empty() => Ok((repo.to_string(), object.to_string())),
        _ => Err(Error::invalid(format!("'{name}': an agent's repository is named sheaf://HOST:PORT/NAME, and its objects NAME/OBJECT"))),
    }
}

fn stored(w: WireStored, repo: &str) -> Stored {
    Stored { name: format!("{repo}/{}", w.name), size: w.size, modified: w.modified, tag: w.tag }
}

impl ServedStore {
    fn stat(&self, name: &str) -> Result<Option<Stored>> {
        let (repo, object) = split(name)?;
        self.pool.with(&format!("looking at {}", self.describe(name)), |c| {
            c.send(&Request::RepoStat { repo: repo.clone(), name: object.clone() })?;
            match c.reply() {
                Ok(bytes) => {
                    serde_json::from_slice::<WireStored>(bytes).map(|w| Some(stored(w, &repo))).map_err(|e| Error::new(ErrorKind::Source, format!("agent at {}: {e}", c.addr())))
                }
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        })
    }
}

impl Store for ServedStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities { readable: true, atomic_publish: true, list: true, files: false }
    }

    fn describe(&self, name: &str) -> String {
        format!("sheaf://{}/{name}", self.pool.addr)
    }

    fn create(&self, name: &str, opts: &WriteOptions) -> Result<Box<dyn StripeSink>> {
        if opts.lock.is_some() {
            return Err(no_lock(&self.describe(name)));
        }
        let (repo, object) = split(name)?;
        let request = Request::RepoCreate {
            repo: repo.clone(),
            name: object.clone(),
            overwrite: opts.overwrite,
            expected: opts.expected_bytes,
            bulk: opts.bulk,
            keep_unfinished: opts.keep_unfinished,
        };
        // Begun on a connection that answers (a pooled one may have been closed meanwhile); a
        // refusal leaves the connection in step, for the pool.
        let c = RECONNECT
            .run(|n| {
                let mut c = if n == 0 { self.pool.take()? } else { self.pool.dial()? };
                c.send(&request)?;
                match c.reply() {
                    Ok(_) => Ok(Ok(c)),
                    Err(e) if !e.is_transient() => {
                        self.pool.give(c);
                        Ok(Err(e))
                    }
                    Err(e) => Err(e),
                }
            })
            .map_err(|e| as_store(e.context(format!("writing {}", self.describe(name)))))?
            .map_err(as_store)?;
        Ok(Box::new(ServedSink { pool: self.pool.clone(), conn: Some(c), repo, object, shown: self.describe(name), written: 0, checked: 0, published: false }))
    }

    fn resume(&self, name: &str, opts: &WriteOptions) -> Result<Option<Box<dyn UnfinishedStripe>>> {
        if opts.lock.is_some() {
            return Err(no_lock(&self.describe(name)));
        }
        let (repo, object) = split(name)?;
        let shown = self.describe(name);
        let request = Request::RepoResume { repo: repo.clone(), name: object.clone(), expected: opts.expected_bytes };
        // Asked on a connection that answers; the one that took it over holds it from then on.
        let taken = RECONNECT
            .run(|n| {
                let mut c = if n == 0 { self.pool.take()? } else { self.pool.dial()? };
                c.send(&request)?;
                match c.reply() {
                    Ok(bytes) => {
                        #[derive(serde::Deserialize)]
                        struct Held {
                            len: u64,
                        }
                        let held: Held = serde_json::from_slice(bytes).map_err(|e| Error::new(ErrorKind::Source, format!("agent at {}: {e}", c.addr())))?;
                        Ok(Ok(Some((c, held.len))))
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        self.pool.give(c);
                        Ok(Ok(None))
                    }
                    Err(e) if !e.is_transient() => {
                        self.pool.give(c);
                        Ok(Err(e))
                    }
                    Err(e) => Err(e),
                }
            })
            .map_err(|e| as_store(e.context(format!("taking over {shown}"))))?
            .map_err(as_store)?;
        Ok(taken.map(|(c, len)| {
            let held = ServedHeld { conn: Mutex::new(Some(c)), len, shown: format!("{shown} (unfinished)") };
            Box::new(ServedUnfinished { pool: self.pool.clone(), held, repo, object, shown }) as Box<dyn UnfinishedStripe>
        }))
    }

    fn can_resume(&self) -> bool {
        true
    }

    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>> {
        let (repo, object) = split(name)?;
        // The stat and the first FIRST bytes asked for together, in one round trip: a record, a
        // summary or a blob's header come with it, and their reads cost nothing more.
        let (stat, head) = self.pool.with(&format!("opening {}", self.describe(name)), |c| {
            c.send(&Request::RepoStat { repo: repo.clone(), name: object.clone() })?;
            c.send(&Request::RepoRead { repo: repo.clone(), name: object.clone(), offset: 0, len: FIRST })?;
            // Both answers read before either is judged, so that the connection stays in step.
            let stat = c.reply().map(serde_json::from_slice::<WireStored>);
            let mut head = Vec::new();
            let end = read_answer_end(c, |b| head.extend_from_slice(b));
            let stat = match stat {
                Ok(Ok(st)) => Some(st),
                Ok(Err(e)) => return Err(Error::new(ErrorKind::Source, format!("agent at {}: a stat that does not parse: {e}", c.addr()))),
                Err(e) if e.kind() == ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            };
            let end = match end {
                Ok(end) => Some(end),
                Err(e) if e.kind() == ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            };
            // Replaced between the two (a record rewritten): the head is not this version's.
            if stat.as_ref().is_none_or(|st| end.is_none_or(|end| end.size_at_open != st.size)) {
                head.clear();
            }
            Ok((stat, head))
        })?;
        match stat {
            Some(st) => Ok(Box::new(ServedSource { pool: self.pool.clone(), repo, object, len: st.size, head, shown: self.describe(name) })),
            None => Err(Error::incomplete(format!("{} does not exist", self.describe(name)))),
        }
    }

    fn exists(&self, name: &str) -> Result<bool> {
        Ok(self.stat(name)?.is_some())
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>> {
        let (repo, object) = match prefix.split_once('/') {
            Some((r, o)) => (r.to_string(), o.to_string()),
            None => (prefix.to_string(), String::new()),
        };
        self.pool.with(&format!("listing {}", self.describe(prefix)), |c| {
            c.send(&Request::RepoList { repo: repo.clone(), prefix: object.clone() })?;
            let mut out = Vec::new();
            loop {
                match c.answer()? {
                    Answer::List(b) => {
                        let batch: Vec<WireStored> = serde_json::from_slice(b).map_err(|e| Error::new(ErrorKind::Source, format!("a listing that does not parse: {e}")))?;
                        out.extend(batch.into_iter().map(|w| stored(w, &repo)));
                    }
                    Answer::End(_) => return Ok(out),
                    Answer::Refused(w) => return Err(w.into_error(c.addr())),
                    _ => return Err(Error::new(ErrorKind::Source, format!("agent at {}: an answer out of turn to a listing", c.addr()))),
                }
            }
        })
    }

    fn delete(&self, name: &str) -> Result<()> {
        let (repo, object) = split(name)?;
        self.pool.with(&format!("removing {}", self.describe(name)), |c| {
            c.send(&Request::RepoDelete { repo: repo.clone(), name: object.clone() })?;
            c.reply().map(drop)
        })
    }

    fn prune(&self, dir: &str) {
        if let Ok((repo, dir)) = split(dir) {
            let _ = self.pool.with("pruning", |c| {
                c.send(&Request::RepoPrune { repo: repo.clone(), dir: dir.clone() })?;
                c.reply().map(drop)
            });
        }
    }

    fn credentials(&self) -> Option<String> {
        Some(format!("the client certificate in {} (the agent at {} decides what it may do)", self.pool.tls_dir.display(), self.pool.addr))
    }
}

/// An object being written through the agent.
struct ServedSink {
    pool: Arc<Pool>,
    conn: Option<AgentClient>,
    repo: String,
    object: String,
    shown: String,
    written: u64,
    /// Bytes written when the write's state was last asked.
    checked: u64,
    published: bool,
}

impl ServedSink {
    fn conn(&mut self) -> Result<&mut AgentClient> {
        self.conn.as_mut().ok_or_else(|| Error::new(ErrorKind::Target, format!("{}: the write was ended already", self.shown)))
    }

    /// A request answered by an empty reply (or the write's failure).
    fn ask(&mut self, r: &Request) -> Result<()> {
        let shown = self.shown.clone();
        let c = self.conn()?;
        let out = c.send(r).and_then(|()| c.reply().map(drop));
        out.map_err(|e| {
            // The write's failure: nothing more goes on this connection.
            if e.is_transient() {
                self.conn = None;
            }
            as_store(e.context(format!("writing {shown}")))
        })
    }
}

impl StripeSink for ServedSink {
    fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        let shown = self.shown.clone();
        let c = self.conn()?;
        for part in buf.chunks(DATA_CHUNK) {
            c.send_data(part).map_err(|e| as_store(e.context(format!("writing {shown}"))))?;
        }
        self.written += buf.len() as u64;
        if self.written - self.checked >= CHECK_EVERY {
            self.checked = self.written;
            self.ask(&Request::RepoCheck)?;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        // The file synced on the agent's host (publish then syncs its name and folder).
        self.ask(&Request::RepoSync)
    }

    fn publish(&mut self) -> Result<()> {
        self.ask(&Request::RepoPublish)?;
        self.published = true;
        if let Some(c) = self.conn.take() {
            self.pool.give(c);
        }
        Ok(())
    }

    fn discard(&mut self) {
        if self.published {
            // Published already: removed again (best effort, as the trait says).
            let delete = Request::RepoDelete { repo: self.repo.clone(), name: self.object.clone() };
            let _ = self.pool.with(&format!("removing {}", self.shown), |c| {
                c.send(&delete)?;
                c.reply().map(drop)
            });
            self.published = false;
        } else if self.conn.is_some() && self.ask(&Request::RepoDiscard).is_ok() {
            if let Some(c) = self.conn.take() {
                self.pool.give(c);
            }
        }
        self.conn = None;
    }

    fn written(&self) -> u64 {
        self.written
    }
}

impl Drop for ServedSink {
    fn drop(&mut self) {
        if !self.published && self.conn.is_some() {
            self.discard();
        }
    }
}

/// What a stopped writer left of an object, taken over by one connection to the agent.
struct ServedUnfinished {
    pool: Arc<Pool>,
    held: ServedHeld,
    repo: String,
    object: String,
    shown: String,
}

/// The bytes an unfinished object holds, read on the connection that took it over.
struct ServedHeld {
    conn: Mutex<Option<AgentClient>>,
    len: u64,
    shown: String,
}

impl StripeSource for ServedHeld {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        checked_range(&self.shown, offset, buf.len() as u64, self.len)?;
        let mut held = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let c = held.as_mut().ok_or_else(|| Error::new(ErrorKind::Io, format!("{}: the link to the agent was lost", self.shown)))?;
        let r = c.send(&Request::RepoHeldRead { offset, len: buf.len() as u64 }).and_then(|()| {
            let mut at = 0;
            read_answer(c, |b| {
                let n = b.len().min(buf.len() - at);
                buf[at..at + n].copy_from_slice(&b[..n]);
                at += n;
            })
        });
        match r {
            Ok(got) if got < buf.len() as u64 => Err(Error::incomplete(format!("{}: ends at {} bytes, before {}", self.shown, offset + got, offset + buf.len() as u64))),
            Ok(_) => Ok(()),
            Err(e) => {
                // Out of step, or gone: the object is held by no one once the link closes.
                if e.is_transient() || e.kind() == ErrorKind::Source {
                    *held = None;
                }
                Err(as_store(e.context(format!("reading {}", self.shown))))
            }
        }
    }

    fn location(&self) -> &str {
        &self.shown
    }
}

impl UnfinishedStripe for ServedUnfinished {
    fn holds(&self) -> Holding<'_> {
        Holding::Bytes(&self.held)
    }

    fn go_on(self: Box<Self>, keep: u64) -> Result<Box<dyn StripeSink>> {
        let ServedUnfinished { pool, held, repo, object, shown } = *self;
        let conn = held.conn.into_inner().unwrap_or_else(|p| p.into_inner());
        if conn.is_none() {
            // The agent left it unfinished again when the link went: nothing was cut.
            return Err(Error::new(ErrorKind::Io, format!("{shown}: the link to the agent was lost while it was read back")).transient(true));
        }
        let mut sink = ServedSink { pool, conn, repo, object, shown, written: 0, checked: 0, published: false };
        sink.ask(&Request::RepoGoOn { keep })?;
        Ok(Box::new(sink))
    }

    fn abandon(self: Box<Self>) {
        // Best effort, as the trait says: one the agent was not told of stays unfinished, and
        // goes when its backup's folder is pruned.
        let ServedUnfinished { pool, held, .. } = *self;
        if let Some(mut c) = held.conn.into_inner().unwrap_or_else(|p| p.into_inner()) {
            if c.send(&Request::RepoAbandon).and_then(|()| c.reply().map(drop)).is_ok() {
                pool.give(c);
            }
        }
    }
}

/// An object read through the agent.
struct ServedSource {
    pool: Arc<Pool>,
    repo: String,
    object: String,
    len: u64,
    /// The object's first bytes, read with its stat (all of a small one).
    head: Vec<u8>,
    shown: String,
}

impl ServedSource {
    fn request(&self, offset: u64, len: u64) -> Request {
        Request::RepoRead { repo: self.repo.clone(), name: self.object.clone(), offset, len }
    }
}

/// Read the answer to a [`Request::RepoRead`] into `sink`; the bytes it held.
fn read_answer(c: &mut AgentClient, sink: impl FnMut(&[u8])) -> Result<u64> {
    read_answer_end(c, sink).map(|end| end.read)
}

/// [`read_answer`], and the end the agent sent (the bytes it held, the object's size).
fn read_answer_end(c: &mut AgentClient, mut sink: impl FnMut(&[u8])) -> Result<ReadEnd> {
    let mut got = 0;
    loop {
        match c.answer()? {
            Answer::Data(b) => {
                got += b.len() as u64;
                sink(b);
            }
            Answer::End(end) => return Ok(ReadEnd { read: got, ..end }),
            Answer::Refused(w) => return Err(w.into_error(c.addr())),
            _ => return Err(Error::new(ErrorKind::Source, format!("agent at {}: an answer out of turn to a read", c.addr()))),
        }
    }
}

impl StripeSource for ServedSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let range = checked_range(&self.shown, offset, buf.len() as u64, self.len)?;
        if range.end <= self.head.len() as u64 {
            buf.copy_from_slice(&self.head[range.start as usize..range.end as usize]);
            return Ok(());
        }
        self.pool.with(&format!("reading {}", self.shown), |c| {
            c.send(&self.request(offset, buf.len() as u64))?;
            let mut at = 0;
            let got = read_answer(c, |b| {
                let n = b.len().min(buf.len() - at);
                buf[at..at + n].copy_from_slice(&b[..n]);
                at += n;
            })?;
            if got < buf.len() as u64 {
                return Err(Error::incomplete(format!("{}: ends at {} bytes, before {} (truncated)", self.shown, offset + got, offset + buf.len() as u64)));
            }
            Ok(())
        })
    }

    fn location(&self) -> &str {
        &self.shown
    }

    fn stream(&self, start: u64, end: u64) -> Result<Box<dyn Read + Send + '_>> {
        stream_range(&self.shown, start, end, self.len)?;
        if end <= self.head.len() as u64 {
            return Ok(Box::new(&self.head[start as usize..end as usize]));
        }
        Ok(Box::new(Streamed { src: self, conn: None, pos: start, end, frame: Vec::new(), used: 0, done: false }))
    }
}

/// A range read as one request, its bytes taken as they come (the link's flow control bounds
/// what is in flight); a link that fails is dialled again and the rest asked for.
struct Streamed<'a> {
    src: &'a ServedSource,
    conn: Option<AgentClient>,
    pos: u64,
    end: u64,
    frame: Vec<u8>,
    used: usize,
    /// The answer's end was read: the connection is in step again.
    done: bool,
}

impl Streamed<'_> {
    fn fill(&mut self) -> Result<()> {
        RECONNECT
            .run(|n| {
                if n > 0 || self.conn.is_none() {
                    self.conn = None;
                    let mut c = if n == 0 { self.src.pool.take()? } else { self.src.pool.dial()? };
                    c.send(&self.src.request(self.pos, self.end - self.pos))?;
                    self.conn = Some(c);
                }
                let c = self.conn.as_mut().expect("just set");
                match c.answer()? {
                    Answer::Data(b) => {
                        self.frame.clear();
                        self.frame.extend_from_slice(b);
                        self.used = 0;
                        Ok(())
                    }
                    Answer::End(_) => {
                        self.done = true;
                        Err(Error::incomplete(format!("{}: ends at {} bytes, before {} (truncated)", self.src.shown, self.pos, self.end)))
                    }
                    Answer::Refused(w) => Err(w.into_error(c.addr())),
                    _ => Err(Error::new(ErrorKind::Source, format!("agent at {}: an answer out of turn to a read", c.addr()))),
                }
            })
            .map_err(|e| as_store(if e.is_transient() { e.context(format!("reading {} (gave up after {RETRIES} new connections)", self.src.shown)) } else { e }))
    }
}

impl Read for Streamed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos >= self.end {
            return Ok(0);
        }
        if self.used >= self.frame.len() {
            self.fill().map_err(sheaf_core::storage::into_io)?;
        }
        let n = buf.len().min(self.frame.len() - self.used).min((self.end - self.pos) as usize);
        buf[..n].copy_from_slice(&self.frame[self.used..self.used + n]);
        self.used += n;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Drop for Streamed<'_> {
    fn drop(&mut self) {
        // Back to the pool only in step: the answer's end read (what is left of it, if little).
        let Some(mut c) = self.conn.take() else { return };
        if !self.done && self.pos >= self.end {
            self.done = matches!(c.answer(), Ok(Answer::End(_)));
        }
        if self.done {
            self.src.pool.give(c);
        }
    }
}
