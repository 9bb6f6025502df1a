//! A blocking client for PostgreSQL's replication protocol: what `BASE_BACKUP` and
//! `START_REPLICATION` need, which the `postgres` crate does not speak. Messages are framed and
//! parsed by `postgres-protocol` (as the `postgres` crate does); this adds the connection (TCP or
//! a Unix socket, TLS through rustls when the URL's sslmode asks), the start-up and
//! authentication (trust, password, md5, SCRAM-SHA-256), simple queries, and COPY streams, both
//! ways (a standby's status updates go back on START_REPLICATION's stream).
//!
//! TLS follows libpq's sslmode: `disable`, `prefer` (TLS when the server offers it, else plain)
//! and `require` (TLS, the server's certificate not checked, as libpq without a root
//! certificate).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::connect::conninfo::{ConnInfo, Endpoint, SslMode};
use crate::connect::tls::Policy;
use bytes::{Buf, Bytes, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::backend::{ErrorFields, Message};
use postgres_protocol::message::frontend;
use sheaf_core::{Error, ErrorKind, Result};

use crate::cluster::lsn::Lsn;

use crate::connect::session::{redact, transient_state, Refusal};
use postgres::error::SqlState;

trait Stream: Read + Write + Send {}
impl<T: Read + Write + Send> Stream for T {}

/// One row of a result: each column as text, `None` for NULL.
pub type Row = Vec<Option<String>>;

/// The socket under a stream, for its read timeout.
enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A message on START_REPLICATION's stream, from the server.
#[derive(Debug, PartialEq, Eq)]
pub enum Streamed<'a> {
    /// XLogData: WAL from `at` on.
    Wal {
        /// Where `data` starts.
        at: Lsn,
        /// The WAL bytes.
        data: &'a [u8],
    },
    /// A primary keepalive; `reply` when the server asks for a status update now (a server
    /// shutting down waits for it).
    Keepalive {
        /// Whether an answer is asked for at once.
        reply: bool,
    },
    /// A message sheaf does not act on (or one too short to be what its tag says).
    Other,
}

