//! The agent: serves list, stat and ranged reads of a cluster's files to backup hosts that
//! present a client certificate signed by its CA and on its allow-list. Only paths inside the
//! data directory, its pg_wal and its tablespaces (where their links lead, resolved at each
//! request) are served; `..` and symlinks are resolved before that check, so neither leads
//! out. Those files are opened read-only, and no request writes them. It may also serve
//! repositories on its host to the clients granted them ([`crate::repos`]).

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rustls::{ServerConfig, ServerConnection, StreamOwned};
use sheaf_core::codec::CodecSpec;
use sheaf_core::format::{MAX_TRANSFER_SIZE, MIN_TRANSFER_SIZE};
use sheaf_core::source::{list_one, Walk};
use sheaf_core::stop::{Beat, Stop};
use sheaf_core::{Error, ErrorKind, Result};

use crate::certs::{fingerprint, Client};
use crate::proto::{self, HelloReply, ReadEnd, Request, WireError, WireErrorKind, WireListed, DATA_CHUNK, LIST_BATCH};
use crate::repos::{ServedRepos, Session};
use crate::squeeze::Squeezer;

/// What the agent serves, and where.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// `ADDR:PORT` to listen on.
    pub listen: String,
    /// The cluster's data directory, if it serves one's files.
    pub pgdata: Option<PathBuf>,
    /// The repositories it serves (`--serve-repo`).
    pub repos: ServedRepos,
    /// The folder of `sheaf agent --init-certs`.
    pub tls_dir: PathBuf,
    /// Connections served at once (more wait in the kernel's backlog).
    pub max_connections: usize,
    /// Threads that compress one connection's reads, for backup hosts that ask the agent to
    /// compress (`--compress-on agent`).
    pub threads: usize,
}

/// Where the agent reports connections refused and failures (it never prints by itself).
pub type Log = Arc<dyn Fn(&str) + Send + Sync>;

/// The client certificates admitted: fingerprint to name. Replaced whole on a reload.
type Allowed = Arc<RwLock<Arc<HashMap<String, Client>>>>;

/// A bound agent.
pub struct Agent {
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    allowed: Allowed,
    tls_dir: PathBuf,
    reload: Arc<AtomicBool>,
    pgdata: Option<PathBuf>,
    system_identifier: String,
    repos: Arc<ServedRepos>,
    max_connections: usize,
    threads: usize,
}

fn wire(kind: WireErrorKind, message: impl Into<String>) -> WireError {
    WireError::new(kind, message)
}

/// The directories reads may fall in: the data directory and where its pg_wal and
/// tablespace links lead, each resolved.
fn roots(pgdata: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(p) = pgdata.canonicalize() {
        out.push(p);
    }
    let mut links = vec![pgdata.join("pg_wal")];
    if let Ok(dir) = std::fs::read_dir(pgdata.join("pg_tblspc")) {
        links.extend(dir.flatten().map(|e| e.path()));
    }
    for l in links {
        if let Ok(p) = l.canonicalize() {
            if !out.iter().any(|r| p.starts_with(r)) {
                out.push(p);
            }
        }
    }
    out
}

/// `path` resolved, if it lies inside one of the roots.
fn confine(path: &str, roots: &[PathBuf]) -> std::result::Result<PathBuf, WireError> {
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(wire(WireErrorKind::Denied, format!("{path}: give an absolute path")));
    }
    let resolved = p.canonicalize().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            wire(WireErrorKind::NotFound, format!("{path}: no such file or directory"))
        } else {
            WireError::from_io(path, &e)
        }
    })?;
    if roots.iter().any(|r| resolved.starts_with(r)) {
        Ok(resolved)
    } else {
        Err(wire(WireErrorKind::Denied, format!("{path} is outside the cluster's directories, which are all this agent serves")))
    }
}

/// `path` itself (a link not followed), if its folder lies inside one of the roots.
fn confine_entry(path: &str, roots: &[PathBuf]) -> std::result::Result<PathBuf, WireError> {
    let p = Path::new(path);
    match (p.parent(), p.file_name()) {
        (Some(parent), Some(name)) if p.is_absolute() => Ok(confine(&parent.display().to_string(), roots)?.join(name)),
        _ => confine(path, roots),
    }
}

