//! A PostgreSQL cluster's repository, as a model: what it holds and where, read and written
//! through [`sheaf_core::repo`] (which knows places and bytes, not what they mean). The operations
//! on it stand above: backing up into it in [`crate::backup::repo`], archiving in [`crate::wal`],
//! the rest in [`crate::maintain`].
//!
//! - [`meta`]: `repo.json` ([`meta::RepoMeta`]): which cluster, which format; open and init.
//! - [`paths`]: where everything lives in it: records, locks, stripes, archived WAL and its block
//!   summaries, pins, drills, drop records.
//! - [`records`]: a finished backup's record, a running one's lock, and finding them; [`id`]:
//!   [`id::BackupId`], a backup's id in the repository.
//! - [`keep`]: pins, the backups expire never removes; [`drills`]: the records `sheaf drill`
//!   leaves; [`dropped`]: WAL that `wal-push --queue-max` left out of the archive.
//! - [`horizon`]: how far back expire removed WAL on purpose, so that what retention removed is
//!   never taken for damage; [`ledger`]: what verify read back whole, and when.
//! - [`inventory`]: what it holds, for `sheaf info`: backups, archived WAL by timeline, gaps.
//! - [`histories`]: a repository through major-version upgrades: one history per cluster that
//!   `pg_upgrade` made, each laid out as the root is.
//! - [`key_use`]: which key wal-push opens it with, so that `key remove` keeps archiving working.

/// A PostgreSQL repository, opened ([`meta::open`]): its places and bytes, and what its
/// `repo.json` says ([`meta::RepoMeta`], through [`sheaf_core::repo::Repo::meta`]).
pub type Repo = sheaf_core::repo::Repo<meta::RepoMeta>;

pub mod annotations;
pub mod drills;
pub mod dropped;
pub mod histories;
pub mod horizon;
pub mod id;
pub mod inventory;
pub mod keep;
pub mod key_use;
pub mod ledger;
pub mod meta;
pub mod paths;
pub mod records;
