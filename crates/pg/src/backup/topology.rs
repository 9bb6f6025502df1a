//! Where an online backup runs and reads, and where its WAL comes from.
//!
//! - **Primary**: started, read and stopped on the primary.
//! - **Standby**: `pg_backup_start` on a hot standby takes a restartpoint (the last checkpoint it
//!   replayed) as the start; `pg_backup_stop` returns its minimum recovery point as the stop and
//!   refuses a standby promoted meanwhile, or one that replayed WAL written with
//!   full_page_writes off. The files are the standby's; pg_control is read after them and before
//!   the stop, so its minimum recovery point (where a restored copy becomes consistent, since the
//!   label says `BACKUP FROM: standby`) is at or before the stop.
//! - **Hybrid** (pgBackRest's backup-standby): started and stopped on the primary, the files
//!   read from a standby once it has replayed past the start (WAL replay from the start repairs
//!   whatever the standby held, as it repairs pages read from a primary mid-write); pg_control
//!   and the configuration files, which are not replicated, are read on the primary through SQL.
//!
//! The WAL from the start segment to the stop segment comes from the pg_wal beside the files
//! read (what the standby streamed), else from the repository's archive; `--wal-from archive`
//! takes it from the archive only. A segment not archived yet is waited for, within a bound: an
//! idle primary does not finish its segment by itself, so with a primary at hand sheaf asks it
//! to switch, and without one it says what it waits for and how to end the wait.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::repo::Repo;
use sheaf_core::source::Files;
use sheaf_core::{Error, ErrorKind, Progress, Result};

use crate::cluster::lsn::Lsn;
use crate::connect::server::{Server, ServerFacts, Start};
use crate::connect::session::redact;

/// How long a backup waits, by default, for WAL to reach the archive or a standby to replay.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(60);

/// Where the backup is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// On the primary.
    Primary,
    /// On a hot standby.
    Standby,
    /// Started and stopped on the primary, files read from a standby.
    Hybrid,
}

impl Role {
    /// As the manifest records it (`None` for the primary).
    pub fn recorded(self) -> Option<String> {
        match self {
            Role::Primary => None,
            Role::Standby => Some("standby".into()),
            Role::Hybrid => Some("hybrid".into()),
        }
    }
}

/// The servers one backup talks to.
pub struct Sides {
    /// Where it is taken.
    pub role: Role,
    /// Where `pg_backup_start` and `pg_backup_stop` run (a standby in [`Role::Standby`]).
    pub control: Server,
    /// Its facts.
    pub facts: ServerFacts,
    /// Hybrid: the standby whose files are read, and its facts.
    pub standby: Option<(Server, ServerFacts)>,
    /// Standby: the primary, asked to switch segments while WAL is awaited from the archive.
    pub primary: Option<Server>,
}

fn connect_checked(url: &str) -> Result<(Server, ServerFacts)> {
    let mut s = Server::connect(url)?;
    let f = s.check()?;
    Ok((s, f))
}

impl Sides {
    /// Connect to `url` (and `standby` for a hybrid backup, `primary` to switch segments for a
    /// standby's) and check each is what its part needs.
    ///
    /// # Errors
    /// A server that is not what its part needs (a standby given as the primary, a primary given
    /// as the standby, servers of different clusters), and [`Server::check`]'s refusals.
    pub fn connect(url: &str, standby: Option<&str>, primary: Option<&str>) -> Result<Sides> {
        let (control, facts) = connect_checked(url)?;
        let same_cluster = |what: &str, other_url: &str, other: &ServerFacts| {
            if other.system_identifier == facts.system_identifier {
                Ok(())
            } else {
                Err(Error::invalid(format!(
                    "{what} {} is cluster {}, but {} is cluster {}: give a {what} of the cluster being backed up",
                    redact(other_url),
                    other.system_identifier,
                    control.url(),
                    facts.system_identifier
                )))
            }
        };
        match (standby, facts.in_recovery) {
            (Some(_), true) => Err(Error::invalid(format!(
                "{} is a standby (in recovery), but with --standby the backup starts and stops on the primary: give the primary as the source (or --primary), or drop --standby to back up the standby alone",
                control.url()
            ))),
            (Some(_), false) if primary.is_some() => Err(Error::invalid(
                "with --standby, give the primary once: as the source, or with --primary and no source",
            )),
            (Some(s), false) => {
                let (sb, sf) = connect_checked(s)?;
                if !sf.in_recovery {
                    return Err(Error::invalid(format!(
                        "--standby {} is not a standby (it is not in recovery): give a hot standby of {}, or drop --standby to read the primary's files",
                        sb.url(),
                        control.url()
                    )));
                }
                same_cluster("standby", s, &sf)?;
                Ok(Sides { role: Role::Hybrid, control, facts, standby: Some((sb, sf)), primary: None })
            }
            (None, true) => {
                let primary = match primary {
                    Some(p) => {
                        let (ps, pf) = connect_checked(p)?;
                        if pf.in_recovery {
                            return Err(Error::invalid(format!("--primary {} is in recovery too: give the primary, which can switch WAL segments", ps.url())));
                        }
                        same_cluster("primary", p, &pf)?;
                        Some(ps)
                    }
                    None => None,
                };
                Ok(Sides { role: Role::Standby, control, facts, standby: None, primary })
            }
            (None, false) => {
                if primary.is_some() {
                    return Err(Error::invalid(format!(
                        "--primary is for a backup taken on a standby, but {} is the primary itself: drop --primary (or add --standby URL to read the files from a standby)",
                        control.url()
                    )));
                }
                Ok(Sides { role: Role::Primary, control, facts, standby: None, primary: None })
            }
        }
    }

