//! The connection to the server being backed up: facts about it, the checks an online backup needs
//! before it touches anything, and the statements that start and stop the backup. Every failure
//! names its cause and its fix.

use postgres::error::SqlState;
use postgres::Client;
use sheaf_core::error::{Error, ErrorKind, Result};

use crate::cluster::lsn::Lsn;
use crate::cluster::system::SystemId;
use crate::connect::conninfo::ConnInfo;
use crate::connect::session::{db_err, open, redact};

/// What sheaf needs to know about the server.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ServerFacts {
    /// `server_version`, e.g. `15.18 (Debian 15.18-0+deb12u1)`.
    pub version: String,
    /// `server_version_num`, e.g. 150018.
    pub version_num: i32,
    /// The cluster's system identifier.
    pub system_identifier: SystemId,
    /// `data_directory` as the server reports it (None when the role may not read it).
    pub data_directory: Option<String>,
    /// Whether pages carry checksums.
    pub data_checksums: bool,
    /// 8 KiB pages and 1 GiB segments: the build whose pages sheaf can verify.
    pub default_layout: bool,
    /// `wal_segment_size` in bytes.
    pub wal_segment_size: u64,
    /// `PG_<major>_<catversion>`: the directory a tablespace keeps this server's files in.
    pub tablespace_version_dir: String,
    /// A standby (in recovery): a backup there starts at a restartpoint and ends at its minimum
    /// recovery point.
    pub in_recovery: bool,
}

/// Where `pg_backup_start` started the backup.
#[derive(Clone, Copy, Debug)]
pub struct Start {
    /// The redo point: where WAL replay starts.
    pub lsn: Lsn,
    /// Its timeline.
    pub timeline: u32,
    /// The start checkpoint's own record.
    pub checkpoint: Lsn,
}

/// What `pg_backup_stop` returns.
#[derive(Clone, Debug)]
pub struct StopInfo {
    /// The LSN at which the backup ends.
    pub lsn: Lsn,
    /// The backup_label file's content.
    pub backup_label: String,
    /// The tablespace_map file's content (empty without tablespaces).
    pub tablespace_map: String,
    /// The timeline of the stop LSN: on a standby, its minimum recovery point's.
    pub timeline: u32,
}

/// How a server archives its WAL, and how that has gone (`pg_stat_archiver`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Archiver {
    /// `archive_mode`.
    pub mode: String,
    /// `archive_command`.
    pub command: String,
    /// `archive_library` (16+; empty before).
    pub library: String,
    /// A standby (its archiver runs only with `archive_mode = always`).
    pub in_recovery: bool,
    /// Files archived since the statistics were reset.
    pub archived_count: i64,
    /// The last one.
    pub last_archived_wal: String,
    /// When, seconds since the epoch (0: never).
    pub last_archived_time: i64,
    /// Failed attempts.
    pub failed_count: i64,
    /// The last file that failed.
    pub last_failed_wal: String,
    /// When, seconds since the epoch (0: never).
    pub last_failed_time: i64,
    /// The server's WAL position now (written on a primary, replayed on a standby).
    pub lsn: Lsn,
    /// Its timeline (of the last checkpoint).
    pub timeline: u32,
    /// The cluster's system identifier.
    pub system_identifier: SystemId,
}

/// A row as text, `None` for NULL ([`Server::simple_query`]).
pub type TextRow = Vec<Option<String>>;

/// A connected server.
pub struct Server {
    pub(super) client: Client,
    url: String,
}

impl Server {
    /// Connect with a libpq connection string: a URL (`postgres://USER@HOST:PORT/DB?host=/socket/dir`)
    /// or keyword/value pairs, completed from the service file, the environment and the password
    /// file as libpq does ([`crate::connect::conninfo`], [`open`]).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] for a URL that does not parse; [`ErrorKind::Source`] naming the
    /// server when it cannot be reached or refuses the login.
    pub fn connect(url: &str) -> Result<Server> {
        let mut info = ConnInfo::resolve(url)?;
        let client = open(&mut info, None)?;
        let mut server = Server { client, url: redact(url) };
        // Role or server timeouts must not end the session mid-backup.
        server
            .client
            .batch_execute("SET statement_timeout = 0; SET idle_session_timeout = 0; SET idle_in_transaction_session_timeout = 0; SET lock_timeout = 0")
            .map_err(|e| db_err("preparing the session", e))?;
        Ok(server)
    }

