//! The command line as clap parses it: raw flags, nothing resolved. [`crate::context`] turns them
//! into what the commands use (settings, schemes, keys, rate limit) once; each command's module
//! under [`crate::commands`] reads its own arguments from here.
//!
//! - [`shared`]: flags several commands flatten in (S3, keys, repository, rate limit, spool).
//! - [`data`]: backup, restore, verify, extract: the commands that move a backup's bytes.
//! - [`repo`]: the repository's commands: init, wal-push, wal-fetch, info, expire, config.
//! - [`tools`]: generate, demo, bench, load-tpch, lab, and the history (list, show).

pub mod agent;
pub mod data;
pub mod repo;
pub mod shared;
pub mod tools;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

pub use agent::AgentArgs;
pub use data::{annotated, BackupArgs, ExtractArgs, RestoreArgs, VerifyArgs};
pub use repo::{
    AnnotateArgs, CheckArgs, ConfigArgs, ConsolidateArgs, CopyArgs, DrillArgs, ExpireArgs, InfoArgs, InitArgs, KeepArgs, KeyAction, KeyCommandArgs, RepoAction, RepoCommandArgs,
    UndeleteArgs, WalFetchArgs, WalPushArgs, WalReceiveArgs, WalSummarizeArgs,
};
pub use shared::{BackupHooks, DrillHooks, ExpireHooks, HookFlags, KeyArgs, LogArgs, RateArgs, RepoArg, RestoreHooks, S3Args, SpoolArg};
pub use tools::{BenchArgs, CompletionsArgs, DemoArgs, GenerateArgs, LabArgs, ListArgs, LoadTpchArgs, ManArgs, ShowArgs, VersionArgs};

