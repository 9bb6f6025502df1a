//! One public error type: a [`ErrorKind`] that callers (the CLI) map to exit codes, a message that
//! names the thing at fault and, where it helps, the fix, and the underlying I/O error if any.

use std::fmt;
use std::io;
use std::path::Path;

/// What went wrong, coarse enough for a stable exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad options or arguments: unknown codec, level out of range, transfer size out of bounds.
    InvalidInput,
    /// Reading the source failed (missing or unreadable file).
    Source,
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
    /// The operation was cancelled (another thread failed first, or the caller asked).
    Cancelled,
}

/// sheaf's error: a kind, a human message, and an optional cause.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<io::Error>,
}

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error { kind, message: message.into(), source: None }
    }

    /// An error caused by an I/O failure. `ENOSPC` and `EDQUOT` become [`ErrorKind::NoSpace`] whatever `kind` says,
    /// because "disk full" needs its own advice.
    pub fn io(kind: ErrorKind, message: impl Into<String>, source: io::Error) -> Self {
        let full = matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT));
        let kind = if full { ErrorKind::NoSpace } else { kind };
        Error { kind, message: message.into(), source: Some(source) }
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

    /// Whether trying again may succeed (a transient I/O condition), as opposed to a permanent fault.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.source.as_ref().map(io::Error::kind),
            Some(io::ErrorKind::Interrupted | io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock)
        )
    }

    /// Prefix the message with more context, keeping kind and cause.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
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
        self.source.as_ref().map(|e| e as _)
    }
}

/// Helper: wrap an `io::Error` with the path it concerns.
pub(crate) fn io_at(kind: ErrorKind, what: &str, path: &Path, e: io::Error) -> Error {
    Error::io(kind, format!("{what} {}", path.display()), e)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(!e.is_retryable());
    }
}