    /// The URL without password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Run `sql` (one or more statements) with the simple query protocol: per statement, its rows
    /// as text (`None` for NULL), or `None` for a statement that returns no rows (SET, CREATE).
    ///
    /// # Errors
    /// The server's error for the first statement that fails.
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<Option<Vec<TextRow>>>> {
        use postgres::SimpleQueryMessage as M;
        let mut out = Vec::new();
        let mut rows: Option<Vec<TextRow>> = None;
        for m in self.client.simple_query(sql).map_err(|e| db_err("running the queries", e))? {
            match m {
                M::RowDescription(_) => rows = Some(Vec::new()),
                M::Row(r) => rows.get_or_insert_with(Vec::new).push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
                M::CommandComplete(_) => out.push(rows.take()),
                _ => {}
            }
        }
        Ok(out)
    }

    fn one(&mut self, what: &str, sql: &str) -> Result<postgres::Row> {
        self.client.query_one(sql, &[]).map_err(|e| db_err(what, e))
    }

    /// Learn the facts and check that an online backup can run: version 15 or newer, a primary,
    /// `wal_level` above minimal, a role that may back up, room for a replication slot.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the unmet condition and the fix.
    pub fn check(&mut self) -> Result<ServerFacts> {
        self.check_with(true)
    }

    /// [`Server::check`]; without `backup_functions`, a role with REPLICATION is enough (BASE_BACKUP
    /// needs no EXECUTE on pg_backup_start and pg_backup_stop).
    ///
    /// # Errors
    /// As [`Server::check`].
    pub fn check_with(&mut self, backup_functions: bool) -> Result<ServerFacts> {
        let r = self.one(
            "reading server settings",
            "SELECT current_setting('server_version'), current_setting('server_version_num')::int, \
                    pg_is_in_recovery(), current_setting('wal_level'), current_setting('data_checksums') = 'on', \
                    (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size'), current_setting('max_replication_slots')::int, \
                    current_user::text, current_setting('block_size')::int, \
                    (SELECT setting::bigint FROM pg_settings WHERE name = 'segment_size')",
        )?;
        let (version, version_num, in_recovery, wal_level): (String, i32, bool, String) = (r.get(0), r.get(1), r.get(2), r.get(3));
        let (data_checksums, wal_segment_size, max_slots, user): (bool, i64, i32, String) = (r.get(4), r.get(5), r.get(6), r.get(7));
        let (block_size, segment_blocks): (i32, i64) = (r.get(8), r.get(9));
        supported_major((version_num / 10000) as u32, &version, &self.url)?;
        if wal_level == "minimal" {
            return Err(Error::invalid(format!(
                "{} has wal_level = minimal, which cannot take an online backup: set wal_level = replica (ALTER SYSTEM SET wal_level = replica) and restart the server",
                self.url
            )));
        }
        let r = self.one(
            "reading role privileges",
            "SELECT r.rolsuper OR r.rolreplication, \
                    has_function_privilege('pg_backup_start(text, boolean)', 'EXECUTE') \
                    AND has_function_privilege('pg_backup_stop(boolean)', 'EXECUTE') \
             FROM pg_roles r WHERE r.rolname = current_user",
        )?;
        let (replication, backup_fns): (bool, bool) = (r.get(0), r.get(1));
        if !replication {
            return Err(Error::invalid(format!("role {user} may not take a backup: it needs the REPLICATION attribute (ALTER ROLE {user} REPLICATION), or use a superuser")));
        }
        if backup_functions && !backup_fns {
            return Err(Error::invalid(format!(
                "role {user} may not take a backup: it needs the REPLICATION attribute (ALTER ROLE {user} REPLICATION) and EXECUTE on pg_backup_start and pg_backup_stop (GRANT EXECUTE ON FUNCTION pg_backup_start, pg_backup_stop TO {user}), or use a superuser"
            )));
        }
        if max_slots < 1 {
            return Err(Error::invalid(format!(
                "{} has max_replication_slots = 0; sheaf reserves WAL with a temporary slot: set max_replication_slots to 1 or more and restart",
                self.url
            )));
        }
        let r = self.one("reading the control file", "SELECT system_identifier::text, catalog_version_no FROM pg_control_system()")?;
        let system_identifier: SystemId = r.get::<_, String>(0).parse()?;
        let catversion: i32 = r.get(1);
        let data_directory = self.client.query_one("SELECT current_setting('data_directory')", &[]).ok().map(|r| r.get::<_, String>(0));
        Ok(ServerFacts {
            version,
            version_num,
            system_identifier,
            data_directory,
            data_checksums,
            default_layout: block_size == 8192 && segment_blocks == 131_072,
            wal_segment_size: wal_segment_size as u64,
            tablespace_version_dir: format!("PG_{}_{catversion}", version_num / 10000),
            in_recovery,
        })
    }