impl Agent {
    /// Check the data directory and the TLS files, and bind.
    ///
    /// # Errors
    /// A data directory without a cluster, TLS files missing or not parsing, an address that
    /// cannot be bound.
    pub fn bind(config: &AgentConfig) -> Result<Agent> {
        if config.pgdata.is_none() && config.repos.is_empty() {
            return Err(Error::invalid(
                "the agent serves nothing: give --pgdata DIR (a cluster's files, on a database host) or --serve-repo NAME=PATH (a repository, on a backup host), or both",
            ));
        }
        let mut id = String::new();
        if let Some(pgdata) = &config.pgdata {
            let control = pgdata.join("global/pg_control");
            let bytes = std::fs::read(&control).map_err(|e| {
                Error::io(ErrorKind::Source, format!("cannot read {} (--pgdata must be the cluster's data directory, readable by this user)", control.display()), e)
            })?;
            id = bytes
                .get(..8)
                .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                .ok_or_else(|| Error::corrupt(format!("{} is too short", control.display())))?
                .to_string();
        }
        let (tls, allowed) = crate::tls::server_config(&config.tls_dir)?;
        let listener = TcpListener::bind(&config.listen)
            .map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot listen on {} (give --listen ADDR:PORT, e.g. 0.0.0.0:7400)", config.listen), e))?;
        Ok(Agent {
            listener,
            tls,
            allowed: Arc::new(RwLock::new(Arc::new(allowed))),
            tls_dir: config.tls_dir.clone(),
            reload: Arc::new(AtomicBool::new(false)),
            pgdata: config.pgdata.clone(),
            system_identifier: id,
            repos: Arc::new(config.repos.clone()),
            max_connections: config.max_connections.max(1),
            threads: config.threads.max(1),
        })
    }

    /// The address it listens on.
    ///
    /// # Errors
    /// The socket's.
    pub fn local_addr(&self) -> Result<std::net::SocketAddr> {
        self.listener.local_addr().map_err(|e| Error::io(ErrorKind::Io, "the agent's address", e))
    }

    /// The flag that makes it read `allowed-clients` again (what SIGHUP sets): connections
    /// open go on; new ones are admitted by the new list. A list that does not read is logged
    /// and the old one kept.
    pub fn reload_flag(&self) -> Arc<AtomicBool> {
        self.reload.clone()
    }

    fn reload_allowed(&self, log: &Log) {
        match crate::tls::allowed(&self.tls_dir) {
            Ok(new) => {
                let mut held = self.allowed.write().unwrap_or_else(|p| p.into_inner());
                let name = |fp: &String, names: &HashMap<String, Client>| format!("{} ({}…)", names.get(fp).map_or("unnamed", Client::shown), &fp[..fp.len().min(12)]);
                let added: Vec<String> = new.keys().filter(|fp| !held.contains_key(*fp)).map(|fp| name(fp, &new)).collect();
                let removed: Vec<String> = held.keys().filter(|fp| !new.contains_key(*fp)).map(|fp| name(fp, &held)).collect();
                log(&format!(
                    "reloaded {}: {} clients admitted; added: {}; removed: {} (connections open go on)",
                    self.tls_dir.join(crate::certs::ALLOWED).display(),
                    new.len(),
                    if added.is_empty() { "none".into() } else { added.join(", ") },
                    if removed.is_empty() { "none".into() } else { removed.join(", ") }
                ));
                *held = Arc::new(new);
            }
            Err(e) => log(&format!("the allow-list was not reloaded, the one in force stays: {e}")),
        }
    }

    fn warn_expiring(&self, log: &Log) {
        match crate::certs::expiring(&self.tls_dir, sheaf_core::time::now_ms() / 1000, 30) {
            Ok(warnings) => warnings.iter().for_each(|w| log(&format!("warning: {}", w.message))),
            Err(e) => log(&format!("warning: {e}")),
        }
    }