#[derive(Parser)]
#[command(
    name = "sheaf",
    version,
    about = "Fast, parallel, compressed, striped backup and restore",
    long_about = "Fast, parallel, compressed, striped backup and restore.\n\n\
A backup is a set of stripes (one file per --to) that share one backup id. Chunks of \
--transfer-size bytes are read by one reader per device, compressed on every core, and written \
to whichever stripe is ready; every chunk carries checksums of its stored and raw bytes, and every \
stripe carries the whole manifest, so any one stripe finds the rest.",
    after_help = crate::exit::help()
)]
pub struct Cli {
    /// History catalog (SQLite) recording every backup, restore and verify. Default: SHEAF_CATALOG,
    /// else $XDG_DATA_HOME/sheaf/catalog.db (~/.local/share/sheaf/catalog.db).
    #[arg(long, global = true, value_name = "PATH")]
    pub catalog: Option<PathBuf>,
    /// Config file (TOML: repo, compression, s3-endpoint, ...; see sheaf config). Default:
    /// SHEAF_CONFIG, else ~/.config/sheaf/sheaf.toml over /etc/sheaf/sheaf.toml. Flags and SHEAF_*
    /// variables win over it.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub log: LogArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Back up a directory tree or a running PostgreSQL server to one or more stripes (or to nul).
    #[command(after_help = "Examples:\n  \
sheaf backup /srv/data --to /mnt/a/data_1.sheaf --to /mnt/b/data_2.sheaf\n  \
sheaf backup /srv/data --to nul --compression lz4 --json        # throughput of read + compress alone\n  \
sheaf backup /srv/data --to d.sheaf --compression zstd:high --transfer-size 4MiB --buffer-count 16\n  \
sheaf backup 'postgres://postgres@/postgres?host=/run/postgresql' --to /mnt/a/pg_1.sheaf --to /mnt/b/pg_2.sheaf\n  \
sheaf backup 'postgres://backup@/postgres?host=/run/postgresql' --repo /backup/db1 --primary postgres://backup@db1/postgres   # on a standby\n  \
sheaf backup --primary postgres://backup@db1/postgres --standby 'postgres://backup@/postgres?host=/run/postgresql' --repo /backup/db1   # hybrid\n  \
sheaf backup postgres://backup@db1/postgres --agent db1:7400 --tls-dir /etc/sheaf/tls --repo /backup/db1   # from a backup host\n  \
sheaf backup /srv/data --to s3://backups/data/d_1.sheaf --to s3://backups/data/d_2.sheaf   # credentials from AWS_* or ~/.aws\n  \
sheaf backup /srv/data --to s3://backups/d.sheaf --s3-endpoint https://minio.example:9000   # any S3-compatible store

\
The list of files, what reading each came to and each stripe's index wait in unnamed temporary files in TMPDIR \
(default /tmp) rather than in memory: about 100 bytes per file and 70 per chunk, gone when sheaf ends.")]
    Backup(BackupArgs),
    /// Restore a backup set into a directory (any one stripe finds the others beside it).
    #[command(after_help = "Examples:\n  \
sheaf restore /mnt/a/data_1.sheaf --to /srv/restored\n  \
sheaf restore a.sheaf b.sheaf --to /srv/new --relocate big/table=/mnt/fast/table\n  \
sheaf restore /mnt/a/pg_1.sheaf --to /srv/pg/new --tablespace /mnt/ts1=/srv/pg/ts1   # then: pg_ctl start -D /srv/pg/new\n  \
sheaf restore s3://backups/data/d_1.sheaf --to /srv/restored                        # finds d_2.sheaf under the same prefix\n  \
sheaf restore --repo /srv/sheaf --to /srv/pg/new --target-time '2026-11-22 10:15:00+00'  # point in time; then pg_ctl start\n  \
sheaf restore --repo /srv/sheaf --to /srv/pg/new --target-name before_upgrade --target-action pause")]
    Restore(Box<RestoreArgs>),
    /// Read every stripe, check every checksum and decompress, writing nothing (RESTORE VERIFYONLY).
    Verify(VerifyArgs),
    /// Write a seeded data set of known compressibility, to try sheaf on.
    Generate(GenerateArgs),
    /// What this sheaf is: its version; with --verbose the commit and date it was built from, its
    /// codecs and their libraries' versions, ISA-L, the crypto provider (for a bug report).
    Version(VersionArgs),
    /// Print the shell completion script for SHELL, generated from sheaf's own flags.
    #[command(after_help = "Examples:\n  \
sheaf completions bash > /etc/bash_completion.d/sheaf\n  \
sheaf completions zsh > \"${fpath[1]}/_sheaf\"\n  \
sheaf completions fish > ~/.config/fish/completions/sheaf.fish")]
    Completions(CompletionsArgs),
    /// Write the man pages (sheaf.1, and sheaf-COMMAND.1 for each command), generated from the same
    /// flags as --help; the package installs them, so that `man sheaf-restore` works.
    #[command(after_help = "Example:\n  sheaf man --to /usr/local/share/man/man1 && man sheaf-restore")]
    Man(ManArgs),
    /// A throwaway PostgreSQL cluster loaded with TPC-H, backed up with each codec, restored,
    /// started and checked; prints the table the seed authors built by hand (make demo runs it).
    #[command(after_help = "Installs Debian's postgresql first if it is missing (as root). Stops every server it started, also on Ctrl-C.")]
    Demo(DemoArgs),
    /// The seeds' experiment as a command: every combination of codec, stripes, transfer size,
    /// buffer count and target, each repeated; backup, verify and restore timed with their CPU;
    /// peers measured in the same run; a table, CSV/JSON/Markdown and plots.
    #[command(after_help = "Examples:\n  \
