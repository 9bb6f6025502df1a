//! A session with the running server: who it is (MariaDB 10.8 to 11.x, nothing else), where its
//! files are, the LSNs InnoDB reports, `BACKUP STAGE`, and the binary log position. Every refusal
//! names its cause and the fix: a privilege with the `GRANT` that gives it, a server that is not
//! MariaDB with what sheaf reads.

use std::time::{Duration, Instant};

use mysql::prelude::Queryable;
use mysql::{Conn, OptsBuilder};
use sheaf_core::{Error, ErrorKind, Result};

use crate::url::Address;

/// Seconds a backup stage waits for the statements it must wait for (lock_wait_timeout).
pub const LOCK_WAIT: u64 = 600;

/// The privileges a backup needs, as the GRANT that gives them (mariabackup's documented set).
pub const BACKUP_GRANT: &str = "RELOAD, PROCESS, LOCK TABLES, BINLOG MONITOR";

/// MariaDB's error for a missing privilege (ER_SPECIFIC_ACCESS_DENIED_ERROR), and for a denied
/// login (ER_ACCESS_DENIED_ERROR).
const NO_PRIVILEGE: u16 = 1227;
const ACCESS_DENIED: u16 = 1045;
/// ER_LOCK_WAIT_TIMEOUT: a backup stage waited lock_wait_timeout for a statement.
const LOCK_WAIT_TIMEOUT: u16 = 1205;

/// The four stages a backup passes the server through, and the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Taken at the start: nothing is blocked.
    Start,
    /// Non-transactional tables flushed; new writes to them wait.
    Flush,
    /// DDL waits.
    BlockDdl,
    /// Commits and non-transactional writes wait: the consistency point.
    BlockCommit,
    /// Everything goes on.
    End,
}

impl Stage {
    /// Its name in `BACKUP STAGE`.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Start => "START",
            Stage::Flush => "FLUSH",
            Stage::BlockDdl => "BLOCK_DDL",
            Stage::BlockCommit => "BLOCK_COMMIT",
            Stage::End => "END",
        }
    }
}

/// The binary log's position at the consistency point.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BinlogPosition {
    /// The binary log file (`SHOW MASTER STATUS`), when the server writes one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Its position.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// `@@gtid_binlog_pos`: the GTIDs the binary log holds.
    pub gtid_binlog_pos: String,
    /// `@@gtid_current_pos`: the GTIDs applied, for a replica made from the backup.
    pub gtid_current_pos: String,
}

/// A connection to the server backed up.
pub struct Server {
    conn: Conn,
    address: Address,
    /// `VERSION()`, e.g. `10.11.19-MariaDB-0+deb12u1-log`.
    pub version: String,
    /// Major, minor, patch.
    pub version_number: (u32, u32, u32),
}

fn sql_error(e: &mysql::Error) -> Option<(u16, &str)> {
    match e {
        mysql::Error::MySqlError(m) => Some((m.code, m.message.as_str())),
        _ => None,
    }
}

/// The version `VERSION()` names, if it is MariaDB's: `None` for another server.
pub fn mariadb_version(text: &str) -> Option<(u32, u32, u32)> {
    if !text.contains("MariaDB") {
        return None;
    }
    let mut nums = text.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty()).map(|s| s.parse::<u32>().ok());
    Some((nums.next()??, nums.next()??, nums.next().flatten().unwrap_or(0)))
}

/// Refuse a server sheaf does not read: not MariaDB (MySQL's redo log is another format), or a
/// MariaDB whose redo log is not the one-file format of 10.8 and later.
///
/// # Errors
/// [`ErrorKind::InvalidInput`], naming the server and what sheaf backs up.
pub fn check_version(text: &str) -> Result<(u32, u32, u32)> {
    match mariadb_version(text) {
        None => Err(Error::invalid(format!(
            "the server is {text}, not MariaDB: sheaf backs up MariaDB 10.8 to 11.x; MySQL's InnoDB redo log is another engine's format and is not guessed at (use MySQL's own tools for it)"
        ))),
        Some(v @ (10, 8..=11, _)) | Some(v @ (11, _, _)) => Ok(v),
        Some((10, 6..=7, _)) => Err(Error::invalid(format!(
            "the server is MariaDB {text}: sheaf reads the one-file redo log of MariaDB 10.8 and later, and 10.6 and 10.7 write the older format; upgrade the server, or back it up with mariadb-backup"
        ))),
        Some(_) => Err(Error::invalid(format!("the server is MariaDB {text}: sheaf backs up MariaDB 10.8 to 11.x"))),
    }
}

