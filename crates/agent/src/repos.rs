//! The agent's other service: repositories on its host, served to the database hosts on its
//! allow-list (`sheaf agent --serve-repo NAME=PATH`), so that a database host's `wal-push`,
//! `backup`, `restore`, `drill` and the rest work with `--repo sheaf://HOST:PORT/NAME` and nothing
//! mounted.
//!
//! Every write goes through the same [`LocalStore`] a repository in a local folder is written
//! with: a temporary name, fsync, rename, fsync of the folder. A publish is answered only once
//! that is done, so what a client was told is stored survives the backup host's power cut.
//!
//! What each client may do is the agent's decision, never the client's: a client names the
//! repositories it uses in its allow-list line ([`crate::certs::Client`]); inside one it may read
//! anything and write new objects, and it may replace or remove only what the repository's
//! [`Guard`] allows a client in normal work (a running backup's lock, a probe, the stripes of a
//! backup that never finished). Expiring backups, replacing WAL or records and changing keys need
//! a `manage=` grant, or the backup host's own sheaf on the folder. Every refusal is logged with
//! the client's name.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sheaf_core::storage::{stored_at, Holding, LocalStore, Store, StripeSink, UnfinishedStripe, WriteOptions};
use sheaf_core::{Error, ErrorKind, Result};

use crate::certs::Client;
use crate::proto::{self, ReadEnd, Request, WireError, WireErrorKind, WireStored, LIST_BATCH};

/// How long a take-over waits for an object another connection still writes (one whose client
/// is gone, its end not yet read) before it is refused.
const HELD_WAIT: Duration = Duration::from_secs(10);
/// How long a connection holding a resumable write must have sent nothing of it before another
/// connection that takes the object over ends that write.
const SILENT: Duration = Duration::from_secs(5);

/// What a write to or a removal from a served repository is, for the [`Guard`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new object where nothing is.
    Create,
    /// An object written over one already there.
    Replace,
    /// An object removed.
    Delete,
}

/// What a client with a plain `repos=` grant may change in a repository: the layout's knowledge
/// (which objects are records, which are a running backup's), given by the caller that knows the
/// layout. Reading is always allowed, and a `manage=` grant skips the guard.
pub trait Guard: Send + Sync {
    /// `None` when `change` of object `name` is allowed; else why not, for the refusal.
    /// `exists` says whether another object of the repository is there.
    fn refuses(&self, change: Change, name: &str, exists: &dyn Fn(&str) -> bool) -> Option<String>;
}

/// The repositories an agent serves, by name, and their guard.
#[derive(Clone)]
pub struct ServedRepos {
    repos: BTreeMap<String, PathBuf>,
    guard: Arc<dyn Guard>,
    /// Resumable writes in progress on any connection, by path: what a take-over may end.
    resumable: Arc<Mutex<HashMap<PathBuf, Weak<Slot>>>>,
}

/// A resumable write in progress, shared with the registry so that another connection can end it
/// ([`Session::resume`]): its client is gone (the backup that takes it over checked that its
/// writer no longer runs) but the agent has not seen its connection end yet.
struct Slot {
    sink: Mutex<Option<Box<dyn StripeSink>>>,
    /// When its connection last sent a byte of it.
    last: Mutex<Instant>,
}

/// The sink of a resumable write, ended by the registry's holder when another connection takes the
/// object over.
struct Shared(Arc<Slot>);

impl Shared {
    fn with<T>(&self, f: impl FnOnce(&mut Box<dyn StripeSink>) -> Result<T>) -> Result<T> {
        let mut held = self.0.sink.lock().unwrap_or_else(|p| p.into_inner());
        match held.as_mut() {
            Some(sink) => f(sink),
            None => Err(Error::new(ErrorKind::Target, "another connection took this unfinished object over (its client was gone): the write ended there")),
        }
    }
}

impl StripeSink for Shared {
    fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        *self.0.last.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.with(|s| s.write_all(buf))
    }
    fn sync(&mut self) -> Result<()> {
        self.with(|s| s.sync())
    }
    fn publish(&mut self) -> Result<()> {
        self.with(|s| s.publish())
    }
    fn discard(&mut self) {
        let _ = self.with(|s| {
            s.discard();
            Ok(())
        });
    }
    fn written(&self) -> u64 {
        self.0.sink.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map_or(0, |s| s.written())
    }
}