    /// Serve until `stop` is set, a thread per connection; each connection is logged when it
    /// opens (who) and when it ends (what it read, bytes, how it ended); `beat` beats each time the
    /// accept loop goes round.
    ///
    /// # Errors
    /// The listener failing.
    pub fn serve(self, stop: Stop, log: Log, beat: Beat) -> Result<()> {
        self.listener.set_nonblocking(true).map_err(|e| Error::io(ErrorKind::Io, "the agent's socket", e))?;
        let busy = Arc::new(AtomicUsize::new(0));
        let mut checked = Instant::now();
        self.warn_expiring(&log);
        while !stop.asked() {
            beat.beat();
            if self.reload.swap(false, Ordering::SeqCst) {
                self.reload_allowed(&log);
            }
            if checked.elapsed() > Duration::from_secs(86_400) {
                checked = Instant::now();
                self.warn_expiring(&log);
            }
            let (stream, peer) = match self.listener.accept() {
                Ok(x) => x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    // Until a connection comes (taken at once: a wal-push connects for each
                    // segment), or 50 ms pass and the loop looks at stop and reload again.
                    let mut fds = [rustix::event::PollFd::new(&self.listener, rustix::event::PollFlags::IN)];
                    let _ = rustix::event::poll(&mut fds, Some(&rustix::event::Timespec { tv_sec: 0, tv_nsec: 50_000_000 }));
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io(ErrorKind::Io, "accepting a connection", e)),
            };
            if busy.load(Ordering::Relaxed) >= self.max_connections {
                log(&format!("{peer}: refused, {} connections are being served already", self.max_connections));
                continue;
            }
            busy.fetch_add(1, Ordering::Relaxed);
            let allowed = self.allowed.read().unwrap_or_else(|p| p.into_inner()).clone();
            let (tls, busy, log) = (self.tls.clone(), busy.clone(), log.clone());
            let served = Served { pgdata: self.pgdata.clone(), id: self.system_identifier.clone(), threads: self.threads, repos: self.repos.clone() };
            std::thread::spawn(move || {
                let mut tally = Tally::default();
                let t0 = Instant::now();
                let end = serve_one(stream, tls, &allowed, &served, &mut tally, &|m: &str| log(&format!("{peer}: {m}")));
                if !tally.who.is_empty() {
                    log(&format!(
                        "{peer}: {} done after {:.1} s: {} requests, {} reads of {} files, {} bytes sent; {} objects stored, {} bytes received; {}",
                        tally.who,
                        t0.elapsed().as_secs_f64(),
                        tally.requests,
                        tally.reads,
                        tally.files,
                        tally.bytes,
                        tally.stored,
                        tally.received,
                        match &end {
                            Ok(()) => "closed by the client".to_string(),
                            Err(e) => format!("ended by an error: {e}"),
                        }
                    ));
                } else if let Err(e) = end {
                    log(&format!("{peer}: {e}"));
                }
                busy.fetch_sub(1, Ordering::Relaxed);
            });
        }
        Ok(())
    }
}

/// What a connection serves.
struct Served {
    pgdata: Option<PathBuf>,
    /// The repositories served.
    repos: Arc<ServedRepos>,
    /// The cluster's system identifier.
    id: String,
    /// Compressor threads for chunked reads.
    threads: usize,
}

/// What one connection did, for its log line.
#[derive(Default)]
struct Tally {
    /// The client, as the allow-list names it, and its fingerprint's start.
    who: String,
    requests: u64,
    reads: u64,
    /// Files read (a file counts again when reads of others came between: nothing is held).
    files: u64,
    last: String,
    bytes: u64,
    /// Objects stored into served repositories, and the bytes received for them.
    stored: u64,
    received: u64,
}

