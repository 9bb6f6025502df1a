//! One public error type: a [`ErrorKind`] that callers (the CLI) map to exit codes, a message that
//! names the thing at fault and, where it helps, the fix, the cause it came from (an I/O error, an
//! object store's or SQLite's), and whether trying again may help ([`Error::is_transient`]): set
//! by whoever knows, the I/O helper from the error's kind and each store from its client's error
//! variants, never from the text.

use std::fmt;
use std::io;
use std::path::Path;

/// What went wrong, coarse enough for a stable exit code; in records, by its snake_case name
/// (`incomplete`, `corrupt`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Bad options or arguments: unknown codec, level out of range, transfer size out of bounds.
    InvalidInput,
    /// Reading the source failed (an unreadable file, a link to its host that failed).
    Source,
    /// What was asked for is not there: a source file gone since it was listed, a path an
    /// agent does not have. Callers decide by this kind, never by the message.
    NotFound,
    /// Writing a target failed for a reason other than space.
    Target,
    /// The target device is full.
    NoSpace,
    /// A stripe is damaged: a checksum, magic or length does not match.
    Corrupt,
    /// The backup set is incomplete: a stripe is missing, truncated, unfinished or from another set.
    Incomplete,
    /// A restore target already holds data and `--force` was not given.
    TargetNotEmpty,
    /// Any other I/O failure.
    Io,
    /// Encryption keys: an encrypted backup and no key or passphrase, the wrong one, or a key file
    /// that is not one.
    Key,
    /// Refused for who is asking: a certificate the other side does not accept, a path an agent
    /// does not serve, files owned by another user than the one running sheaf.
    Denied,
    /// The operation was cancelled (another thread failed first, or the caller asked).
    Cancelled,
}

/// The cause an [`Error`] keeps.
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// sheaf's error: a kind, a human message, an optional cause, whether it is transient, and the
/// object it concerns, as data (object_store's `NotFound { path, .. }`): a caller that must know
/// which object is missing or damaged asks [`Error::object`], never the message.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Source>,
    transient: bool,
    object: Option<String>,
    /// What became of the work, said after the message ([`Error::note`]): worth saying even when
    /// the user stopped the command and knows why it failed.
    noted: bool,
}

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), source: None, transient: false, object: None, noted: false }
    }

    /// An error caused by an I/O failure. `ENOSPC` and `EDQUOT` become [`ErrorKind::NoSpace`] whatever `kind` says,
    /// because "disk full" needs its own advice; an interrupted, timed-out or would-block failure
    /// is transient.
    pub fn io(kind: ErrorKind, message: impl Into<String>, source: io::Error) -> Self {
        let full = matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT));
        let kind = if full { ErrorKind::NoSpace } else { kind };
        let transient = matches!(source.kind(), io::ErrorKind::Interrupted | io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock);
        Error { kind, message: message.into(), source: Some(Box::new(source)), transient, object: None, noted: false }
    }

    /// This error, caused by `source` (shown after the message, and kept for callers to inspect).
    pub fn with_source(mut self, source: impl Into<Source>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// This error, marked as transient (`true`: trying again may succeed: a timeout, a busy
    /// database, a connection reset) or permanent.
    pub fn transient(mut self, transient: bool) -> Self {
        self.transient = transient;
        self
    }

    /// This error, about `object` (a stripe, a record, a file: the name its store knows it by).
    pub fn with_object(mut self, object: impl Into<String>) -> Self {
        self.object = Some(object.into());
        self
    }

    /// The object this error concerns, when whoever made it said.
    pub fn object(&self) -> Option<&str> {
        self.object.as_deref()
    }

    /// Shorthand for [`ErrorKind::InvalidInput`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidInput, message)
    }

    /// Shorthand for [`ErrorKind::Corrupt`].
    pub fn corrupt(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Corrupt, message)
    }

    /// Shorthand for [`ErrorKind::Incomplete`].
    pub fn incomplete(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Incomplete, message)
    }

    /// The kind, for exit codes and matching.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message without the cause.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether trying again may succeed (a timeout, a busy server or database), as opposed to a
    /// permanent fault that needs a change first. The CLI says so when it reports the error.
    pub fn is_transient(&self) -> bool {
        self.transient
    }

    /// The I/O error this came from, if it came from one.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.source.as_ref().and_then(|s| s.downcast_ref::<io::Error>())
    }

    /// The same error again, for a value resolved once and asked for more than once: its kind,
    /// message, transience and object, and its cause as text (an I/O cause keeps its kind).
    pub fn again(&self) -> Error {
        let source: Option<Source> = self.source.as_ref().map(|s| match s.downcast_ref::<io::Error>() {
            Some(io) => Box::new(io::Error::new(io.kind(), io.to_string())) as Source,
            None => s.to_string().into(),
        });
        Error { kind: self.kind, message: self.message.clone(), source, transient: self.transient, object: self.object.clone(), noted: self.noted }
    }

    /// Prefix the message with more context, keeping kind and cause.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }

    /// The same error, `more` said after it (what became of the work, what to do next).
    pub fn note(mut self, more: impl fmt::Display) -> Self {
        self.message = format!("{}; {more}", self.message);
        self.noted = true;
        self
    }

    /// Whether [`Error::note`] said what became of the work: worth showing even after an
    /// interrupt, whose own notice says the rest.
    pub fn is_noted(&self) -> bool {
        self.noted
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(e) = &self.source {
            write!(f, ": {e}")?;
        }
        if self.kind == ErrorKind::NoSpace {
            f.write_str(" (the device or quota is full: free space, or stripe the backup over more volumes)")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_ref().map(|e| &**e as _)
    }
}