sheaf bench --dataset tpch:1 --target nul,/mnt/backup --stripes 1,2 --peers pg_basebackup,pgbackrest --out report\n  \
sheaf bench /srv/data --compression lz4,zstd:low --transfer-size 64KiB,1MiB,4MiB --buffer-count 7,27,47 --target /mnt/a+/mnt/b\n  \
sheaf bench --plan sweep.toml --repeat 5\n  \
sheaf bench --dataset files:100000x8KiB -c zstd:1 --target /var/tmp --peers tar --repeat 3\n\n\
Each repeat runs `sheaf backup`, then for a disk target `sheaf verify` and `sheaf restore` (into a \
scratch folder beside the stripes, removed after), each as a child process: its wall time until \
durable (sync), its CPU (user + system, from wait4) as a share of all cores, its peak memory (the \
process tree's resident sets, sampled), and the whole host's CPU over the same time. The page cache stays warm unless --drop-caches. Runs are \
recorded in the catalog. A plan file holds the same settings in TOML (compression = [\"lz4\"], \
stripes = [1, 2], transfer-size, buffer-count, target, repeat, peers, dataset or source, out, \
drop-caches, restore-dir); flags win over it. The pgbackrest peer is Debian's unless \
SHEAF_PGBACKREST names another binary: scripts/build-pgbackrest.sh builds the newest (2.60) from source.")]
    Bench(BenchArgs),
    /// Load TPC-H tables (tpchgen) into an existing database, for benchmarks.
    LoadTpch(LoadTpchArgs),
    /// Create a repository for a cluster: a folder, s3://BUCKET/PREFIX, az://CONTAINER/PREFIX, gs://BUCKET/PREFIX, sftp://USER@HOST/PATH or sheaf://HOST:PORT/NAME where sheaf keeps its
    /// backups and archived WAL (point-in-time recovery, retention).
    #[command(after_help = "Example:\n  \
sheaf init --repo /srv/sheaf 'postgres://postgres@/postgres?host=/run/postgresql'\n\n\
sheaf init --repo s3://backups/pg --lock 35 'postgres://...'   # a bucket with S3 Object Lock\n\n\
Then in postgresql.conf: archive_mode = on, archive_command = 'sheaf wal-push %p --repo /srv/sheaf'\n\
(or put repo = \"/srv/sheaf\" in /etc/sheaf/sheaf.toml and write just 'sheaf wal-push %p').\n\n\
With --lock every object backups and wal-push write is locked for DAYS: ransomware holding the \
repository's credentials, or a mistaken expire, cannot delete it before then (docs/ransomware.md).")]
    Init(InitArgs),
    /// Archive one WAL file into the repository (archive_command = 'sheaf wal-push %p').
    #[command(after_help = "Compressed (zstd:low unless told), checksummed and stored under a temporary name, then \
published; exit 0 only once it is durable. A file archived already with the same content is success \
(the archiver retries after a crash); different content under an archived name is refused and never \
overwritten. A segment of another cluster is refused.")]
    WalPush(WalPushArgs),
    /// Restore one WAL file from the repository (restore_command = 'sheaf wal-fetch %f %p'); exit 1
    /// without a word when the archive does not hold it, as PostgreSQL expects at its end. Any other
    /// failure (a damaged object, an unreachable repository) exits 255, which stops recovery rather
    /// than ending it early; in standby mode the usual exit codes, and the standby retries.
    WalFetch(WalFetchArgs),
    /// Stream WAL into the repository as the server writes it, over a physical replication slot:
    /// a recovery point of seconds, or zero as a synchronous standby. Runs until stopped
    /// (Ctrl-C, SIGTERM), connecting again when the server goes away.
    #[command(
        after_help = "The segment being received is kept in a spool folder on this host (--spool, or spool in the config file), fsynced before the server hears it flushed; complete segments go to the repository at once (one that wal-push stored already is not stored twice), the segment being received every --partial-every seconds and when stopped. wal-fetch serves that copy for a segment the archive lacks, so a restore replays to the last byte received. PostgreSQL 15 or later.\n\nExample (a recovery point of zero):\n  \
sheaf wal-receive --repo /srv/sheaf --spool /var/lib/sheaf/spool 'postgres://replicator@db1/postgres?application_name=sheaf'\n  \
then on the server: synchronous_standby_names = 'sheaf'"
    )]
    WalReceive(WalReceiveArgs),
    /// Make the WAL block summaries that incrementals read for archived segments that lack one
    /// (WAL archived by another tool, or while summaries could not be made); wal-push makes them
    /// as it archives.
    WalSummarize(WalSummarizeArgs),
    /// Serve this host's cluster files, read-only, to backup hosts over mutual TLS (`sheaf backup
    /// URL --agent HOST:PORT` there); --init-certs makes the certificates first.
    #[command(after_help = "Examples:\n  \
