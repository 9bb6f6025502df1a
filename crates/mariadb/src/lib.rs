//! sheaf's MariaDB source: online, consistent physical backups of a running MariaDB 10.8–11.x
//! server through sheaf's engine (readers, compressors, frames, striped writers, any storage),
//! as mariabackup makes them, and restores prepared by the server's own crash recovery.
//!
//! - [`url`]: the server a `mariadb://` URL names.
//! - [`server`]: the session: version, variables, LSNs, `BACKUP STAGE`, the binary log position.
//! - [`redo`]: the redo log's head, the thread that copies it as it is written, and its rebuilding.
//! - [`page`]: InnoDB's page checksums, checked (and torn pages read again) as pages are read.

pub mod backup;
pub mod drill;
pub mod page;
pub mod redo;
pub mod repo;
pub mod restore;
pub mod scratch;
pub mod server;
pub mod url;

pub use backup::{backup_mariadb, is_mariadb, MariaBackupOptions, MariaBackupReport, MariaFacts, KIND};
pub use restore::{prepare, restore_mariadb, MariaRestored, Prepared};