/// A writer that counts what passes.
struct Counted<'a, W: Write> {
    inner: &'a mut W,
    bytes: u64,
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(b)?;
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn serve_one(
    stream: TcpStream,
    tls: Arc<ServerConfig>,
    allowed: &HashMap<String, Client>,
    served: &Served,
    tally: &mut Tally,
    log: &dyn Fn(&str),
) -> std::result::Result<(), String> {
    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let conn = ServerConnection::new(tls).map_err(|e| e.to_string())?;
    let mut s = StreamOwned::new(conn, stream);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock).map_err(|e| format!("TLS handshake failed: {e}"))?;
    }
    let fp = s.conn.peer_certificates().and_then(|c| c.first()).map(|c| fingerprint(c.as_ref())).unwrap_or_default();
    let client = if let Some(c) = allowed.get(&fp) {
        tally.who = format!("{} (SHA-256 {}…)", c.shown(), &fp[..fp.len().min(12)]);
        c
    } else {
        // The client's hello first, so that its write does not meet a closed connection (whose
        // reset could lose the refusal before the client reads it).
        let mut hello = Vec::new();
        let _ = proto::read_frame(&mut s, &mut hello);
        let _ = proto::write_json(&mut s, proto::ERROR, &wire(WireErrorKind::Denied, format!("this client's certificate (SHA-256 {fp}) is not in the agent's allowed-clients")));
        let _ = s.flush();
        s.conn.send_close_notify();
        let _ = s.conn.complete_io(&mut s.sock);
        return Err(format!("refused a certificate not on the allow-list (SHA-256 {fp})"));
    };
    let _ = s.sock.set_read_timeout(Some(Duration::from_secs(900)));
    // A backup host gone silent (its link cut) frees the connection within minutes.
    let _ = s.sock.set_write_timeout(Some(Duration::from_secs(300)));
    let mut buf = Vec::new();
    let mut data = vec![0u8; DATA_CHUNK];
    let mut squeezer = None;
    let who = tally.who.clone();
    let mut session = Session::new(&served.repos, client, &who, log);
    let mut said = false;
    let end = loop {
        let kind = match proto::read_frame(&mut s, &mut buf) {
            Ok(Some(k)) => k,
            Ok(None) => break Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break Ok(()),
            Err(e) => break Err(format!("reading a request: {e}")),
        };
        if kind == proto::DATA {
            session.data(&buf);
            continue;
        }
        let request = match (kind, serde_json::from_slice::<Request>(&buf)) {
            (proto::REQUEST, Ok(r)) => r,
            _ => {
                let _ = proto::write_json(&mut s, proto::ERROR, &wire(WireErrorKind::Protocol, "not a request this agent knows"));
                break Err("a frame that is not a request".into());
            }
        };
        if !said && !matches!(request, Request::Hello { .. }) {
            // Said once the client asks for something, so that the line says what it came for.
            said = true;
            let what = match &request {
                Request::RepoStat { repo, .. }
                | Request::RepoList { repo, .. }
                | Request::RepoRead { repo, .. }
                | Request::RepoCreate { repo, .. }
                | Request::RepoResume { repo, .. }
                | Request::RepoDelete { repo, .. } => {
                    format!("repository '{repo}'")
                }
                _ => served.pgdata.as_ref().map_or_else(|| "the cluster's files (none served)".to_string(), |p| p.display().to_string()),
            };
            log(&format!("{} connected, served {what}", tally.who));
        }
        tally.requests += 1;
        if let Request::Read { path, .. } | Request::ReadChunks { path, .. } = &request {
            tally.reads += 1;
            if tally.last != *path {
                tally.files += 1;
                tally.last.clone_from(path);
            }
        }
        let mut counted = Counted { inner: &mut s, bytes: 0 };
        let r = match session.answer(&mut counted, &request, &mut data) {
            Ok(true) => Ok(()),
            // A database host (granted repositories) reads no cluster's files: a host that
            // could take over one must not read the other's data directory.
            Ok(false) if !matches!(request, Request::Hello { .. }) && (!client.repos.is_empty() || !client.manage.is_empty()) => {
                let m = format!("{} is granted repositories, not the cluster's files: a backup host reading them needs a certificate of its own (sheaf agent --init-certs DIR --add-client NAME)", client.shown());
                log(&format!("{who}: refused: {m}"));
                refuse(&mut counted, wire(WireErrorKind::Denied, m))
            }
            Ok(false) => answer(&mut counted, request, served, &mut data, &mut squeezer),
            Err(e) => Err(e),
        };
        tally.bytes += counted.bytes;
        if let Err(e) = r.and_then(|()| s.flush()) {
            break Err(format!("writing an answer: {e}"));
        }
    };
    tally.stored = session.published;
    tally.received = session.received;
    end
}