sheaf agent --init-certs /etc/sheaf/tls --name db1.example.com   # then copy ca.pem, client.pem, client.key to the backup host\n  \
sheaf agent --listen 0.0.0.0:7400 --pgdata /var/lib/postgresql/17/main --tls-dir /etc/sheaf/tls")]
    Agent(AgentArgs),
    /// What the repository holds: backups (times, LSNs, timeline, sizes, ratio), the archived WAL
    /// per timeline, gaps, totals; as a table, JSON, or Prometheus metrics.
    #[command(after_help = "Examples:\n  \
sheaf info --repo /srv/sheaf\n  \
sheaf info --repo /srv/sheaf --format prometheus\n  \
sheaf info --repo /srv/sheaf 'postgres://monitor@db1/postgres' --prometheus /var/lib/node_exporter/textfile/sheaf.prom   # from cron")]
    Info(InfoArgs),
    /// Is the backup of record healthy now? The repository reachable, writable and of this
    /// cluster; archive_command working end to end (a segment switched, then waited for in the
    /// repository); the newest backup younger than --max-age; no gap in the WAL since it. Exit 0
    /// ok, 1 warning, 2 critical, as Nagios and its kin read them.
    #[command(after_help = "The first line is the verdict, as monitoring plugins print it (SHEAF OK - ..., SHEAF WARNING - ..., \
SHEAF CRITICAL - ...); then one line per check. The role needs EXECUTE on pg_switch_wal (or superuser) and \
reads pg_stat_archiver.\n\nExample:\n  sheaf check 'postgres://monitor@db1/postgres' --repo /srv/sheaf --max-age 26h")]
    Check(CheckArgs),
    /// Write an incremental's or differential's chain as one new full backup in the repository,
    /// without touching the database: chains stay short without a full read of the cluster.
    #[command(after_help = "Example:\n  \
sheaf consolidate --repo /srv/sheaf --set 20261124-020000Z   # writes backup 20261124-020000Z-full\n\n\
The new backup holds the cluster as the incremental does, with its LSNs, timeline and WAL: restore \
--repo and point-in-time recovery use it in place of the chain, and the next incremental builds on \
it. The chain stays until expire removes it.")]
    Consolidate(ConsolidateArgs),
    /// Prove a backup: restore it (and its chain) into a scratch folder, start a server of its
    /// version on it with archiving off, recover through the repository's WAL to the target,
    /// check it (every database, pg_amcheck --heapallindexed, your --check-sql), stop it, remove
    /// the folder, and record the verdict and each phase's time in the repository.
    #[command(after_help = "Examples:\n  \
sheaf drill --repo /srv/sheaf                                   # the newest backup, to the end of the archive\n  \
sheaf drill --repo /srv/sheaf --random --check-sql /etc/sheaf/canary.sql --check-db app\n  \
sheaf drill --repo /srv/sheaf --set 20261124-101500Z --target immediate --keep\n\n\
The drill never touches the source cluster and writes nothing into the repository but its record \
(drills/). It times the restore, the recovery (with the WAL replayed) and the checks: their sum is \
the recovery time, measured. sheaf info shows each backup's last drill; sheaf check --max-drill-age \
7d warns when the newest passing drill is older, and is critical when the last one failed. Exit 0 \
when it passed; 3 when it found damage or a check failed; 4 when WAL was missing.")]
    Drill(DrillArgs),
    /// Remove old backups and the WAL no kept backup needs, by policy; or one backup by its id.
    #[command(after_help = "Examples:\n  \
