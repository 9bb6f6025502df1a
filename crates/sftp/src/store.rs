//! One SFTP server as a [`Store`]: names are absolute paths on it.

use std::fmt;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sheaf_core::storage::{no_lock, Capabilities, Holding, Stored, StripeSink, StripeSource, UnfinishedStripe, WriteOptions};
use sheaf_core::{Error, ErrorKind, Result, Store};
use ssh2::{CheckResult, ErrorCode, FileStat, HashType, KnownHostFileKind, MethodType, OpenFlags, OpenType, Session, Sftp};

use crate::target::Target;

/// SFTP's "no such file" status.
const NO_SUCH_FILE: i32 = 2;
/// SFTP's "permission denied" status (what sftp-server answers a request its -P denies).
const PERMISSION_DENIED: i32 = 3;
/// SFTP's "operation unsupported" status.
const OP_UNSUPPORTED: i32 = 8;
/// Connections kept for reuse, per server.
const POOL: usize = 8;
/// Bytes a sink gathers before one SFTP write (libssh2 pipelines a large write as several packets).
const WRITE_BUFFER: usize = 1 << 20;

/// How to reach one server, resolved.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub(crate) target: Target,
    pub(crate) known_hosts: PathBuf,
    pub(crate) key_file: Option<PathBuf>,
    /// An ssh-agent is there (`SSH_AUTH_SOCK`).
    pub(crate) agent: bool,
    pub(crate) fsync: bool,
    pub(crate) timeout: Duration,
}

/// One authenticated connection with its SFTP channel.
struct Conn {
    _session: Session,
    sftp: Sftp,
}

/// The connections to one server, shared by the store and the sinks and sources it made.
struct Pool {
    settings: Settings,
    idle: Mutex<Vec<Conn>>,
    /// The server's key, as `ssh` shows it (`SHA256:...`).
    fingerprint: String,
}

impl Pool {
    /// A connection: an idle one, or a new one.
    fn take(&self) -> Result<Conn> {
        self.take_reused().map(|(c, _)| c)
    }

    /// A connection, and whether it was idle in the pool (and so may have died meanwhile).
    fn take_reused(&self) -> Result<(Conn, bool)> {
        if let Some(c) = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop() {
            return Ok((c, true));
        }
        dial(&self.settings).map(|(c, _)| (c, false))
    }

    /// Run `first` on a connection; when it fails with a session error (not an SFTP status) on a
    /// connection that had been idle, the connection is dropped and `again` runs on a new one.
    fn call<T>(
        &self,
        first: impl FnOnce(&Conn) -> std::result::Result<T, ssh2::Error>,
        again: impl FnOnce(&Conn) -> std::result::Result<T, ssh2::Error>,
    ) -> Result<(Conn, std::result::Result<T, ssh2::Error>)> {
        let (c, reused) = self.take_reused()?;
        match first(&c) {
            Err(e) if reused && status(&e).is_none() => {
                drop(c);
                let (c, _) = dial(&self.settings)?;
                let r = again(&c);
                Ok((c, r))
            }
            r => Ok((c, r)),
        }
    }

    /// Give back a connection that is in order.
    fn give(&self, c: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < POOL {
            idle.push(c);
        }
    }

    /// Run `f` on a connection (again on a new one when an idle one had died); the connection
    /// goes back to the pool unless the session failed (an SFTP status leaves it in order).
    fn with<T>(&self, f: impl Fn(&Sftp) -> std::result::Result<T, ssh2::Error>) -> std::result::Result<T, SftpError> {
        let (c, r) = self.call(|c| f(&c.sftp), |c| f(&c.sftp)).map_err(SftpError::Connect)?;
        match r {
            Ok(v) => {
                self.give(c);
                Ok(v)
            }
            Err(e) if status(&e) == Some(NO_SUCH_FILE) => {
                self.give(c);
                Err(SftpError::Missing(e))
            }
            Err(e) => {
                if status(&e).is_some() {
                    self.give(c);
                }
                Err(SftpError::Call(e))
            }
        }
    }

    fn url(&self, path: &str) -> String {
        let t = &self.settings.target;
        if t.host.contains(':') {
            format!("sftp://{}@[{}]:{}{path}", t.user, t.host, t.port)
        } else {
            format!("sftp://{}@{}:{}{path}", t.user, t.host, t.port)
        }
    }
}

