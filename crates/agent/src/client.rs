//! The backup host's side of the agent: one TLS connection, requests answered in order.

use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::{ClientConnection, StreamOwned};
use sheaf_core::{Error, ErrorKind, Result};

use crate::proto::{self, HelloReply, ReadEnd, Request, WireError, WireListed};

/// How long a connection waits for the agent by default: to connect (at most 10 s), then for each
/// answer's next bytes.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// One frame of an answer.
pub enum Answer<'a> {
    /// A reply (JSON).
    Reply(&'a [u8]),
    /// File bytes.
    Data(&'a [u8]),
    /// A chunk of a file, compressed by the agent ([`crate::proto::ChunkHead`] and stored bytes).
    Chunk(&'a [u8]),
    /// A batch of a listing (JSON array).
    List(&'a [u8]),
    /// The end of a read.
    End(ReadEnd),
    /// A refusal or failure.
    Refused(WireError),
}

/// A part of a listing that streams ([`AgentClient::list_part`]).
pub enum ListPart {
    /// The next entries, in tree order.
    Entries(Vec<WireListed>),
    /// The end, with the warnings the walk met.
    End(Vec<String>),
}

/// A connection to an agent.
pub struct AgentClient {
    s: StreamOwned<ClientConnection, TcpStream>,
    buf: Vec<u8>,
    /// What the agent said at hello.
    pub hello: HelloReply,
    addr: String,
}

/// The link to the agent failed (nothing listening, a reset, a timeout, the stream cut): worth
/// dialling again, so transient.
fn link(addr: &str, what: &str, e: std::io::Error) -> Error {
    Error::io(ErrorKind::Source, format!("agent at {addr}: {what}"), e).transient(true)
}

/// The agent answered something this side cannot take: not the link's fault, so permanent.
fn garbled(addr: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Source, format!("agent at {addr}: {what}: {e}"))
}

/// The TLS error under an I/O error, if that is what it is.
fn tls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
}

/// The TLS error under sheaf's error, if that is what it is.
fn tls_cause(e: &Error) -> Option<&rustls::Error> {
    e.io_error().and_then(tls_error)
}

impl AgentClient {
    /// Connect to the agent at `addr` (`HOST:PORT`) with the CA and client certificate in
    /// `tls_dir`, and say hello.
    ///
    /// # Errors
    /// Nothing listening, a handshake refused either way (the agent's certificate not from the
    /// CA or not naming HOST; this client's not signed by it, expired, or not on its list), a
    /// version mismatch: each named, with what to check.
    pub fn connect(addr: &str, tls_dir: &Path) -> Result<AgentClient> {
        Self::connect_within(addr, tls_dir, TIMEOUT)
    }

    /// As [`AgentClient::connect`], waiting at most `timeout` for the connection and then for
    /// each answer's next bytes (a link that goes silent fails a read after it, rather than hangs).
    ///
    /// # Errors
    /// As [`AgentClient::connect`].
    pub fn connect_within(addr: &str, tls_dir: &Path, timeout: Duration) -> Result<AgentClient> {
        let config = crate::tls::client_config(tls_dir)?;
        let host = match addr.rsplit_once(':') {
            Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
            None => return Err(Error::invalid(format!("--agent {addr}: give HOST:PORT"))),
        };
        let name = ServerName::try_from(host.to_string()).map_err(|e| Error::invalid(format!("--agent {addr}: '{host}' is not a host name or address ({e})")))?;
        let target = addr
            .to_socket_addrs()
            .map_err(|e| link(addr, "cannot resolve it", e))?
            .next()
            .ok_or_else(|| Error::new(ErrorKind::Source, format!("agent at {addr}: the name resolves to no address")).transient(true))?;
        let sock = TcpStream::connect_timeout(&target, timeout.min(Duration::from_secs(10)))
            .map_err(|e| link(addr, "cannot connect (check that `sheaf agent` runs there, on that port, and that no firewall stands between)", e))?;
        let _ = sock.set_nodelay(true);
        sock.set_read_timeout(Some(timeout)).map_err(|e| link(addr, "socket", e))?;
        sock.set_write_timeout(Some(timeout)).map_err(|e| link(addr, "socket", e))?;
        let conn = ClientConnection::new(config, name).map_err(|e| garbled(addr, "TLS", e))?;
        let mut s = StreamOwned::new(conn, sock);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock).map_err(|e| {
                // A certificate refused either way is the TLS layer's error: dialling again
                // gets it again. A link cut mid-handshake is the link's.
                if tls_error(&e).is_some() {
                    Error::io(
                        ErrorKind::Denied,
                        format!("agent at {addr}: the TLS handshake failed (is the agent's certificate from the CA in --tls-dir, and does it name this host? is this client's certificate from the agent's CA and unexpired?)"),
                        e,
                    )
                } else {
                    link(addr, "the TLS handshake was cut off", e)
                }
            })?;
        }
        let mut c = AgentClient {
            s,
            buf: Vec::new(),
            hello: HelloReply { version: 0, pgdata: String::new(), system_identifier: String::new(), roots: Vec::new() },
            addr: addr.to_string(),
        };
        // TLS 1.3 ends the client's handshake before the agent has checked its certificate: a
        // refusal arrives as an alert on the first answer, or, when the agent has closed by then,
        // as a broken pipe on the first request (the alert is then read after it). Either way
        // it is permanent: the same certificate is refused again.
        let refused = |e: Error| {
            Error::new(ErrorKind::Denied, format!("{e} (the agent refused this client's certificate: is it from the agent's CA, unexpired, and on its allowed-clients?)"))
        };
        let alert = |e: &Error| matches!(tls_cause(e), Some(rustls::Error::AlertReceived(_)));
        if let Err(sent) = c.send(&Request::Hello { version: proto::VERSION }) {
            return Err(match c.next() {
                Err(e) if alert(&e) => refused(e),
                _ => refused(sent),
            });
        }
        let first = c.next().map_err(|e| if alert(&e) { refused(e) } else { e })?;
        match first {
            proto::REPLY => c.hello = c.json()?,
            k => return Err(c.unexpected(k)),
        }
        Ok(c)
    }

    /// Send a request without waiting for its answer (answers come in order: [`AgentClient::answer`]).
    ///
    /// # Errors
    /// The link's.
    pub fn send(&mut self, r: &Request) -> Result<()> {
        proto::write_json(&mut self.s, proto::REQUEST, r).and_then(|()| self.s.flush()).map_err(|e| link(&self.addr, "sending a request", e))
    }

    /// Send one frame of an object's bytes (a write begun with [`Request::RepoCreate`]), without
    /// flushing.
    ///
    /// # Errors
    /// The link's.
    pub fn send_data(&mut self, bytes: &[u8]) -> Result<()> {
        proto::write_frame(&mut self.s, proto::DATA, bytes).map_err(|e| link(&self.addr, "sending an object's bytes", e))
    }

    /// Flush what was sent.
    ///
    /// # Errors
    /// The link's.
    pub fn flush(&mut self) -> Result<()> {
        self.s.flush().map_err(|e| link(&self.addr, "sending", e))
    }

    /// The reply to the request sent last (its JSON bytes), or its refusal as sheaf's error.
    ///
    /// # Errors
    /// The refusal; the link's.
    pub fn reply(&mut self) -> Result<&[u8]> {
        match self.next()? {
            proto::REPLY => Ok(&self.buf),
            k => Err(self.unexpected(k)),
        }
    }

    /// The address dialled.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    fn next(&mut self) -> Result<u8> {
        match proto::read_frame(&mut self.s, &mut self.buf) {
            Ok(Some(k)) => Ok(k),
            Ok(None) => Err(link(&self.addr, "the agent closed the connection", std::io::ErrorKind::UnexpectedEof.into())),
            Err(e) => Err(link(&self.addr, "reading its answer", e)),
        }
    }

    /// The next frame of the answers, in order.
    ///
    /// # Errors
    /// The link's; a frame that does not parse.
    pub fn answer(&mut self) -> Result<Answer<'_>> {
        let kind = self.next()?;
        Ok(match kind {
            proto::REPLY => Answer::Reply(&self.buf),
            proto::DATA => Answer::Data(&self.buf),
            proto::CHUNK => Answer::Chunk(&self.buf),
            proto::LIST => Answer::List(&self.buf),
            proto::END => Answer::End(self.json().unwrap_or_default()),
            proto::ERROR => Answer::Refused(self.json().map_err(|_| self.unexpected(kind))?),
            k => return Err(self.unexpected(k)),
        })
    }

    fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.buf).map_err(|e| garbled(&self.addr, "an answer that does not parse", e))
    }

    fn unexpected(&self, kind: u8) -> Error {
        if kind == proto::ERROR {
            if let Ok(w) = serde_json::from_slice::<WireError>(&self.buf) {
                return w.into_error(&self.addr);
            }
        }
        garbled(&self.addr, "an answer out of turn", format!("frame kind {kind}"))
    }

    /// Everything under `path` on the agent's host (`path` itself as `""`), and the warnings
    /// the listing met, whole (for a listing that streams: [`AgentClient::start_list`]).
    ///
    /// # Errors
    /// A path outside what the agent serves, the link's errors.
    pub fn list(&mut self, path: &str) -> Result<(Vec<WireListed>, Vec<String>)> {
        self.start_list(path)?;
        let mut out = Vec::new();
        loop {
            match self.list_part()? {
                ListPart::Entries(b) => out.extend(b),
                ListPart::End(w) => return Ok((out, w)),
            }
        }
    }

    /// Ask for everything under `path`, in tree order, to be read a batch at a time with
    /// [`AgentClient::list_part`] until its end. Nothing else may be asked meanwhile.
    ///
    /// # Errors
    /// The link's.
    pub fn start_list(&mut self, path: &str) -> Result<()> {
        self.send(&Request::List { path: path.to_string() })
    }

    /// The next part of the listing asked for with [`AgentClient::start_list`].
    ///
    /// # Errors
    /// A path outside what the agent serves, a walk that failed there, the link's errors.
    pub fn list_part(&mut self) -> Result<ListPart> {
        match self.next()? {
            proto::LIST => Ok(ListPart::Entries(self.json()?)),
            proto::END => Ok(ListPart::End(self.json()?)),
            k => Err(self.unexpected(k)),
        }
    }

    /// The names in directory `path` on the agent's host, each handed to `each`; none when it is
    /// gone.
    ///
    /// # Errors
    /// A path outside what the agent serves, the link's errors.
    pub fn names(&mut self, path: &str, mut each: impl FnMut(&str)) -> Result<()> {
        self.send(&Request::Names { path: path.to_string() })?;
        loop {
            match self.next()? {
                proto::LIST => self.json::<Vec<String>>()?.iter().for_each(|n| each(n)),
                proto::END => return Ok(()),
                k => return Err(self.unexpected(k)),
            }
        }
    }

    /// One entry (a link not followed).
    ///
    /// # Errors
    /// Missing, outside what the agent serves, the link's errors.
    pub fn stat(&mut self, path: &str) -> Result<WireListed> {
        self.send(&Request::Stat { path: path.to_string() })?;
        match self.next()? {
            proto::REPLY => self.json(),
            k => Err(self.unexpected(k)),
        }
    }

    /// `len` bytes of `path` from `offset` (fewer at its end), handed to `sink` as they arrive.
    ///
    /// # Errors
    /// The file missing or outside what the agent serves, `sink`'s errors (the rest of the
    /// answer is then read and dropped, so the connection stays usable), the link's errors.
    pub fn read(&mut self, path: &str, offset: u64, len: u64, mut sink: impl FnMut(&[u8]) -> Result<()>) -> Result<ReadEnd> {
        self.send(&Request::Read { path: path.to_string(), offset, len })?;
        let mut failed = None;
        loop {
            match self.next()? {
                proto::DATA => {
                    if failed.is_none() {
                        if let Err(e) = sink(&self.buf) {
                            failed = Some(e);
                        }
                    }
                }
                proto::END => {
                    let end: ReadEnd = self.json()?;
                    return match failed {
                        Some(e) => Err(e),
                        None => Ok(end),
                    };
                }
                k => return Err(self.unexpected(k)),
            }
        }
    }

    /// Read into `buf` from `offset`; the bytes read (fewer at the file's end).
    ///
    /// # Errors
    /// As [`AgentClient::read`].
    pub fn read_at(&mut self, path: &str, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut got = 0;
        self.read(path, offset, buf.len() as u64, |d| {
            buf[got..got + d.len()].copy_from_slice(d);
            got += d.len();
            Ok(())
        })?;
        Ok(got)
    }
}
