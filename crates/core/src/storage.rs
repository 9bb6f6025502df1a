//! Where stripes go and come from. The write side ([`StripeSink`]) and the read side
//! ([`StripeSource`]) are separate small traits; each target kind is one file (`storage/local.rs`,
//! `storage/null.rs`). Capabilities are data ([`TargetSpec::is_null`]), not downcasts.

pub(crate) mod local;
mod null;

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

pub use local::{LocalSink, LocalSource};
pub use null::NullSink;

/// A backup target as given on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    /// A stripe file at this path.
    File(PathBuf),
    /// Discard everything (SQL Server's `DISK='NUL'`): measures read + compress.
    Null,
}

impl TargetSpec {
    /// `nul` / `NUL` / `nul:` is the null target; anything else is a file path.
    pub fn parse(text: &str) -> TargetSpec {
        match text.to_ascii_lowercase().as_str() {
            "nul" | "nul:" => TargetSpec::Null,
            _ => TargetSpec::File(PathBuf::from(text)),
        }
    }

    /// Whether stripes written here can be read back.
    pub fn is_null(&self) -> bool {
        matches!(self, TargetSpec::Null)
    }

    /// Create the sink for stripe `index`. For a file: refuses an existing file unless `overwrite`,
    /// and writes under a temporary name until [`StripeSink::publish`].
    ///
    /// # Errors
    /// [`crate::ErrorKind::Target`] when the folder is missing, the file exists, or it cannot be created.
    pub fn create(&self, overwrite: bool) -> Result<Box<dyn StripeSink>> {
        match self {
            TargetSpec::Null => Ok(Box::new(NullSink::default())),
            TargetSpec::File(p) => Ok(Box::new(LocalSink::create(p, overwrite)?)),
        }
    }

    /// Display name for messages and the manifest.
    pub fn display(&self) -> String {
        match self {
            TargetSpec::Null => "nul".into(),
            TargetSpec::File(p) => p.display().to_string(),
        }
    }

    /// File name (no folder), as stored in the manifest.
    pub fn file_name(&self) -> String {
        match self {
            TargetSpec::Null => "nul".into(),
            TargetSpec::File(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        }
    }
}

/// The write side of one stripe. Bytes go to a temporary place; [`StripeSink::sync`] makes them
/// durable, [`StripeSink::publish`] makes the stripe visible under its final name. Dropping a sink
/// that was not published removes what it wrote.
pub trait StripeSink: Send {
    /// Append bytes.
    ///
    /// # Errors
    /// [`crate::ErrorKind::Target`] or [`crate::ErrorKind::NoSpace`].
    fn write_all(&mut self, buf: &[u8]) -> Result<()>;
    /// Flush and make durable.
    ///
    /// # Errors
    /// As `write_all`.
    fn sync(&mut self) -> Result<()>;
    /// Give the stripe its final name, durably.
    ///
    /// # Errors
    /// [`crate::ErrorKind::Target`].
    fn publish(&mut self) -> Result<()>;
    /// Remove whatever was written, published or not (best effort).
    fn discard(&mut self);
    /// Bytes written so far.
    fn written(&self) -> u64;
}

/// The read side of one stripe: positional reads of a known length.
pub trait StripeSource: Send + Sync {
    /// Total length in bytes.
    fn len(&self) -> u64;
    /// Whether the stripe is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fill `buf` from `offset`.
    ///
    /// # Errors
    /// [`crate::ErrorKind::Incomplete`] when the stripe ends before `offset + buf.len()`, else I/O.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// Where it is, for messages.
    fn location(&self) -> &Path;
}

/// Open a stripe for reading.
///
/// # Errors
/// [`crate::ErrorKind::Incomplete`] when it does not exist; I/O errors otherwise.
pub fn open_source(path: &Path) -> Result<Box<dyn StripeSource>> {
    if path.as_os_str().eq_ignore_ascii_case("nul") {
        return Err(Error::invalid("a backup to nul wrote nothing: there is nothing to read back"));
    }
    Ok(Box::new(LocalSource::open(path)?))
}