fn answer(s: &mut impl Write, request: Request, served: &Served, data: &mut [u8], squeezer: &mut Option<Squeezer>) -> std::io::Result<()> {
    if let Request::Hello { version } = request {
        if version != proto::VERSION {
            return refuse(s, wire(WireErrorKind::Protocol, format!("this agent speaks version {}, the client {version}: run the same sheaf on both hosts", proto::VERSION)));
        }
        let reply = HelloReply {
            version: proto::VERSION,
            pgdata: served.pgdata.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            system_identifier: served.id.clone(),
            roots: served.pgdata.as_deref().map(roots).unwrap_or_default().iter().map(|r| r.display().to_string()).collect(),
        };
        return proto::write_json(s, proto::REPLY, &reply);
    }
    let Some(pgdata) = served.pgdata.as_deref() else {
        return refuse(s, wire(WireErrorKind::Denied, "this agent serves no cluster's files (it was started without --pgdata): it serves repositories only"));
    };
    let roots = roots(pgdata);
    match request {
        Request::Hello { .. } => unreachable!("answered above"),
        Request::Stat { path } => match confine_entry(&path, &roots) {
            Err(e) => refuse(s, e),
            Ok(p) => match list_one(&p, String::new(), 0) {
                Ok(l) => proto::write_json(s, proto::REPLY, &WireListed { entry: l.entry, dev: l.dev, ino: l.ino, nlink: l.nlink }),
                Err(e) => refuse(s, wire(if e.kind() == ErrorKind::NotFound { WireErrorKind::NotFound } else { WireErrorKind::Io }, e.to_string())),
            },
        },
        Request::List { path } => {
            let dir = match confine(&path, &roots) {
                Ok(p) => p,
                Err(e) => return refuse(s, e),
            };
            // Walked as it is sent: the agent holds one batch, never the listing.
            let mut walk = match Walk::new(&dir, 0) {
                Ok(w) => w,
                Err(e) => return refuse(s, wire(WireErrorKind::Io, e.to_string())),
            };
            let mut batch = Vec::with_capacity(LIST_BATCH);
            for l in &mut walk {
                match l {
                    Ok(l) => batch.push(WireListed { entry: l.entry, dev: l.dev, ino: l.ino, nlink: l.nlink }),
                    Err(e) => return refuse(s, wire(WireErrorKind::Io, e.to_string())),
                }
                if batch.len() == LIST_BATCH {
                    proto::write_json(s, proto::LIST, &batch)?;
                    batch.clear();
                }
            }
            if !batch.is_empty() {
                proto::write_json(s, proto::LIST, &batch)?;
            }
            proto::write_json(s, proto::END, &walk.take_warnings())
        }
        Request::Names { path } => {
            let dir = match confine(&path, &roots) {
                Ok(p) => p,
                // A directory gone (dropped while the backup walks) has no names.
                Err(e) if e.kind == WireErrorKind::NotFound => return proto::write_json(s, proto::END, &Vec::<String>::new()),
                Err(e) => return refuse(s, e),
            };
            let mut batch: Vec<String> = Vec::with_capacity(LIST_BATCH);
            // A directory gone (dropped while the backup walks) has no names.
            if let Ok(names) = std::fs::read_dir(&dir) {
                for name in names.flatten() {
                    batch.push(name.file_name().to_string_lossy().into_owned());
                    if batch.len() == LIST_BATCH {
                        proto::write_json(s, proto::LIST, &batch)?;
                        batch.clear();
                    }
                }
            }
            if !batch.is_empty() {
                proto::write_json(s, proto::LIST, &batch)?;
            }
            proto::write_json(s, proto::END, &Vec::<String>::new())
        }
        Request::Read { path, offset, len } => {
            let (f, before) = match open_confined(&path, &roots) {
                Ok(x) => x,
                Err(e) => return refuse(s, e),
            };
            let mut at = offset;
            let end = offset.saturating_add(len);
            while at < end {
                let want = ((end - at) as usize).min(data.len());
                let got = match std::os::unix::fs::FileExt::read_at(&f, &mut data[..want], at) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return refuse(s, wire(WireErrorKind::Io, format!("{path}: {e}"))),
                };
                if got == 0 {
                    break;
                }
                proto::write_frame(s, proto::DATA, &data[..got])?;
                at += got as u64;
            }
            read_end(s, &f, &before, at - offset)
        }
        Request::ReadChunks { path, offset, len, chunk, codec } => {
            let spec = match CodecSpec::parse(&codec) {
                Ok(c) if !c.is_auto() => c,
                Ok(_) => return refuse(s, wire(WireErrorKind::Protocol, "the agent compresses at one level: give a codec and level, not auto")),
                Err(e) => return refuse(s, wire(WireErrorKind::Protocol, e.to_string())),
            };
            if !(MIN_TRANSFER_SIZE..=MAX_TRANSFER_SIZE).contains(&u64::from(chunk)) {
                return refuse(
                    s,
                    wire(WireErrorKind::Protocol, format!("chunks of {chunk} bytes: the agent compresses chunks of {MIN_TRANSFER_SIZE} to {MAX_TRANSFER_SIZE} bytes")),
                );
            }
            let (f, before) = match open_confined(&path, &roots) {
                Ok(x) => x,
                Err(e) => return refuse(s, e),
            };
            if squeezer.as_ref().is_none_or(|q| q.codec() != spec) {
                *squeezer = None;
                match Squeezer::new(spec, served.threads) {
                    Ok(q) => *squeezer = Some(q),
                    Err(e) => return refuse(s, wire(WireErrorKind::Io, e.to_string())),
                }
            }
            let q = squeezer.as_mut().expect("just made");
            let f = Arc::new(f);
            // A read that fails is told as one (the chunks before it stand); a link that fails
            // ends the connection.
            let mut link = None;
            let sent = q.run(&f, offset, len, chunk as usize, |frame| proto::write_frame(s, proto::CHUNK, frame).inspect_err(|e| link = Some(e.kind())));
            match sent {
                Ok(n) => read_end(s, &f, &before, n),
                Err(e) if link.is_some() => Err(e),
                Err(e) => refuse(s, wire(WireErrorKind::Io, format!("{path}: {e}"))),
            }
        }
        // The repositories' requests, answered by the session before this.
        _ => refuse(s, wire(WireErrorKind::Protocol, "a repository's request out of place")),
    }
}

