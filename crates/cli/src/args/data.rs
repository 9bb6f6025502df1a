//! The arguments of the commands that move a backup's bytes: backup, restore (from stripes or,
//! with [`RecoveryArgs`], from a repository), verify and extract.

use std::path::PathBuf;

use clap::Args;
use sheaf_pg::repo::records::BackupRef;
use sheaf_pg::restore::pitr::{TargetAction, TimelineTarget};
use sheaf_pg::Lsn;

use super::shared::{KeyArgs, RateArgs, RepoArg, S3Args};

#[derive(Args, Clone)]
pub struct BackupArgs {
    #[command(flatten)]
    pub hooks: super::BackupHooks,
    /// What to back up: a directory (a stopped database's files, a filesystem snapshot), a
    /// running PostgreSQL server as a libpq URL, e.g. postgres://postgres@/postgres?host=/run/postgresql,
    /// or a running MariaDB 10.8-11.x server, e.g. mariadb://backup@localhost/?socket=/run/mysqld/mysqld.sock
    /// (its password in MARIADB_PASSWORD; the user needs RELOAD, PROCESS, LOCK TABLES and BINLOG
    /// MONITOR). Online and consistent; sheaf must run on the host whose files it reads. A hot standby's
    /// URL takes the backup there, sparing the primary: started at a restartpoint, stopped at the
    /// standby's minimum recovery point, its files and WAL read on the standby's host. May be left
    /// out with --primary and --standby. Default: pg-url (or pg-host, pg-port, ...) in the
    /// config file.
    pub source: Option<String>,
    /// PostgreSQL: the primary. With a standby as the source, it is asked to switch WAL segments
    /// when the backup waits for WAL to reach the archive (an idle primary never finishes its
    /// segment). With --standby (and no source), the hybrid backup's primary.
    #[arg(long, value_name = "URL")]
    pub primary: Option<String>,
    /// PostgreSQL: hybrid backup, as pgBackRest's backup-standby. Started and stopped on the
    /// primary (the source, or --primary), the files read from this standby once it has replayed
    /// past the start, on its host (--pgdata is the standby's); pg_control and the configuration
    /// files, which are not replicated, are read on the primary through SQL
    /// (pg_read_binary_file: a superuser, or a role granted EXECUTE on it).
    #[arg(long, value_name = "URL")]
    pub standby: Option<String>,
    /// PostgreSQL: read the cluster's files through the sheaf agent at HOST:PORT on the database
    /// host (started there with sheaf agent --listen ... --pgdata ... --tls-dir ...), so that the
    /// backup runs here, on a backup host: pg_backup_start and pg_backup_stop over SQL (the URL),
    /// the files read over mutual TLS with several reads in flight, compressed on this host's
    /// cores. Default: agent in the config file.
    #[arg(long, value_name = "HOST:PORT")]
    pub agent: Option<String>,
    /// PostgreSQL, through --agent: where large files are compressed. `host`: here, on the
    /// backup host's cores (the link carries raw bytes). `agent`: on the database host, chunk by
    /// chunk on the agent's threads (its --threads), so that the link carries compressed bytes:
    /// for a link slower than the codec. Needs a codec and level (not none or auto); small files
    /// still come raw and are packed here. Either way every chunk is checked here (decompressed,
    /// its checksum and page checksums verified) before it is written.
    #[arg(long, value_enum, default_value_t = CompressOn::Host)]
    pub compress_on: CompressOn,
    /// PostgreSQL, through --agent: how long a connection waits for the agent (to connect, then
    /// for each answer's next bytes; 90s, 5m, or seconds). A link silent that long fails the read,
    /// which is tried again on a new connection (3 times, with pauses of 0.5, 1 and 2 s) before
    /// the backup fails.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::duration)]
    pub agent_timeout: std::time::Duration,
    /// PostgreSQL: how the cluster is read: `files` (its data directory, here or through --agent)
    /// or `base-backup` (over the replication protocol, BASE_BACKUP, as pg_basebackup reads it:
    /// nothing of sheaf's on the database host; the role needs REPLICATION and pg_hba.conf a
    /// `replication` line; full backups only; PostgreSQL 15+). The stream is cut into chunks and
    /// compressed on this host's cores.
    #[arg(long, value_enum, default_value_t = Via::Files)]
    pub via: Via,
    /// PostgreSQL: where the backup's WAL comes from: `local` (the pg_wal beside the files read,
    /// then the repository's archive for what it lacks) or `archive` (the repository's archive
    /// only, waiting for the segments to arrive; proves the archive holds them).
    #[arg(long, value_enum, default_value_t = WalFrom::Local)]
    pub wal_from: WalFrom,
    /// PostgreSQL: how long to wait for WAL to reach the archive, or for a standby to replay past
    /// the backup's start or receive its end, before failing (90s, 5m, or seconds).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::duration)]
    pub wal_timeout: std::time::Duration,
    /// A stripe: a file path, s3://BUCKET/PREFIX/NAME.sheaf (an object), or `nul` to discard the
    /// output. Repeat for more stripes (up to 64), ideally on different volumes or buckets; each
    /// stripe has its own writer. Files and objects mix.
    #[arg(long = "to", value_name = "TARGET", conflicts_with = "repo")]
    pub to: Vec<String>,
    /// Back up into this repository instead (a PostgreSQL server's, made with sheaf init): the set
    /// goes under its backups/, recorded for sheaf info, restore --repo and expire. Default when no
    /// --to is given: SHEAF_REPO, else repo in the config file.
    #[arg(long, value_name = "REPO")]
    pub repo: Vec<String>,
    /// With several repositories: which to back up into, by position (1 for the first), or all
    /// (one backup into each, in turn).
    #[arg(long, value_name = "N|all", default_value = "1")]
    pub repo_target: super::RepoTarget,
    /// Stripes of a backup into a repository. Default: SHEAF_STRIPES, the config file, else 1.
    #[arg(long, value_name = "N", conflicts_with = "to")]
    pub stripes: Option<usize>,
    /// Into a repository: full (every page), diff (what changed since the last full) or incr (what
    /// changed since the last backup of any type). An incremental reads only the pages the WAL
    /// block summaries (kept by wal-push) name since its parent's start; where they have a gap it
    /// reads every page and keeps those whose LSN is at or after that start, and says so. It
    /// writes only the change; restore --repo reads its chain. With nothing to build on, a full
    /// backup is taken and the report says why. Default: SHEAF_TYPE, type in the config file,
    /// else full.
    #[arg(long = "type", value_enum, ignore_case = true, conflicts_with = "to")]
    pub backup_type: Option<sheaf_core::manifest::BackupType>,
    /// Into a repository: once the backup has finished, run `sheaf expire` on that repository
    /// with the retention configured (retention-full, retention-within), as pgBackRest's
    /// expire-auto. Default: expire-auto in the config file (false). A failing expire is reported
    /// as a warning: the backup itself stands.
    #[arg(long, conflicts_with = "to")]
    pub expire_auto: bool,
    /// Into a repository, a full backup: start afresh. By default a full backup goes on from one
    /// of the same cluster left unfinished (killed, a power cut, storage gone away): the files it
    /// stored whole that have not changed since (same size, mtime and inode, last written before
    /// it began) are taken, not read again, and everything else is read. Without this flag such a
    /// backup's stripes and journal stay for the next one to resume; with it, an unfinished one is
    /// removed and nothing is kept if this one stops. Resuming needs the same codec, chunk size,
    /// stripes and key; where they differ, the backup starts afresh and says why.
    #[arg(long, conflicts_with = "to")]
    pub no_resume: bool,
    /// MariaDB: how often the redo log's follower looks for what the server wrote, in
    /// milliseconds (a test's way to make it fall behind a small log).
    #[arg(long, value_name = "MS", default_value_t = 50, hide = true)]
    pub redo_poll: u64,
    /// For an incremental or differential: find the changed pages both ways, by the WAL block
    /// summaries wal-push keeps and by reading every page, keep what the page scan finds, and
    /// fail if the summaries missed a page (a check of sheaf itself; the summaries alone are the
    /// fast way).
    #[arg(long, conflicts_with = "to")]
    pub check_changes: bool,
    /// For an incremental or differential: read every relation page and keep those whose LSN is
    /// at or after the parent's start, instead of reading only the pages the WAL summaries name
    /// (for WAL archived by another tool; slower, as correct).
    #[arg(long, conflicts_with_all = ["to", "check_changes"])]
    pub page_scan: bool,
    /// none, lz4, deflate[:0-12], zstd[:low|medium|high|-7..22]. deflate levels 0-3 use ISA-L (the
    /// software side of QAT_DEFLATE), 4-12 libdeflate. zstd low=1, medium=3, high=7. Default:
    /// SHEAF_COMPRESSION, the config file, else zstd:low.
    #[arg(long, short = 'c', value_name = "CODEC[:LEVEL]", value_parser = super::codec)]
    pub compression: Option<sheaf_core::CodecSpec>,
    /// Chunk size (SQL Server's MAXTRANSFERSIZE), 64KiB .. 16MiB. The unit of reading, compressing,
    /// checksumming and restoring.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = super::size)]
    pub transfer_size: u64,
    /// Buffers in flight (SQL Server's BUFFERCOUNT), each compressor's output buffer included.
    /// Memory for chunk data is bounded by buffer count × transfer size. Default: stripes × 4 +
    /// 2 × readers (at least 2 × threads), plus one per compressor thread.
    #[arg(long, value_name = "N")]
    pub buffer_count: Option<usize>,
    /// Reader threads. Default: one per device among the source's files.
    #[arg(long, value_name = "N")]
    pub readers: Option<usize>,
    /// Compressor threads. Default: one per core.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Free text stored with the backup.
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// Into a repository: an annotation kept in the backup's record, KEY=VALUE (repeatable);
    /// `sheaf annotate` edits them later, `restore --annotation KEY=VALUE` picks by them.
    #[arg(long, value_name = "KEY=VALUE", value_parser = super::shared::annotation)]
    pub annotation: Vec<sheaf_pg::repo::annotations::Change>,
    /// Replace stripe files that already exist.
    #[arg(long)]
    pub overwrite: bool,
    /// Reserve each stripe file's estimated size (the source's size over the stripes) up front
    /// and trim it at the end, as SQL Server does unless trace flag 3042 is on. By default a stripe
    /// grows as it is written: on ext4, reserving first made no measurable difference
    /// (docs/design.md). Where the filesystem cannot reserve it (or has not the room), the stripe
    /// grows as written.
    #[arg(long)]
    pub preallocate: bool,
    /// PostgreSQL: the data directory, when the server will not say or to make sure.
    #[arg(long, value_name = "DIR")]
    pub pgdata: Option<PathBuf>,
    /// PostgreSQL: name of the temporary replication slot that reserves WAL (default sheaf_<pid>).
    #[arg(long, value_name = "NAME")]
    pub slot: Option<String>,
    /// PostgreSQL: checkpoint at backup start, `fast` (at once) or `spread` (gentler, slower).
    #[arg(long, value_enum, default_value_t = Checkpoint::Fast)]
    pub checkpoint: Checkpoint,
    /// PostgreSQL: keep a backup that found page checksum failures (they are recorded and listed).
    #[arg(long)]
    pub ignore_checksum_failures: bool,
    #[command(flatten)]
    pub rate: RateArgs,
    /// Print one JSON object with the results instead of the summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub keys: KeyArgs,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub hooks: super::RestoreHooks,
    /// Stripes of the backup (files or s3://BUCKET/KEY objects); one is enough when the others are
    /// beside it (same folder or prefix) or where the backup wrote them. None with --repo.
    #[arg(value_name = "STRIPE")]
    pub stripes: Vec<String>,
    /// Directory to restore into; created if missing, refused if not empty (see --force).
    /// `--datadir`, as Patroni passes it, is the same.
    #[arg(long = "to", visible_alias = "datadir", value_name = "DIR")]
    pub to: PathBuf,
    /// Restore only what matches PATTERN (repeatable): a glob on paths as the backup holds them
    /// (base/16384/16385*, pg_tblspc/..., or relative to a directory backup's root; * and ? within
    /// a name, ** across folders); a folder that matches comes whole. Only the frames that hold
    /// those files are read. Not a cluster that starts: files, for inspection or copying back.
    #[arg(long, value_name = "PATTERN")]
    pub only: Vec<String>,
    /// PostgreSQL: restore only this database whole (repeatable; postgres, template0 and template1
    /// always come whole). The others' files come back as sparse files of zeros, unread, so that
    /// the cluster starts; drop them then (DROP DATABASE). As pgBackRest's --db-include.
    #[arg(long, value_name = "NAME")]
    pub db_include: Vec<String>,
    /// Put what was under OLD (a path inside the backup, or an original absolute path) under NEW
    /// instead (SQL Server's WITH MOVE). Repeatable.
    #[arg(long, value_name = "OLD=NEW")]
    pub relocate: Vec<String>,
    /// PostgreSQL: put the tablespace at OLD (its location, name or OID) at NEW instead; its link in
    /// pg_tblspc and tablespace_map follow. Repeatable.
    #[arg(long, value_name = "OLD=NEW")]
    pub tablespace: Vec<String>,
    /// Restore trees the backup holds outside its main directory (tablespaces) to the absolute
    /// paths they had when backed up. Without it sheaf writes only under --to and where a
    /// --relocate or --tablespace says, and names any tree left unmapped.
    #[arg(long)]
    pub original_paths: bool,
    /// Restore into a non-empty directory: everything in it is removed first, so the result is
    /// exactly the backup (SQL Server's WITH REPLACE).
    #[arg(long)]
    pub force: bool,
    /// Make an existing directory (a failed primary, a stale standby, an earlier restore) equal to
    /// the backup while rewriting only what differs; what the backup lacks is removed. A
    /// PostgreSQL target must be a data directory of the same cluster, shut down; a standby
    /// stays a standby (its standby.signal and configuration files kept) unless --promote. From a
    /// repository (`--repo`), what differs is what the WAL summaries name between the target's
    /// state and the backup's end (as pg_rewind decides), and nothing else of the target is read;
    /// where they cannot say (a target not shut down cleanly, a gap in the summaries, timelines
    /// that do not meet, a former primary that wrote past the promotion without checksums or
    /// wal_log_hints) and for `--delta=hash` or a restore from stripes, each chunk is compared
    /// with the target by its XXH3-128 instead, and the report says why.
    #[arg(long, conflicts_with = "force", num_args = 0..=1, require_equals = true, default_missing_value = "auto", value_name = "HOW")]
    pub delta: Option<DeltaHow>,
    /// With `--delta` from a repository: compare every chunk with the target by its hash (the
    /// restore is the hashing one), and fail if a block differed that the WAL summaries did not
    /// name (a check of sheaf itself).
    #[arg(long, requires = "delta")]
    pub check_changes: bool,
    /// Decompressor threads. Default: one per core.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Write through the page cache. By default files of 64 KiB or more are written with direct
    /// I/O (O_DIRECT), which skips a copy and the cache's lock contention, wherever the filesystem
    /// allows it (where it does not, sheaf falls back by itself); smaller files always go through
    /// the cache and one syncfs makes them durable.
    #[arg(long)]
    pub buffered_io: bool,
    /// Write each direct chunk synchronously from the thread that decompressed it, instead of
    /// keeping writes in flight on an io_uring while the next chunks decompress. For comparison:
    /// where the kernel offers no io_uring (disabled, or refused by a container's sandbox) sheaf
    /// writes synchronously by itself.
    #[arg(long)]
    pub sync_writes: bool,
    /// PostgreSQL: `preserve` keeps the backup's archive settings; `off` writes archive_mode = off
    /// into the restored postgresql.auto.conf, so that a test restore never archives its new
    /// timeline into the production repository (where recovery_target_timeline = latest could
    /// later follow it). As pgBackRest's --archive-mode. When archiving is preserved and runs
    /// sheaf wal-push, restore says so in its last lines.
    #[arg(long, value_enum, default_value_t = ArchiveMode::Preserve)]
    pub archive_mode: ArchiveMode,
    #[command(flatten)]
    pub start: StartArgs,
    #[command(flatten)]
    pub rate: RateArgs,
    /// Print one JSON object with the results instead of the summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub recovery: RecoveryArgs,
    #[command(flatten)]
    pub s3: S3Args,
}

