//! sheaf-core: the engine of sheaf, a striped, chunk-parallel, compressed backup format and the
//! pipelines that write and read it.
//!
//! - [`backup`]: [`Backup`] sessions and [`backup_directory`]; [`BackupOptions`] and [`Tuning`].
//! - [`set`]: [`BackupSet`] (open and check a set) and [`verify`].
//! - [`restore`]: [`restore()`] with [`RestoreOptions`].
//! - [`codec`]: [`CodecSpec`] and the codec factory.
//! - [`format`]: the on-disk stripe format; [`manifest`]: what a backup holds.
//! - [`storage`]: where stripes go ([`Location`], [`Store`], [`StripeSink`], [`StripeSource`]).
//!
//! The library never prints or exits; progress goes through the [`Progress`] trait and failures are
//! [`Error`]s with an [`ErrorKind`].

pub mod aligned;
pub mod backup;
pub mod blob;
pub mod codec;
pub mod crc;
pub mod crypto;
pub mod datagen;
pub mod error;
pub mod format;
pub mod frame;
pub mod host;
pub mod keyring;
pub mod manifest;
pub mod pipeline;
pub mod repo;
pub mod restore;
pub mod retry;
pub mod set;
pub mod size;
pub mod source;
pub(crate) mod spill;
pub mod stop;
pub mod storage;
pub mod testing;
pub mod text;
pub mod time;
pub mod transfer;
pub mod whole;

pub use backup::{
    backup_directory, Backup, BackupOptions, BackupReport, Batch, Changes, ChunkCheck, FileChanges, Journal, Journaled, Lineage, Resumable, Resume, Tuning, UnitFilter,
};
pub use codec::{CodecKind, CodecSpec};
pub use crypto::Keys;
pub use error::{Error, ErrorKind, Result};
pub use pipeline::{NoProgress, Progress};
pub use restore::{chain_file, check_chain, consolidate, restore, restore_chain, ChainFile, DeltaReport, RestoreOptions, RestoreReport};
pub use restore::{verify, VerifyReport};
pub use set::BackupSet;
pub use storage::{LocalOnly, Location, Schemes, Store, StripeSink, StripeSource};
