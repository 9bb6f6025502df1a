//! An online, consistent backup of a running cluster.
//!
//! - [`direct`]: [`direct::backup_postgres`], the cluster's files read where they are (on this
//!   host, or through its agent); [`basebackup`]: the cluster read over the replication protocol
//!   (`--via base-backup`), its tar archives parsed as they stream ([`tarstream`]).
//! - [`topology`]: where a backup runs and reads (the primary, a hot standby, or both) and where
//!   its WAL comes from.
//! - [`options`]: what a backup is asked and what it reports; [`facts`]: [`facts::ClusterFacts`],
//!   what a backup records about its cluster, read back everywhere.
//! - [`incremental`]: the parent an incremental or differential builds on, and the page scan;
//!   [`changes`]: what changed since the parent, from the WAL summaries or the page scan.
//! - [`repo`]: a backup into the repository, and consolidation of a chain into one full backup;
//!   [`resume`]: its journal, and the unfinished backup a full one goes on from.

pub mod basebackup;
pub mod changes;
pub mod direct;
pub mod facts;
pub mod incremental;
pub mod options;
pub mod repo;
pub mod resume;
pub mod tarstream;
pub mod topology;