/// How a restored PostgreSQL cluster starts: a standby, its recovery settings, its links.
#[derive(Args, Clone, Default)]
pub struct StartArgs {
    /// PostgreSQL: restore a standby. standby.signal (never recovery.signal), restore_command
    /// through sheaf wal-fetch from the repository (it catches up from the archive first), and
    /// --primary-conninfo and --slot when given: it streams from its primary once the archive
    /// runs out, and never promotes. Without --repo (from stripes) it has no restore_command,
    /// and streams only.
    #[arg(long, help_heading = "Standby and recovery settings")]
    pub standby: bool,
    /// With --standby: the primary to stream from, in libpq's syntax ('host=db1 user=replicator
    /// application_name=db2', or a postgresql:// URL), written as primary_conninfo. No password:
    /// put it in the server user's ~/.pgpass.
    #[arg(long, value_name = "CONNINFO", requires = "standby", help_heading = "Standby and recovery settings")]
    pub primary_conninfo: Option<String>,
    /// With --standby: the primary's physical replication slot to stream through
    /// (primary_slot_name), so that the primary keeps the WAL the standby has not received.
    #[arg(long, value_name = "NAME", requires = "standby", help_heading = "Standby and recovery settings")]
    pub slot: Option<String>,
    /// With --slot and --primary-conninfo: create the slot on the primary before restoring
    /// (dropped again if the restore fails). A slot of that name that no standby uses is taken
    /// over; one in use is refused.
    #[arg(long, requires_all = ["slot", "primary_conninfo"], help_heading = "Standby and recovery settings")]
    pub create_slot: bool,
    /// With --delta onto a standby: make it a primary (recovery.signal; it promotes at the end of
    /// recovery). Without it a delta onto a standby (a data directory with standby.signal) keeps
    /// it a standby with its own settings.
    #[arg(long, requires = "delta", conflicts_with = "standby", help_heading = "Standby and recovery settings")]
    pub promote: bool,
    /// Leave the recovery settings the backed-up cluster had in postgresql.auto.conf (a backup
    /// of a standby has its primary_conninfo; an earlier restore's target). By default they are
    /// commented out, with a note, before the new ones are written.
    #[arg(long, help_heading = "Standby and recovery settings")]
    pub keep_recovery_settings: bool,
    /// Write NAME = VALUE into the restored postgresql.auto.conf (repeatable): any parameter the
    /// restored major knows, checked against its own list (postgres --describe-config) before
    /// anything is written; e.g. recovery_min_apply_delay=5min.
    #[arg(long, value_name = "NAME=VALUE", value_parser = recovery_option, help_heading = "Standby and recovery settings")]
    pub recovery_option: Vec<(String, String)>,
    /// The restored major's bin directory, for checking --recovery-option. Default: found as
    /// drill finds servers (pg_config, /usr/lib/postgresql/N/bin, /usr/pgsql-N/bin).
    #[arg(long, value_name = "DIR", help_heading = "Standby and recovery settings")]
    pub pg_bin: Option<PathBuf>,
    /// Put the data directory's NAME (pg_wal, or a link the backup holds) at DIR, with a
    /// symbolic link in its place (repeatable; as pgBackRest's --link-map). A backup whose
    /// pg_wal was a link restores it as a folder unless this or --original-paths says where.
    #[arg(long, value_name = "NAME=DIR", value_parser = link_map, help_heading = "Standby and recovery settings")]
    pub link_map: Vec<(String, PathBuf)>,
    #[command(flatten)]
    pub patroni: PatroniArgs,
}

