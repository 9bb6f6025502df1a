//! The `sheaf` binary against real PostgreSQL servers started for the purpose.

pub mod agent;
pub mod basebackup;
pub mod bench;
pub mod cluster;
pub mod demo;
pub mod extract;
pub mod faults;
pub mod german;
pub mod incremental;
pub mod keep;
pub mod lock;
pub mod monitor;
pub mod online;
pub mod receive;
pub mod repo;
pub mod standby;
pub mod walsum;

use std::process::Command;

use crate::integration::common::{server_catalog, SHEAF};

/// `sheaf` as the cluster's user (`postgres` when the suite runs as root), recording into the
/// suite's server catalog: as a DBA runs it beside archive_command, so that the repository, its
/// spool and what is restored are that user's. sheaf refuses to write into a folder repository
/// as another user than its owner; the tests that show that refusal run `common::sheaf` as root.
pub fn sheaf() -> Command {
    let mut c = sheaf_pg::scratch::as_server_user(SHEAF);
    c.env("SHEAF_CATALOG", server_catalog());
    c
}