sheaf expire --keep-full 2               # the two newest backups and the WAL from the older one on\n  \
sheaf expire --keep-within 14d --dry-run # what recovery to any moment of the last 14 days needs\n  \
sheaf expire --keep-full 4 --keep-archive 2\n                                         \
# four fulls; point-in-time recovery from the newest two on,\n                                         \
# the older two only to their own end\n  \
sheaf expire --set 20261129-010000Z      # that one backup (sheaf info lists the ids)\n\n\
Never removes the newest finished backup, nor WAL a kept backup needs to be consistent or to reach \
any moment after it; history files always stay. Backups left unfinished by a crash are removed; one \
still being written is left alone.\n\n\
Without flags the policy comes from the settings: retention-full, retention-within and \
retention-archive; a repository's own keys (repo2-retention-full ..., matched by its location) say \
its whole policy instead. Each repository given (--repo repeated, or repo .. repo4 in the settings) is \
expired by its own policy.")]
    Expire(ExpireArgs),
    /// Pin a backup so that expire never removes it, nor what it builds on, nor the WAL it needs
    /// to be consistent: forever, or --until a date (WAL-G's backup-mark, Barman's keep).
    #[command(after_help = "Examples:\n  \
sheaf keep --repo /srv/sheaf --set 20261124-101500Z                            # until released\n  \
sheaf keep --repo /srv/sheaf --set 20261124-101500Z --until '2027-12-31 00:00:00Z'\n  \
sheaf keep --repo /srv/sheaf --set 20261124-101500Z --release\n  \
sheaf keep --repo /srv/sheaf                                                   # the pins\n\n\
Only the WAL from the backup's start to its stop is kept for it: recovery to a later moment needs \
the WAL the policy keeps.")]
    Keep(KeepArgs),
    /// Mark a backup with what it is for, later than its backup ("before the 2026-12 migration",
    /// ticket=OPS-1234), as pgBackRest's annotate and WAL-G's user data: KEY=VALUE sets, KEY=
    /// removes; info shows them, restore and drill --annotation KEY=VALUE pick by them.
    #[command(after_help = "Examples:\n  \
sheaf annotate --repo /srv/sheaf --set 20261124-101500Z why='before the 2026-12 migration' ticket=OPS-1234\n  \
sheaf annotate --repo /srv/sheaf --set 20261124-101500Z ticket=      # removes ticket\n  \
sheaf annotate --repo /srv/sheaf --set 20261124-101500Z              # prints them\n  \
sheaf restore --repo /srv/sheaf --annotation ticket=OPS-1234 --to /srv/pg/new\n\n\
A backup taken with --annotation KEY=VALUE carries those in its record; annotate keeps the edited \
set beside it (the record is never rewritten), and expire removes it with the backup.")]
    Annotate(AnnotateArgs),
    /// The keys of an encrypted repository: any one opens it; add, remove and rotate them without
    /// rewriting a backup.
    #[command(after_help = "Examples:\n  \
sheaf key list --repo /srv/sheaf\n  \
sheaf key add --repo /srv/sheaf --passphrase-file old.pass --new-key-command 'vault kv get -field=key secret/sheaf'\n  \
sheaf key remove --repo /srv/sheaf --key-command 'vault kv get -field=key secret/sheaf' --key 3f2a9c0d1e4b5a67\n  \
sheaf key rotate --repo /srv/sheaf --passphrase-file dba.pass\n  \
sheaf key migrate --repo /srv/sheaf --passphrase-file dba.pass    # a repository from before key rings\n\n\
A repository's backups and WAL are encrypted with random data keys (the key ring), stored only \
wrapped for each of its keys: a passphrase, a key file or a key command's output. Adding or removing \
a key rewrites one small record. After removing a key that may have leaked, rotate: what is written \
from then on uses a new data key that the removed key never saw (what it could read before, it may \
have copied). docs/encryption.md says which secret opens what.")]
    Key(KeyCommandArgs),
    /// Copy backups into another repository (another disk, bucket, region or cloud) with the WAL
    /// they need, their pins, annotations and drills: as stored (sealed for the target's keys when
    /// it is encrypted), every frame's checksum checked on the way; a second run copies only what
    /// is missing.
    #[command(after_help = "Examples:\n  \