/// What Patroni passes to a replica-creation or bootstrap method (`--scope=NAME --role=replica
/// --datadir=DIR --connstring=...`, and its method's own keys, `--keep_data=True`...):
/// docs/patroni.md.
#[derive(Args, Clone, Default)]
pub struct PatroniArgs {
    /// Patroni: the cluster's name (accepted: Patroni always passes it).
    #[arg(long, value_name = "NAME", help_heading = "Run by Patroni")]
    pub scope: Option<String>,
    /// Patroni: `replica` restores a standby (as --standby).
    #[arg(long, value_name = "ROLE", help_heading = "Run by Patroni")]
    pub role: Option<String>,
    /// Patroni: the leader's connection string, without password (PGPASSFILE has it): the
    /// standby's primary_conninfo unless --primary-conninfo is given (Patroni writes its own).
    #[arg(long, value_name = "CONNINFO", help_heading = "Run by Patroni")]
    pub connstring: Option<String>,
    /// Patroni passes its method's options as arguments too: accepted, and nothing to sheaf.
    #[arg(long = "keep_data", value_name = "BOOL", hide = true)]
    pub keep_data: Option<String>,
    #[arg(long = "no_leader", value_name = "BOOL", hide = true)]
    pub no_leader: Option<String>,
    #[arg(long = "no_params", value_name = "BOOL", hide = true)]
    pub no_params: Option<String>,
}