impl<'a> Streamed<'a> {
    /// The message in one CopyData payload.
    pub fn parse(d: &'a [u8]) -> Streamed<'a> {
        let be64 = |b: &[u8]| u64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
        match d.first() {
            // 'w', start, end of WAL on the server, send time, then the WAL.
            Some(b'w') if d.len() >= 25 => Streamed::Wal { at: Lsn(be64(&d[1..])), data: &d[25..] },
            // 'k', end of WAL on the server, send time, reply-requested.
            Some(b'k') if d.len() >= 18 => Streamed::Keepalive { reply: d[17] != 0 },
            _ => Streamed::Other,
        }
    }
}

/// A connection in replication mode.
pub struct Replication {
    stream: Box<dyn Stream>,
    sock: Option<Sock>,
    inbuf: BytesMut,
    out: BytesMut,
    url: String,
    /// The server's `server_version`.
    pub server_version: String,
    /// Notices (warnings) the server sent, in order.
    pub notices: Vec<String>,
}

/// One message of a COPY stream.
pub enum Copy {
    /// A CopyData message's payload.
    Data(Bytes),
    /// The end of the stream.
    Done,
}

enum Msg {
    Pg(Message),
    /// CopyBothResponse, which postgres-protocol does not parse.
    CopyBoth,
}

fn fields_text(mut fields: ErrorFields<'_>) -> (String, String) {
    let (mut code, mut message, mut detail, mut hint) = (String::new(), String::new(), String::new(), String::new());
    while let Ok(Some(f)) = fields.next() {
        let v = String::from_utf8_lossy(f.value_bytes()).into_owned();
        match f.type_() {
            b'C' => code = v,
            b'M' => message = v,
            b'D' => detail = v,
            b'H' => hint = v,
            _ => {}
        }
    }
    let mut text = message;
    if !detail.is_empty() {
        text = format!("{text} ({detail})");
    }
    if !hint.is_empty() {
        text = format!("{text}; {hint}");
    }
    (code, text)
}

impl Replication {
    /// Connect to `url` in physical replication mode and authenticate.
    ///
    /// # Errors
    /// A URL that does not parse; the server unreachable, refusing TLS under sslmode=require,
    /// refusing the login (pg_hba.conf must allow `replication` for the user), or asking for an
    /// authentication sheaf does not speak: each named with the fix.
    pub fn connect(url: &str) -> Result<Replication> {
        let mut info = ConnInfo::resolve(url)?;
        let shown = redact(url);
        let io = |what: &str, e: std::io::Error| Error::io(ErrorKind::Source, format!("{shown}: {what}"), e).transient(true);
        let user = info.user();
        let policy = Policy::for_conn(&info)?;
        let timeout = info.connect_timeout();
        // Each host in turn, as libpq tries them: the first that answers.
        let mut failures = Vec::new();
        let mut stream: Option<(Box<dyn Stream>, Option<Sock>)> = None;
        let mut password: Option<zeroize::Zeroizing<String>> = None;
        for target in info.targets()? {
            let port = target.port;
            // The password file matches a replication connection's database as `replication`.
            password = info.password(&target, "replication");
            let attempt: Result<(Box<dyn Stream>, Option<Sock>)> = match &target.endpoint {
                Endpoint::Socket(dir) => {
                    let path = dir.join(format!(".s.PGSQL.{port}"));
                    UnixStream::connect(&path)
                        .map(|s| {
                            let sock = s.try_clone().ok().map(Sock::Unix);
                            (Box::new(s) as Box<dyn Stream>, sock)
                        })
                        .map_err(|e| io(&format!("cannot connect to {}", path.display()), e))
                }
                Endpoint::Tcp { host, addr } => Self::tcp(host, addr.as_deref(), port, &policy, timeout, &shown),
            };
            match attempt {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => failures.push(e),
            }
        }
        let (mut stream, sock) = stream.ok_or_else(|| {
            let said: Vec<String> = failures.iter().map(ToString::to_string).collect();
            let said: Vec<String> = said.into_iter().chain(info.warnings.iter().cloned()).collect();
            // A certificate refused is said as such, whatever the other hosts did; else no host
            // answered: transient where each failure was (a server starting or restarting).
            if failures.iter().any(|e| e.kind() == ErrorKind::Denied) {
                return Error::new(ErrorKind::Denied, said.join("; "));
            }
            let transient = failures.iter().all(Error::is_transient);
            Error::new(ErrorKind::Source, format!("{}; check that the server runs and that host, port or socket directory are right", said.join("; "))).transient(transient)
        })?;
        let mut out = BytesMut::new();
        let app = info.get("application_name").or(info.get("fallback_application_name")).unwrap_or("sheaf").to_string();
        frontend::startup_message([("user", user.as_str()), ("database", "replication"), ("replication", "true"), ("application_name", app.as_str())], &mut out)
            .map_err(|e| io("start-up", e))?;
        stream.write_all(&out).map_err(|e| io("start-up", e))?;
        out.clear();
        let mut c = Replication { stream, sock, inbuf: BytesMut::with_capacity(1 << 20), out, url: shown, server_version: String::new(), notices: Vec::new() };
        c.authenticate(&user, password.as_deref().map(String::as_bytes))?;
        loop {
            match c.read()? {
                Msg::Pg(Message::ReadyForQuery(_)) => return Ok(c),
                Msg::Pg(Message::ParameterStatus(p)) if p.name().ok() == Some("server_version") => {
                    c.server_version = p.value().unwrap_or_default().to_string();
                }
                Msg::Pg(Message::ErrorResponse(e)) => return Err(c.server_error("start-up", fields_text(e.fields()))),
                _ => {}
            }
        }
    }