/// What an SFTP call came to.
enum SftpError {
    Connect(Error),
    Missing(ssh2::Error),
    Call(ssh2::Error),
}

impl SftpError {
    fn into_error(self, kind: ErrorKind, what: &str) -> Error {
        match self {
            SftpError::Connect(e) => e,
            SftpError::Missing(e) => Error::new(ErrorKind::Incomplete, format!("{what}: not there ({e})")),
            SftpError::Call(e) => Error::new(kind, format!("{what}: {e}")),
        }
    }
}

/// The SFTP status code of `e`, if it is one.
fn status(e: &ssh2::Error) -> Option<i32> {
    match e.code() {
        ErrorCode::SFTP(c) => Some(c),
        ErrorCode::Session(_) => None,
    }
}

/// Connect, check the server's key, authenticate, open SFTP.
fn dial(s: &Settings) -> Result<(Conn, String)> {
    let t = &s.target;
    let shown = format!("{}@{}:{}", t.user, t.host, t.port);
    let link = |e: std::io::Error| Error::new(ErrorKind::Target, format!("cannot reach the SFTP server {}:{}: {e}", t.host, t.port)).transient(true);
    // Every address the name has, in turn (an unreachable IPv6 one does not hide the IPv4 one).
    let mut last = std::io::Error::other("the name has no address");
    let mut tcp = None;
    for addr in (t.host.as_str(), t.port).to_socket_addrs().map_err(link)? {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(10)) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let tcp = tcp.ok_or_else(|| link(last))?;
    // Requests and their acknowledgements are small: none waits on Nagle's algorithm.
    tcp.set_nodelay(true).map_err(link)?;
    let ssh = |what: &str, e: ssh2::Error| Error::new(ErrorKind::Target, format!("SFTP server {shown}: {what}: {e}"));
    let mut session = Session::new().map_err(|e| ssh("cannot start an SSH session", e))?;
    session.set_tcp_stream(tcp);
    // AES-GCM first: OpenSSL's, on the CPU's AES instructions, outruns libssh2's own
    // chacha20-poly1305 (its first choice); the others stay as fallbacks for older servers.
    for dir in [MethodType::CryptCs, MethodType::CryptSc] {
        session
            .method_pref(dir, "aes128-gcm@openssh.com,aes256-gcm@openssh.com,chacha20-poly1305@openssh.com,aes128-ctr,aes256-ctr")
            .map_err(|e| Error::new(ErrorKind::Target, format!("SFTP server {shown}: cannot set the ciphers: {e}")))?;
    }
    session.set_timeout(u32::try_from(s.timeout.as_millis()).unwrap_or(u32::MAX));
    // The key types known_hosts has for this server, asked for first (as OpenSSH does): a server
    // with several keys then shows one the file can vouch for, not a "changed" one.
    let types = known_key_types(&s.known_hosts, &t.host, t.port);
    if !types.is_empty() {
        session
            .method_pref(MethodType::HostKey, &types.join(","))
            .map_err(|e| Error::new(ErrorKind::Target, format!("SFTP server {shown}: cannot ask for host key types {types:?}: {e}")))?;
    }
    session.handshake().map_err(|e| ssh("the SSH handshake failed", e))?;

    // The server's key against the known_hosts file, before any credential is sent.
    let fingerprint = session.host_key_hash(HashType::Sha256).map(fingerprint).unwrap_or_else(|| "(no SHA256 hash)".into());
    let (key, _) = session.host_key().ok_or_else(|| Error::new(ErrorKind::Denied, format!("SFTP server {shown} showed no host key")))?;
    let mut known = session.known_hosts().map_err(|e| ssh("cannot read known hosts", e))?;
    if s.known_hosts.exists() {
        known.read_file(&s.known_hosts, KnownHostFileKind::OpenSSH).map_err(|e| ssh(&format!("cannot read {}", s.known_hosts.display()), e))?;
    }
    let entry = if t.port == 22 { t.host.clone() } else { format!("[{}]:{}", t.host, t.port) };
    match known.check_port(&t.host, t.port, key) {
        CheckResult::Match => {}
        CheckResult::NotFound => {
            return Err(Error::new(
                ErrorKind::Denied,
                format!(
                    "SFTP server {entry} is not in {}: its host key is {fingerprint}. Check that fingerprint with the server's administrator (ssh-keygen -lf on its host key), then add it: ssh-keyscan -p {} {} >> {} (or --sftp-known-hosts FILE)",
                    s.known_hosts.display(),
                    t.port,
                    t.host,
                    s.known_hosts.display()
                ),
            ))
        }
        CheckResult::Mismatch => {
            return Err(Error::new(
                ErrorKind::Denied,
                format!(
                    "SFTP server {entry} showed host key {fingerprint}, which is NOT the key {} has for it: someone may be in the middle, or the server was reinstalled. Nothing was sent; if the change is known, remove the old entry (ssh-keygen -R '{entry}' -f {}) and add the new one",
                    s.known_hosts.display(),
                    s.known_hosts.display()
                ),
            ))
        }
        CheckResult::Failure => return Err(Error::new(ErrorKind::Denied, format!("SFTP server {entry}: its host key could not be checked against {}", s.known_hosts.display()))),
    }

    match &s.key_file {
        Some(k) => session.userauth_pubkey_file(&t.user, None, k, None).map_err(|e| {
            Error::new(ErrorKind::Denied, format!("SFTP server {shown} refused the key {} for {}: {e} (is its public key in the user's authorized_keys?)", k.display(), t.user))
        })?,
        None if s.agent => {
            session.userauth_agent(&t.user).map_err(|e| Error::new(ErrorKind::Denied, format!("SFTP server {shown} accepted none of the ssh-agent's keys for {}: {e}", t.user)))?
        }
        None => {
            return Err(Error::new(
                ErrorKind::Denied,
                format!("SFTP server {shown}: no key to authenticate with: pass --sftp-key-file FILE, or run an ssh-agent (SSH_AUTH_SOCK) holding the key"),
            ))
        }
    }
    if !session.authenticated() {
        return Err(Error::new(ErrorKind::Denied, format!("SFTP server {shown} did not authenticate {}", t.user)));
    }
    let sftp = session.sftp().map_err(|e| ssh("the server offers no SFTP subsystem", e))?;
    Ok((Conn { _session: session, sftp }, fingerprint))
}

