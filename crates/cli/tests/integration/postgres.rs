//! The `sheaf` binary against real PostgreSQL servers started for the purpose.

pub mod agent;
pub mod basebackup;
pub mod bench;
pub mod cluster;
pub mod connect;
pub mod delta;
pub mod demo;
pub mod drill;
pub mod extract;
pub mod faults;
pub mod german;
pub mod incremental;
pub mod interrupt;
pub mod keep;
pub mod keys;
pub mod lock;
pub mod monitor;
pub mod online;
pub mod patroni;
pub mod receive;
pub mod replica;
pub mod repo;
pub mod standby;
pub mod tls;
pub mod units;
pub mod verify;
pub mod walsum;

use std::process::Command;

use crate::integration::common::{server_catalog, SHEAF};

/// `sheaf` as the cluster's user (`postgres` when the suite runs as root), recording into the
/// suite's server catalog: as a DBA runs it beside archive_command, so that the repository, its
/// spool and what is restored are that user's. sheaf refuses to write into a folder repository
/// as another user than its owner; the tests that show that refusal run `common::sheaf` as root.
/// setpriv execs sheaf itself (runuser would stay between), so a signal the test sends reaches it.
pub fn sheaf() -> Command {
    let mut c = if sheaf_core::host::is_root() {
        let (uid, gid) = sheaf_pg::drill::scratch::server_owner().unwrap_or_else(|e| panic!("{e}"));
        let mut c = Command::new("setpriv");
        c.args([format!("--reuid={uid}"), format!("--regid={gid}"), "--init-groups".into(), SHEAF.into()]);
        c.env("HOME", home_of(uid)).env("USER", "postgres").env("LOGNAME", "postgres");
        c
    } else {
        Command::new(SHEAF)
    };
    c.env("SHEAF_CATALOG", server_catalog());
    c
}

/// User `uid`'s home folder as /etc/passwd gives it (`/` when it gives none).
fn home_of(uid: u32) -> String {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd.lines().map(|l| l.split(':').collect::<Vec<_>>()).find(|f| f.len() > 5 && f[2] == uid.to_string()).map_or("/".into(), |f| f[5].to_string())
}
