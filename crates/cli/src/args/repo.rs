//! The arguments of the repository's commands: init, wal-push, wal-fetch, info, expire, config.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use sheaf_pg::repo::records::BackupRef;

use super::shared::{RateArgs, RepoArg, S3Args, SpoolArg};

#[derive(Args)]
pub struct InitArgs {
    /// The cluster the repository is for (its system identifier is recorded), as a libpq URL or
    /// keyword/value string. Default: pg-url (or pg-host, pg-port, ...) in the config file.
    pub url: Option<String>,
    #[command(flatten)]
    pub repo: RepoArg,
    /// Lock every object backups and wal-push write for DAYS after it is written (S3 Object Lock;
    /// the bucket must have been created with it): not even the repository's own credentials can
    /// delete or overwrite it before then, so neither ransomware nor a mistaken expire can. Give
    /// at least your retention (expire --keep-within) plus the time between full backups.
    #[arg(long, value_name = "DAYS")]
    pub lock: Option<u32>,
    /// governance (a user granted s3:BypassGovernanceRetention can still remove a locked version:
    /// keep that permission away from the backup's credentials) or compliance (nobody can, not
    /// even the account's root user, until the date; choose it once sure of the days).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = sheaf_core::storage::LockMode::Governance, requires = "lock")]
    pub lock_mode: sheaf_core::storage::LockMode,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct WalPushArgs {
    /// The WAL file to archive: PostgreSQL's %p (archive_command = 'sheaf wal-push %p').
    pub path: PathBuf,
    #[command(flatten)]
    pub repo: RepoArg,
    /// Codec for archived WAL. Default: SHEAF_COMPRESSION, the config file, else zstd:low.
    #[arg(long, short = 'c', value_name = "CODEC[:LEVEL]", value_parser = super::codec)]
    pub compression: Option<sheaf_core::CodecSpec>,
    /// Look-ahead: push this segment and up to N-1 `.ready` ones after it at once, so the
    /// archiver's next calls return at once. Default: SHEAF_PARALLEL, the config file, else 4.
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,
    /// When a push fails and more than SIZE of WAL waits in pg_wal, report success anyway so
    /// PostgreSQL can recycle the segment, keeping pg_wal from filling the disk. The segment is then
    /// NOT archived: recovery cannot pass it until the next backup (the gap is recorded and shown
    /// by sheaf info). Default: no bound (archiving waits, pg_wal grows).
    #[arg(long, value_name = "SIZE", value_parser = super::size)]
    pub queue_max: Option<u64>,
    #[command(flatten)]
    pub spool: SpoolArg,
    /// Print what was done as JSON (archive_command output goes to the server log).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct WalReceiveArgs {
    /// The server to stream from: a PostgreSQL URL of a role with REPLICATION, which pg_hba.conf
    /// admits for `replication`. Its application_name (default sheaf) is the name to put in
    /// synchronous_standby_names for a recovery point of zero. Default: pg-url (or pg-host,
    /// pg-port, ...) in the config file.
    pub url: Option<String>,
    #[command(flatten)]
    pub repo: RepoArg,
    /// The physical replication slot to stream from; made when missing. The server keeps WAL for
    /// it until it is received: drop it if you stop receiving for good.
    #[arg(long, value_name = "NAME", default_value = "sheaf")]
    pub slot: String,
    /// Codec for the WAL stored in the repository. Default: SHEAF_COMPRESSION, the config file,
    /// else zstd:low.
    #[arg(long, short = 'c', value_name = "CODEC[:LEVEL]", value_parser = super::codec)]
    pub compression: Option<sheaf_core::CodecSpec>,
    /// How often the segment being received is copied into the repository (complete segments go
    /// at once; the flush position the server hears is the spool's): 10s, 1m, or seconds.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = super::duration)]
    pub partial_every: std::time::Duration,
    /// How long to wait before connecting again after the connection failed (or trying a
    /// repository again that failed): 5s, 1m, or seconds.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = super::duration)]
    pub retry_every: std::time::Duration,
    #[command(flatten)]
    pub spool: SpoolArg,
    /// Print what was done as JSON when it stops.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct WalFetchArgs {
    /// The WAL file PostgreSQL wants: %f (restore_command = 'sheaf wal-fetch %f %p').
    pub name: String,
    /// Where to put it: %p.
    pub dest: PathBuf,
    #[command(flatten)]
    pub repo: RepoArg,
    /// Prefetch: after serving a segment, keep the next N fetched and checked in the spool by a
    /// background process, so replay never waits on the repository. 1 turns it off. Default:
    /// SHEAF_PARALLEL, the config file, else 4.
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,
    #[command(flatten)]
    pub spool: SpoolArg,
    /// Print what was done as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run as the background prefetcher (started by wal-fetch itself).
    #[arg(long, hide = true)]
    pub prefetch: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct InfoArgs {
    /// The cluster's server (optional): with it, the Prometheus metrics add how far the archive
    /// lags behind the WAL the server has written (sheaf_wal_archive_lag_bytes).
    pub url: Option<String>,
    #[command(flatten)]
    pub repo: RepoArg,
    /// How to print: a table (text), JSON, or Prometheus's text format (metrics named sheaf_*,
    /// with the catalog's runs beside the repository's state).
    #[arg(long, value_enum, default_value_t = InfoFormat::Text)]
    pub format: InfoFormat,
    /// Print JSON (as --format json).
    #[arg(long)]
    pub json: bool,
    /// Write the Prometheus metrics to FILE instead (replaced whole, for node_exporter's textfile
    /// collector: point it at FILE's folder and run this from cron or a timer). With them, when
    /// each certificate in --tls-dir expires (sheaf_tls_certificate_expiry_timestamp_seconds).
    #[arg(long, value_name = "FILE")]
    pub prometheus: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub s3: S3Args,
}

/// `sheaf wal-summarize`: the repository, and `--json`.
#[derive(Args)]
pub struct WalSummarizeArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct KeepArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// The backup to pin (its id, as sheaf info lists them). Without it, the pins are listed.
    #[arg(long = "set", value_name = "ID")]
    pub set: Option<String>,
    /// Pin it until then (e.g. '2027-06-30 00:00:00Z'; a zone is required), not until released.
    #[arg(long, value_name = "TIME", requires = "set", conflicts_with = "release")]
    pub until: Option<String>,
    /// Release its pin: expire treats it by the policy again.
    #[arg(long, requires = "set")]
    pub release: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

/// `sheaf annotate`: the backup, and the changes.
#[derive(Args)]
pub struct AnnotateArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// The backup (its id, as sheaf info lists them).
    #[arg(long = "set", value_name = "ID")]
    pub set: String,
    /// KEY=VALUE sets a key, KEY= removes it; several at once, applied in order. Keys are
    /// letters, digits, '-', '_' and '.'; a value is one line of text. Without any, the backup's
    /// annotations are printed.
    #[arg(value_name = "KEY=VALUE", value_parser = super::shared::annotation)]
    pub changes: Vec<sheaf_pg::repo::annotations::Change>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct DrillArgs {
    #[command(flatten)]
    pub hooks: super::DrillHooks,
    #[command(flatten)]
    pub repo: RepoArg,
    /// The backup to drill: an id as sheaf info lists it. Default: the newest (--latest).
    #[arg(long = "set", value_name = "ID", conflicts_with_all = ["latest", "random"])]
    pub set: Option<BackupRef>,
    /// The newest finished backup annotated KEY=VALUE (sheaf annotate, backup --annotation).
    #[arg(long, value_name = "KEY=VALUE", value_parser = super::shared::annotation, conflicts_with_all = ["set", "latest", "random"])]
    pub annotation: Option<sheaf_pg::repo::annotations::Change>,
    /// The newest finished backup (the default).
    #[arg(long, conflicts_with = "random")]
    pub latest: bool,
    /// A finished backup chosen at random: drilled every night, each backup gets its turn.
    #[arg(long)]
    pub random: bool,
    /// Where recovery stops. Default: the end of the archive (for a pinned backup older than what
    /// retention keeps: its consistency point).
    #[command(flatten)]
    pub targets: super::data::TargetArgs,
    /// The drill's folder (new or empty; removed afterwards unless --keep). Default: a new folder
    /// beside the spool (SHEAF_SPOOL or spool in the config file), else in the system's temporary
    /// folder. The restore checks it has room before it writes.
    #[arg(long = "to", value_name = "DIR")]
    pub to: Option<PathBuf>,
    /// The bin directory of a server of the backup's major version. Default: found from
    /// pg_config, /usr/lib/postgresql/N/bin, /usr/pgsql-N/bin.
    #[arg(long, value_name = "DIR")]
    pub pg_bin: Option<PathBuf>,
    /// Queries that must each return true once the server is up (row counts, a canary row, a
    /// business invariant), e.g. SELECT count(*) > 1000 FROM orders;
    #[arg(long, value_name = "FILE")]
    pub check_sql: Option<PathBuf>,
    /// The database --check-sql runs in.
    #[arg(long, value_name = "DB", default_value = "postgres")]
    pub check_db: String,
    /// Leave the restored cluster (stopped) in the folder, to look at.
    #[arg(long)]
    pub keep: bool,
    /// How long the server may take to start and recover to the target.
    #[arg(long, value_name = "DURATION", value_parser = super::duration, default_value = "1h")]
    pub timeout: std::time::Duration,
    /// Restore threads. Default: one per core.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub rate: RateArgs,
    /// Print one JSON object (the drill's record) instead of the summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub spool: SpoolArg,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct UndeleteArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// When the damage began (e.g. '2026-11-24 03:10:00Z'; a zone is required): every version
    /// written since then over an object that existed before is removed too, not only delete
    /// markers.
    #[arg(long, value_name = "TIME")]
    pub since: Option<String>,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct CheckArgs {
    /// The cluster's server (its primary: archiving is tested with a segment switch there).
    /// Default: pg-url (or pg-host, pg-port, ...) in the config file.
    pub url: Option<String>,
    #[command(flatten)]
    pub repo: RepoArg,
    /// The newest backup may be at most this old (26h, 1d, 1w): older is critical.
    #[arg(long, value_name = "DURATION", default_value = "1d", value_parser = super::duration)]
    pub max_age: std::time::Duration,
    /// How long to wait for the switched segment to reach the repository (60s, 5m, or seconds).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = super::duration)]
    pub archive_timeout: std::time::Duration,
    /// The newest passing drill (sheaf drill) may be at most this old (7d): older, or none, is a
    /// warning; a last drill that failed is critical whatever its age. Not checked unless given.
    #[arg(long, value_name = "DURATION", value_parser = super::duration)]
    pub max_drill_age: Option<std::time::Duration>,
    /// A copy of the repository (sheaf copy's target, another region or cloud): what it lacks of
    /// the repository's backups and WAL is a warning naming them.
    #[arg(long, value_name = "REPO")]
    pub compare_repo: Option<String>,
    #[command(flatten)]
    pub compare_keys: CompareKeyArgs,
    /// Print the findings as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

/// The secret of the repository `check --compare-repo` compares with, when it is not the one
/// given for --repo.
#[derive(Args, Clone, Default)]
#[group(multiple = false)]
#[command(next_help_heading = "The compared repository's secret")]
pub struct CompareKeyArgs {
    /// --compare-repo opens with the key in FILE. Default: the secret given for --repo.
    #[arg(long, value_name = "FILE", requires = "compare_repo")]
    pub compare_encryption_key_file: Option<PathBuf>,
    /// --compare-repo opens with the passphrase in FILE (its first line). Default: the secret
    /// given for --repo.
    #[arg(long, value_name = "FILE", requires = "compare_repo")]
    pub compare_passphrase_file: Option<PathBuf>,
    /// --compare-repo opens with what CMD prints (as --key-command). Default: the secret given
    /// for --repo.
    #[arg(long, value_name = "CMD", requires = "compare_repo")]
    pub compare_key_command: Option<String>,
}

#[derive(Args)]
pub struct ConsolidateArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// The incremental or differential to consolidate (its id as sheaf info lists it, or latest).
    /// With several repositories it is consolidated in each that holds it; latest is the first
    /// repository's newest backup unless --repo-target says which.
    #[arg(long, value_name = "ID")]
    pub set: BackupRef,
    /// With several repositories: consolidate in this one only, by position (1 for the first),
    /// or in all (latest: each one's newest backup).
    #[arg(long, value_name = "N|all")]
    pub repo_target: Option<super::RepoTarget>,
    /// Stripes of the new backup. Default: SHEAF_STRIPES, the config file, else 1.
    #[arg(long, value_name = "N")]
    pub stripes: Option<usize>,
    /// Codec of the new backup (as for sheaf backup). Default: SHEAF_COMPRESSION, the config
    /// file, else zstd:low.
    #[arg(long, short = 'c', value_name = "CODEC[:LEVEL]", value_parser = super::codec)]
    pub compression: Option<sheaf_core::CodecSpec>,
    /// Decompressor threads reading the chain. Default: one per core.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// A frame of the chain that newer backups replaced in part is copied as it is stored (not
    /// decompressed and compressed again) when at most PCT percent of its bytes were replaced;
    /// those bytes stay in it, unused ("superseded"), until a later consolidation finds more of
    /// the frame replaced than this and rewrites it. 0 rewrites every frame a newer backup cut
    /// into: the smallest backup, at the cost of compressing most of it again.
    #[arg(long, value_name = "PCT", default_value_t = sheaf_core::backup::DEFAULT_KEEP_SUPERSEDED_PCT, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub keep_superseded: u8,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct ExpireArgs {
    #[command(flatten)]
    pub hooks: super::ExpireHooks,
    #[command(flatten)]
    pub repo: RepoArg,
    /// Keep the newest N full backups and every differential and incremental built on them.
    /// Whatever the policy, a backup that a kept (or running) incremental builds on is kept: a
    /// chain goes only as a whole, newest first.
    #[arg(long, value_name = "N")]
    pub keep_full: Option<usize>,
    /// Keep what recovers to any moment this far back (e.g. 14d, 36h, 90m): every backup that ends
    /// inside it, and the newest one before it.
    #[arg(long, value_name = "DURATION", value_parser = super::duration)]
    pub keep_within: Option<std::time::Duration>,
    /// Archive retention: keep the WAL for point-in-time recovery from the newest N full backups
    /// kept on. Older kept backups keep only the WAL that makes each consistent: they restore to
    /// their own end (--target immediate), not to a moment after it. Alone, it keeps every
    /// backup and trims only WAL.
    #[arg(long, value_name = "N")]
    pub keep_archive: Option<usize>,
    /// Remove this one backup (its id as sheaf info lists it, or its set's id) and the WAL no
    /// backup left needs; refused, naming why, for the newest finished backup, one another
    /// backup builds on (remove that first), a pinned one (sheaf keep --release) or one still
    /// locked. The settings' retention-full and retention-within are not applied; archive
    /// retention (--keep-archive, or retention-archive) is.
    #[arg(long, value_name = "ID", conflicts_with_all = ["keep_full", "keep_within"])]
    pub set: Option<String>,
    /// Say what would be removed; remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct ConfigArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// How `info` prints (`--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InfoFormat {
    /// For a person.
    Text,
    /// For a program.
    Json,
    /// Prometheus' text exposition format, for a collector.
    Prometheus,
}

#[derive(Args)]
pub struct KeyCommandArgs {
    #[command(subcommand)]
    pub action: KeyAction,
}

#[derive(Subcommand)]
pub enum KeyAction {
    /// List the keys that open the repository: id, kind, when and by whom added, the key ring
    /// generations each opens. Needs no key; with one, marks it.
    List(KeyOn),
    /// Add a key (--new-passphrase-file, --new-key-file or --new-key-command), opening the
    /// repository with a current one.
    Add(KeyAddArgs),
    /// Remove a key (--key ID, from `sheaf key list`), opening the repository with another one.
    /// The last key cannot be removed.
    Remove(KeyRemoveArgs),
    /// Start a new data key for everything written from now on; what was written keeps its own,
    /// re-wrapped: nothing is rewritten, only the keys' small records.
    Rotate(KeyOn),
    /// Move a repository encrypted before key rings (one passphrase or key file) to them, in
    /// place: only a key record is written. With --set, a `--to` set: each stripe's key block is
    /// written again in place, a random data key sealed by the secret (by a new one with
    /// --new-*): nothing else is rewritten.
    Migrate(KeyMigrateArgs),
}

#[derive(Args)]
pub struct KeyMigrateArgs {
    #[command(flatten)]
    pub on: KeyOn,
    /// A `--to` set instead of a repository: its stripe files on this host (any one finds the
    /// others beside it), opened with the secret given as usual. With --new-*, sealed for that
    /// secret instead.
    #[arg(long = "set", value_name = "STRIPE", num_args = 1..)]
    pub set: Vec<String>,
    #[command(flatten)]
    pub new: NewKeyArgs,
}

#[derive(Args)]
pub struct KeyOn {
    #[command(flatten)]
    pub repo: RepoArg,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct KeyAddArgs {
    #[command(flatten)]
    pub on: KeyOn,
    #[command(flatten)]
    pub new: NewKeyArgs,
}

/// The new secret of `sheaf key add`, and of `sheaf key migrate --set` when it changes a set's.
#[derive(Args)]
#[group(id = "new_secret", multiple = false)]
pub struct NewKeyArgs {
    /// The new secret: the passphrase in FILE (its first line), stretched with Argon2id.
    #[arg(long, value_name = "FILE")]
    pub new_passphrase_file: Option<PathBuf>,
    /// The new secret: the key in FILE, 32 random bytes or 64 hex digits
    /// (`head -c 32 /dev/urandom > FILE`).
    #[arg(long, value_name = "FILE")]
    pub new_key_file: Option<PathBuf>,
    /// The new secret: what CMD prints (as --key-command), e.g. from Vault or a cloud KMS.
    #[arg(long, value_name = "CMD")]
    pub new_key_command: Option<String>,
}

impl NewKeyArgs {
    /// Whether one was given.
    pub fn given(&self) -> bool {
        self.new_passphrase_file.is_some() || self.new_key_file.is_some() || self.new_key_command.is_some()
    }
}

#[derive(Args)]
pub struct KeyRemoveArgs {
    #[command(flatten)]
    pub on: KeyOn,
    /// The key to remove: its id as `sheaf key list` shows it (or enough of its start to name
    /// one).
    #[arg(long = "key", value_name = "ID")]
    pub key: String,
    /// Remove it even though wal-push used it in the last week (its archive_command would fail
    /// from then on).
    #[arg(long)]
    pub force: bool,
}

#[derive(Args)]
pub struct RepoCommandArgs {
    #[command(subcommand)]
    pub action: RepoAction,
}

#[derive(Subcommand)]
pub enum RepoAction {
    /// After pg_upgrade, record the new cluster as the repository's next history: its backups
    /// and WAL live beside the old cluster's, which stay restorable (with the old major's
    /// server), drilled, verified and expired by the same policy.
    Upgrade(RepoUpgradeArgs),
}

#[derive(Args)]
pub struct RepoUpgradeArgs {
    /// The upgraded cluster, as a libpq URL or keyword/value string. Default: pg-url (or
    /// pg-host, pg-port, ...) in the config file.
    pub url: Option<String>,
    #[command(flatten)]
    pub repo: RepoArg,
    #[command(flatten)]
    pub s3: S3Args,
    /// Print what was recorded as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct CopyArgs {
    #[command(flatten)]
    pub repo: RepoArg,
    /// Where the copies go: a folder, s3://BUCKET/PREFIX, az://, gs://, sftp:// or sheaf://; a
    /// repository of the same cluster, or an empty place (made one).
    #[arg(long, value_name = "REPO")]
    pub to_repo: String,
    /// The backup to copy (its id as sheaf info lists it, or latest), with the backups it builds on.
    #[arg(long, value_name = "ID", conflicts_with_all = ["latest", "all"])]
    pub set: Option<BackupRef>,
    /// The newest backup.
    #[arg(long, conflicts_with = "all")]
    pub latest: bool,
    /// Every backup the target's retention keeps (retention-* for it in the config file, else
    /// all): the target holds what the repository holds (geo-redundancy).
    #[arg(long)]
    pub all: bool,
    /// Print what was copied as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub to_keys: ToKeyArgs,
    #[command(flatten)]
    pub rate: RateArgs,
    #[command(flatten)]
    pub s3: S3Args,
}

/// The secret of the repository `sheaf copy` copies into, when it is not the one given for the
/// repository copied from.
#[derive(Args, Clone, Default)]
#[group(multiple = false)]
#[command(next_help_heading = "The target's secret (between encrypted repositories, each object's data key is sealed again for the target's keys; frames stay as stored)")]
pub struct ToKeyArgs {
    /// The target opens with the key in FILE. Default: the secret given for --repo.
    #[arg(long, value_name = "FILE")]
    pub to_encryption_key_file: Option<PathBuf>,
    /// The target opens with the passphrase in FILE (its first line). Default: the secret given
    /// for --repo.
    #[arg(long, value_name = "FILE")]
    pub to_passphrase_file: Option<PathBuf>,
    /// The target opens with what CMD prints (as --key-command). Default: the secret given for
    /// --repo.
    #[arg(long, value_name = "CMD")]
    pub to_key_command: Option<String>,
}