impl PatroniArgs {
    /// Whether Patroni asked for a replica.
    pub fn replica(&self) -> bool {
        self.role.as_deref() == Some("replica")
    }
}

fn recovery_option(text: &str) -> Result<(String, String), String> {
    sheaf_pg::restore::startup::parse_option(text).map_err(|e| e.to_string())
}

fn link_map(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, dir)) if !name.trim_matches('/').is_empty() && !dir.is_empty() => Ok((name.trim_matches('/').to_string(), PathBuf::from(dir))),
        _ => Err(format!("'{text}': write NAME=DIR, e.g. --link-map pg_wal=/mnt/wal/db1")),
    }
}

/// What a restored cluster does with its WAL (`restore --archive-mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ArchiveMode {
    /// Keep the backup's archive_mode and archive_command.
    Preserve,
    /// archive_mode = off.
    Off,
}

#[derive(Args)]
pub struct VerifyArgs {
    /// Stripes of the backup (files or s3://BUCKET/KEY objects); one is enough when the others are
    /// beside it or where the backup wrote them. None with --repo: every backup in it and the WAL.
    #[arg(value_name = "STRIPE")]
    pub stripes: Vec<String>,
    #[command(flatten)]
    pub repo: RepoArg,
    /// Decompressor threads. Default: one per core.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// With --repo: read every backup and WAL file again. Without it, verify reads only what is
    /// new or changed (another size or ETag, a file written again) since it last read back whole,
    /// as the repository's verify ledger (verify.ledger) records, and does not check a chain again
    /// that was found whole on the same objects.
    #[arg(long)]
    pub full: bool,
    /// With --repo: read again what last read back whole longer ago than this, unchanged or not
    /// (what a disk rots in place keeps its size and date).
    #[arg(long, value_name = "DURATION", value_parser = super::duration, default_value = "30d")]
    pub recheck_after: std::time::Duration,
    #[command(flatten)]
    pub rate: RateArgs,
    /// Print one JSON object with the results instead of the summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

/// The `--repo` side of `sheaf restore`: which backup, and where recovery stops.
#[derive(Args, Clone, Default)]
#[command(next_help_heading = "From a repository (point-in-time recovery)")]
pub struct RecoveryArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// The backup: an id as `sheaf info` lists it, or `latest`. Default: the newest that is
    /// consistent before the target.
    #[arg(long, value_name = "ID")]
    pub set: Option<BackupRef>,
    /// The newest finished backup annotated KEY=VALUE (sheaf annotate, backup --annotation),
    /// instead of --set.
    #[arg(long, value_name = "KEY=VALUE", value_parser = super::shared::annotation, conflicts_with = "set")]
    pub annotation: Option<sheaf_pg::repo::annotations::Change>,
    #[command(flatten)]
    pub targets: TargetArgs,
    /// What the server does at the target: promote (open for writes on a new timeline), pause
    /// (read-only, to look first: then SELECT pg_wal_replay_resume()), or shutdown.
    #[arg(long, value_enum, default_value_t = TargetAction::Promote)]
    pub target_action: TargetAction,
    /// The timeline to follow: latest, current (the backup's) or a number.
    #[arg(long, value_name = "TIMELINE", default_value = "latest")]
    pub target_timeline: TimelineTarget,
}