    /// Bytes of all databases together (an estimate of the backup's size, for sizing upload parts).
    ///
    /// # Errors
    /// A database error.
    pub fn databases_size(&mut self) -> Result<u64> {
        let row = self.one("sizing the databases", "SELECT coalesce(sum(pg_database_size(oid)), 0)::int8 FROM pg_database WHERE datallowconn")?;
        Ok(row.get::<_, i64>(0).max(0) as u64)
    }

    /// Create a temporary physical replication slot that reserves WAL now. It lives as long as this
    /// connection, so a failed or killed backup leaves none behind.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] when a slot of that name exists.
    pub fn create_slot(&mut self, name: &str) -> Result<()> {
        self.client.execute("SELECT pg_create_physical_replication_slot($1, true, true)", &[&name]).map(drop).map_err(|e| {
            if e.as_db_error().is_some_and(|d| *d.code() == SqlState::DUPLICATE_OBJECT) {
                Error::invalid(format!(
                    "replication slot {name} already exists: choose another name with --slot, or drop it (SELECT pg_drop_replication_slot('{name}')) if nothing uses it"
                ))
            } else {
                db_err(&format!("creating replication slot {name}"), e)
            }
        })
    }

    /// Drop the slot (it would also go when the connection closes).
    pub fn drop_slot(&mut self, name: &str) {
        let _ = self.client.execute("SELECT pg_drop_replication_slot($1)", &[&name]);
    }

    /// `pg_backup_start(label, fast)`: where the backup starts. On a standby the start is the redo
    /// point of a restartpoint, the last checkpoint it replayed.
    ///
    /// # Errors
    /// A database error (e.g. a backup already running in this session).
    pub fn backup_start(&mut self, label: &str, fast: bool) -> Result<Start> {
        let r = self.client.query_one("SELECT pg_backup_start($1, $2)::text", &[&label, &fast]).map_err(|e| self.refused("pg_backup_start", e, false))?;
        let lsn: String = r.get(0);
        let lsn = lsn.parse().map_err(|_| Error::corrupt(format!("server returned LSN '{lsn}'")))?;
        // The checkpoint (or restartpoint) pg_backup_start waited for is the control file's now:
        // its timeline is the start's (backup_label confirms it at the stop).
        let (timeline, checkpoint) = self.checkpoint()?;
        Ok(Start { lsn, timeline, checkpoint })
    }