/// A regular file inside the roots, open for reading, and its stat at open.
fn open_confined(path: &str, roots: &[PathBuf]) -> std::result::Result<(std::fs::File, std::fs::Metadata), WireError> {
    let file = confine(path, roots)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_noatime() | nonblock())
        .open(&file)
        .or_else(|_| std::fs::OpenOptions::new().read(true).custom_flags(nonblock()).open(&file))
        .map_err(|e| WireError::from_io(path, &e))?;
    match f.metadata() {
        Ok(m) if m.is_file() => Ok((f, m)),
        Ok(_) => Err(wire(WireErrorKind::Denied, format!("{path} is not a regular file"))),
        Err(e) => Err(wire(WireErrorKind::Io, format!("{path}: {e}"))),
    }
}

/// The end of a read of `read` bytes: whether the file changed since `before`.
fn read_end(s: &mut impl Write, f: &std::fs::File, before: &std::fs::Metadata, read: u64) -> std::io::Result<()> {
    let changed = f.metadata().map(|a| a.len() != before.len() || a.mtime() != before.mtime() || a.mtime_nsec() != before.mtime_nsec()).unwrap_or(true);
    proto::write_json(s, proto::END, &ReadEnd { read, size_at_open: before.len(), changed })
}

/// `O_NOATIME`: reading for a backup should not touch access times (refused for files of
/// other owners, so the open falls back to plain).
fn libc_noatime() -> i32 {
    rustix::fs::OFlags::NOATIME.bits() as i32
}

/// `O_NONBLOCK`: a FIFO is opened without waiting for a writer, then refused as not a file.
fn nonblock() -> i32 {
    rustix::fs::OFlags::NONBLOCK.bits() as i32
}

fn refuse(s: &mut impl Write, e: WireError) -> std::io::Result<()> {
    proto::write_json(s, proto::ERROR, &e)
}
