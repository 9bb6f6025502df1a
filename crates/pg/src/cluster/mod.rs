//! What PostgreSQL itself writes, as types, with no connection and no repository: the words the
//! rest of the crate speaks.
//!
//! - [`lsn`]: [`lsn::Lsn`], a WAL position, read and written as PostgreSQL writes it (`X/Y`).
//! - [`walname`]: WAL file names (segments, timelines, history, partial and backup files).
//! - [`layout`]: the data directory: what a base backup leaves out, which files are relation
//!   forks.
//! - [`checksum`]: the data page checksum, to verify pages as they are read.
//! - [`control`]: `global/pg_control`, read; [`system`]: [`system::SystemId`], which cluster.
//! - [`conf`]: the configuration files a restore reads and appends to.
//! - [`label`]: `backup_label`, where a backup's WAL replay starts.

pub mod checksum;
pub mod conf;
pub mod control;
pub mod label;
pub mod layout;
pub mod lsn;
pub mod system;
pub mod walname;