sheaf copy --repo /srv/sheaf --to-repo s3://dr-bucket/pg --latest      # the newest backup, off site\n  \
sheaf copy --repo /srv/sheaf --to-repo s3://dr-bucket/pg --all         # everything the target's retention keeps\n  \
sheaf copy --repo s3://dr-bucket/pg --to-repo /srv/sheaf --set 20261124-101500Z   # and back\n  \
sheaf check --repo /srv/sheaf --compare-repo s3://dr-bucket/pg        # what the copy lacks\n  \
sheaf copy --repo /srv/sheaf --to-repo s3://dr-sealed/pg --to-passphrase-file /etc/sheaf/dr.pass --all   # into an encrypted copy with its own secret\n\n\
The target is a repository of the same cluster, or an empty place, which becomes one. A backup's WAL \
goes first (from its start to the end of the archive, for point-in-time recovery there), then its \
stripes, its record last: stopped at any point (Ctrl-C, a lost link), nothing there looks like a \
finished backup that is not one, and the next run goes on where it stopped. A damaged object in the \
source is named and not copied. --all keeps what the target's retention (repo2-retention-* for it \
in the config file, else retention-*) would keep. Into an encrypted repository (`sheaf init` it with \
its secret first; --to-passphrase-file and the like when that is not the one given for --repo) every \
object is sealed for its keys on the way: from an encrypted repository only each key block changes, \
from one that is not each frame is sealed as stored; nothing is decompressed. Out of an encrypted \
repository into one that is not is refused.")]
    Copy(CopyArgs),
    /// The repository's own life: `sheaf repo upgrade` after pg_upgrade records the new cluster,
    /// so that one repository keeps both clusters' backups and WAL.
    #[command(after_help = "Example, after pg_upgrade from 15 to 18 and starting the new server:\n  \
sheaf repo upgrade --repo /srv/sheaf 'postgres://postgres@/postgres?host=/run/postgresql'\n  \
sheaf backup --repo /srv/sheaf --type full 'postgres://...'    # the new cluster's first backup\n\n\
Until it is run, wal-push and backup of the new cluster are refused (its system identifier is not \
the repository's). It refuses a cluster that cannot be the old one upgraded: an older major, another \
WAL segment size, or WAL that does not start past where the old cluster's ended (pg_upgrade carries \
the WAL position over; a new initdb starts again at the first segment). Afterwards info lists each \
history's backups; restore, PITR and drill of an old backup use the old major's server; verify and \
check cover both; expire counts full backups across histories, and removes an old history's WAL \
with its last backup.")]
    Repo(RepoCommandArgs),
    /// After a wipe of a locked repository (S3 Object Lock), make what the lock kept readable
    /// again: remove the delete markers, and with --since the overwrites, on top of its objects.
    #[command(after_help = "Examples:\n  \
sheaf undelete --repo s3://backups/pg --dry-run                         # what would come back\n  \
sheaf undelete --repo s3://backups/pg --since '2026-11-24 03:10:00Z'    # undo everything done since\n\n\
In a bucket with Object Lock a delete only puts a marker on top of an object and an overwrite a \
new version on top; the locked version underneath cannot be removed before its date, not even \
with the repository's own credentials. Without --since every delete marker goes (objects expire \
removed come back too, and the next expire removes them again); with it, every version written \
since then over an object that existed before it. Then sheaf verify, and restore as usual. The \
credentials that run this need s3:ListBucketVersions and s3:DeleteObjectVersion; keep them away \
from the database hosts.")]
    Undelete(UndeleteArgs),
    /// The settings in force (flags aside) and where each comes from; secrets masked.
    Config(ConfigArgs),
    /// List the runs the history catalog holds, newest first (msdb's backupset).
    List(ListArgs),
    /// Show one run of the history catalog, with its full report.
    Show(ShowArgs),
    /// What a codec costs per access on your own pages (seed 003's question): ratio, full scan,
    /// single-page fetch and in-place update, for each codec and unit size, as multiples of raw.
    #[command(after_help = "Examples:\n  \
sheaf lab --url 'postgres://postgres@/tpch?host=/run/postgresql' --relation public.lineitem\n  \
sheaf lab /backups/pg_1.sheaf --relation lineitem --database tpch -c lz4,zstd:low --unit 8KiB,1MiB\n  \
sheaf lab --file /var/lib/postgresql/15/main/base/16384/16402 --threads 2 --out lab-report\n\n\
In memory, on a sample of the relation's pages (--sample, from its start): each unit is compressed \
on its own; a scan decompresses every unit, a fetch the unit that holds one random page, an update \
decompresses it, changes a tuple's bytes and compresses it again. Medians of --repeat runs.")]
    Lab(LabArgs),
    /// Write one relation's files, or one 8 KiB page of it, out of a PostgreSQL backup, as they were
    /// backed up, reading only the frames that hold them.
    #[command(after_help = "Examples:\n  \
sheaf extract /backups/pg_1.sheaf --relation public.orders --database shop --to /tmp/orders\n  \
sheaf extract --repo /srv/sheaf --set latest --relation orders --block 4711 --to /tmp/page\n\n\
A page comes checked by its frames' checksums and, where the cluster had data checksums, by its own \
(ok, new, recent: written while the backup ran, so WAL replay rewrites it; or mismatch, which still \
writes the page for inspection and exits 3). Relations are found by the names the catalogs had when \
the backup started.")]
    Extract(ExtractArgs),
}