    /// What a standby refuses at the start or stop of a backup, with what to do: a promotion
    /// during the backup, WAL written with full_page_writes off replayed meanwhile. Both come as
    /// SQLSTATE 55000 (object not in prerequisite state) in the server's language, so which one it
    /// was is asked of the server's state, never read from its message: a backup that began in
    /// recovery and ends out of it was promoted; one still in recovery replayed such WAL.
    fn refused(&mut self, what: &str, e: postgres::Error, began_in_recovery: bool) -> Error {
        if e.as_db_error().map(|d| d.code()) != Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE) {
            return db_err(what, e);
        }
        let now_in_recovery = self.client.query_one("SELECT pg_is_in_recovery()", &[]).ok().map(|r| r.get::<_, bool>(0));
        match now_in_recovery {
            Some(false) if began_in_recovery => Error::new(
                ErrorKind::Source,
                format!(
                    "{} was promoted while the backup ran, so the copy is not consistent and was not kept: take the backup again (from the new primary, or from another standby)",
                    self.url
                ),
            ),
            Some(true) => {
                let message = e.as_db_error().map(|d| d.message().to_string()).unwrap_or_default();
                Error::new(
                    ErrorKind::Source,
                    format!(
                        "{} refused {what} as a standby ({message}): it replayed WAL written with full_page_writes = off, so pages in a copy may be torn and the backup was not kept: set full_page_writes = on on the primary (ALTER SYSTEM SET full_page_writes = on; SELECT pg_reload_conf()) and run CHECKPOINT there, then CHECKPOINT on the standby once it has replayed that, and take the backup again",
                        self.url
                    ),
                )
            }
            _ => db_err(what, e),
        }
    }

    /// The control file's last checkpoint (a restartpoint on a standby): its timeline and its
    /// record's LSN.
    fn checkpoint(&mut self) -> Result<(u32, Lsn)> {
        let r = self.one("reading the last checkpoint", "SELECT timeline_id::int8, checkpoint_lsn::text FROM pg_control_checkpoint()")?;
        let at: String = r.get(1);
        Ok((r.get::<_, i64>(0) as u32, at.parse().unwrap_or_default()))
    }

    /// `CHECKPOINT` (on a standby, a restartpoint at the last checkpoint record it replayed, which
    /// writes out every page changed before that checkpoint's redo point); returns that redo point.
    ///
    /// # Errors
    /// A role that may not checkpoint, naming the grant.
    pub fn restartpoint(&mut self) -> Result<Lsn> {
        self.client.batch_execute("CHECKPOINT").map_err(|e| {
            if e.as_db_error().is_some_and(|d| *d.code() == SqlState::INSUFFICIENT_PRIVILEGE) {
                Error::invalid(format!(
                    "{} will not let this role run CHECKPOINT, which a hybrid backup needs on the standby: connect as a superuser, or GRANT pg_checkpoint TO the backup role (PostgreSQL 15+)",
                    self.url
                ))
            } else {
                db_err(&format!("CHECKPOINT on {}", self.url), e)
            }
        })?;
        let r = self.one("reading the last checkpoint", "SELECT redo_lsn::text FROM pg_control_checkpoint()")?;
        let redo: String = r.get(0);
        Ok(redo.parse().unwrap_or_default())
    }

    /// `pg_backup_stop(false)`: end the backup (without waiting for archiving, since sheaf copies
    /// the WAL itself). On a standby the stop is its minimum recovery point.
    ///
    /// # Errors
    /// A database error, e.g. when the server was restarted during the backup; on a standby,
    /// a promotion during the backup or WAL written with full_page_writes off replayed meanwhile,
    /// each named with what to do.
    pub fn backup_stop(&mut self, in_recovery: bool, start_timeline: u32) -> Result<StopInfo> {
        let r = self
            .client
            .query_one("SELECT lsn::text, labelfile, coalesce(spcmapfile, '') FROM pg_backup_stop(false)", &[])
            .map_err(|e| self.refused("pg_backup_stop", e, in_recovery))?;
        let lsn: String = r.get(0);
        let timeline = if in_recovery {
            let t = self.one("reading the minimum recovery point's timeline", "SELECT min_recovery_end_timeline::int8 FROM pg_control_recovery()")?;
            t.get::<_, i64>(0) as u32
        } else {
            start_timeline
        };
        Ok(StopInfo { lsn: lsn.parse().map_err(|_| Error::corrupt(format!("server returned LSN '{lsn}'")))?, backup_label: r.get(1), tablespace_map: r.get(2), timeline })
    }

    /// Where the last checkpoint's redo began (`pg_control_checkpoint()`): after `pg_upgrade`, at
    /// or past the WAL position the old cluster ended at, which pg_upgrade carries over.
    ///
    /// # Errors
    /// A database error.
    pub fn checkpoint_redo(&mut self) -> Result<Lsn> {
        let r = self.one("reading the control file", "SELECT redo_lsn::text FROM pg_control_checkpoint()")?;
        r.get::<_, String>(0).parse()
    }

    /// Whether WAL is on disk past `lsn`: flushed on a primary; received (or, on a standby fed
    /// from an archive, replayed) on a standby.
    ///
    /// # Errors
    /// A database error.
    pub fn wal_reached(&mut self, lsn: Lsn) -> Result<bool> {
        let l = lsn.to_string();
        let r = self
            .client
            .query_one(
                "SELECT CASE WHEN pg_is_in_recovery() \
                        THEN greatest(coalesce(pg_last_wal_receive_lsn(), '0/0'), coalesce(pg_last_wal_replay_lsn(), '0/0')) \
                        ELSE pg_current_wal_flush_lsn() END >= $1::text::pg_lsn",
                &[&l],
            )
            .map_err(|e| db_err("reading WAL position", e))?;
        Ok(r.get(0))
    }

    /// On a standby, how far it has replayed and received, and whether it is still in recovery.
    ///
    /// # Errors
    /// A database error.
    pub fn standby_position(&mut self) -> Result<(bool, Lsn, Option<Lsn>)> {
        let r = self.one("reading the standby's position", "SELECT pg_is_in_recovery(), coalesce(pg_last_wal_replay_lsn(), '0/0')::text, pg_last_wal_receive_lsn()::text")?;
        let (recovering, replay, received): (bool, String, Option<String>) = (r.get(0), r.get(1), r.get(2));
        Ok((recovering, replay.parse().unwrap_or_default(), received.and_then(|r| r.parse().ok())))
    }

    /// Ask a primary to finish its current WAL segment (`pg_switch_wal`), so that the archiver
    /// sends it. A record is written first: with nothing written since the last switch, the switch
    /// does nothing.
    ///
    /// # Errors
    /// A database error (e.g. a role without EXECUTE on pg_switch_wal).
    pub fn switch_wal(&mut self) -> Result<()> {
        self.client
            .batch_execute("SELECT pg_logical_emit_message(false, 'sheaf', 'switch'); SELECT pg_switch_wal()")
            .map_err(|e| db_err(&format!("asking {} to switch WAL segments (pg_switch_wal)", self.url), e))
    }

    /// Switch segments as [`Server::switch_wal`] does, and name the segment just finished: the one
    /// the archiver is to send next.
    ///
    /// # Errors
    /// As [`Server::switch_wal`].
    pub fn switch_wal_named(&mut self) -> Result<String> {
        self.client
            .batch_execute("SELECT pg_logical_emit_message(false, 'sheaf', 'check')")
            .and_then(|()| self.client.query_one("SELECT pg_walfile_name(pg_switch_wal())", &[]))
            .map(|r| r.get(0))
            .map_err(|e| db_err(&format!("asking {} to switch WAL segments (pg_switch_wal)", self.url), e))
    }

    /// Whether sheaf works with this server's major ([`supported_major`]).
    ///
    /// # Errors
    /// A database error, or [`supported_major`]'s refusal.
    pub fn supported(&mut self) -> Result<()> {
        let r = self.one("reading the server's version", "SELECT current_setting('server_version'), current_setting('server_version_num')::int")?;
        let (version, num): (String, i32) = (r.get(0), r.get(1));
        supported_major((num / 10000) as u32, &version, &self.url)
    }

    /// How the server archives, and how its archiver has fared (`pg_stat_archiver`).
    ///
    /// # Errors
    /// A database error.
    pub fn archiver(&mut self) -> Result<Archiver> {
        let r = self.one(
            "reading pg_stat_archiver",
            "SELECT current_setting('archive_mode'), current_setting('archive_command'),                     coalesce(current_setting('archive_library', true), ''), pg_is_in_recovery(),                     a.archived_count, coalesce(a.last_archived_wal, ''),                     coalesce(extract(epoch FROM a.last_archived_time)::bigint, 0),                     a.failed_count, coalesce(a.last_failed_wal, ''), coalesce(extract(epoch FROM a.last_failed_time)::bigint, 0),                     CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text ELSE pg_current_wal_lsn()::text END,                     (SELECT timeline_id FROM pg_control_checkpoint())::bigint, (SELECT system_identifier FROM pg_control_system())::text              FROM pg_stat_archiver a",
        )?;
        Ok(Archiver {
            mode: r.get(0),
            command: r.get(1),
            library: r.get(2),
            in_recovery: r.get(3),
            archived_count: r.get(4),
            last_archived_wal: r.get(5),
            last_archived_time: r.get(6),
            failed_count: r.get(7),
            last_failed_wal: r.get(8),
            last_failed_time: r.get(9),
            lsn: r.get::<_, String>(10).parse().unwrap_or_default(),
            timeline: u32::try_from(r.get::<_, i64>(11)).unwrap_or(0),
            system_identifier: r.get::<_, String>(12).parse()?,
        })
    }

    /// A file under the data directory, read by the server (`pg_read_binary_file`), until two reads
    /// agree (the server rewrites pg_control in place); `None` where it does not exist.
    ///
    /// # Errors
    /// A role that may not call `pg_read_binary_file`, naming the grant.
    pub fn read_file(&mut self, rel: &str) -> Result<Option<Vec<u8>>> {
        // pg_read_binary_file(text, boolean) is 16's; the four-argument form reads a length
        // that it allocates up front, so the size comes first.
        let read = || -> Result<Option<Vec<u8>>> {
            let denied = |e: postgres::Error, url: &str| {
                if e.as_db_error().is_some_and(|d| *d.code() == SqlState::INSUFFICIENT_PRIVILEGE) {
                    Error::invalid(format!(
                        "{url} will not let this role read {rel}: connect as a superuser, or GRANT EXECUTE ON FUNCTION pg_stat_file(text, boolean), pg_read_binary_file(text, bigint, bigint, boolean) TO the backup role"
                    ))
                } else {
                    db_err(&format!("reading {rel} on {url}"), e)
                }
            };
            let r = self.client.query_one("SELECT size FROM pg_stat_file($1, true)", &[&rel]).map_err(|e| denied(e, &self.url))?;
            let Some(size) = r.get::<_, Option<i64>>(0) else { return Ok(None) };
            let r = self.client.query_one("SELECT pg_read_binary_file($1, 0, $2, true)", &[&rel, &size]).map_err(|e| denied(e, &self.url))?;
            Ok(r.get(0))
        };
        let what = format!("{rel} on {}", self.url);
        sheaf_core::source::settled(read, &what)
    }
}

