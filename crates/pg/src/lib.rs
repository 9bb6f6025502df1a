//! sheaf-pg: PostgreSQL as a sheaf source. Its folders, from the ground up, each using only those
//! below it:
//!
//! - [`cluster`]: what PostgreSQL itself writes, as types: WAL positions ([`Lsn`]) and WAL file
//!   names, the data directory's layout, pages and their checksums, `pg_control`, the
//!   configuration files. No connection and no repository: the words every other folder speaks.
//! - [`installed`]: the PostgreSQL programs on this host, by major version, and the user its
//!   servers run as.
//! - [`connect`]: reaching the server: connection parameters as libpq finds them, TLS, the SQL
//!   connection with the facts and statements a backup needs, the replication protocol.
//! - [`repo`]: the repository's model: `repo.json`, where everything lives, the records of
//!   backups, pins, drills and dropped WAL, what it holds and how far back retention went.
//! - [`wal`]: WAL read and summarized, archived into the repository and fetched back (with the
//!   archiver's look-ahead, queue bound and recovery's prefetch), and streamed (`wal-receive`).
//! - [`maintain`]: what a DBA does to a repository besides backing up into it: expire, keep,
//!   verify, check, metrics, keys, undelete.
//! - [`backup`]: an online backup, read directly or over the replication protocol, on a primary,
//!   a standby or both; incrementals; a backup into the repository.
//! - [`restore`]: a backup into a data directory that starts; point-in-time recovery; `--delta`;
//!   one relation or page out of a backup.
//! - [`drill`]: a backup restored, started, recovered and checked on a scratch server; the
//!   scratch servers themselves.

pub mod backup;
pub mod cluster;
pub mod connect;
pub mod drill;
pub mod installed;
pub mod maintain;
pub mod repo;
pub mod restore;
pub mod wal;

pub use backup::direct::backup_postgres;
pub use backup::facts::{is_postgres, ClusterFacts};
pub use backup::options::{PgBackupOptions, PgBackupReport};
pub use cluster::lsn::Lsn;
pub use restore::directory::{restore_postgres, restore_postgres_chain, PgRestoreOptions};