/// Helper: wrap an `io::Error` with the path it concerns.
pub(crate) fn io_at(kind: ErrorKind, what: &str, path: &Path, e: io::Error) -> Error {
    Error::io(kind, format!("{what} {}", path.display()), e).with_object(path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_again_says_what_it_said() {
        let e = Error::io(ErrorKind::Key, "cannot read the key file k", io::Error::new(io::ErrorKind::NotFound, "gone")).with_object("k").transient(true);
        let a = e.again();
        assert_eq!((a.kind(), a.to_string(), a.object(), a.is_transient()), (e.kind(), e.to_string(), e.object(), true));
        assert_eq!(a.io_error().map(io::Error::kind), Some(io::ErrorKind::NotFound));
    }

    #[test]
    fn enospc_becomes_no_space_with_advice() {
        let e = Error::io(ErrorKind::Target, "writing stripe a", io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(e.kind(), ErrorKind::NoSpace);
        let text = e.to_string();
        assert!(text.contains("writing stripe a"), "{text}");
        assert!(text.contains("more volumes"), "{text}");
    }

    #[test]
    fn context_prefixes_message() {
        let e = Error::corrupt("bad crc").context("stripe x");
        assert_eq!(e.message(), "stripe x: bad crc");
        assert_eq!(e.kind(), ErrorKind::Corrupt);
        assert!(!e.is_transient());
    }

    #[test]
    fn the_cause_is_kept_and_transience_follows_it() {
        let timed_out = Error::io(ErrorKind::Io, "reading x", io::Error::from(io::ErrorKind::TimedOut));
        assert!(timed_out.is_transient());
        assert_eq!(timed_out.io_error().map(io::Error::kind), Some(io::ErrorKind::TimedOut));
        let denied = Error::io(ErrorKind::Target, "writing y", io::Error::from_raw_os_error(libc::EACCES));
        assert!(!denied.is_transient() && denied.io_error().is_some());
        // Any cause, not only I/O: shown after the message, kept for callers, context kept too.
        let e = Error::new(ErrorKind::Io, "catalog: cannot record").with_source("database is locked").transient(true).context("backup");
        assert_eq!(e.to_string(), "backup: catalog: cannot record: database is locked");
        assert!(e.is_transient() && e.io_error().is_none());
        assert_eq!(std::error::Error::source(&e).map(ToString::to_string).as_deref(), Some("database is locked"));
    }
}