impl RecoveryArgs {
    /// The backup asked for: `--set`, or the newest annotated as `--annotation` says.
    pub fn backup(&self) -> Option<BackupRef> {
        self.set.clone().or_else(|| self.annotation.as_ref().map(annotated))
    }

    /// Whether any repository-only flag was given.
    pub fn any_target(&self) -> bool {
        self.set.is_some() || self.targets.any()
    }
}

/// Where recovery stops (restore --repo, drill): one of these, or the end of the archive.
#[derive(Args, Clone, Default)]
pub struct TargetArgs {
    /// Recover to this moment, with its zone: '2026-11-22 10:15:00+00'.
    #[arg(long, value_name = "TIMESTAMP")]
    pub target_time: Option<String>,
    /// Recover to this LSN, e.g. 0/3000060.
    #[arg(long, value_name = "LSN")]
    pub target_lsn: Option<Lsn>,
    /// Recover to a restore point made with pg_create_restore_point('NAME').
    #[arg(long, value_name = "NAME")]
    pub target_name: Option<String>,
    /// Recover to the end of a transaction, by its id (pg_current_xact_id(), txid_current()).
    #[arg(long, value_name = "XID")]
    pub target_xid: Option<u64>,
    /// `immediate`: stop as soon as the backup is consistent.
    #[arg(long, value_name = "immediate", value_parser = ["immediate"])]
    pub target: Option<String>,
    /// Stop just before the target (a time, an LSN or a transaction) instead of just after it:
    /// recovery_target_inclusive = off.
    #[arg(long)]
    pub target_exclusive: bool,
}

