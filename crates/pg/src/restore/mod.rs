//! A backup back into a data directory that `pg_ctl start` brings up consistent.
//!
//! - [`directory`]: [`directory::restore_postgres`], a backup (or a chain of them) written out,
//!   relocated, fixed up to start.
//! - [`pitr`]: point-in-time recovery from the repository: the backup consistent before the
//!   target, and the settings that recover to it.
//! - [`target`]: where recovery stops and what the server does there.
//! - [`startup`]: how the restored cluster starts: a standby, a recovery to a target, as backed
//!   up; the recovery settings written and those of the cluster backed up removed.
//! - [`delta`]: `restore --delta`: onto a copy of this cluster, only what the WAL says changed.
//! - [`extract`]: one relation, or one page of it, out of a backup.

pub mod delta;
pub mod directory;
pub mod extract;
pub mod pitr;
pub mod startup;
pub mod target;