impl fmt::Debug for ServedRepos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServedRepos").field("repos", &self.repos).finish_non_exhaustive()
    }
}

impl ServedRepos {
    /// None (an agent that serves a cluster's files only).
    pub fn none() -> ServedRepos {
        struct Nothing;
        impl Guard for Nothing {
            fn refuses(&self, _: Change, _: &str, _: &dyn Fn(&str) -> bool) -> Option<String> {
                Some("this agent serves no repository".into())
            }
        }
        ServedRepos { repos: BTreeMap::new(), guard: Arc::new(Nothing), resumable: Arc::default() }
    }

    /// `repos` (each `NAME` and its folder, which must exist), guarded by `guard`.
    ///
    /// # Errors
    /// A name that is not a plain word, given twice, or a folder that is not one.
    pub fn new(repos: &[(String, PathBuf)], guard: Arc<dyn Guard>) -> Result<ServedRepos> {
        let mut out = BTreeMap::new();
        for (name, path) in repos {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) || name.starts_with('.') {
                return Err(Error::invalid(format!(
                    "--serve-repo {name}={}: name the repository with letters, digits, '-', '_' or '.' (clients write sheaf://HOST:PORT/NAME)",
                    path.display()
                )));
            }
            let dir = path.canonicalize().map_err(|e| {
                Error::io(
                    ErrorKind::InvalidInput,
                    format!("--serve-repo {name}={}: the folder cannot be used (make it, owned by the agent's user, before serving it)", path.display()),
                    e,
                )
            })?;
            if !dir.is_dir() {
                return Err(Error::invalid(format!("--serve-repo {name}={}: not a folder", path.display())));
            }
            if let Some((other, _)) = out.iter().find(|(_, d): &(&String, &PathBuf)| d.starts_with(&dir) || dir.starts_with(d)) {
                return Err(Error::invalid(format!(
                    "--serve-repo {name}={}: it and repository {other} are one inside the other; serve folders that do not overlap (a client of one would reach the other)",
                    path.display()
                )));
            }
            if out.insert(name.clone(), dir).is_some() {
                return Err(Error::invalid(format!("--serve-repo {name}: given twice")));
            }
        }
        Ok(ServedRepos { repos: out, guard, resumable: Arc::default() })
    }

    /// Whether it serves any.
    pub fn is_empty(&self) -> bool {
        self.repos.is_empty()
    }

    /// Each name and folder, for the agent's first log line.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &PathBuf)> {
        self.repos.iter()
    }
}

/// An unfinished object taken over, and its path.
type Taken = (Box<dyn UnfinishedStripe>, PathBuf);

/// A write in progress on one connection.
enum Writing {
    Open {
        sink: Box<dyn StripeSink>,
        name: String,
    },
    /// Refused or failed: the client's bytes are dropped until it asks how the write stands.
    Failed(WireError),
}

/// One connection's use of the served repositories.
pub(crate) struct Session<'a> {
    served: &'a ServedRepos,
    client: &'a Client,
    /// The client as the log names it: its name and its certificate's fingerprint.
    who: &'a str,
    log: &'a dyn Fn(&str),
    writing: Option<Writing>,
    /// An unfinished object taken over ([`Request::RepoResume`]), its name for the log, and its path.
    resuming: Option<(Box<dyn UnfinishedStripe>, String, PathBuf)>,
    /// Objects published and bytes received, for the connection's last log line.
    pub(crate) published: u64,
    pub(crate) received: u64,
}

/// `name` as a path under `root`: relative, `/`-separated, no empty, `.` or `..` part.
fn confine(root: &Path, name: &str) -> std::result::Result<PathBuf, WireError> {
    if name.is_empty() || name.starts_with('/') || name.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(WireError::new(WireErrorKind::Denied, format!("'{name}' is not an object's name in a repository")));
    }
    Ok(root.join(name))
}