impl Server {
    /// Connect to `address` and check that it is a MariaDB sheaf backs up.
    ///
    /// # Errors
    /// [`ErrorKind::Source`] when it cannot be reached or refuses the login (naming the fix);
    /// [`ErrorKind::InvalidInput`] for a server that is not MariaDB 10.8 to 11.x.
    pub fn connect(address: &Address) -> Result<Server> {
        let mut opts = OptsBuilder::new()
            .user(Some(address.user.clone()))
            .pass(address.password.clone())
            .ip_or_hostname(Some(address.host.clone()))
            .tcp_port(address.port)
            .prefer_socket(false)
            .tcp_connect_timeout(Some(Duration::from_secs(10)));
        if let Some(s) = &address.socket {
            opts = opts.socket(Some(s.clone()));
        }
        let mut conn = Conn::new(opts).map_err(|e| match sql_error(&e) {
            Some((ACCESS_DENIED, m)) => Error::new(
                ErrorKind::Denied,
                format!("{} refused the login: {m}; give the user's password in the URL or in MARIADB_PASSWORD, or connect through the socket as a user the server knows by it (unix_socket)", address.describe()),
            ),
            _ => Error::new(
                ErrorKind::Source,
                format!(
                    "cannot connect to MariaDB at {}: {e}; is the server running, and is that its {}?",
                    address.describe(),
                    if address.socket.is_some() { "socket (SELECT @@socket tells)" } else { "host and port (or give its socket with ?socket=PATH)" }
                ),
            ),
        })?;
        let version: String = conn.query_first("SELECT VERSION()").map_err(|e| query_failed("SELECT VERSION()", &e))?.unwrap_or_default();
        let version_number = check_version(&version)?;
        Ok(Server { conn, address: address.clone(), version, version_number })
    }

    /// Who is connected, for messages.
    pub fn describe(&self) -> String {
        self.address.describe()
    }

    /// A global variable's value (`@@GLOBAL.name`), `None` when NULL.
    ///
    /// # Errors
    /// The query fails (an unknown variable, say).
    pub fn var(&mut self, name: &str) -> Result<Option<String>> {
        let sql = format!("SELECT @@GLOBAL.{name}");
        let v: Option<Option<String>> = self.conn.query_first(&sql).map_err(|e| query_failed(&sql, &e))?;
        Ok(v.flatten())
    }

    /// A global status counter (`Innodb_lsn_current`, say).
    ///
    /// # Errors
    /// The query fails, or the server has no such counter.
    pub fn status(&mut self, name: &str) -> Result<u64> {
        let sql = format!("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '{}'", name.to_ascii_uppercase());
        let v: Option<String> = self.conn.query_first(&sql).map_err(|e| query_failed(&sql, &e))?;
        v.and_then(|v| v.trim().parse().ok()).ok_or_else(|| Error::new(ErrorKind::Source, format!("the server reports no status {name}: is InnoDB enabled?")))
    }

    /// Run `sql`, mapping a missing privilege to the GRANT that gives it.
    ///
    /// # Errors
    /// The statement fails.
    pub fn exec(&mut self, sql: &str) -> Result<()> {
        self.conn.query_drop(sql).map_err(|e| self.refused(sql, &e))
    }