/// The PostgreSQL majors this sheaf was tested on (the suite runs its scenarios on each).
pub const TESTED_MAJORS: std::ops::RangeInclusive<u32> = 15..=18;

/// The environment variable that lets sheaf work with a major it was never tested on: the major
/// itself (`SHEAF_UNTESTED_PG=19`), so that the next one is refused again until it is tested.
pub const UNTESTED_VAR: &str = "SHEAF_UNTESTED_PG";

/// Whether sheaf works with a server of PostgreSQL `major` (`version` and `url` for the message):
/// older than 15 never, newer than the last tested major only when [`UNTESTED_VAR`] names it.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] naming the version, the tested ones and the way out.
pub fn supported_major(major: u32, version: &str, url: &str) -> Result<()> {
    allowed_major(major, version, url, std::env::var(UNTESTED_VAR).ok().as_deref())
}

fn allowed_major(major: u32, version: &str, url: &str, allow: Option<&str>) -> Result<()> {
    let (first, last) = (*TESTED_MAJORS.start(), *TESTED_MAJORS.end());
    if major < first {
        return Err(Error::invalid(format!("{url} runs PostgreSQL {version}; sheaf needs {first} or newer")));
    }
    if major <= last || allow.map(str::trim) == Some(major.to_string().as_str()) {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "{url} runs PostgreSQL {version}, which this sheaf ({}) was never tested on (it is tested on {first} to {last}): a new major may change the WAL records, the control file or the backup protocol in ways sheaf would misread. Use a sheaf that supports {major}, or, to go on at your own risk (and restore-test what you get), set {UNTESTED_VAR}={major}",
        env!("CARGO_PKG_VERSION")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(redact("postgres://bob:secret@db:5432/x"), "postgres://bob@db:5432/x");
        assert_eq!(redact("postgres://bob@db/x?host=/tmp"), "postgres://bob@db/x?host=/tmp");
        assert_eq!(redact("postgres://bob:p@ss@db/x"), "postgres://bob@db/x");
        assert_eq!(redact("postgres://bob@db/x?sslmode=disable&password=s3cret&host=/tmp"), "postgres://bob@db/x?sslmode=disable&host=/tmp");
        assert_eq!(redact("postgres://db"), "postgres://db");
    }

    #[test]
    fn majors_never_tested_are_refused_unless_named() {
        let url = "postgresql://db";
        for m in super::TESTED_MAJORS {
            assert!(super::allowed_major(m, &format!("{m}.1"), url, None).is_ok(), "{m} is tested");
        }
        let old = super::allowed_major(14, "14.19", url, Some("14")).unwrap_err().to_string();
        assert!(old.contains("needs 15 or newer"), "{old}");
        let new = super::allowed_major(19, "19.0", url, None).unwrap_err().to_string();
        assert!(new.contains("never tested") && new.contains("SHEAF_UNTESTED_PG=19") && new.contains("15 to 18"), "{new}");
        assert!(super::allowed_major(19, "19.0", url, Some(" 19 ")).is_ok());
        // Naming one major lets that one through, not the next.
        assert!(super::allowed_major(20, "20.0", url, Some("19")).is_err());
    }
}