/// The key types (`ssh-ed25519`, `ecdsa-sha2-nistp256`, ...) a known_hosts file lists for `host`
/// on `port` in plain (not hashed) entries, in the file's order.
fn known_key_types(file: &Path, host: &str, port: u16) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(file) else { return Vec::new() };
    let name = if port == 22 { host.to_string() } else { format!("[{host}]:{port}") };
    let mut types: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(mut hosts) = f.next() else { continue };
        if hosts.starts_with('@') {
            // @cert-authority and @revoked entries are not keys of the host.
            continue;
        }
        if hosts.starts_with('#') {
            continue;
        }
        let Some(kind) = f.next() else { continue };
        if hosts.is_empty() {
            hosts = "";
        }
        if hosts.split(',').any(|h| h == name) && !types.iter().any(|t| t == kind) {
            types.push(kind.to_string());
        }
    }
    types
}

/// `SHA256:` and the hash in unpadded base64, as OpenSSH prints fingerprints.
fn fingerprint(hash: &[u8]) -> String {
    use base64::Engine as _;
    format!("SHA256:{}", base64::engine::general_purpose::STANDARD_NO_PAD.encode(hash))
}

/// An SFTP server's files as a [`Store`].
pub struct SftpStore {
    pool: Arc<Pool>,
}

impl fmt::Debug for SftpStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SftpStore({})", self.pool.url(""))
    }
}

impl SftpStore {
    /// Connect once (checking the server's key and the credentials now, so that a mistake is named
    /// before anything starts) and keep that connection for the first use.
    ///
    /// # Errors
    /// The server unreachable ([`ErrorKind::Target`], transient), its key unknown or changed, or
    /// the credentials refused ([`ErrorKind::Denied`]).
    pub(crate) fn connect(settings: Settings) -> Result<Self> {
        let (conn, fingerprint) = dial(&settings)?;
        let pool = Arc::new(Pool { settings, idle: Mutex::new(vec![conn]), fingerprint });
        Ok(SftpStore { pool })
    }
}

static TEMP: AtomicU64 = AtomicU64::new(0);

