//! The WAL, from the server to the repository and back.
//!
//! - [`read`]: WAL pages and records decoded, checked as PostgreSQL checks them.
//! - [`blocksum`]: what a span of WAL changed, per relation fork; [`summarize`]: each archived
//!   segment's summary, made by wal-push and stored beside it; [`summaries`]: `sheaf
//!   wal-summarize`, for segments that lack one; [`changes`]: what the summaries say changed
//!   between two positions.
//! - [`archive`]: WAL pushed into the repository and fetched from it; [`history`]: a timeline's
//!   history file as the repository holds it.
//! - [`spool`]: the archiver's look-ahead and recovery's prefetch; [`queue`]: the archiver's queue
//!   bound and the one call `archive_command` makes; [`fetch`]: `restore_command`'s rule over
//!   several repositories.
//! - [`receive`]: WAL streamed into the repository over a replication slot (`sheaf wal-receive`).

pub mod archive;
pub mod blocksum;
pub mod changes;
pub mod fetch;
pub mod history;
pub mod queue;
pub mod read;
pub mod receive;
pub mod spool;
pub mod summaries;
pub mod summarize;