impl TargetArgs {
    /// Whether a target was given.
    pub fn any(&self) -> bool {
        self.target_time.is_some() || self.target_lsn.is_some() || self.target_name.is_some() || self.target_xid.is_some() || self.target.is_some() || self.target_exclusive
    }

    /// The request for `sheaf_pg::restore::pitr`, with the backup `set`, the action and the timeline.
    pub fn request(&self, set: Option<BackupRef>, action: TargetAction, timeline: TimelineTarget) -> sheaf_pg::restore::pitr::Request {
        sheaf_pg::restore::pitr::Request {
            set,
            time: self.target_time.clone(),
            lsn: self.target_lsn,
            name: self.target_name.clone(),
            xid: self.target_xid,
            immediate: self.target.is_some(),
            exclusive: self.target_exclusive,
            action,
            timeline,
        }
    }
}

#[derive(Args)]
pub struct ExtractArgs {
    /// Stripes of the backup (files or s3://BUCKET/KEY objects); one is enough when the others are
    /// beside it. None with --repo.
    #[arg(value_name = "STRIPE")]
    pub stripes: Vec<String>,
    /// The relation: SCHEMA.NAME, or NAME when only one schema (and database) has it.
    #[arg(long, value_name = "NAME")]
    pub relation: String,
    /// Its database. Default: the one database that has the relation.
    #[arg(long, value_name = "DB")]
    pub database: Option<String>,
    /// One block (8 KiB page) of the relation's main fork instead of its files, written as
    /// FILENODE.blockN.
    #[arg(long, value_name = "N")]
    pub block: Option<u64>,
    /// The folder to write into (made if missing).
    #[arg(long = "to", value_name = "DIR")]
    pub to: PathBuf,
    /// With --repo: which backup (its id as sheaf info lists it, or latest).
    #[arg(long, value_name = "ID", default_value = "latest")]
    pub set: BackupRef,
    #[command(flatten)]
    pub repo: RepoArg,
    /// Print one JSON object with the results instead of the summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

/// How `restore --delta` finds what differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeltaHow {
    /// From the repository's WAL summaries where they can say, else by hashing.
    Auto,
    /// By hashing every chunk of the target.
    Hash,
}

/// Where a backup through an agent compresses (`--compress-on`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CompressOn {
    /// On this host's cores: the link carries raw bytes.
    Host,
    /// On the database host, by the agent: the link carries compressed bytes.
    Agent,
}

/// How a PostgreSQL cluster is read (`--via`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Via {
    /// Its data directory's files, here or through `--agent`.
    Files,
    /// The replication protocol's BASE_BACKUP, as pg_basebackup reads it.
    BaseBackup,
}

/// Where a backup's WAL comes from (`--wal-from`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum WalFrom {
    /// The pg_wal beside the files read, then the repository's archive for what it lacks.
    Local,
    /// The repository's archive only.
    Archive,
}

/// The checkpoint a backup starts with (`--checkpoint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Checkpoint {
    /// At once, as fast as the disks allow.
    Fast,
    /// Spread over checkpoint_completion_target, as a scheduled checkpoint is.
    Spread,
}

/// The backup `--annotation KEY=VALUE` names (`KEY=` names the newest that has KEY empty: none).
pub fn annotated(c: &sheaf_pg::repo::annotations::Change) -> BackupRef {
    BackupRef::Annotated(c.key.clone(), c.value.clone().unwrap_or_default())
}