impl Store for SftpStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities { readable: true, atomic_publish: true, list: true, files: false }
    }

    fn describe(&self, name: &str) -> String {
        self.pool.url(name)
    }

    fn sink_memory(&self, _expected_bytes: u64) -> u64 {
        // The write buffer each stripe being written holds, counted in the backup's budget.
        WRITE_BUFFER as u64
    }

    fn create(&self, name: &str, opts: &WriteOptions) -> Result<Box<dyn StripeSink>> {
        let shown = self.describe(name);
        if opts.lock.is_some() {
            return Err(no_lock(&shown));
        }
        if !opts.overwrite && self.exists(name)? {
            return Err(Error::new(ErrorKind::Target, format!("target {shown} already exists: remove it, choose another name, or pass --overwrite")));
        }
        let temp = format!("{name}.partial.{}.{}", std::process::id(), TEMP.fetch_add(1, Ordering::Relaxed));
        let open = |c: &Conn| c.sftp.open_mode(Path::new(&temp), OpenFlags::WRITE | OpenFlags::CREATE | OpenFlags::TRUNCATE | OpenFlags::EXCLUSIVE, 0o600, OpenType::File);
        let (conn, file) = self.pool.call(open, open)?;
        let file = file.map_err(|e| match status(&e) {
            Some(NO_SUCH_FILE) => Error::new(ErrorKind::Target, format!("cannot write {shown}: its folder does not exist on the server")),
            _ => Error::new(ErrorKind::Target, format!("cannot write {shown}: {e}")),
        })?;
        Ok(Box::new(SftpSink {
            pool: self.pool.clone(),
            conn: Some(conn),
            file: Some(file),
            buf: Vec::with_capacity(WRITE_BUFFER),
            temp,
            name: name.to_string(),
            shown,
            overwrite: opts.overwrite,
            written: 0,
            synced: false,
            published: false,
            keep_unfinished: opts.keep_unfinished,
        }))
    }

    fn resume(&self, name: &str, opts: &WriteOptions) -> Result<Option<Box<dyn UnfinishedStripe>>> {
        let shown = self.describe(name);
        if opts.lock.is_some() {
            return Err(no_lock(&shown));
        }
        // What a stopped writer left: `NAME.partial.PID.N` (never `.partial.old.`, a replaced
        // stripe set aside). SFTP has no locks: the caller takes over only what a writer that no
        // longer runs left (a backup's lock names it). Of several, the largest is taken and the
        // others removed when it goes on.
        let (dir, base) = name.rsplit_once('/').map_or(("/", name), |(d, b)| (if d.is_empty() { "/" } else { d }, b));
        let prefix = format!("{base}.partial.");
        let c = self.pool.take()?;
        let items = match c.sftp.readdir(Path::new(dir)) {
            Ok(items) => items,
            Err(e) if status(&e) == Some(NO_SUCH_FILE) => {
                self.pool.give(c);
                return Ok(None);
            }
            Err(e) => return Err(Error::new(ErrorKind::Io, format!("cannot list {}: {e}", self.describe(dir)))),
        };
        let mut left: Vec<(u64, PathBuf)> = items
            .into_iter()
            .filter(|(p, st)| st.is_file() && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&prefix) && !n[prefix.len()..].starts_with("old.")))
            .map(|(p, st)| (st.size.unwrap_or(0), p))
            .collect();
        left.sort();
        let Some((len, temp)) = left.pop() else {
            self.pool.give(c);
            return Ok(None);
        };
        let temp_shown = self.describe(&temp.display().to_string());
        let file = c.sftp.open(&temp).map_err(|e| Error::new(ErrorKind::Target, format!("cannot open {temp_shown}: {e}")))?;
        let source = SftpSource { pool: self.pool.clone(), conn: Mutex::new(Some((c, file, 0))), broken: std::sync::atomic::AtomicBool::new(false), len, shown: temp_shown };
        Ok(Some(Box::new(SftpUnfinished {
            pool: self.pool.clone(),
            source,
            temp: temp.display().to_string(),
            others: left.into_iter().map(|(_, p)| p).collect(),
            name: name.to_string(),
            shown,
            overwrite: opts.overwrite,
        })))
    }

    fn can_resume(&self) -> bool {
        true
    }

    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>> {
        let shown = self.describe(name);
        let look = |c: &Conn| c.sftp.stat(Path::new(name));
        let (conn, stat) = self.pool.call(look, look)?;
        let stat = stat.map_err(|e| match status(&e) {
            Some(NO_SUCH_FILE) => Error::incomplete(format!("{shown} does not exist")).with_object(name.to_string()),
            _ => Error::new(ErrorKind::Io, format!("cannot look at {shown}: {e}")),
        })?;
        if !stat.is_file() {
            return Err(Error::incomplete(format!("{shown} is not a file")));
        }
        let file = conn.sftp.open(Path::new(name)).map_err(|e| Error::new(ErrorKind::Io, format!("cannot open {shown}: {e}")))?;
        Ok(Box::new(SftpSource {
            pool: self.pool.clone(),
            conn: Mutex::new(Some((conn, file, 0))),
            broken: std::sync::atomic::AtomicBool::new(false),
            len: stat.size.unwrap_or(0),
            shown,
        }))
    }

    fn exists(&self, name: &str) -> Result<bool> {
        match self.pool.with(|s| s.stat(Path::new(name))) {
            Ok(st) => Ok(st.is_file()),
            Err(SftpError::Missing(_)) => Ok(false),
            Err(e) => Err(e.into_error(ErrorKind::Io, &format!("cannot look at {}", self.describe(name)))),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>> {
        let (dir, base) = prefix.rsplit_once('/').map_or(("/", prefix), |(d, b)| (if d.is_empty() { "/" } else { d }, b));
        let mut out = Vec::new();
        let mut todo = vec![(PathBuf::from(dir), base.to_string())];
        let c = self.pool.take()?;
        while let Some((d, starts)) = todo.pop() {
            let items = match c.sftp.readdir(&d) {
                Ok(items) => items,
                Err(e) if status(&e) == Some(NO_SUCH_FILE) => continue,
                Err(e) => return Err(Error::new(ErrorKind::Io, format!("cannot list {}: {e}", self.describe(&d.display().to_string())))),
            };
            for (path, st) in items {
                let n = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if !n.starts_with(&starts) || n == "." || n == ".." {
                    continue;
                }
                if st.is_dir() {
                    todo.push((path, String::new()));
                } else if st.is_file() && !n.contains(".partial.") {
                    out.push(stored(&path, &st));
                }
            }
        }
        self.pool.give(c);
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn prepare(&self, name: &str, _below: Option<&str>) -> Result<()> {
        let Some(dir) = Path::new(name).parent() else { return Ok(()) };
        let c = self.pool.take()?;
        // Each level from the top, as `mkdir -p`: an existing one is fine.
        let mut at = PathBuf::from("/");
        for part in dir.components().skip(1) {
            at.push(part);
            if c.sftp.stat(&at).is_ok_and(|s| s.is_dir()) {
                continue;
            }
            if let Err(e) = c.sftp.mkdir(&at, 0o750) {
                if !c.sftp.stat(&at).is_ok_and(|s| s.is_dir()) {
                    return Err(Error::new(ErrorKind::Target, format!("cannot create folder {}: {e}", self.describe(&at.display().to_string()))));
                }
            }
        }
        self.pool.give(c);
        Ok(())
    }

    fn prune(&self, dir: &str) {
        let _ = self.pool.with(|s| s.rmdir(Path::new(dir)));
    }

    fn delete(&self, name: &str) -> Result<()> {
        match self.pool.with(|s| s.unlink(Path::new(name))) {
            Ok(()) | Err(SftpError::Missing(_)) => Ok(()),
            Err(e) => Err(e.into_error(ErrorKind::Target, &format!("cannot remove {}", self.describe(name)))),
        }
    }

    fn credentials(&self) -> Option<String> {
        let s = &self.pool.settings;
        let auth = match &s.key_file {
            Some(k) => format!("the key {}", k.display()),
            None => "the ssh-agent's keys".into(),
        };
        let fsync = if s.fsync {
            "fsync@openssh.com asked for every file (a server without it is refused at the first write)"
        } else {
            "files NOT fsynced by the server (--sftp-no-fsync)"
        };
        Some(format!(
            "{} as {}, host key {} checked against {}; authenticated by {auth}; {fsync}",
            self.pool.url(""),
            s.target.user,
            self.pool.fingerprint,
            s.known_hosts.display()
        ))
    }
}

fn stored(path: &Path, st: &FileStat) -> Stored {
    let mtime = st.mtime.unwrap_or(0);
    Stored { name: path.display().to_string(), size: st.size.unwrap_or(0), modified: mtime as i64, tag: format!("{:x}-{:x}", st.size.unwrap_or(0), mtime) }
}

/// A file being written under a temporary name.
struct SftpSink {
    pool: Arc<Pool>,
    conn: Option<Conn>,
    file: Option<ssh2::File>,
    buf: Vec<u8>,
    temp: String,
    name: String,
    shown: String,
    overwrite: bool,
    written: u64,
    synced: bool,
    published: bool,
    /// Left under its temporary name, not removed, when dropped unpublished (a resumable stripe).
    keep_unfinished: bool,
}

impl SftpSink {
    fn flush_buf(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let file = self.file.as_mut().ok_or_else(|| Error::new(ErrorKind::Target, format!("{}: already closed", self.shown)))?;
        file.write_all(&self.buf).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", self.shown), e))?;
        self.buf.clear();
        Ok(())
    }

    fn sftp(&self) -> Result<&Sftp> {
        self.conn.as_ref().map(|c| &c.sftp).ok_or_else(|| Error::new(ErrorKind::Target, format!("{}: the connection is gone", self.shown)))
    }
}

impl StripeSink for SftpSink {
    fn write_all(&mut self, mut data: &[u8]) -> Result<()> {
        self.synced = false;
        self.written += data.len() as u64;
        // A whole buffer's worth with nothing gathered goes straight to libssh2: no copy.
        if self.buf.is_empty() && data.len() >= WRITE_BUFFER {
            let file = self.file.as_mut().ok_or_else(|| Error::new(ErrorKind::Target, format!("{}: already closed", self.shown)))?;
            return file.write_all(data).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", self.shown), e));
        }
        while !data.is_empty() {
            let n = (WRITE_BUFFER - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.buf.len() == WRITE_BUFFER {
                self.flush_buf()?;
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.flush_buf()?;
        if self.pool.settings.fsync && !self.synced {
            let file = self.file.as_mut().ok_or_else(|| Error::new(ErrorKind::Target, format!("{}: already closed", self.shown)))?;
            file.fsync().map_err(|e| match status(&e) {
                Some(OP_UNSUPPORTED | PERMISSION_DENIED) => Error::new(
                    ErrorKind::Target,
                    format!(
                        "{}: the SFTP server does not offer (or refuses) fsync@openssh.com ({e}), so it cannot promise the file is on its disk; use OpenSSH's sftp-server with fsync allowed, or pass --sftp-no-fsync to accept that",
                        self.shown
                    ),
                ),
                _ => Error::new(ErrorKind::Target, format!("cannot fsync {}: {e}", self.shown)),
            })?;
        }
        self.synced = true;
        Ok(())
    }

    fn publish(&mut self) -> Result<()> {
        self.sync()?;
        drop(self.file.take());
        let (temp, name) = (Path::new(&self.temp).to_path_buf(), Path::new(&self.name).to_path_buf());
        let sftp = self.sftp()?;
        if self.overwrite {
            // A listing tells one version of a name from the next by size and modification time
            // (SFTP 3 has whole seconds and no inode): a replacement written within the second of
            // the one it replaces is dated the next second, so that verify's ledger sees it anew.
            if let (Ok(old), Ok(new)) = (sftp.stat(&name), sftp.stat(&temp)) {
                if old.size == new.size && old.mtime.is_some() && old.mtime >= new.mtime {
                    let next = old.mtime.unwrap_or(0) + 1;
                    let when = FileStat { size: None, uid: None, gid: None, perm: None, atime: Some(next), mtime: Some(next) };
                    sftp.setstat(&temp, when).map_err(|e| Error::new(ErrorKind::Target, format!("cannot date {}: {e}", self.shown)))?;
                }
            }
        }
        // A replacement sets the old file aside first (hidden from listings like a temporary
        // file), so that the name is never left without one of the two if the link fails.
        let aside = PathBuf::from(format!("{}.partial.old.{}.{}", self.name, std::process::id(), TEMP.fetch_add(1, Ordering::Relaxed)));
        let set_aside = self.overwrite
            && match sftp.rename(&name, &aside, None) {
                Ok(()) => true,
                Err(e) if status(&e) == Some(NO_SUCH_FILE) => false,
                Err(e) => return Err(Error::new(ErrorKind::Target, format!("cannot replace {}: {e}", self.shown))),
            };
        // SFTP 3's rename refuses a taken name: never two writers' files under one name.
        if let Err(e) = sftp.rename(&temp, &name, None) {
            if set_aside {
                let _ = sftp.rename(&aside, &name, None);
            }
            let taken = sftp.stat(&name).is_ok();
            return Err(Error::new(
                ErrorKind::Target,
                if taken {
                    format!("target {} already exists (written meanwhile by someone else?): not replaced", self.shown)
                } else {
                    format!("cannot publish {}: {e}", self.shown)
                },
            ));
        }
        if set_aside {
            let _ = sftp.unlink(&aside);
        }
        self.published = true;
        if let Some(c) = self.conn.take() {
            self.pool.give(c);
        }
        Ok(())
    }

    fn discard(&mut self) {
        if self.keep_unfinished && !self.published {
            // A resumable stripe is left for the next attempt, with what reached the server (as
            // a folder's `.partial` is); giving it up is the unfinished stripe's `abandon`. A
            // connection whose last write failed may be broken: not pooled.
            let flushed = self.flush_buf().is_ok();
            drop(self.file.take());
            if let Some(c) = self.conn.take().filter(|_| flushed) {
                self.pool.give(c);
            }
            return;
        }
        drop(self.file.take());
        let conn = match self.conn.take() {
            Some(c) => Some(c),
            None => self.pool.take().ok(),
        };
        if let Some(c) = conn {
            let _ = c.sftp.unlink(Path::new(&self.temp));
            if self.published {
                let _ = c.sftp.unlink(Path::new(&self.name));
            }
        }
    }

    fn written(&self) -> u64 {
        self.written
    }
}

impl Drop for SftpSink {
    fn drop(&mut self) {
        if !self.published && self.keep_unfinished {
            // What was gathered goes too (best effort): the next attempt keeps what reached the
            // server and checks it frame by frame.
            self.discard();
        } else if !self.published {
            drop(self.file.take());
            if let Some(c) = self.conn.take() {
                let _ = c.sftp.unlink(Path::new(&self.temp));
            }
        }
    }
}

/// A stopped writer's temporary file, taken over ([`Store::resume`]).
struct SftpUnfinished {
    pool: Arc<Pool>,
    /// What it holds, read back.
    source: SftpSource,
    temp: String,
    /// Other temporary files of the same stripe (writers stopped earlier), removed on going on.
    others: Vec<PathBuf>,
    name: String,
    shown: String,
    overwrite: bool,
}

impl UnfinishedStripe for SftpUnfinished {
    fn holds(&self) -> Holding<'_> {
        Holding::Bytes(&self.source)
    }

    fn go_on(self: Box<Self>, keep: u64) -> Result<Box<dyn StripeSink>> {
        let SftpUnfinished { pool, source, temp, others, name, shown, overwrite } = *self;
        if keep > source.len {
            return Err(Error::new(ErrorKind::Target, format!("{}: cannot keep {keep} bytes of {}", source.shown, source.len)));
        }
        drop(source);
        let conn = pool.take()?;
        let path = Path::new(&temp);
        for o in &others {
            let _ = conn.sftp.unlink(o);
        }
        // Cut to what is kept, then written on from there.
        let cut = FileStat { size: Some(keep), uid: None, gid: None, perm: None, atime: None, mtime: None };
        conn.sftp.setstat(path, cut).map_err(|e| Error::new(ErrorKind::Target, format!("cannot cut {}: {e}", pool.url(&temp))))?;
        let mut file =
            conn.sftp.open_mode(path, OpenFlags::WRITE, 0o600, OpenType::File).map_err(|e| Error::new(ErrorKind::Target, format!("cannot write {}: {e}", pool.url(&temp))))?;
        if pool.settings.fsync {
            // Cut durably before anything is written after it.
            file.fsync().map_err(|e| Error::new(ErrorKind::Target, format!("cannot fsync {}: {e}", pool.url(&temp))))?;
        }
        file.seek(SeekFrom::Start(keep)).map_err(|e| Error::io(ErrorKind::Target, format!("cannot seek in {}", pool.url(&temp)), e))?;
        Ok(Box::new(SftpSink {
            pool,
            conn: Some(conn),
            file: Some(file),
            buf: Vec::with_capacity(WRITE_BUFFER),
            temp,
            name,
            shown,
            overwrite,
            written: 0,
            synced: false,
            published: false,
            keep_unfinished: true,
        }))
    }

    fn abandon(self: Box<Self>) {
        let SftpUnfinished { pool, source, temp, others, .. } = *self;
        drop(source);
        let _ = pool.with(|s| {
            for o in &others {
                let _ = s.unlink(o);
            }
            s.unlink(Path::new(&temp))
        });
    }
}

/// A file being read: one connection and handle, reads at any offset. The handle's position is
/// kept, so that reads in order never seek (a seek drops libssh2's read-ahead).
struct SftpSource {
    pool: Arc<Pool>,
    conn: Mutex<Option<(Conn, ssh2::File, u64)>>,
    broken: std::sync::atomic::AtomicBool,
    len: u64,
    shown: String,
}

/// Bytes a stream asks the server for at once (libssh2 keeps that much read ahead).
const READ_AHEAD: usize = 4 << 20;

impl SftpSource {
    /// Read into `buf` from `offset`: `all` fills it (or fails), else as much as one read gives.
    fn read_at(&self, buf: &mut [u8], offset: u64, all: bool) -> Result<usize> {
        let mut held = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let (_, file, pos) = held.as_mut().ok_or_else(|| Error::new(ErrorKind::Io, format!("{}: the connection is gone", self.shown)))?;
        if *pos != offset {
            file.seek(SeekFrom::Start(offset)).map_err(|e| Error::io(ErrorKind::Io, format!("cannot read {}", self.shown), e))?;
            *pos = offset;
        }
        let r = if all { file.read_exact(buf).map(|()| buf.len()) } else { file.read(buf) };
        match r {
            Ok(n) if n > 0 || buf.is_empty() => {
                *pos += n as u64;
                Ok(n)
            }
            Ok(_) => Err(Error::incomplete(format!("{} ended early (truncated while read?)", self.shown))),
            Err(e) => {
                // The position is unknown after a failed read, and the session may be broken:
                // the connection is not given back to the pool.
                *pos = u64::MAX;
                self.broken.store(true, Ordering::Relaxed);
                Err(match e.kind() {
                    std::io::ErrorKind::UnexpectedEof => Error::incomplete(format!("{} ended early (truncated while read?)", self.shown)),
                    _ => Error::io(ErrorKind::Io, format!("cannot read {}", self.shown), e),
                })
            }
        }
    }
}

impl StripeSource for SftpSource {
    fn len(&self) -> u64 {
        self.len
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        sheaf_core::storage::checked_range(&self.shown, offset, buf.len() as u64, self.len)?;
        self.read_at(buf, offset, true).map(drop)
    }

    fn location(&self) -> &str {
        &self.shown
    }

    fn stream(&self, start: u64, end: u64) -> Result<Box<dyn Read + Send + '_>> {
        sheaf_core::storage::stream_range(&self.shown, start, end, self.len)?;
        Ok(Box::new(std::io::BufReader::with_capacity(READ_AHEAD, Sequential { src: self, pos: start, end })))
    }
}

/// A range read in order, in reads as large as the caller's buffer.
struct Sequential<'a> {
    src: &'a SftpSource,
    pos: u64,
    end: u64,
}

impl Read for Sequential<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = (self.end - self.pos).min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        let n = self.src.read_at(&mut buf[..want], self.pos, false).map_err(sheaf_core::storage::into_io)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Drop for SftpSource {
    fn drop(&mut self) {
        if let Some((conn, file, _)) = self.conn.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            drop(file);
            if !*self.broken.get_mut() {
                self.pool.give(conn);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_types_known_hosts_has_for_a_server_come_first() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("known_hosts");
        std::fs::write(
            &f,
            "# a comment\nvault.example,10.0.0.9 ecdsa-sha2-nistp256 AAAA1\n[vault.example]:2222 ssh-rsa AAAA2\n[vault.example]:2222 ssh-ed25519 AAAA3\n@cert-authority *.example ssh-ed25519 AAAA4\n|1|hashed= ssh-ed25519 AAAA5\n",
        )
        .unwrap();
        assert_eq!(known_key_types(&f, "vault.example", 22), vec!["ecdsa-sha2-nistp256"]);
        assert_eq!(known_key_types(&f, "10.0.0.9", 22), vec!["ecdsa-sha2-nistp256"]);
        assert_eq!(known_key_types(&f, "vault.example", 2222), vec!["ssh-rsa", "ssh-ed25519"]);
        assert!(known_key_types(&f, "other.example", 22).is_empty(), "no plain entry: libssh2's own order (hashed entries still match)");
        assert!(known_key_types(&d.path().join("missing"), "vault.example", 22).is_empty());
    }
}