    fn tcp(name: &str, hostaddr: Option<&str>, port: u16, policy: &Policy, timeout: Duration, shown: &str) -> Result<(Box<dyn Stream>, Option<Sock>)> {
        let io = |what: &str, e: std::io::Error| Error::io(ErrorKind::Source, format!("{shown}: {what}"), e).transient(true);
        let addr = format!("{}:{port}", hostaddr.unwrap_or(name));
        let sock = std::net::ToSocketAddrs::to_socket_addrs(&addr.as_str())
            .map_err(|e| io(&format!("cannot resolve {addr}"), e))?
            .next()
            .ok_or_else(|| Error::new(ErrorKind::Source, format!("{shown}: {addr} resolves to no address")))?;
        let tcp = TcpStream::connect_timeout(&sock, timeout).map_err(|e| io(&format!("cannot connect to {addr}"), e))?;
        let _ = tcp.set_nodelay(true);
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(600)));
        let sock = tcp.try_clone().ok().map(Sock::Tcp);
        match &policy.config {
            None => Ok((Box::new(tcp), sock)),
            Some(config) => Self::tls(tcp, name, config.clone(), policy.required(), policy.mode, shown).map(|s| (s, sock)),
        }
    }

    fn tls(mut tcp: TcpStream, name: &str, config: std::sync::Arc<rustls::ClientConfig>, required: bool, mode: SslMode, shown: &str) -> Result<Box<dyn Stream>> {
        let mut req = BytesMut::new();
        frontend::ssl_request(&mut req);
        let io = |e: std::io::Error| Error::new(ErrorKind::Source, format!("{shown}: TLS: {e}"));
        tcp.write_all(&req).map_err(io)?;
        let mut answer = [0u8; 1];
        tcp.read_exact(&mut answer).map_err(io)?;
        if answer[0] != b'S' {
            if required {
                return Err(Error::new(
                    ErrorKind::Source,
                    format!("{shown}: sslmode={}, but the server does not offer TLS (ssl = off): turn it on there, or use sslmode=prefer", mode.name()),
                ));
            }
            return Ok(Box::new(tcp));
        }
        let server = Policy::server_name(name).map_err(|e| e.context(shown))?;
        let conn = rustls::ClientConnection::new(config, server).map_err(|e| Error::new(ErrorKind::Source, format!("{shown}: TLS: {e}")))?;
        let mut stream = rustls::StreamOwned::new(conn, tcp);
        // The handshake now, so that a certificate refused is said as such, not as a failed write.
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock).map_err(|e| match Refusal::in_chain(&e) {
                Some(r) => Error::new(ErrorKind::Denied, format!("{shown}: TLS: {e}; {}", r.hint())),
                None => Error::io(ErrorKind::Source, format!("{shown}: TLS handshake"), e),
            })?;
        }
        Ok(Box::new(stream))
    }

    fn authenticate(&mut self, user: &str, password: Option<&[u8]>) -> Result<()> {
        let need = |url: &str| Error::new(ErrorKind::Denied, format!("{url}: {} (with a line for the database `replication`)", Refusal::PasswordMissing.hint()));
        let mut scram: Option<sasl::ScramSha256> = None;
        loop {
            match self.read()? {
                Msg::Pg(Message::AuthenticationOk) => return Ok(()),
                Msg::Pg(Message::AuthenticationCleartextPassword) => {
                    let pw = password.ok_or_else(|| need(&self.url))?;
                    frontend::password_message(pw, &mut self.out).map_err(|e| self.io("authentication", e))?;
                }
                Msg::Pg(Message::AuthenticationMd5Password(b)) => {
                    let pw = password.ok_or_else(|| need(&self.url))?;
                    let hashed = md5_hash(user.as_bytes(), pw, b.salt());
                    frontend::password_message(hashed.as_bytes(), &mut self.out).map_err(|e| self.io("authentication", e))?;
                }
                Msg::Pg(Message::AuthenticationSasl(b)) => {
                    let pw = password.ok_or_else(|| need(&self.url))?;
                    let mechanisms: Vec<String> = b.mechanisms().map(|m| Ok(m.to_string())).collect().unwrap_or_default();
                    if !mechanisms.iter().any(|m| m == sasl::SCRAM_SHA_256) {
                        return Err(Error::invalid(format!("{} offers SASL {mechanisms:?}, and sheaf speaks SCRAM-SHA-256", self.url)));
                    }
                    let s = sasl::ScramSha256::new(pw, sasl::ChannelBinding::unsupported());
                    frontend::sasl_initial_response(sasl::SCRAM_SHA_256, s.message(), &mut self.out).map_err(|e| self.io("authentication", e))?;
                    scram = Some(s);
                }
                Msg::Pg(Message::AuthenticationSaslContinue(b)) => {
                    let s = scram.as_mut().ok_or_else(|| Error::corrupt(format!("{}: SCRAM out of turn", self.url)))?;
                    s.update(b.data()).map_err(|e| Error::invalid(format!("{}: SCRAM: {e}", self.url)))?;
                    let msg = s.message().to_vec();
                    frontend::sasl_response(&msg, &mut self.out).map_err(|e| self.io("authentication", e))?;
                }
                Msg::Pg(Message::AuthenticationSaslFinal(b)) => {
                    let s = scram.as_mut().ok_or_else(|| Error::corrupt(format!("{}: SCRAM out of turn", self.url)))?;
                    s.finish(b.data()).map_err(|e| Error::invalid(format!("{}: the server's SCRAM proof does not check: {e}", self.url)))?;
                    continue;
                }
                Msg::Pg(Message::ErrorResponse(e)) => {
                    let (code, text) = fields_text(e.fields());
                    let state = SqlState::from_code(&code);
                    let hint = match Refusal::of_state(&state) {
                        Some(_) if state == SqlState::INVALID_PASSWORD => ": check the password",
                        Some(_) => ": pg_hba.conf must have a `replication` line for this user and host",
                        None => "",
                    };
                    let kind = if Refusal::of_state(&state).is_some() { ErrorKind::Denied } else { ErrorKind::InvalidInput };
                    return Err(Error::new(kind, format!("{} refused the replication connection: {text} ({code}){hint}", self.url)));
                }
                Msg::Pg(_) => {
                    return Err(Error::invalid(format!(
                        "{} asks for an authentication sheaf does not speak (GSS, SSPI, Kerberos): use password or scram-sha-256 for replication",
                        self.url
                    )))
                }
                Msg::CopyBoth => return Err(Error::corrupt(format!("{}: a COPY during start-up", self.url))),
            }
            self.flush()?;
        }
    }

    /// The link failed: worth connecting again.
    fn io(&self, what: &str, e: std::io::Error) -> Error {
        Error::io(ErrorKind::Source, format!("{}: {what}", self.url), e).transient(true)
    }

    /// The server's error, by its SQLSTATE: a login refused (class 28) is [`ErrorKind::Denied`], a
    /// request refused (class 42) bad input, a shutdown or a lost connection transient
    /// ([`transient_state`]).
    fn server_error(&self, what: &str, (code, text): (String, String)) -> Error {
        let state = SqlState::from_code(&code);
        let kind = if Refusal::of_state(&state).is_some() {
            ErrorKind::Denied
        } else if code.starts_with("42") {
            ErrorKind::InvalidInput
        } else {
            ErrorKind::Source
        };
        Error::new(kind, format!("{}: {what}: {text} ({code})", self.url)).transient(transient_state(&SqlState::from_code(&code)))
    }

    fn flush(&mut self) -> Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let r = self.stream.write_all(&self.out).and_then(|()| self.stream.flush());
        self.out.clear();
        r.map_err(|e| self.io("writing", e))
    }

    fn read(&mut self) -> Result<Msg> {
        loop {
            if let Some(m) = self.read_some()? {
                return Ok(m);
            }
        }
    }

    /// Whether a whole message is waiting in what was read already (more of a burst to come
    /// without a wait).
    pub fn has_message(&self) -> bool {
        self.inbuf.len() >= 5 && self.inbuf.len() > u32::from_be_bytes(self.inbuf[1..5].try_into().expect("4 bytes")) as usize
    }

    /// The next message, or `None` when the socket's read timeout passed first.
    fn read_some(&mut self) -> Result<Option<Msg>> {
        loop {
            if self.inbuf.len() >= 5 && self.inbuf[0] == b'W' {
                let len = u32::from_be_bytes(self.inbuf[1..5].try_into().expect("4 bytes")) as usize;
                if self.inbuf.len() > len {
                    self.inbuf.advance(len + 1);
                    return Ok(Some(Msg::CopyBoth));
                }
            } else if let Some(m) = Message::parse(&mut self.inbuf).map_err(|e| self.io("reading a message", e))? {
                if let Message::NoticeResponse(n) = &m {
                    self.notices.push(fields_text(n.fields()).1);
                    continue;
                }
                return Ok(Some(Msg::Pg(m)));
            }
            let start = self.inbuf.len();
            self.inbuf.resize(start + (256 << 10), 0);
            let n = match self.stream.read(&mut self.inbuf[start..]) {
                Ok(n) => n,
                // A signal (EINTR) counts as the read timeout passing: the caller looks at its stop
                // flag and reads on; it is no failure of the connection.
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut | std::io::ErrorKind::Interrupted) => {
                    self.inbuf.truncate(start);
                    return Ok(None);
                }
                Err(e) => {
                    self.inbuf.truncate(start);
                    return Err(self.io("reading", e));
                }
            };
            self.inbuf.truncate(start + n);
            if n == 0 {
                return Err(Error::new(ErrorKind::Source, format!("{}: the server closed the connection", self.url)).transient(true));
            }
        }
    }

    /// Send `sql`, a command that answers with a COPY stream, and read up to the stream: the rows
    /// of the result sets that come before it (BASE_BACKUP's start position).
    ///
    /// # Errors
    /// The server's error instead of a COPY.
    pub fn start_copy(&mut self, sql: &str) -> Result<Vec<Row>> {
        frontend::query(sql, &mut self.out).map_err(|e| self.io("sending a command", e))?;
        self.flush()?;
        let mut rows = Vec::new();
        loop {
            match self.read()? {
                Msg::Pg(Message::DataRow(r)) => rows.push(row_of(&r)),
                Msg::Pg(Message::CopyOutResponse(_)) | Msg::CopyBoth => return Ok(rows),
                Msg::Pg(Message::ErrorResponse(e)) => {
                    let err = self.server_error(sql.split_whitespace().next().unwrap_or("command"), fields_text(e.fields()));
                    self.until_ready()?;
                    return Err(err);
                }
                Msg::Pg(Message::ReadyForQuery(_)) => return Err(Error::corrupt(format!("{}: {sql} ended without a COPY", self.url))),
                _ => {}
            }
        }
    }

    /// The next message of a COPY stream.
    ///
    /// # Errors
    /// The server's error (the stream then ends), the link's.
    pub fn next_copy(&mut self) -> Result<Copy> {
        loop {
            match self.read()? {
                Msg::Pg(Message::CopyData(d)) => return Ok(Copy::Data(d.into_bytes())),
                Msg::Pg(Message::CopyDone) => return Ok(Copy::Done),
                Msg::Pg(Message::ErrorResponse(e)) => {
                    let err = self.server_error("the stream", fields_text(e.fields()));
                    let _ = self.until_ready();
                    return Err(err);
                }
                _ => {}
            }
        }
    }

    /// A command that answers with rows (IDENTIFY_SYSTEM, READ_REPLICATION_SLOT,
    /// CREATE_REPLICATION_SLOT, TIMELINE_HISTORY): its rows, up to the server being ready again.
    ///
    /// # Errors
    /// The server's error.
    pub fn query(&mut self, sql: &str) -> Result<Vec<Row>> {
        frontend::query(sql, &mut self.out).map_err(|e| self.io("sending a command", e))?;
        self.flush()?;
        self.finish_copy().map_err(|e| Error::new(e.kind(), e.to_string().replace("after the stream", sql.split_whitespace().next().unwrap_or("command"))))
    }

    /// Send one CopyData message of a COPY-both stream (a standby's status update).
    ///
    /// # Errors
    /// The link's.
    pub fn send_copy(&mut self, data: &[u8]) -> Result<()> {
        frontend::CopyData::new(data).map_err(|e| self.io("a message", e))?.write(&mut self.out);
        self.flush()
    }

    /// A standby status update on START_REPLICATION's stream: `written` and `flushed` (applied is
    /// never claimed, as pg_receivewal does not), and our clock, in microseconds since 2000.
    ///
    /// # Errors
    /// The link's.
    pub fn send_standby_status(&mut self, written: Lsn, flushed: Lsn) -> Result<()> {
        const POSTGRES_EPOCH_US: i64 = 946_684_800_000_000;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64) - POSTGRES_EPOCH_US;
        let mut m = Vec::with_capacity(34);
        m.push(b'r');
        m.extend_from_slice(&written.0.to_be_bytes());
        m.extend_from_slice(&flushed.0.to_be_bytes());
        m.extend_from_slice(&0u64.to_be_bytes());
        m.extend_from_slice(&now.to_be_bytes());
        m.push(0);
        self.send_copy(&m)
    }

    /// Answer the server's end of a COPY-both stream with ours (it then sends what follows: the
    /// next timeline, at a timeline's end).
    ///
    /// # Errors
    /// The link's.
    pub fn end_copy(&mut self) -> Result<()> {
        frontend::copy_done(&mut self.out);
        self.flush()
    }

    /// The next message of a COPY stream, or `None` when nothing came within `wait`.
    ///
    /// # Errors
    /// As [`Replication::next_copy`].
    pub fn next_copy_within(&mut self, wait: Duration) -> Result<Option<Copy>> {
        self.set_timeout(Some(wait));
        let r = loop {
            match self.read_some() {
                Ok(None) => break Ok(None),
                Ok(Some(Msg::Pg(Message::CopyData(d)))) => break Ok(Some(Copy::Data(d.into_bytes()))),
                Ok(Some(Msg::Pg(Message::CopyDone))) => break Ok(Some(Copy::Done)),
                Ok(Some(Msg::Pg(Message::ErrorResponse(e)))) => {
                    let err = self.server_error("the stream", fields_text(e.fields()));
                    self.set_timeout(Some(Duration::from_secs(600)));
                    let _ = self.until_ready();
                    break Err(err);
                }
                Ok(Some(_)) => {}
                Err(e) => break Err(e),
            }
        };
        self.set_timeout(Some(Duration::from_secs(600)));
        r
    }

    fn set_timeout(&self, wait: Option<Duration>) {
        let _ = match &self.sock {
            Some(Sock::Tcp(s)) => s.set_read_timeout(wait),
            Some(Sock::Unix(s)) => s.set_read_timeout(wait),
            None => Ok(()),
        };
    }

    /// After a COPY stream's end: the rows of the result sets that follow (BASE_BACKUP's end
    /// position), up to the server being ready again.
    ///
    /// # Errors
    /// The server's error.
    pub fn finish_copy(&mut self) -> Result<Vec<Row>> {
        let mut rows = Vec::new();
        let mut failed = None;
        loop {
            match self.read()? {
                Msg::Pg(Message::DataRow(r)) => rows.push(row_of(&r)),
                Msg::Pg(Message::ErrorResponse(e)) => failed = Some(fields_text(e.fields())),
                Msg::Pg(Message::ReadyForQuery(_)) => {
                    return match failed {
                        Some(f) => Err(self.server_error("after the stream", f)),
                        None => Ok(rows),
                    }
                }
                _ => {}
            }
        }
    }

    fn until_ready(&mut self) -> Result<()> {
        loop {
            if let Msg::Pg(Message::ReadyForQuery(_)) = self.read()? {
                return Ok(());
            }
        }
    }
}