/// The flags the command given shares with others, for [`crate::context::Context`] to resolve:
/// each left at its default where the command has no such flag.
#[derive(Clone, Default)]
pub struct Shared {
    /// How to reach `s3://` locations (`None`: the command reaches none).
    pub s3: Option<S3Args>,
    /// The encryption secret (`None`: the command takes none, and none is read).
    pub keys: Option<KeyArgs>,
    /// `--repo`, each time given.
    pub repo: Vec<String>,
    /// `--max-rate`.
    pub rate: RateArgs,
    /// `--spool`.
    pub spool: SpoolArg,
}

impl Command {
    /// The flags this command shares with others.
    pub fn shared(&self) -> Shared {
        let with = |s3: &S3Args, repo: &RepoArg| Shared { s3: Some(s3.clone()), keys: Some(repo.keys.clone()), repo: repo.repo.clone(), ..Shared::default() };
        match self {
            Command::Backup(a) => Shared { s3: Some(a.s3.clone()), keys: Some(a.keys.clone()), repo: a.repo.clone(), rate: a.rate.clone(), ..Shared::default() },
            Command::Restore(a) => Shared { rate: a.rate.clone(), ..with(&a.s3, &a.recovery.repo) },
            Command::Verify(a) => Shared { rate: a.rate.clone(), ..with(&a.s3, &a.repo) },
            Command::Extract(a) => with(&a.s3, &a.repo),
            Command::Lab(a) => with(&a.s3, &a.repo),
            Command::Init(a) => with(&a.s3, &a.repo),
            Command::Info(a) => with(&a.s3, &a.repo),
            Command::Check(a) => with(&a.s3, &a.repo),
            Command::Keep(a) => with(&a.s3, &a.repo),
            Command::Annotate(a) => with(&a.s3, &a.repo),
            Command::Key(a) => {
                let on = match &a.action {
                    KeyAction::List(o) | KeyAction::Rotate(o) => o,
                    KeyAction::Migrate(x) => &x.on,
                    KeyAction::Add(x) => &x.on,
                    KeyAction::Remove(x) => &x.on,
                };
                with(&on.s3, &on.repo)
            }
            Command::Drill(a) => Shared { rate: a.rate.clone(), spool: a.spool.clone(), ..with(&a.s3, &a.repo) },
            Command::Undelete(a) => with(&a.s3, &a.repo),
            Command::Copy(a) => Shared { rate: a.rate.clone(), ..with(&a.s3, &a.repo) },
            Command::Repo(a) => match &a.action {
                RepoAction::Upgrade(x) => with(&x.s3, &x.repo),
            },
            Command::Expire(a) => with(&a.s3, &a.repo),
            Command::Consolidate(a) => with(&a.s3, &a.repo),
            Command::WalSummarize(a) => with(&a.s3, &a.repo),
            Command::WalPush(a) => Shared { spool: a.spool.clone(), ..with(&a.s3, &a.repo) },
            Command::WalFetch(a) => Shared { spool: a.spool.clone(), ..with(&a.s3, &a.repo) },
            Command::WalReceive(a) => Shared { spool: a.spool.clone(), ..with(&a.s3, &a.repo) },
            Command::Bench(a) => Shared { keys: Some(a.keys.clone()), ..Shared::default() },
            Command::Generate(_)
            | Command::Completions(_)
            | Command::Man(_)
            | Command::Version(_)
            | Command::Demo(_)
            | Command::LoadTpch(_)
            | Command::Config(_)
            | Command::List(_)
            | Command::Show(_)
            | Command::Agent(_) => Shared::default(),
        }
    }
}