    /// The server whose data directory is read, and its facts.
    pub fn reader(&mut self) -> (&mut Server, &ServerFacts) {
        match &mut self.standby {
            Some((s, f)) => (s, f),
            None => (&mut self.control, &self.facts),
        }
    }

    /// The primary, where one is connected: asked to switch segments.
    fn switcher(&mut self) -> Option<&mut Server> {
        match self.role {
            Role::Primary | Role::Hybrid => Some(&mut self.control),
            Role::Standby => self.primary.as_mut(),
        }
    }

    /// Hybrid: wait until the standby has replayed the primary's start checkpoint, then make it
    /// write out what it replayed before (a restartpoint), so that no file it holds is older than
    /// the start. A standby's disk lags its memory: without the restartpoint a page changed before
    /// the start, still only in the standby's buffers, would be copied old, and replay from the
    /// start would not repair it. Any other role: nothing to do.
    ///
    /// # Errors
    /// The standby promoted, not past the checkpoint within `wait` (it lags or cannot reach the
    /// WAL), or a role that may not checkpoint there.
    pub fn prepare_standby(&mut self, start: Start, wait: Duration, progress: &Arc<dyn Progress>) -> Result<()> {
        let Some((standby, _)) = &mut self.standby else { return Ok(()) };
        let t0 = Instant::now();
        let mut said = false;
        loop {
            let (recovering, replay, received) = standby.standby_position()?;
            if !recovering {
                return Err(Error::new(ErrorKind::Source, format!("standby {} was promoted while the backup ran; nothing was kept: take the backup again", standby.url())));
            }
            if replay > start.checkpoint && standby.restartpoint()? >= start.lsn {
                return Ok(());
            }
            let at = format!("it has replayed to {replay}{}", received.map(|r| format!(" and received to {r}")).unwrap_or_default());
            if t0.elapsed() >= wait {
                return Err(Error::new(
                    ErrorKind::Source,
                    format!(
                        "standby {} did not replay the backup's start checkpoint {} within {} s ({at}): it lags behind the primary or cannot reach its WAL (see pg_stat_wal_receiver there, and its primary_conninfo and restore_command); wait longer with --wal-timeout, or back up without --standby",
                        standby.url(),
                        start.checkpoint,
                        wait.as_secs()
                    ),
                ));
            }
            if !said && t0.elapsed() >= Duration::from_secs(2) {
                progress.note(&format!("waiting up to {} s for standby {} to replay the backup's start checkpoint {} ({at})", wait.as_secs(), standby.url(), start.checkpoint));
                said = true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait until the server whose pg_wal is read holds WAL past `lsn` (flushed on a primary,
    /// received or replayed on a standby).
    ///
    /// # Errors
    /// Not there within `wait`.
    pub fn wait_for_wal(&mut self, lsn: Lsn, wait: Duration) -> Result<()> {
        let (server, _) = self.reader();
        let deadline = Instant::now() + wait;
        loop {
            if server.wal_reached(lsn)? {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::new(
                    ErrorKind::Source,
                    format!(
                        "{} has not got WAL past the backup's end ({}) within {} s: a standby lags behind the primary or cannot reach it; wait longer with --wal-timeout",
                        server.url(),
                        lsn,
                        wait.as_secs()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Where a WAL file was found.
pub enum Found {
    /// In the cluster's pg_wal (on the agent's host when read through one).
    Cluster(PathBuf),
    /// Fetched from the archive into the spool on this host.
    Fetched(PathBuf),
}

/// The folder on this host that WAL fetched from the archive waits in to be read (and a remote
/// cluster's unarchived segments, copied here to be summarized), made in TMPDIR when the archive
/// is first asked for a file (or at the start, for a remote cluster): most backups find their
/// WAL in pg_wal and need none, and one killed (where nothing removes it) then leaves no empty
/// folder behind. Removed with what it holds when dropped.
#[derive(Default)]
pub struct Spool(std::sync::OnceLock<tempfile::TempDir>);

impl Spool {
    /// The folder, made on the first call.
    ///
    /// # Errors
    /// When it cannot be made.
    pub fn path(&self) -> Result<&Path> {
        if let Some(dir) = self.0.get() {
            return Ok(dir.path());
        }
        let dir =
            tempfile::Builder::new().prefix("sheaf-wal.").tempdir().map_err(|e| Error::io(ErrorKind::Io, "cannot make a folder for WAL fetched from the archive (TMPDIR)", e))?;
        Ok(self.0.get_or_init(|| dir).path())
    }
}

/// Where the backup's WAL segments are found.
pub struct WalSource<'a> {
    /// The pg_wal beside the files read; `None` to take everything from the archive.
    pub pg_wal: Option<&'a Path>,
    /// Where the cluster's files are.
    pub files: &'a dyn Files,
    /// The repository the primary archives into.
    pub archive: Option<&'a Repo>,
    /// How long to wait for a segment to reach the archive.
    pub wait: Duration,
}

impl WalSource<'_> {
    /// Where WAL file `name` can be read: pg_wal's copy, else one fetched from the archive into
    /// `spool` (waiting for it to arrive, asking the primary to switch segments where one is
    /// connected).
    ///
    /// # Errors
    /// The file in neither place within the wait, with what to do; the archive's errors.
    pub fn find(&self, name: &str, spool: &Spool, sides: &mut Sides, progress: &Arc<dyn Progress>) -> Result<Found> {
        if let Some(at) = self.pg_wal.map(|d| d.join(name)) {
            if self.files.list_one(&at, String::new(), 0)?.is_some() {
                return Ok(Found::Cluster(at));
            }
        }
        let Some(repo) = self.archive else {
            return Err(Error::new(
                ErrorKind::Source,
                format!(
                    "WAL file {name}, which the backup needs, is not in {}: back up into a repository the primary archives to (sheaf wal-push), where sheaf finds it",
                    self.pg_wal.map(|d| d.display().to_string()).unwrap_or_else(|| "pg_wal".into())
                ),
            ));
        };
        let dest = spool.path()?.join(name);
        let t0 = Instant::now();
        let mut asked: Option<Instant> = None;
        let mut said = false;
        loop {
            if crate::wal::archive::fetch(repo, name, &dest, false)?.is_some() {
                return Ok(Found::Fetched(dest));
            }
            let is_segment = crate::cluster::walname::is_segment_name(name);
            if !is_segment {
                // A history file is archived before the timeline's first segment: not there, not needed.
                return Err(Error::new(ErrorKind::Incomplete, format!("{name} is not in the archive")));
            }
            if t0.elapsed() >= self.wait {
                let how = if sides.switcher().is_some() {
                    "the primary was asked to switch segments, but its archiver has not delivered it: check archive_command and pg_stat_archiver there"
                } else {
                    "give --primary URL so that sheaf asks the primary to finish the segment (pg_switch_wal), or set archive_timeout on the primary"
                };
                return Err(Error::new(
                    ErrorKind::Source,
                    format!(
                        "WAL file {name}, which the backup needs, did not reach the repository's archive within {} s (nothing was kept): {how}; --wal-timeout waits longer",
                        self.wait.as_secs()
                    ),
                ));
            }
            match sides.switcher() {
                // Asked again every 10 s, in case the first switch found nothing to finish.
                Some(primary) if asked.is_none_or(|a| a.elapsed() >= Duration::from_secs(10)) => {
                    primary.switch_wal()?;
                    asked = Some(Instant::now());
                }
                Some(_) => {}
                None if !said => {
                    progress.note(&format!(
                        "waiting up to {} s for WAL file {name} to reach the repository's archive: an idle primary does not finish its segment by itself; give --primary URL so that sheaf asks it to switch (pg_switch_wal), or set archive_timeout on the primary",
                        self.wait.as_secs()
                    ));
                    said = true;
                }
                None => {}
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}
