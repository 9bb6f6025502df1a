//! sheaf-pg: PostgreSQL as a sheaf source.
//!
//! - [`backup`]: [`backup_postgres`], an online, consistent backup of a running cluster.
//! - [`restore`]: [`restore_postgres`], a restore that `pg_ctl start` brings up consistent.
//! - [`facts`]: [`ClusterFacts`], what a backup records about its cluster, read back everywhere.
//! - [`server`]: the connection, its checks, and the backup functions.
//! - [`wire`]: a client of the replication protocol; [`basebackup`]: `--via base-backup`, the
//!   cluster read over it (BASE_BACKUP), its tar archives parsed as they stream ([`tarstream`]).
//! - [`topology`]: where a backup runs and reads (the primary, a hot standby, or both) and where
//!   its WAL comes from.
//! - [`checksum`]: PostgreSQL's page checksum, to verify pages while they are read.
//! - [`extract`]: one relation, or one page of it, out of a backup.
//! - [`incremental`]: the parent an incremental or differential builds on, and the page scan that
//!   finds what changed since it.
//! - [`layout`]: what a base backup leaves out, and which files are relation forks.
//! - [`lsn`]: [`Lsn`], a WAL position, read and written as PostgreSQL writes it (`X/Y`).
//! - [`wal`]: WAL file names (segments, timelines, history, partial and backup files);
//!   [`walread`]: WAL pages and records decoded; [`blocksum`]: what a span of WAL changed, per
//!   relation fork; [`summarize`]: each archived segment's summary, made by wal-push and stored
//!   beside it; [`walmap`]: what changed since a parent, from the summaries.
//! - [`repo`]: a cluster's repository (meta, layout, records, backups into it, inventory,
//!   retention, verify); [`archive`]: WAL push and fetch; [`spool`]: the archiver's look-ahead
//!   and recovery's prefetch; [`queue`]: the archiver's queue bound; [`pitr`]: point-in-time
//!   recovery from the repository; [`receive`]: WAL streamed into the repository over a
//!   replication slot (`sheaf wal-receive`); [`drill`]: a backup restored, started, recovered
//!   and checked on a scratch server, timed and recorded (`sheaf drill`).

pub mod archive;
pub mod backup;
pub mod basebackup;
pub mod blocksum;
pub mod checksum;
pub mod conninfo;
pub mod delta;
pub mod drill;
pub mod extract;
pub mod facts;
pub mod incremental;
pub mod layout;
pub mod lsn;
pub mod options;
pub mod pitr;
pub mod queue;
pub mod receive;
pub mod repo;
pub mod restore;
pub mod scratch;
pub mod server;
pub mod spool;
pub mod summarize;
pub mod tarstream;
pub mod tls;
pub mod topology;
pub mod wal;
pub mod walfetch;
pub mod walmap;
pub mod walread;
pub mod wire;

pub use backup::backup_postgres;
pub use facts::{is_postgres, ClusterFacts};
pub use lsn::Lsn;
pub use options::{PgBackupOptions, PgBackupReport};
pub use restore::{restore_postgres, restore_postgres_chain, PgRestoreOptions};