/// Every duration flag's parser: `90s`, `5m`, `2h`, `1d`, `1w`, a bare number in seconds
/// ([`sheaf_core::time::parse_span`], also every duration setting's).
pub fn duration(text: &str) -> Result<Duration, String> {
    sheaf_core::time::parse_duration(text).map_err(|e| e.message().to_string())
}

/// Every size flag's parser: `65536`, `64KiB`, `16MiB` ([`sheaf_core::size::parse_size`], also
/// every size setting's).
pub fn size(text: &str) -> Result<u64, String> {
    sheaf_core::size::parse_size(text).map_err(|e| e.message().to_string())
}

/// Every codec flag's parser: `none`, `lz4`, `deflate[:0-12]`, `zstd[:low|medium|high|-7..22]`,
/// `auto` ([`sheaf_core::CodecSpec::parse`], also the `compression` setting's).
pub fn codec(text: &str) -> Result<sheaf_core::CodecSpec, String> {
    sheaf_core::CodecSpec::parse(text).map_err(|e| e.message().to_string())
}

/// Which of the repositories given a command writes into (`--repo-target`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RepoTarget {
    /// Each in turn.
    All,
    /// This one, counted from 1 (as `--repo` and `repo`, `repo2`, ... give them).
    Nth(usize),
}

impl std::str::FromStr for RepoTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "all" => Ok(RepoTarget::All),
            n => match n.parse::<usize>() {
                Ok(k) if k >= 1 => Ok(RepoTarget::Nth(k)),
                _ => Err(format!("'{n}': give a repository's position (1 for the first) or all")),
            },
        }
    }
}

impl RepoTarget {
    /// The positions (from 0) it names among `given` repositories.
    ///
    /// # Errors
    /// A position past the last one given.
    pub fn positions(self, given: usize) -> sheaf_core::Result<Vec<usize>> {
        match self {
            RepoTarget::All => Ok((0..given).collect()),
            RepoTarget::Nth(k) if k <= given => Ok(vec![k - 1]),
            RepoTarget::Nth(k) => Err(sheaf_core::Error::invalid(format!(
                "--repo-target {k}: {given} {} given; give a repository's position, 1 to {given}, or all",
                if given == 1 { "repository is" } else { "repositories are" }
            ))),
        }
    }
}

/// `--max-rate`'s parser: a size per second (`100MiB`).
pub fn rate(text: &str) -> Result<u64, String> {
    size(text).map_err(|e| format!("{e} (bytes per second, e.g. 100MiB)"))
}
