//! sheaf-pg: PostgreSQL as a sheaf source.
//!
//! - [`backup`]: [`backup_postgres`], an online, consistent backup of a running cluster.
//! - [`restore`]: [`restore_postgres`], a restore that `pg_ctl start` brings up consistent.
//! - [`server`]: the connection, its checks, and the backup functions.
//! - [`checksum`]: PostgreSQL's page checksum, to verify pages while they are read.
//! - [`extract`]: one relation, or one page of it, out of a backup.
//! - [`layout`]: what a base backup leaves out, and which files are relation forks.
//! - [`repo`]: a cluster's repository (backups, records, retention); [`archive`]: WAL push and
//!   fetch; [`pitr`]: point-in-time recovery from it.

pub mod archive;
pub mod backup;
pub mod checksum;
pub mod extract;
pub mod layout;
pub mod pitr;
pub mod repo;
pub mod restore;
pub mod scratch;
pub mod spool;
pub mod server;

pub use backup::{backup_postgres, PgBackupOptions, PgBackupReport};
pub use restore::{is_postgres, restore_postgres, PgRestoreOptions};