impl<'a> Session<'a> {
    pub(crate) fn new(served: &'a ServedRepos, client: &'a Client, who: &'a str, log: &'a dyn Fn(&str)) -> Session<'a> {
        Session { served, client, who, log, writing: None, resuming: None, published: 0, received: 0 }
    }

    /// The folder of repository `repo`, if it is served and this client may use it; a refusal
    /// is logged.
    fn root(&self, repo: &str, what: &str) -> std::result::Result<&'a Path, WireError> {
        let Some(root) = self.served.repos.get(repo) else {
            // Not "no such object": a wal-fetch would take that for the end of the archive.
            let mut e = self.refuse(WireErrorKind::Protocol, format!("{what}: this agent serves no repository named '{repo}' (see --serve-repo on the backup host)"));
            e.sheaf = Some(ErrorKind::InvalidInput);
            return Err(e);
        };
        if !self.client.uses(repo) {
            return Err(self.refuse(
                WireErrorKind::Denied,
                format!("{what}: {} is not granted repository '{repo}' (add repos={repo} to its line in allowed-clients, then kill -HUP the agent)", self.client.shown()),
            ));
        }
        Ok(root.as_path())
    }

    fn refuse(&self, kind: WireErrorKind, message: String) -> WireError {
        (self.log)(&format!("{}: refused: {message}", self.who));
        WireError::new(kind, message)
    }

    /// `name` in `root`, or its refusal, logged.
    fn confined(&self, root: &Path, repo: &str, name: &str) -> std::result::Result<PathBuf, WireError> {
        confine(root, name).map_err(|e| self.refuse(e.kind, format!("{repo}: {}", e.message)))
    }

    /// Whether the guard lets this client make `change` to `name` in `repo`.
    fn guarded(&self, repo: &str, root: &Path, change: Change, name: &str) -> std::result::Result<(), WireError> {
        if self.client.manages(repo) {
            return Ok(());
        }
        let exists = |other: &str| confine(root, other).is_ok_and(|p| p.exists());
        match self.served.guard.refuses(change, name, &exists) {
            None => Ok(()),
            Some(why) => {
                Err(self.refuse(WireErrorKind::Denied, format!("{repo}/{name}: {why}; a client with repos={repo} may not (give it manage={repo}, or run that on the backup host)")))
            }
        }
    }

    /// Bytes of the object being written.
    pub(crate) fn data(&mut self, bytes: &[u8]) {
        self.received += bytes.len() as u64;
        match &mut self.writing {
            Some(Writing::Open { sink, .. }) => {
                if let Err(e) = sink.write_all(bytes) {
                    self.writing = Some(Writing::Failed(WireError::from_error(&e)));
                }
            }
            Some(Writing::Failed(_)) => {}
            None => self.writing = Some(Writing::Failed(WireError::new(WireErrorKind::Protocol, "object bytes without a write begun"))),
        }
    }

    /// Answer a repository request; `Ok(false)` when it is not one.
    pub(crate) fn answer(&mut self, s: &mut impl std::io::Write, request: &Request, data: &mut [u8]) -> std::io::Result<bool> {
        match request {
            Request::RepoStat { repo, name } => {
                let r = self.root(repo, &format!("{repo}/{name}")).and_then(|root| self.confined(root, repo, name));
                match r.map(|p| stored_at(&p, name.clone())) {
                    Err(e) => refuse(s, e)?,
                    Ok(Ok(Some(st))) => proto::write_json(s, proto::REPLY, &wire_stored(st))?,
                    Ok(Ok(None)) => refuse(s, WireError::new(WireErrorKind::NotFound, format!("{repo}/{name}: no such object")))?,
                    Ok(Err(e)) => refuse(s, WireError::from_error(&e))?,
                }
            }
            Request::RepoList { repo, prefix } => {
                let root = match self.root(repo, &format!("{repo}/{prefix}*")) {
                    Ok(r) => r,
                    Err(e) => return refuse(s, e).map(|()| true),
                };
                if prefix.starts_with('/') || prefix.split('/').any(|c| c == "..") {
                    return refuse(s, self.refuse(WireErrorKind::Denied, format!("{repo}: '{prefix}' is not a prefix inside a repository"))).map(|()| true);
                }
                let base = format!("{}/", root.display());
                match LocalStore.list(&format!("{base}{prefix}")) {
                    Err(e) => refuse(s, WireError::from_error(&e))?,
                    Ok(all) => {
                        for batch in all.chunks(LIST_BATCH) {
                            let b: Vec<WireStored> =
                                batch.iter().map(|st| WireStored { name: st.name.strip_prefix(&base).unwrap_or(&st.name).to_string(), ..wire_stored(st.clone()) }).collect();
                            proto::write_json(s, proto::LIST, &b)?;
                        }
                        proto::write_json(s, proto::END, &Vec::<String>::new())?;
                    }
                }
            }
            Request::RepoRead { repo, name, offset, len } => {
                let path = match self.root(repo, &format!("{repo}/{name}")).and_then(|root| self.confined(root, repo, name)) {
                    Ok(p) => p,
                    Err(e) => return refuse(s, e).map(|()| true),
                };
                let f = match std::fs::File::open(&path) {
                    Ok(f) => f,
                    Err(e) => return refuse(s, io_wire(&format!("{repo}/{name}"), &e)).map(|()| true),
                };
                let size = f.metadata().map(|m| m.len()).unwrap_or(0);
                let (mut at, end) = (*offset, offset.saturating_add(*len));
                while at < end {
                    let want = ((end - at) as usize).min(data.len());
                    let got = match std::os::unix::fs::FileExt::read_at(&f, &mut data[..want], at) {
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => return refuse(s, io_wire(&format!("{repo}/{name}"), &e)).map(|()| true),
                    };
                    if got == 0 {
                        break;
                    }
                    proto::write_frame(s, proto::DATA, &data[..got])?;
                    at += got as u64;
                }
                proto::write_json(s, proto::END, &ReadEnd { read: at - offset, size_at_open: size, changed: false })?;
            }
            Request::RepoResume { repo, name, expected } => {
                self.writing = None;
                self.resuming = None;
                match self.resume(repo, name, *expected) {
                    Ok(Some((u, path))) => {
                        let len = match u.holds() {
                            Holding::Bytes(src) => src.len(),
                            Holding::Parts(_) => 0,
                        };
                        (self.log)(&format!("{}: took over {repo}/{name}, unfinished ({len} bytes)", self.who));
                        self.resuming = Some((u, format!("{repo}/{name}"), path));
                        proto::write_json(s, proto::REPLY, &serde_json::json!({ "len": len }))?;
                    }
                    Ok(None) => refuse(s, WireError::new(WireErrorKind::NotFound, format!("{repo}/{name}: nothing unfinished to take over")))?,
                    Err(e) => refuse(s, e)?,
                }
            }
            Request::RepoHeldRead { offset, len } => {
                let Some((u, name, _)) = &self.resuming else {
                    return refuse(s, WireError::new(WireErrorKind::Protocol, "no unfinished object taken over")).map(|()| true);
                };
                let Holding::Bytes(src) = u.holds() else {
                    return refuse(s, WireError::new(WireErrorKind::Protocol, "the object taken over cannot be read")).map(|()| true);
                };
                let size = src.len();
                let (mut at, end) = (*offset, offset.saturating_add(*len).min(size));
                while at < end {
                    let want = ((end - at) as usize).min(data.len());
                    if let Err(e) = src.read_exact_at(&mut data[..want], at) {
                        return refuse(s, WireError::from_error(&e.context(name.clone()))).map(|()| true);
                    }
                    proto::write_frame(s, proto::DATA, &data[..want])?;
                    at += want as u64;
                }
                proto::write_json(s, proto::END, &ReadEnd { read: at.saturating_sub(*offset), size_at_open: size, changed: false })?;
            }
            Request::RepoGoOn { keep } => match self.resuming.take() {
                Some((u, name, path)) => match u.go_on(*keep) {
                    Ok(sink) => {
                        let sink = self.register(path, sink);
                        self.writing = Some(Writing::Open { sink, name });
                        proto::write_json(s, proto::REPLY, &serde_json::json!({}))?;
                    }
                    Err(e) => refuse(s, WireError::from_error(&e))?,
                },
                None => refuse(s, WireError::new(WireErrorKind::Protocol, "no unfinished object taken over"))?,
            },
            Request::RepoAbandon => {
                if let Some((u, _, _)) = self.resuming.take() {
                    u.abandon();
                }
                proto::write_json(s, proto::REPLY, &serde_json::json!({}))?;
            }
            Request::RepoCreate { repo, name, overwrite, expected, bulk, keep_unfinished } => match self.create(repo, name, *overwrite, *expected, *bulk, *keep_unfinished) {
                Ok(sink) => {
                    self.writing = Some(Writing::Open { sink, name: format!("{repo}/{name}") });
                    proto::write_json(s, proto::REPLY, &serde_json::json!({}))?;
                }
                Err(e) => {
                    self.writing = None;
                    refuse(s, e)?;
                }
            },
            Request::RepoCheck => match &self.writing {
                Some(Writing::Failed(e)) => refuse(s, e.clone())?,
                Some(Writing::Open { .. }) => proto::write_json(s, proto::REPLY, &serde_json::json!({}))?,
                None => refuse(s, WireError::new(WireErrorKind::Protocol, "no write in progress"))?,
            },
            Request::RepoPublish => match self.writing.take() {
                Some(Writing::Open { mut sink, name }) => match sink.publish() {
                    Ok(()) => {
                        self.published += 1;
                        proto::write_json(s, proto::REPLY, &serde_json::json!({}))?;
                    }
                    Err(e) => {
                        sink.discard();
                        (self.log)(&format!("{}: {name} not stored: {e}", self.client.shown()));
                        refuse(s, WireError::from_error(&e))?;
                    }
                },
                Some(Writing::Failed(e)) => refuse(s, e)?,
                None => refuse(s, WireError::new(WireErrorKind::Protocol, "no write in progress"))?,
            },
            Request::RepoDiscard => {
                if let Some(Writing::Open { mut sink, .. }) = self.writing.take() {
                    sink.discard();
                }
                proto::write_json(s, proto::REPLY, &serde_json::json!({}))?;
            }
            Request::RepoDelete { repo, name } => {
                let r = self.root(repo, &format!("{repo}/{name}")).and_then(|root| {
                    let path = self.confined(root, repo, name)?;
                    if path.exists() {
                        self.guarded(repo, root, Change::Delete, name)?;
                    }
                    LocalStore.delete(&path.display().to_string()).map_err(|e| WireError::from_error(&e))
                });
                match r {
                    Ok(()) => proto::write_json(s, proto::REPLY, &serde_json::json!({}))?,
                    Err(e) => refuse(s, e)?,
                }
            }
            Request::RepoPrune { repo, dir } => {
                // An empty folder removed, as a folder repository's own prune does; never the
                // repository's top.
                if let Ok(path) = self.root(repo, &format!("{repo}/{dir}")).and_then(|root| self.confined(root, repo, dir)) {
                    LocalStore.prune(&path.display().to_string());
                }
                proto::write_json(s, proto::REPLY, &serde_json::json!({}))?;
            }
            Request::RepoSync => match &mut self.writing {
                Some(Writing::Open { sink, .. }) => match sink.sync() {
                    Ok(()) => proto::write_json(s, proto::REPLY, &serde_json::json!({}))?,
                    Err(e) => {
                        let w = WireError::from_error(&e);
                        self.writing = Some(Writing::Failed(w.clone()));
                        refuse(s, w)?;
                    }
                },
                Some(Writing::Failed(e)) => refuse(s, e.clone())?,
                None => refuse(s, WireError::new(WireErrorKind::Protocol, "no write in progress"))?,
            },
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// What a stopped writer left unfinished of `name`, taken over: a new object as far as the
    /// guard is concerned (nothing under its name is replaced).
    fn resume(&self, repo: &str, name: &str, expected: u64) -> std::result::Result<Option<Taken>, WireError> {
        let root = self.root(repo, &format!("{repo}/{name}"))?;
        let path = self.confined(root, repo, name)?;
        self.guarded(repo, root, Change::Create, name)?;
        let opts = WriteOptions { overwrite: false, expected_bytes: expected, lock: None, bulk: true, keep_unfinished: true };
        // Another connection's write may still hold it: a client killed a moment ago whose
        // connection's end this agent has not read yet, or one whose link went silent (a network
        // cut, noticed only after 15 minutes). The backup asking has checked that the writer no
        // longer runs; a write here silent for SILENT is ended, what it wrote kept unfinished.
        // Waited for a while, not refused at once.
        let since = Instant::now();
        loop {
            match LocalStore.resume(&path.display().to_string(), &opts) {
                Err(e) if e.is_transient() && since.elapsed() < HELD_WAIT => {
                    if self.end_silent(&path) {
                        (self.log)(&format!("{}: ended another connection's write of {repo}/{name}, silent for {} s, to take it over", self.who, SILENT.as_secs()));
                        continue;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                // Still held after the wait: said as final (the client asking again would wait
                // as long again).
                r => {
                    return r.map(|u| u.map(|u| (u, path))).map_err(|e| WireError { transient: false, ..WireError::from_error(&e) });
                }
            }
        }
    }

    /// A resumable write's sink, registered so that another connection may end it (see
    /// [`Session::resume`]).
    fn register(&self, path: PathBuf, sink: Box<dyn StripeSink>) -> Box<dyn StripeSink> {
        let slot = Arc::new(Slot { sink: Mutex::new(Some(sink)), last: Mutex::new(Instant::now()) });
        let mut all = self.served.resumable.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|_, w| w.strong_count() > 0);
        all.insert(path, Arc::downgrade(&slot));
        Box::new(Shared(slot))
    }

    /// End the write of `path` another connection holds, if it has sent nothing of it for
    /// [`SILENT`]: its sink dropped (what it wrote stays unfinished) and its connection told at
    /// its next request. Whether one was ended.
    fn end_silent(&self, path: &Path) -> bool {
        let slot = self.served.resumable.lock().unwrap_or_else(|p| p.into_inner()).get(path).and_then(Weak::upgrade);
        let Some(slot) = slot else { return false };
        if slot.last.lock().unwrap_or_else(|p| p.into_inner()).elapsed() < SILENT {
            return false;
        }
        let sink = slot.sink.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(sink);
        true
    }

    fn create(&self, repo: &str, name: &str, overwrite: bool, expected: u64, bulk: bool, keep_unfinished: bool) -> std::result::Result<Box<dyn StripeSink>, WireError> {
        let root = self.root(repo, &format!("{repo}/{name}"))?;
        let path = self.confined(root, repo, name)?;
        let change = if path.exists() { Change::Replace } else { Change::Create };
        if change == Change::Replace && !overwrite {
            return Err(WireError::from_error(&Error::new(ErrorKind::Target, format!("{repo}/{name} exists already: remove it, choose another name, or pass --overwrite"))));
        }
        self.guarded(repo, root, change, name)?;
        let full = path.display().to_string();
        let store = LocalStore;
        store.prepare(&full, Some(&root.display().to_string())).map_err(|e| WireError::from_error(&e))?;
        let sink = store.create(&full, &WriteOptions { overwrite, expected_bytes: expected, lock: None, bulk, keep_unfinished }).map_err(|e| WireError::from_error(&e))?;
        Ok(if keep_unfinished { self.register(path, sink) } else { sink })
    }
}

fn wire_stored(st: sheaf_core::storage::Stored) -> WireStored {
    WireStored { name: st.name, size: st.size, modified: st.modified, tag: st.tag }
}

/// What the agent's file system failed with, keeping sheaf's kind: a missing object is
/// `NotFound`, anything else I/O (as a folder repository says it).
fn io_wire(what: &str, e: &std::io::Error) -> WireError {
    let mut w = WireError::from_io(what, e);
    if w.kind != WireErrorKind::NotFound {
        w.sheaf = Some(ErrorKind::Io);
    }
    w
}

fn refuse(s: &mut impl std::io::Write, e: WireError) -> std::io::Result<()> {
    proto::write_json(s, proto::ERROR, &e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside_the_repository() {
        let root = Path::new("/srv/repo");
        assert_eq!(confine(root, "wal/00000001/x.wal").unwrap(), Path::new("/srv/repo/wal/00000001/x.wal"));
        for bad in ["", "/etc/passwd", "../other/repo.json", "wal/../../x", "wal//x", "./repo.json"] {
            assert_eq!(confine(root, bad).unwrap_err().kind, WireErrorKind::Denied, "{bad}");
        }
    }
}