/// Column `col` of the first row of `rows`, the answer to `what`.
///
/// # Errors
/// No row, or too few columns.
pub fn cell<'a>(rows: &'a [Row], col: usize, what: &str) -> Result<Option<&'a str>> {
    let row = rows.first().ok_or_else(|| Error::corrupt(format!("{what} answered no row")))?;
    Ok(row.get(col).ok_or_else(|| Error::corrupt(format!("{what} answered too few columns")))?.as_deref())
}

/// [`cell`] as an LSN.
///
/// # Errors
/// As [`cell`], and a value that is not an LSN.
pub fn lsn_cell(rows: &[Row], col: usize, what: &str) -> Result<Option<Lsn>> {
    cell(rows, col, what)?.map(|t| t.parse().map_err(|_| Error::corrupt(format!("{what}: '{t}' is not an LSN")))).transpose()
}

fn row_of(r: &postgres_protocol::message::backend::DataRowBody) -> Row {
    let buf = r.buffer();
    let mut out = Vec::new();
    let mut ranges = r.ranges();
    while let Ok(Some(range)) = ranges.next() {
        out.push(range.map(|x| String::from_utf8_lossy(&buf[x]).into_owned()));
    }
    out
}

impl Drop for Replication {
    fn drop(&mut self) {
        frontend::terminate(&mut self.out);
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streamed_messages_by_their_tag() {
        let mut w = vec![b'w'];
        w.extend_from_slice(&0x1_0300_0000u64.to_be_bytes());
        w.extend_from_slice(&[0; 16]);
        w.extend_from_slice(b"wal");
        assert_eq!(Streamed::parse(&w), Streamed::Wal { at: Lsn(0x1_0300_0000), data: b"wal" });
        let mut k = vec![b'k'];
        k.extend_from_slice(&[0; 16]);
        assert_eq!(Streamed::parse(&[k.as_slice(), &[1]].concat()), Streamed::Keepalive { reply: true });
        assert_eq!(Streamed::parse(&[k.as_slice(), &[0]].concat()), Streamed::Keepalive { reply: false });
        // Too short for its tag, or a tag sheaf does not act on.
        assert_eq!(Streamed::parse(&w[..20]), Streamed::Other);
        assert_eq!(Streamed::parse(b"x"), Streamed::Other);
        assert_eq!(Streamed::parse(b""), Streamed::Other);
    }
}
