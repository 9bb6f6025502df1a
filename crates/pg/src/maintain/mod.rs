//! What a DBA does to a repository besides backing up into it. Each works on the model in
//! [`crate::repo`].
//!
//! - [`expire`]: retention: what `sheaf expire` removes, by policy, and removing it;
//!   [`keep`]: pinning a backup so that it is never removed; [`annotate`]: what a backup is
//!   for; [`undelete`]: after a wipe of a locked repository, what the lock kept made readable
//!   again.
//! - [`verify`]: `sheaf verify --repo`: every backup and archived file read back and checked.
//! - [`check`]: `sheaf check`: the repository, archiving end to end, the newest backup's age,
//!   judged for monitoring; [`metrics`]: the same as Prometheus metrics.
//! - [`copy`]: `sheaf copy`: backups, their WAL, pins and drills copied into another
//!   repository as stored, checked on the way.
//! - [`keys`]: `sheaf key`: the keys of an encrypted repository.
//! - [`upgrade`]: `sheaf repo upgrade`: after pg_upgrade, the new cluster as the next history.

pub mod annotate;
pub mod check;
pub mod copy;
pub mod expire;
pub mod keep;
pub mod keys;
pub mod metrics;
pub mod undelete;
pub mod upgrade;
pub mod verify;