    fn refused(&self, sql: &str, e: &mysql::Error) -> Error {
        match sql_error(e) {
            Some((NO_PRIVILEGE, m)) => Error::new(
                ErrorKind::Denied,
                format!("{sql}: {m}; a backup needs {BACKUP_GRANT}: as an administrator, run GRANT {BACKUP_GRANT} ON *.* TO '{}'@'<its host>'", self.address.user),
            ),
            Some((LOCK_WAIT_TIMEOUT, m)) => Error::new(
                ErrorKind::Source,
                format!("{sql}: {m}: the stage waited {} s for statements that hold what it blocks (a long ALTER TABLE, a long write to a MyISAM or Aria table); nothing was kept; run the backup again when they are done", LOCK_WAIT),
            ),
            _ => query_failed(sql, e),
        }
    }

    /// Move the server's backup to `stage`, returning how long the statement waited.
    ///
    /// # Errors
    /// The statement fails (a missing RELOAD privilege named with its GRANT; a lock wait that
    /// timed out).
    pub fn stage(&mut self, stage: Stage) -> Result<Duration> {
        let t0 = Instant::now();
        self.exec(&format!("BACKUP STAGE {}", stage.name()))?;
        Ok(t0.elapsed())
    }

    /// The binary log position and GTIDs now (at BLOCK_COMMIT: the consistency point).
    ///
    /// # Errors
    /// A missing BINLOG MONITOR privilege, named with its GRANT.
    pub fn binlog_position(&mut self) -> Result<BinlogPosition> {
        let mut pos = BinlogPosition::default();
        if self.var("log_bin")?.as_deref() == Some("1") {
            let row: Option<mysql::Row> = self.conn.query_first("SHOW MASTER STATUS").map_err(|e| self.refused("SHOW MASTER STATUS", &e))?;
            if let Some(row) = row {
                pos.file = row.get::<Option<String>, _>(0).flatten();
                pos.position = row.get::<Option<String>, _>(1).flatten().and_then(|p| p.parse().ok());
            }
        }
        pos.gtid_binlog_pos = self.var("gtid_binlog_pos")?.unwrap_or_default();
        pos.gtid_current_pos = self.var("gtid_current_pos")?.unwrap_or_default();
        Ok(pos)
    }

    /// Who the server is, as its repository records it: `@@hostname:@@datadir` (MariaDB has no
    /// server UUID; a server's data directory on its host is what its backups are of).
    ///
    /// # Errors
    /// The variables cannot be read.
    pub fn identity(&mut self) -> Result<sheaf_pg::repo::meta::MariaSource> {
        let host = self.var("hostname")?.unwrap_or_default();
        let datadir = self.var("datadir")?.unwrap_or_default();
        Ok(sheaf_pg::repo::meta::MariaSource { server: format!("{host}:{datadir}"), datadir })
    }

    /// A second connection to the same server, as the same user (the redo log's follower asks
    /// for LSNs on its own while this one holds the backup stages).
    ///
    /// # Errors
    /// As [`Server::connect`].
    pub fn another(&self) -> Result<Server> {
        Server::connect(&self.address)
    }
}

fn query_failed(sql: &str, e: &mysql::Error) -> Error {
    let transient = matches!(e, mysql::Error::IoError(_));
    Error::new(ErrorKind::Source, format!("{sql}: {e}")).transient(transient)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mariadb_with_the_one_file_redo_log_is_taken() {
        assert_eq!(check_version("10.11.19-MariaDB-0+deb12u1-log").unwrap(), (10, 11, 19));
        assert_eq!(check_version("11.4.2-MariaDB").unwrap(), (11, 4, 2));
        assert!(check_version("8.0.36").unwrap_err().to_string().contains("not MariaDB"));
        assert!(check_version("8.0.36-0ubuntu0.22.04.1").unwrap_err().to_string().contains("another engine's format"));
        assert!(check_version("10.6.18-MariaDB").unwrap_err().to_string().contains("older format"));
        assert!(check_version("10.5.2-MariaDB").unwrap_err().to_string().contains("10.8 to 11.x"));
        assert!(check_version("12.0.1-MariaDB").unwrap_err().to_string().contains("10.8 to 11.x"));
    }
}
