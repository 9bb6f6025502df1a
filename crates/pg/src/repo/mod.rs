//! A PostgreSQL cluster's repository. The places and bytes are [`sheaf_core::repo`]'s; these
//! modules give them PostgreSQL's meaning:
//!
//! - [`meta`]: `repo.json` ([`meta::RepoMeta`]): which cluster, which format; open and init.
//! - [`paths`]: where everything lives in it: records, locks, stripes, archived WAL (and its block
//!   summaries), drop records.
//! - [`records`]: a finished backup's record, a running one's lock, and finding them.
//! - [`backup`]: a backup written into the repository.
//! - [`inventory`]: what it holds, for `sheaf info`: archived WAL by timeline, gaps, totals;
//!   [`metrics`]: the same as Prometheus metrics.
//! - [`check`]: `sheaf check`: the repository, archiving end to end, the newest backup's age and
//!   the WAL since it, judged ok, warning or critical for monitoring.
//! - [`retention`]: what `sheaf expire` removes, and removing it; [`keep`]: pinned backups, which
//!   it never removes; [`horizon`]: how far back it removed WAL on purpose, so that what retention
//!   removed is never taken for damage.
//! - [`drills`]: the records `sheaf drill` leaves, and what info, check and the metrics read of
//!   them.
//! - [`summaries`]: `sheaf wal-summarize`: block summaries made for archived WAL that lacks them.
//! - [`keys`]: `sheaf key`: the keys of an encrypted repository: list, add, remove, rotate,
//!   migrate.
//! - [`verify`]: `sheaf verify --repo`: every backup and archived file read and checked.

pub mod backup;
pub mod check;
pub mod drills;
pub mod horizon;
pub mod inventory;
pub mod keep;
pub mod keys;
pub mod ledger;
pub mod meta;
pub mod metrics;
pub mod paths;
pub mod records;
pub mod retention;
pub mod summaries;
pub mod undelete;
pub mod verify;
