//! `sheaf`: the command line. Parses flags into the core's typed options, draws progress, prints the
//! summary, and maps errors to exit codes. All the work is in `sheaf-core`.

mod progress;
mod repo;
mod settings;

use settings::Settings;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use sheaf_core::size::{format_size, parse_size};
use sheaf_core::{BackupOptions, BackupSet, CodecSpec, Error, ErrorKind, Location, Progress, RestoreOptions};

const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  other I/O failure
  2  bad arguments or options
  3  the backup is damaged (a checksum, magic or length does not match)
  4  the backup set is incomplete (missing, truncated, unfinished or foreign stripe)
  5  the restore target is not empty (use --force)
  6  the target device is full
  7  the source cannot be read
  8  the target cannot be written
  9  encryption key: missing, wrong, or not a key (the backup or repository is encrypted)";

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
    after_help = EXIT_CODES
)]
struct Cli {
    /// History catalog (SQLite) recording every backup, restore and verify. Default: SHEAF_CATALOG,
    /// else $XDG_DATA_HOME/sheaf/catalog.db (~/.local/share/sheaf/catalog.db).
    #[arg(long, global = true, value_name = "PATH")]
    catalog: Option<PathBuf>,
    /// Config file (TOML: repo, compression, s3-endpoint, ...; see sheaf config). Default:
    /// SHEAF_CONFIG, else ~/.config/sheaf/sheaf.toml over /etc/sheaf/sheaf.toml. Flags and SHEAF_*
    /// variables win over it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Back up a directory tree or a running PostgreSQL server to one or more stripes (or to nul).
    #[command(after_help = "Examples:\n  \
sheaf backup /srv/data --to /mnt/a/data_1.sheaf --to /mnt/b/data_2.sheaf\n  \
sheaf backup /srv/data --to nul --compression lz4 --json        # throughput of read + compress alone\n  \
sheaf backup /srv/data --to d.sheaf --compression zstd:high --transfer-size 4MiB --buffer-count 16\n  \
sheaf backup 'postgres://postgres@/postgres?host=/run/postgresql' --to /mnt/a/pg_1.sheaf --to /mnt/b/pg_2.sheaf\n  \
sheaf backup /srv/data --to s3://backups/data/d_1.sheaf --to s3://backups/data/d_2.sheaf   # credentials from AWS_* or ~/.aws\n  \
sheaf backup /srv/data --to s3://backups/d.sheaf --s3-endpoint https://minio.example:9000   # any S3-compatible store")]
    Backup(BackupArgs),
    /// Restore a backup set into a directory (any one stripe finds the others beside it).
    #[command(after_help = "Examples:\n  \
sheaf restore /mnt/a/data_1.sheaf --to /srv/restored\n  \
sheaf restore a.sheaf b.sheaf --to /srv/new --relocate big/table=/mnt/fast/table\n  \
sheaf restore /mnt/a/pg_1.sheaf --to /srv/pg/new --tablespace /mnt/ts1=/srv/pg/ts1   # then: pg_ctl start -D /srv/pg/new\n  \
sheaf restore s3://backups/data/d_1.sheaf --to /srv/restored                        # finds d_2.sheaf under the same prefix\n  \
sheaf restore --repo /srv/sheaf --to /srv/pg/new --target-time '2026-11-22 10:15:00+00'  # point in time; then pg_ctl start\n  \
sheaf restore --repo /srv/sheaf --to /srv/pg/new --target-name before_upgrade --target-action pause")]
    Restore(RestoreArgs),
    /// Read every stripe, check every checksum and decompress, writing nothing (RESTORE VERIFYONLY).
    Verify(VerifyArgs),
    /// Write a seeded data set of known compressibility, to try sheaf on.
    Generate(GenerateArgs),
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
drop-caches, restore-dir); flags win over it.")]
    Bench(BenchArgs),
    /// Load TPC-H tables (tpchgen) into an existing database, for benchmarks.
    LoadTpch(LoadTpchArgs),
    /// Create a repository for a cluster: a folder or s3://BUCKET/PREFIX where sheaf keeps its
    /// backups and archived WAL (point-in-time recovery, retention).
    #[command(after_help = "Example:\n  \
sheaf init --repo /srv/sheaf 'postgres://postgres@/postgres?host=/run/postgresql'\n\n\
Then in postgresql.conf: archive_mode = on, archive_command = 'sheaf wal-push %p --repo /srv/sheaf'\n\
(or put repo = \"/srv/sheaf\" in /etc/sheaf/sheaf.toml and write just 'sheaf wal-push %p').")]
    Init(repo::InitArgs),
    /// Archive one WAL file into the repository (archive_command = 'sheaf wal-push %p').
    #[command(after_help = "Compressed (zstd:low unless told), checksummed and stored under a temporary name, then \
published; exit 0 only once it is durable. A file archived already with the same content is success \
(the archiver retries after a crash); different content under an archived name is refused and never \
overwritten. A segment of another cluster is refused.")]
    WalPush(repo::WalPushArgs),
    /// Restore one WAL file from the repository (restore_command = 'sheaf wal-fetch %f %p'); exit 1
    /// without a word when the archive does not hold it, as PostgreSQL expects at its end. Any other
    /// failure (a damaged object, an unreachable repository) exits 255, which stops recovery rather
    /// than ending it early; in standby mode the usual exit codes, and the standby retries.
    WalFetch(repo::WalFetchArgs),
    /// What the repository holds: backups (times, LSNs, timeline, sizes, ratio), the archived WAL
    /// per timeline, gaps, totals.
    Info(repo::InfoArgs),
    /// Remove old backups and the WAL no kept backup needs, by policy.
    #[command(after_help = "Examples:\n  \
sheaf expire --keep-full 2               # the two newest backups and the WAL from the older one on\n  \
sheaf expire --keep-within 14d --dry-run # what recovery to any moment of the last 14 days needs\n\n\
Never removes the newest finished backup, nor WAL a kept backup needs to be consistent or to reach \
any moment after it; history files always stay. Backups left unfinished by a crash are removed; one \
still being written is left alone.")]
    Expire(repo::ExpireArgs),
    /// The settings in force (flags aside) and where each comes from; secrets masked.
    Config(repo::ConfigArgs),
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

#[derive(Args)]
struct LabArgs {
    /// A backup's stripes (files or s3:// objects) to take the relation from (with --relation).
    #[arg(value_name = "STRIPE")]
    stripes: Vec<String>,
    /// A relation file (a PostgreSQL data file, or any file of 8 KiB pages).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["stripes", "url", "relation", "database"])]
    file: Option<PathBuf>,
    /// A running server (on this host: its files are read directly), with --relation.
    #[arg(long, value_name = "URL", conflicts_with = "stripes")]
    url: Option<String>,
    /// The database lab instead, on this server: a table made three times (TOAST compression
    /// pglz, lz4, and none: STORAGE EXTERNAL) in the URL's database and dropped after, from up to
    /// --rows rows of --relation (your table) or generated wide text; a full scan, seeks by key
    /// and in-place updates timed on each.
    #[arg(long, value_name = "URL", conflicts_with_all = ["stripes", "file", "url", "compression", "unit"])]
    db_url: Option<String>,
    /// Database lab: rows copied from --relation, or generated (about 2.3 KB of text each).
    #[arg(long, value_name = "N", default_value_t = 50_000)]
    rows: u32,
    /// The relation, SCHEMA.NAME (with --url or stripes).
    #[arg(long, value_name = "NAME")]
    relation: Option<String>,
    /// Its database, for a backup (default: the one that has it).
    #[arg(long, value_name = "DB")]
    database: Option<String>,
    /// Codecs to compare with raw [default: lz4,deflate:1,zstd:low,zstd:medium,zstd:high].
    #[arg(long, short = 'c', value_name = "LIST")]
    compression: Option<String>,
    /// Unit sizes, each a multiple of 8 KiB [default: 8KiB,64KiB,1MiB].
    #[arg(long, value_name = "LIST")]
    unit: Option<String>,
    /// How much of the relation to measure on, from its start (held in memory).
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    sample: String,
    /// Timed runs of each measurement; the median is kept.
    #[arg(long, value_name = "N", default_value_t = 3)]
    repeat: usize,
    /// Cores for the full scan.
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// Random pages fetched, and updated, per run.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    accesses: usize,
    /// Also write lab.csv, lab.json and the plots (lab-cost, lab-fetch: SVG and PNG) into DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    repo: repo::RepoArg,
    #[command(flatten)]
    s3: S3Args,
}

#[derive(Args)]
struct ExtractArgs {
    /// Stripes of the backup (files or s3://BUCKET/KEY objects); one is enough when the others are
    /// beside it. None with --repo.
    #[arg(value_name = "STRIPE")]
    stripes: Vec<String>,
    /// The relation: SCHEMA.NAME, or NAME when only one schema (and database) has it.
    #[arg(long, value_name = "NAME")]
    relation: String,
    /// Its database. Default: the one database that has the relation.
    #[arg(long, value_name = "DB")]
    database: Option<String>,
    /// One block (8 KiB page) of the relation's main fork instead of its files, written as
    /// FILENODE.blockN.
    #[arg(long, value_name = "N")]
    block: Option<u64>,
    /// The folder to write into (made if missing).
    #[arg(long = "to", value_name = "DIR")]
    to: PathBuf,
    /// With --repo: which backup (its id as sheaf info lists it, or latest).
    #[arg(long, value_name = "ID", default_value = "latest")]
    set: String,
    #[command(flatten)]
    repo: repo::RepoArg,
    /// Print one JSON object with the results instead of the summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    s3: S3Args,
}

#[derive(Args)]
struct ListArgs {
    /// How many runs.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ShowArgs {
    /// The run's id (as `sheaf list` shows).
    id: i64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BenchArgs {
    /// What to back up: a directory or a postgres:// URL. Or use --dataset.
    source: Option<String>,
    /// tpch:SCALE: a throwaway PostgreSQL cluster loaded with TPC-H (1 is about 1.4 GB on disk),
    /// removed afterwards. files:COUNTxSIZE: that many generated files (seeded text, 1,000 to a
    /// folder, beside the first directory target), e.g. files:100000x8KiB; measure it with
    /// --peers tar.
    #[arg(long, value_name = "tpch:SCALE|files:COUNTxSIZE")]
    dataset: Option<String>,
    /// A TOML plan with any of these settings; flags win over it.
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Codecs, comma-separated [default: lz4,deflate:1,zstd:low,zstd:medium,zstd:high].
    #[arg(long, short = 'c', value_name = "LIST")]
    compression: Option<String>,
    /// Stripe counts [default: 1].
    #[arg(long, value_name = "LIST")]
    stripes: Option<String>,
    /// Transfer sizes (MAXTRANSFERSIZE) [default: 1MiB].
    #[arg(long, value_name = "LIST")]
    transfer_size: Option<String>,
    /// Buffer counts (BUFFERCOUNT), or `default` [default: default].
    #[arg(long, value_name = "LIST")]
    buffer_count: Option<String>,
    /// Targets: `nul` (read + compress only), existing directories (the bench works in a folder
    /// of its own inside each, removed after), DIR+DIR to deal the stripes over several
    /// directories (volumes), and s3://BUCKET/PREFIX (objects under a prefix of their own, removed
    /// after; reached as AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... say) [default: nul].
    #[arg(long, value_name = "LIST")]
    target: Option<String>,
    /// Runs per permutation [default: 3].
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,
    /// Peers to measure in the same run, when installed: pg_basebackup (server- and client-side
    /// compression) and pgbackrest (needs --dataset tpch:SCALE, whose WAL it archives) for
    /// PostgreSQL sources; tar (piped through zstd, lz4 or gzip at the same level and threads) for
    /// directory sources.
    #[arg(long, value_name = "LIST")]
    peers: Option<String>,
    /// Drop the page cache before every operation (root; not in most containers).
    #[arg(long)]
    drop_caches: bool,
    /// Directory for report.csv, report.json, report.md, samples.csv and the plots
    /// [default: ./sheaf-bench-<UTC time>].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Where restores go (a scratch folder in it, removed after) [default: beside the stripes].
    #[arg(long, value_name = "DIR")]
    restore_dir: Option<PathBuf>,
    /// Print the results as JSON on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Run nothing: write the table, report files and plots again from the report.json of an
    /// earlier bench (into --out).
    #[arg(long, value_name = "REPORT_JSON", conflicts_with_all = ["source", "dataset", "plan"])]
    from: Option<PathBuf>,
    /// Encrypted runs: sheaf's backups, verifies and restores use this secret (peers do not
    /// encrypt).
    #[command(flatten)]
    keys: repo::KeyArgs,
}

#[derive(Args)]
struct LoadTpchArgs {
    /// libpq URL of the database to load into (tables are dropped and created).
    url: String,
    /// TPC-H scale factor: 1 is about 1 GB of data.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
}

#[derive(Args)]
struct DemoArgs {
    /// TPC-H scale factor: 0.1 is about 100 MB of data, 1 about 1 GB.
    #[arg(long, default_value_t = 0.1)]
    scale: f64,
    /// Codecs to compare, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "lz4,deflate:1,zstd:low,zstd:medium,zstd:high")]
    compression: String,
    /// Stripes per backup.
    #[arg(long, default_value_t = 2)]
    stripes: usize,
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct GenerateArgs {
    /// Directory to create; refused if it exists and is not empty.
    dir: PathBuf,
    /// Total bytes.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    size: String,
    /// Number of large files (plus 100 small ones).
    #[arg(long, value_name = "N", default_value_t = 16)]
    files: u64,
    /// Share of the data that repeats earlier data, 0.0 (incompressible) .. 1.0; 0.6 compresses
    /// about 2.5:1 with zstd:low.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.6)]
    repeat: f64,
    /// Seed: the same seed gives the same bytes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Many small files instead, COUNTxSIZE (e.g. 100000x8KiB), 1,000 to a folder; --size and
    /// --files do not apply.
    #[arg(long, value_name = "COUNTxSIZE")]
    small: Option<String>,
}

#[derive(Args)]
struct BackupArgs {
    /// What to back up: a directory (a stopped database's files, a filesystem snapshot), or a
    /// running PostgreSQL server as a libpq URL, e.g. postgres://postgres@/postgres?host=/run/postgresql
    /// (online and consistent; sheaf must run on the database host).
    source: String,
    /// A stripe: a file path, s3://BUCKET/PREFIX/NAME.sheaf (an object), or `nul` to discard the
    /// output. Repeat for more stripes (up to 64), ideally on different volumes or buckets; each
    /// stripe has its own writer. Files and objects mix.
    #[arg(long = "to", value_name = "TARGET", conflicts_with = "repo")]
    to: Vec<String>,
    /// Back up into this repository instead (a PostgreSQL server's, made with sheaf init): the set
    /// goes under its backups/, recorded for sheaf info, restore --repo and expire. Default when no
    /// --to is given: SHEAF_REPO, else repo in the config file.
    #[arg(long, value_name = "REPO")]
    repo: Option<String>,
    /// Stripes of a backup into a repository. Default: SHEAF_STRIPES, the config file, else 1.
    #[arg(long, value_name = "N", conflicts_with = "to")]
    stripes: Option<usize>,
    /// none, lz4, deflate[:0-12], zstd[:low|medium|high|-7..22]. deflate 0-3 uses ISA-L (the
    /// software side of QAT_DEFLATE), 4-12 libdeflate. zstd low=1, medium=3, high=7. Default:
    /// SHEAF_COMPRESSION, the config file, else zstd:low.
    #[arg(long, short = 'c', value_name = "CODEC[:LEVEL]")]
    compression: Option<String>,
    /// Chunk size (SQL Server's MAXTRANSFERSIZE), 64KiB .. 16MiB. The unit of reading, compressing,
    /// checksumming and restoring.
    #[arg(long, value_name = "SIZE", default_value = "1MiB")]
    transfer_size: String,
    /// Buffers in flight (SQL Server's BUFFERCOUNT), each compressor's output buffer included.
    /// Memory for chunk data is bounded by buffer count × transfer size. Default: stripes × 4 +
    /// 2 × readers (at least 2 × threads), plus one per compressor thread.
    #[arg(long, value_name = "N")]
    buffer_count: Option<usize>,
    /// Reader threads. Default: one per device among the source's files.
    #[arg(long, value_name = "N")]
    readers: Option<usize>,
    /// Compressor threads. Default: one per core.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Free text stored with the backup.
    #[arg(long, value_name = "TEXT")]
    label: Option<String>,
    /// Replace stripe files that already exist.
    #[arg(long)]
    overwrite: bool,
    /// Reserve each stripe file's estimated size (the source's size over the stripes) up front
    /// and trim it at the end, as SQL Server does unless trace flag 3042 is on. By default a stripe
    /// grows as it is written: on ext4, reserving first made no measurable difference
    /// (docs/design.md). Where the filesystem cannot reserve it (or has not the room), the stripe
    /// grows as written.
    #[arg(long)]
    preallocate: bool,
    /// PostgreSQL: the data directory, when the server will not say or to make sure.
    #[arg(long, value_name = "DIR")]
    pgdata: Option<PathBuf>,
    /// PostgreSQL: name of the temporary replication slot that reserves WAL (default sheaf_<pid>).
    #[arg(long, value_name = "NAME")]
    slot: Option<String>,
    /// PostgreSQL: checkpoint at backup start, `fast` (at once) or `spread` (gentler, slower).
    #[arg(long, value_name = "MODE", default_value = "fast", value_parser = ["fast", "spread"])]
    checkpoint: String,
    /// PostgreSQL: keep a backup that found page checksum failures (they are recorded and listed).
    #[arg(long)]
    ignore_checksum_failures: bool,
    #[command(flatten)]
    rate: RateArgs,
    /// Print one JSON object with the results instead of the summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    keys: repo::KeyArgs,
    #[command(flatten)]
    s3: S3Args,
}

/// `--max-rate`, for the commands that move a backup's bytes.
#[derive(Args)]
struct RateArgs {
    /// Hold the bytes written to all stripes together (backup), or read from them (restore,
    /// verify), to RATE per second, e.g. 100MiB: a backup that leaves the server's disks and the
    /// network room for its own work. Any 5 seconds carry at most about 5 % more. Default: no limit.
    #[arg(long, value_name = "RATE")]
    max_rate: Option<String>,
}

impl RateArgs {
    /// The shared limit, if one was asked for.
    fn limit(&self) -> Result<Option<std::sync::Arc<sheaf_core::storage::RateLimit>>, Error> {
        self.max_rate
            .as_deref()
            .map(|t| {
                let bytes = parse_size(t).map_err(|e| Error::invalid(format!("--max-rate {t}: {} (bytes per second, e.g. 100MiB)", e.message())))?;
                sheaf_core::storage::RateLimit::new(bytes)
            })
            .transpose()
    }
}

/// How to reach s3:// locations. Credentials come only from the environment (AWS_ACCESS_KEY_ID,
/// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN) or the AWS profile files, never from flags.
#[derive(Args, Clone)]
#[command(next_help_heading = "Object storage (s3://)")]
struct S3Args {
    /// Endpoint of an S3-compatible store, e.g. http://127.0.0.1:9000 (MinIO). Default: AWS, or
    /// AWS_ENDPOINT_URL, or endpoint_url in the profile.
    #[arg(long, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// Region. Default: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1.
    #[arg(long, value_name = "REGION")]
    s3_region: Option<String>,
    /// Allow a plain-HTTP endpoint (requests and data unencrypted on the wire).
    #[arg(long)]
    s3_allow_http: bool,
    /// Path-style addressing (ENDPOINT/BUCKET/KEY). The default with --s3-endpoint; AWS itself is
    /// addressed by host (BUCKET.s3.REGION.amazonaws.com).
    #[arg(long)]
    s3_path_style: bool,
    /// Profile in ~/.aws/credentials and ~/.aws/config. Default: AWS_PROFILE, else default.
    #[arg(long, value_name = "NAME")]
    s3_profile: Option<String>,
    /// PEM certificates to trust besides the system's, for an HTTPS endpoint with a private CA or a
    /// self-signed certificate. Default: AWS_CA_BUNDLE, or ca_bundle in the profile.
    #[arg(long, value_name = "FILE")]
    s3_ca_bundle: Option<PathBuf>,
    /// Upload part size, 5MiB .. 5GiB; raised automatically so that no stripe object needs more than
    /// 10,000 parts. Each stripe holds (parts in flight + 1) parts in memory, counted in the budget.
    #[arg(long, value_name = "SIZE", default_value = "16MiB")]
    s3_part_size: String,
    /// Parts uploading at once, per stripe.
    #[arg(long, value_name = "N", default_value_t = 2)]
    s3_parts_in_flight: usize,
    /// Ranged GETs in flight per stripe when reading (4 MiB each).
    #[arg(long, value_name = "N", default_value_t = 4)]
    s3_read_ahead: usize,
}

impl S3Args {
    /// The S3 settings in force: these flags over `SHEAF_S3_*` over the config file.
    fn resolved(&self, settings: &Settings) -> Result<S3Args, Error> {
        let mut a = self.clone();
        a.s3_endpoint = settings.value("s3-endpoint", a.s3_endpoint);
        a.s3_region = settings.value("s3-region", a.s3_region);
        a.s3_profile = settings.value("s3-profile", a.s3_profile);
        a.s3_ca_bundle = settings.value("s3-ca-bundle", a.s3_ca_bundle.map(|p| p.display().to_string())).map(PathBuf::from);
        a.s3_allow_http = settings.switch("s3-allow-http", a.s3_allow_http)?;
        a.s3_path_style = settings.switch("s3-path-style", a.s3_path_style)?;
        Ok(a)
    }

    /// The same settings as flags, for a command sheaf writes for later (restore_command).
    fn as_flags(&self) -> Vec<String> {
        let mut f = Vec::new();
        let mut add = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                f.push(format!("--{k}"));
                f.push(v);
            }
        };
        add("s3-endpoint", self.s3_endpoint.clone());
        add("s3-region", self.s3_region.clone());
        add("s3-profile", self.s3_profile.clone());
        add("s3-ca-bundle", self.s3_ca_bundle.as_ref().map(|p| p.display().to_string()));
        if self.s3_allow_http {
            f.push("--s3-allow-http".into());
        }
        if self.s3_path_style {
            f.push("--s3-path-style".into());
        }
        f
    }

    fn schemes(&self, settings: &Settings) -> Result<sheaf_s3::S3Schemes, Error> {
        let r = self.resolved(settings)?;
        let o = sheaf_s3::S3Options {
            endpoint: r.s3_endpoint.clone(),
            region: r.s3_region.clone(),
            allow_http: r.s3_allow_http,
            path_style: r.s3_path_style.then_some(true),
            profile: r.s3_profile.clone(),
            ca_bundle: r.s3_ca_bundle.clone(),
            part_size: parse_size(&self.s3_part_size)?,
            parts_in_flight: self.s3_parts_in_flight,
            read_ahead: self.s3_read_ahead,
            ..Default::default()
        };
        o.check()?;
        Ok(sheaf_s3::S3Schemes::new(o))
    }
}

/// Parse every location once; `s3://` ones go to `schemes`.
/// The stripes `texts` name, held to `rate` where one is given (`--max-rate`: one limit for all).
/// The backup set the stripes given on the command line belong to, read with the keys given (an
/// encrypted set needs them) and held to `rate` (`--max-rate`).
fn open_stripes(
    stripes: &[String],
    s3: &S3Args,
    settings: &Settings,
    keys: &repo::KeyArgs,
    rate: Option<&std::sync::Arc<sheaf_core::storage::RateLimit>>,
) -> Result<BackupSet, Error> {
    let schemes = s3.schemes(settings)?;
    BackupSet::open_with(&locations(stripes, &schemes, rate)?, &schemes, keys.keys(settings)?.as_deref())
}

/// The core restore's options from the flags (a directory backup, or `--only`).
fn core_restore_options(a: &RestoreArgs) -> Result<RestoreOptions, Error> {
    let mut opts = RestoreOptions::new(&a.to);
    opts.relocate = a.relocate.iter().map(|r| sheaf_core::restore::parse_relocation(r)).collect::<Result<_, _>>()?;
    opts.force = a.force;
    opts.original_paths = a.original_paths;
    opts.threads = a.threads;
    opts.buffered = a.buffered_io;
    opts.sync_writes = a.sync_writes;
    opts.only = a.only.clone();
    Ok(opts)
}

fn locations(texts: &[String], schemes: &sheaf_s3::S3Schemes, rate: Option<&std::sync::Arc<sheaf_core::storage::RateLimit>>) -> Result<Vec<Location>, Error> {
    texts.iter().map(|t| Location::parse(t, schemes).map(|l| match rate {
        Some(r) => l.throttled(r),
        None => l,
    })).collect()
}

#[derive(Args)]
struct RestoreArgs {
    /// Stripes of the backup (files or s3://BUCKET/KEY objects); one is enough when the others are
    /// beside it (same folder or prefix) or where the backup wrote them. None with --repo.
    #[arg(value_name = "STRIPE")]
    stripes: Vec<String>,
    /// Directory to restore into; created if missing, refused if not empty (see --force).
    #[arg(long = "to", value_name = "DIR")]
    to: PathBuf,
    /// Restore only what matches PATTERN (repeatable): a glob on paths as the backup holds them
    /// (base/16384/16385*, pg_tblspc/..., or relative to a directory backup's root; * and ? within
    /// a name, ** across folders); a folder that matches comes whole. Only the frames that hold
    /// those files are read. Not a cluster that starts: files, for inspection or copying back.
    #[arg(long, value_name = "PATTERN")]
    only: Vec<String>,
    /// PostgreSQL: restore only this database whole (repeatable; postgres, template0 and template1
    /// always come whole). The others' files come back as sparse files of zeros, unread, so that
    /// the cluster starts; drop them then (DROP DATABASE). As pgBackRest's --db-include.
    #[arg(long, value_name = "NAME")]
    db_include: Vec<String>,
    /// Put what was under OLD (a path inside the backup, or an original absolute path) under NEW
    /// instead (SQL Server's WITH MOVE). Repeatable.
    #[arg(long, value_name = "OLD=NEW")]
    relocate: Vec<String>,
    /// PostgreSQL: put the tablespace at OLD (its location, name or OID) at NEW instead; its link in
    /// pg_tblspc and tablespace_map follow. Repeatable.
    #[arg(long, value_name = "OLD=NEW")]
    tablespace: Vec<String>,
    /// Restore trees the backup holds outside its main directory (tablespaces) to the absolute
    /// paths they had when backed up. Without it sheaf writes only under --to and where a
    /// --relocate or --tablespace says, and names any tree left unmapped.
    #[arg(long)]
    original_paths: bool,
    /// Restore into a non-empty directory: everything in it is removed first, so the result is
    /// exactly the backup (SQL Server's WITH REPLACE).
    #[arg(long)]
    force: bool,
    /// Decompressor threads. Default: one per core.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Write through the page cache. By default files of 64 KiB or more are written with direct
    /// I/O (O_DIRECT), which skips a copy and the cache's lock contention, wherever the filesystem
    /// allows it (where it does not, sheaf falls back by itself); smaller files always go through
    /// the cache and one syncfs makes them durable.
    #[arg(long)]
    buffered_io: bool,
    /// Write each direct chunk synchronously from the thread that decompressed it, instead of
    /// keeping writes in flight on an io_uring while the next chunks decompress. For comparison:
    /// where the kernel offers no io_uring (disabled, or refused by a container's sandbox) sheaf
    /// writes synchronously by itself.
    #[arg(long)]
    sync_writes: bool,
    #[command(flatten)]
    rate: RateArgs,
    /// Print one JSON object with the results instead of the summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    recovery: repo::RecoveryArgs,
    #[command(flatten)]
    s3: S3Args,
}

#[derive(Args)]
struct VerifyArgs {
    /// Stripes of the backup (files or s3://BUCKET/KEY objects); one is enough when the others are
    /// beside it or where the backup wrote them. None with --repo: every backup in it and the WAL.
    #[arg(value_name = "STRIPE")]
    stripes: Vec<String>,
    #[command(flatten)]
    repo: repo::RepoArg,
    /// Decompressor threads. Default: one per core.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    #[command(flatten)]
    rate: RateArgs,
    /// Print one JSON object with the results instead of the summary.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    s3: S3Args,
}

/// Set by the Ctrl-C handler: whatever fails after it is the interruption's doing.
static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) => ExitCode::from(130),
        Err(e) => {
            eprintln!("sheaf: error: {e}");
            ExitCode::from(exit_code(e.kind()))
        }
    }
}

fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Io | ErrorKind::Cancelled => 1,
        ErrorKind::InvalidInput => 2,
        ErrorKind::Corrupt => 3,
        ErrorKind::Incomplete => 4,
        ErrorKind::TargetNotEmpty => 5,
        ErrorKind::NoSpace => 6,
        ErrorKind::Source => 7,
        ErrorKind::Target => 8,
        ErrorKind::Key => 9,
    }
}

/// Records a run in the catalog. A catalog that cannot be opened or written is a warning: the
/// backup itself matters more than its history.
struct Recorder {
    catalog: Option<sheaf_catalog::Catalog>,
    id: Option<i64>,
}

impl Recorder {
    fn begin(path: Option<&std::path::Path>, start: sheaf_catalog::RunStart) -> Recorder {
        match sheaf_catalog::Catalog::open(path) {
            Ok(c) => match c.begin(&start) {
                Ok(id) => Recorder { catalog: Some(c), id: Some(id) },
                Err(e) => {
                    eprintln!("sheaf: warning: {e}; this run is not recorded");
                    Recorder { catalog: None, id: None }
                }
            },
            Err(e) => {
                eprintln!("sheaf: warning: {e}; this run is not recorded");
                Recorder { catalog: None, id: None }
            }
        }
    }

    fn end<T>(self, result: &Result<T, Error>, end: impl FnOnce(&T) -> sheaf_catalog::RunEnd) {
        let (Some(c), Some(id)) = (self.catalog, self.id) else { return };
        let r = match result {
            Ok(v) => c.finish(id, &end(v), None),
            Err(e) => c.finish(id, &sheaf_catalog::RunEnd::default(), Some(&e.to_string())),
        };
        if let Err(e) = r {
            eprintln!("sheaf: warning: {e}");
        }
    }
}

/// Run `f`, recording it in the catalog as started, then complete or failed.
fn recorded(
    catalog: Option<&std::path::Path>,
    start: sheaf_catalog::RunStart,
    f: impl FnOnce() -> Result<serde_json::Value, Error>,
) -> Result<(), Error> {
    let rec = Recorder::begin(catalog, start);
    let r = f();
    rec.end(&r, run_end);
    r.map(drop)
}

fn run_end(v: &serde_json::Value) -> sheaf_catalog::RunEnd {
    let u = |k: &str| v.get(k).and_then(|x| x.as_u64());
    let t = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    sheaf_catalog::RunEnd {
        backup_id: t("backup_id"),
        system_identifier: v.pointer("/postgres/system_identifier").and_then(|x| x.as_str()).map(str::to_string),
        seconds: v.get("seconds").and_then(|x| x.as_f64()),
        bytes_read: u("bytes_read").or(u("bytes_stored")),
        bytes_written: u("bytes_written"),
        compression: t("compression"),
        codec: t("codec"),
        level: v.get("level").and_then(|x| x.as_i64()),
        transfer_size: u("transfer_size"),
        buffer_count: u("buffer_count"),
        readers: u("readers"),
        threads: u("threads"),
        details: Some(v.clone()),
    }
}

fn run(cli: Cli) -> Result<(), Error> {
    let catalog = cli.catalog.as_deref();
    let settings = Settings::load(cli.config.as_deref())?;
    let settings = &settings;
    match cli.command {
        Command::Backup(a) => {
            let is_pg = a.source.starts_with("postgres://") || a.source.starts_with("postgresql://");
            let start = sheaf_catalog::RunStart {
                operation: "backup".into(),
                source_kind: Some(if is_pg { "postgres" } else { "directory" }.into()),
                source: Some(if is_pg { sheaf_pg::server::redact(&a.source) } else { a.source.clone() }),
                label: a.label.clone(),
                stripes: if a.to.is_empty() { settings.value("repo", a.repo.clone()).into_iter().collect() } else { a.to.clone() },
            };
            recorded(catalog, start, || backup(a, settings))
        }
        Command::Restore(a) => {
            let start = sheaf_catalog::RunStart {
                operation: "restore".into(),
                source: Some(a.to.display().to_string()),
                stripes: a.stripes.clone(),
                ..Default::default()
            };
            recorded(catalog, start, || restore(a, settings))
        }
        Command::Verify(a) => {
            let start = sheaf_catalog::RunStart {
                operation: "verify".into(),
                stripes: a.stripes.clone(),
                ..Default::default()
            };
            recorded(catalog, start, || verify(a, settings))
        }
        Command::Init(a) => repo::init(a, settings),
        Command::WalPush(a) => repo::wal_push(a, settings),
        Command::WalFetch(a) => match repo::wal_fetch(a, settings) {
            Ok(true) => Ok(()),
            // Not in the archive: PostgreSQL takes a quiet non-zero exit for the archive's end.
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("sheaf: error: {e}");
                // PostgreSQL reads any exit below 126 as "not in the archive" and, outside standby
                // mode, ends recovery there and promotes: a damaged or unreachable archive would
                // cut recovery short without a word. 255 makes it stop instead; a standby
                // (standby.signal in the data directory, its working directory) retries by itself.
                let standby = std::path::Path::new("standby.signal").exists();
                std::process::exit(if standby { i32::from(exit_code(e.kind())) } else { 255 })
            }
        },
        Command::Info(a) => repo::info(a, settings),
        Command::Expire(a) => repo::expire(a, settings),
        Command::Config(a) => repo::config(a, settings),
        Command::List(a) => list(catalog, a),
        Command::Show(a) => show(catalog, a),
        Command::Extract(a) => extract(a, settings),
        Command::Lab(a) => lab(a, settings),
        Command::Generate(a) => generate(a),
        Command::Demo(a) => demo(a),
        Command::Bench(a) => bench(catalog, a, settings),
        Command::LoadTpch(a) => {
            let counts = sheaf_bench::tpch::load(&a.url, a.scale, &|t| eprintln!("sheaf: {t}"))?;
            println!("loaded {} rows at TPC-H scale {}", counts.iter().map(|c| c.1).sum::<i64>(), a.scale);
            Ok(())
        }
    }
}

fn progress(json: bool) -> Arc<dyn Progress> {
    progress::for_terminal(json)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1 << 20) as f64
}

fn rate(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        mib(bytes) / secs
    } else {
        0.0
    }
}

fn backup(a: BackupArgs, settings: &Settings) -> Result<serde_json::Value, Error> {
    let codec = repo::codec(settings, a.compression.clone())?;
    let schemes = a.s3.schemes(settings)?;
    let into_repo = a.to.is_empty();
    if into_repo && settings.value("repo", a.repo.clone()).is_none() {
        return Err(Error::invalid("say where the backup goes: --to TARGET (repeat for stripes), or --repo REPO (or SHEAF_REPO, or repo in the config file)"));
    }
    let max_rate = a.rate.limit()?;
    let mut opts = BackupOptions::new(locations(&a.to, &schemes, max_rate.as_ref())?);
    opts.stop = Some(stop_on_interrupt());
    opts.codec = codec;
    opts.transfer_size = parse_size(&a.transfer_size)?;
    opts.buffer_count = a.buffer_count;
    opts.readers = a.readers;
    opts.threads = a.threads;
    opts.label = a.label;
    opts.overwrite = a.overwrite;
    opts.preallocate = a.preallocate;
    if !into_repo {
        // A set of its own: a fresh KDF (salt) for this backup. Into a repository, its own KDF.
        opts.encryption = a
            .keys
            .keys(settings)?
            .map(|keys| keys.fresh_kdf().map(|kdf| sheaf_core::crypto::Encryption { keys, kdf }))
            .transpose()?;
    }
    let is_pg = a.source.starts_with("postgres://") || a.source.starts_with("postgresql://");
    let (r, pg) = if is_pg {
        let pg = sheaf_pg::PgBackupOptions {
            url: a.source.clone(),
            pgdata: a.pgdata.clone(),
            slot: a.slot.clone(),
            spread_checkpoint: a.checkpoint == "spread",
            ignore_checksum_failures: a.ignore_checksum_failures,
            expect_system_identifier: None,
        };
        if into_repo {
            let (r, record) = repo::backup_into(&repo::RepoArg { repo: a.repo.clone(), keys: a.keys.clone() }, &a.s3, settings, &pg, &opts, a.stripes, max_rate.as_ref(), progress(a.json))?;
            let mut postgres = r.postgres;
            postgres["repository_id"] = serde_json::json!(record.id);
            (r.report, Some(postgres))
        } else {
            let r = sheaf_pg::backup_postgres(&pg, &opts, progress(a.json))?;
            (r.report, Some(r.postgres))
        }
    } else {
        if into_repo {
            return Err(Error::invalid("a repository holds a PostgreSQL cluster's backups and WAL: back up a directory with --to"));
        }
        if a.pgdata.is_some() || a.slot.is_some() || a.ignore_checksum_failures {
            return Err(Error::invalid("--pgdata, --slot and --ignore-checksum-failures apply to a PostgreSQL source (postgres://...)"));
        }
        (sheaf_core::backup_directory(std::path::Path::new(&a.source), &opts, progress(a.json))?, None)
    };
    for w in &r.warnings {
        eprintln!("sheaf: warning: {w}");
    }
    let mut v = serde_json::to_value(&r).expect("report serialises");
    v["ratio"] = serde_json::json!(r.ratio());
    v["mib_per_second"] = serde_json::json!(rate(r.bytes_read, r.seconds));
    if let Some(pg) = &pg {
        v["postgres"] = pg.clone();
    }
    if a.json {
        println!("{v}");
    } else {
        println!(
            "processed {} pages ({:.1} MiB) in {:.2} s ({:.1} MiB/s), wrote {:.1} MiB (ratio {:.2}) to {} stripe{}",
            r.bytes_read.div_ceil(8192),
            mib(r.bytes_read),
            r.seconds,
            rate(r.bytes_read, r.seconds),
            mib(r.bytes_written),
            r.ratio(),
            r.stripes,
            if r.stripes == 1 { "" } else { "s" }
        );
        let uploads = if r.target_memory_bytes > 0 {
            format!(" + {} of upload parts", format_size(r.target_memory_bytes))
        } else {
            String::new()
        };
        println!(
            "memory: {} buffers × {}{uploads} = {} ({}; {} reader{}, {} compressor thread{})",
            r.buffer_count,
            format_size(r.buffer_len),
            format_size(r.memory_budget_bytes),
            r.compression,
            r.readers,
            if r.readers == 1 { "" } else { "s" },
            r.threads,
            if r.threads == 1 { "" } else { "s" },
        );
        if let Some(levels) = &r.auto_levels {
            let total: u64 = levels.values().sum::<u64>().max(1);
            let shares: Vec<String> = levels.iter().map(|(l, n)| format!("{l} ({:.0} %)", *n as f64 * 100.0 / total as f64)).collect();
            println!("auto chose zstd level {} of the chunks", shares.join(", "));
        }
        if r.encryption != "none" {
            println!("encrypted with {}", r.encryption.to_uppercase());
        }
        println!("backup id {}: {} files, {} entries", r.backup_id, r.files, r.entries);
        if let Some(id) = pg.as_ref().and_then(|p| p.get("repository_id")).and_then(|v| v.as_str()) {
            println!("in the repository as backup {id} (sheaf info lists it; sheaf restore --repo ... --set {id})");
        }
        if let Some(pg) = &pg {
            let f = |k: &str| pg.get(k).map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).unwrap_or_default();
            println!(
                "PostgreSQL {} (system {}), timeline {}, LSN {} .. {}, {} WAL files; page checksums: {} pages verified, {} not checked (new or written during the backup), {} failures",
                f("server_version"),
                f("system_identifier"),
                f("timeline"),
                f("start_lsn"),
                f("stop_lsn"),
                f("wal_files"),
                f("pages_verified"),
                f("pages_not_checked"),
                r.check_failures.len()
            );
            for c in &r.check_failures {
                eprintln!("sheaf: warning: checksum failure kept by --ignore-checksum-failures: {c}");
            }
        }
    }
    Ok(v)
}

/// A PostgreSQL restore's options from the flags (from stripes or from a repository alike).
fn pg_restore_options(a: &RestoreArgs) -> Result<sheaf_pg::PgRestoreOptions, Error> {
    if !a.relocate.is_empty() {
        return Err(Error::invalid("a PostgreSQL backup moves with --to (the data directory) and --tablespace OLD=NEW, not --relocate"));
    }
    Ok(sheaf_pg::PgRestoreOptions {
        target: a.to.clone(),
        tablespaces: a.tablespace.iter().map(|r| sheaf_core::restore::parse_relocation(r)).collect::<Result<_, _>>()?,
        force: a.force,
        original_paths: a.original_paths,
        threads: a.threads,
        buffered_io: a.buffered_io,
        sync_writes: a.sync_writes,
        db_include: a.db_include.clone(),
    })
}

fn restore(a: RestoreArgs, settings: &Settings) -> Result<serde_json::Value, Error> {
    if !a.only.is_empty() {
        return restore_only(a, settings);
    }
    if a.stripes.is_empty() {
        let opts = pg_restore_options(&a)?;
        let (r, plan) = repo::restore_from(&a.recovery, &a.s3, settings, opts, a.rate.limit()?.as_ref(), progress(a.json))?;
        let mut v = serde_json::to_value(&r).expect("report serialises");
        v["mib_per_second"] = serde_json::json!(rate(r.bytes_written, r.seconds));
        v["repository_backup"] = serde_json::json!(plan.backup.id);
        v["recovery"] = serde_json::to_value(&plan).expect("plan serialises");
        if a.json {
            println!("{v}");
        } else {
            println!(
                "restored backup {} ({} files, {:.1} MiB) in {:.2} s to {}; recovery follows timeline {} through the archive{}",
                plan.backup.id,
                r.files,
                mib(r.bytes_written),
                r.seconds,
                r.target,
                plan.timeline,
                plan.archive_end.as_deref().map(|e| format!(" (it ends at {e})")).unwrap_or_default()
            );
            println!("next: pg_ctl start -D {} (restore_command, the target and recovery.signal are written)", a.to.display());
        }
        return Ok(v);
    }
    if a.recovery.any_target() || a.recovery.repo.repo.is_some() {
        return Err(Error::invalid("--repo, --set and the --target flags restore from a repository: give them without stripes (or stripes without them)"));
    }
    let set = open_stripes(&a.stripes, &a.s3, settings, &a.recovery.repo.keys, a.rate.limit()?.as_ref())?;
    let is_pg = sheaf_pg::is_postgres(&set);
    let r = if is_pg {
        let opts = pg_restore_options(&a)?;
        sheaf_pg::restore_postgres(&set, &opts, progress(a.json))?
    } else {
        if !a.tablespace.is_empty() || !a.db_include.is_empty() {
            return Err(Error::invalid("--tablespace and --db-include apply to PostgreSQL backups; this one is of a directory (use --relocate, or --only)"));
        }
        sheaf_core::restore(&set, &core_restore_options(&a)?, progress(a.json))?
    };
    let mut v = serde_json::to_value(&r).expect("report serialises");
    v["mib_per_second"] = serde_json::json!(rate(r.bytes_written, r.seconds));
    if a.json {
        println!("{v}");
    } else {
        println!(
            "restored {} files ({:.1} MiB) from {} stripe{} in {:.2} s ({:.1} MiB/s) to {}",
            r.files,
            mib(r.bytes_written),
            r.stripes,
            if r.stripes == 1 { "" } else { "s" },
            r.seconds,
            rate(r.bytes_written, r.seconds),
            r.target
        );
    }
    Ok(v)
}

/// `restore --only`: the matching files of any backup (from stripes or a repository), as files.
fn restore_only(a: RestoreArgs, settings: &Settings) -> Result<serde_json::Value, Error> {
    if !a.db_include.is_empty() {
        return Err(Error::invalid("--only restores files and --db-include a cluster: give one of them"));
    }
    if !a.tablespace.is_empty() || a.recovery.any_target() {
        return Err(Error::invalid("--only restores files, not a cluster: --tablespace and the --target flags do not apply (use --relocate to place a tree elsewhere)"));
    }
    let limit = a.rate.limit()?;
    let set = if a.stripes.is_empty() {
        repo::open_backup(&a.recovery.repo, &a.s3, settings, a.recovery.set.as_deref().unwrap_or("latest"), limit.as_ref())?
    } else {
        open_stripes(&a.stripes, &a.s3, settings, &a.recovery.repo.keys, limit.as_ref())?
    };
    let r = sheaf_core::restore(&set, &core_restore_options(&a)?, progress(a.json))?;
    let mut v = serde_json::to_value(&r).expect("report serialises");
    v["mib_per_second"] = serde_json::json!(rate(r.bytes_written, r.seconds));
    if a.json {
        println!("{v}");
    } else {
        println!(
            "restored {} files ({:.1} MiB) matching {} in {:.2} s to {}; read {} of the set's {}",
            r.files,
            mib(r.bytes_written),
            a.only.join(", "),
            r.seconds,
            r.target,
            format_size(r.bytes_read),
            format_size(r.set_bytes)
        );
    }
    Ok(v)
}

fn verify(a: VerifyArgs, settings: &Settings) -> Result<serde_json::Value, Error> {
    if a.stripes.is_empty() {
        return repo::verify_repo(&a.repo, &a.s3, settings, a.threads, a.rate.limit()?.as_ref(), a.json);
    }
    if a.repo.repo.is_some() {
        return Err(Error::invalid("give stripes or --repo, not both"));
    }
    let set = open_stripes(&a.stripes, &a.s3, settings, &a.repo.keys, a.rate.limit()?.as_ref())?;
    let r = sheaf_core::verify(&set, a.threads, progress(a.json))?;
    let mut v = serde_json::to_value(&r).expect("report serialises");
    v["ok"] = serde_json::json!(true);
    if a.json {
        println!("{v}");
    } else {
        println!(
            "verified backup {}: {} stripe{}, {} frames, {:.1} MiB of data in {:.2} s ({:.1} MiB/s); the set is complete and every checksum matches",
            r.backup_id,
            r.stripes,
            if r.stripes == 1 { "" } else { "s" },
            r.frames,
            mib(r.bytes_raw),
            r.seconds,
            rate(r.bytes_raw, r.seconds)
        );
    }
    Ok(v)
}

fn generate(a: GenerateArgs) -> Result<(), Error> {
    let total = parse_size(&a.size)?;
    if !(0.0..=1.0).contains(&a.repeat) {
        return Err(Error::invalid(format!("--repeat {}: give a fraction from 0.0 to 1.0", a.repeat)));
    }
    if std::fs::read_dir(&a.dir).map(|mut d| d.next().is_some()).unwrap_or(false) {
        return Err(Error::new(
            ErrorKind::TargetNotEmpty,
            format!("{} is not empty: generate into a new or empty directory", a.dir.display()),
        ));
    }
    let t0 = std::time::Instant::now();
    let cannot = |e| Error::io(ErrorKind::Target, format!("cannot write data set in {}", a.dir.display()), e);
    let (written, files) = match &a.small {
        Some(spec) => {
            let (count, size) = sheaf_core::datagen::parse_files_spec(spec)?;
            (sheaf_core::datagen::make_small_files(&a.dir, count, size, a.repeat, a.seed).map_err(cannot)?, count)
        }
        None => (sheaf_core::datagen::make_dataset(&a.dir, total, a.files, a.repeat, a.seed).map_err(cannot)?, a.files + 100),
    };
    println!("generated {} in {files} files under {} in {:.1} s", format_size(written), a.dir.display(), t0.elapsed().as_secs_f64());
    Ok(())
}

/// On Ctrl-C (or SIGTERM, SIGHUP): ask the running backup to stop, so that it removes its
/// `.partial` files and aborts its uploads on the way out (exit 130). A second signal exits at once.
fn stop_on_interrupt() -> Arc<std::sync::atomic::AtomicBool> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let _ = ctrlc::set_handler(move || {
        if INTERRUPTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
            std::process::exit(130);
        }
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        eprintln!("sheaf: interrupted; removing what the backup wrote (again to quit at once)");
    });
    stop
}

/// On Ctrl-C: stop the scratch servers we started (pg_ctl detaches them from the terminal, so
/// they would outlive us) and remove the bench's work folders, then exit 130.
fn stop_scratch_on_interrupt(what: &'static str) {
    let _ = ctrlc::set_handler(move || {
        INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
        eprintln!("sheaf: interrupted; stopping the servers the {what} started");
        sheaf_bench::runner::cleanup();
        sheaf_pg::scratch::stop_all();
        std::process::exit(130);
    });
}

/// `v`, unless an interrupt came: then the handler is stopping servers and removing folders and
/// will exit the process, so this thread waits for it rather than print, write or return (which
/// would end the process under the handler).
fn unless_interrupted<T>(v: T) -> T {
    if INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    v
}

fn duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

fn bench(catalog: Option<&std::path::Path>, a: BenchArgs, settings: &Settings) -> Result<(), Error> {
    use sheaf_bench::runner::Event;
    stop_scratch_on_interrupt("bench");
    let plan = match &a.plan {
        Some(p) => sheaf_bench::plan::Plan::load(p)?,
        None => sheaf_bench::plan::Plan::default(),
    };
    let flags = sheaf_bench::plan::Flags {
        source: a.source,
        dataset: a.dataset,
        compression: a.compression,
        stripes: a.stripes,
        transfer_size: a.transfer_size,
        buffer_count: a.buffer_count,
        target: a.target,
        repeat: a.repeat,
        peers: a.peers,
        drop_caches: a.drop_caches,
        out: a.out,
        restore_dir: a.restore_dir,
    };
    let default_out = || PathBuf::from(format!("sheaf-bench-{}", sheaf_core::time::utc_now().replace(':', "")));
    if let Some(from) = &a.from {
        let text = std::fs::read(from).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot read {}", from.display()), e))?;
        let result: sheaf_bench::results::BenchResult = serde_json::from_slice(&text)
            .map_err(|e| Error::invalid(format!("{} is not a sheaf bench report.json: {e}", from.display())))?;
        return bench_output(&result, &flags.out.unwrap_or_else(default_out), a.json);
    }
    let r = sheaf_bench::plan::resolve(flags, plan)?;
    let out = r.out.clone().unwrap_or_else(default_out);
    let sheaf = std::env::current_exe().map_err(|e| Error::io(ErrorKind::Io, "cannot find the sheaf executable", e))?;
    let opts = sheaf_bench::runner::BenchOptions {
        matrix: r.matrix,
        source: r.source,
        peers: r.peers,
        drop_caches: r.drop_caches,
        sheaf,
        catalog: catalog.map(std::path::Path::to_path_buf),
        restore_dir: r.restore_dir,
        key_args: match a.keys.keys(settings)? {
            // Checked here, so that a bad key file stops the bench before its first run; the
            // runs get the file's name (SHEAF_PASSPHRASE they inherit), never the secret.
            Some(_) => a.keys.flags(settings).unwrap_or_default(),
            None => Vec::new(),
        },
    };
    let note = |e: Event| match e {
        Event::Note(n) => eprintln!("sheaf bench: {n}"),
        Event::Warning(w) => eprintln!("sheaf: warning: {w}"),
        Event::Run { index, total, what, repeat, repeats, eta } => eprintln!(
            "sheaf bench: [{index}/{total}{}] {what} (run {repeat} of {repeats})",
            eta.map_or_else(String::new, |d| format!(", {} left", duration(d)))
        ),
    };
    let outcome = unless_interrupted(sheaf_bench::runner::run(&opts, &note))?;
    // What ran before a failure is written all the same, marked as stopped early.
    bench_output(&outcome.result, &out, a.json)?;
    outcome.failure.map_or(Ok(()), Err)
}

/// Print the table (or JSON) and write the report files and plots into `out`.
fn bench_output(result: &sheaf_bench::results::BenchResult, out: &std::path::Path, json: bool) -> Result<(), Error> {
    let written = sheaf_bench::report::write_all(result, out);
    if json {
        println!("{}", serde_json::to_string(result).expect("results serialise"));
    } else {
        let mut table = Vec::new();
        sheaf_bench::report::write_text(&result.rows, &mut table).expect("a table in memory");
        print!("{}", String::from_utf8_lossy(&table));
        println!(
            "(median of {} runs, (min-max) where they differ; CPU % of all {} cores; cache {})",
            result.info.repeats, result.info.cores, result.info.cache
        );
    }
    let files = written?;
    eprintln!("sheaf bench: wrote {} files to {} (report.md, report.csv, report.json, samples.csv, plots)", files.len(), out.display());
    Ok(())
}

fn demo(a: DemoArgs) -> Result<(), Error> {
    stop_scratch_on_interrupt("demo");
    if !(a.scale > 0.0 && a.scale <= 100.0) {
        return Err(Error::invalid(format!("--scale {}: give a TPC-H scale factor such as 0.1 or 1", a.scale)));
    }
    let codecs = a.compression.split(',').map(|c| CodecSpec::parse(c.trim())).collect::<Result<Vec<_>, _>>()?;
    let opts = sheaf_bench::demo::DemoOptions { scale: a.scale, codecs, stripes: a.stripes.max(1) };
    let rows = unless_interrupted(sheaf_bench::demo::run(&opts, &|n| eprintln!("sheaf demo: {n}")))?;
    if a.json {
        println!("{}", serde_json::to_string(&rows).expect("rows serialise"));
    } else {
        println!(
            "{:<12} {:>10} {:>8} {:>11} {:>7} {:>11} {:>11} {:>6}",
            "codec", "backup s", "CPU %", "size", "ratio", "restore s", "restore CPU", "rows"
        );
        for r in &rows {
            println!(
                "{:<12} {:>10.2} {:>7.0}% {:>11} {:>7.2} {:>11.2} {:>10.0}% {:>6}",
                r.codec,
                r.backup_seconds,
                r.backup_cpu_pct,
                format_size(r.size_bytes),
                r.ratio,
                r.restore_seconds,
                r.restore_cpu_pct,
                if r.rows_match { "ok" } else { "DIFFER" }
            );
        }
        if let Some(r) = rows.first() {
            println!("(each backup read {} from the cluster; CPU % is of all {} cores)", format_size(r.bytes_read), sheaf_core::backup::available_cores());
        }
    }
    if rows.iter().any(|r| !r.rows_match) {
        return Err(Error::corrupt("a restored cluster's row counts differ from the source's"));
    }
    Ok(())
}

fn open_catalog(path: Option<&std::path::Path>) -> Result<sheaf_catalog::Catalog, Error> {
    sheaf_catalog::Catalog::open(path).map_err(|e| Error::new(ErrorKind::Io, e.to_string()))
}

fn list(path: Option<&std::path::Path>, a: ListArgs) -> Result<(), Error> {
    let c = open_catalog(path)?;
    let runs = c.list(a.limit).map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?;
    if a.json {
        println!("{}", serde_json::to_string(&runs).expect("runs serialise"));
        return Ok(());
    }
    println!("{:>5}  {:<8} {:<9} {:<20} {:<12} {:>10} {:>9} {:>6} {:>8}  backup id / error", "id", "op", "status", "started (UTC)", "codec", "read", "seconds", "ratio", "MiB/s");
    for r in &runs {
        println!(
            "{:>5}  {:<8} {:<9} {:<20} {:<12} {:>10} {:>9} {:>6} {:>8}  {}",
            r.id,
            r.operation,
            r.status,
            r.started_at,
            r.compression.as_deref().unwrap_or("-"),
            r.bytes_read.map(|b| format_size(b as u64)).unwrap_or_else(|| "-".into()),
            r.seconds.map(|s| format!("{s:.2}")).unwrap_or_else(|| "-".into()),
            r.ratio.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into()),
            r.mib_per_second.map(|x| format!("{x:.0}")).unwrap_or_else(|| "-".into()),
            r.error.as_deref().or(r.backup_id.as_deref()).unwrap_or("")
        );
    }
    Ok(())
}

fn lab(a: LabArgs, settings: &Settings) -> Result<(), Error> {
    if let Some(url) = &a.db_url {
        let opts = sheaf_bench::dblab::DbLabOptions { rows: a.rows.max(100), repeat: a.repeat.max(1), accesses: a.accesses.max(1), table: a.relation.clone() };
        let rows = sheaf_bench::dblab::run(url, &opts)?;
        let v = serde_json::json!({ "source": sheaf_pg::server::redact(url), "table": opts.table, "rows_in_table": opts.rows, "repeat": opts.repeat, "database_lab": rows });
        if let Some(out) = &a.out {
            std::fs::create_dir_all(out).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", out.display()), e))?;
            let p = out.join("dblab.json");
            std::fs::write(&p, serde_json::to_string_pretty(&v).expect("serialises")).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", p.display()), e))?;
        }
        if a.json {
            println!("{v}");
        } else {
            let what = opts.table.as_deref().map_or_else(|| "rows of generated wide text".to_string(), |t| format!("rows at most of {t}"));
            println!("database lab on {}: {} {what}, warm cache, median of {}", sheaf_pg::server::redact(url), opts.rows, opts.repeat);
            print!("{}", sheaf_bench::dblab::table(&rows));
            println!("(× = as a multiple of the uncompressed table, STORAGE EXTERNAL)");
        }
        return Ok(());
    }
    let sample = parse_size(&a.sample)? as usize / sheaf_bench::lab::PAGE * sheaf_bench::lab::PAGE;
    if sample == 0 {
        return Err(Error::invalid(format!("--sample {}: give at least 8KiB", a.sample)));
    }
    let read_file = |path: &std::path::Path| -> Result<Vec<u8>, Error> {
        use std::io::Read;
        let f = std::fs::File::open(path).map_err(|e| Error::io(ErrorKind::Source, format!("cannot open {}", path.display()), e))?;
        let mut v = Vec::new();
        f.take(sample as u64).read_to_end(&mut v).map_err(|e| Error::io(ErrorKind::Source, format!("cannot read {}", path.display()), e))?;
        Ok(v)
    };
    let (what, mut pages) = match (&a.file, &a.url, a.stripes.is_empty()) {
        (Some(f), _, _) => (f.display().to_string(), read_file(f)?),
        (None, Some(url), _) => {
            let rel = a.relation.as_deref().ok_or_else(|| Error::invalid("--url needs --relation SCHEMA.NAME"))?;
            let path = sheaf_pg::server::Server::connect(url)?.relation_file(rel)?;
            (format!("{rel} ({})", path.display()), read_file(&path)?)
        }
        (None, None, false) => {
            let rel = a.relation.as_deref().ok_or_else(|| Error::invalid("a backup needs --relation NAME"))?;
            let set = open_stripes(&a.stripes, &a.s3, settings, &a.repo.keys, None)?;
            let dbs = sheaf_pg::extract::catalog(&set)?;
            let (db, r) = sheaf_pg::extract::find(&dbs, rel, a.database.as_deref())?;
            let mut f = set.file(sheaf_pg::extract::main_fork(&set, r)?)?;
            let n = (f.size() as usize).min(sample);
            let mut v = vec![0u8; n];
            f.read_at(0, &mut v)?;
            (format!("{}.{} in database {} of backup {}", r.schema, r.name, db.name, set.manifest.backup_id), v)
        }
        (None, None, true) => return Err(Error::invalid("give the pages: --file PATH, --url URL --relation NAME, or a backup's STRIPE with --relation NAME")),
    };
    pages.truncate(pages.len() / sheaf_bench::lab::PAGE * sheaf_bench::lab::PAGE);
    if pages.is_empty() {
        return Err(Error::invalid(format!("{what} holds no whole 8 KiB page")));
    }
    let mut opts = sheaf_bench::lab::LabOptions { repeat: a.repeat.max(1), threads: a.threads.max(1), accesses: a.accesses.max(1), ..Default::default() };
    if let Some(list) = &a.compression {
        opts.codecs = list.split(',').map(CodecSpec::parse).collect::<Result<_, _>>()?;
    }
    if let Some(list) = &a.unit {
        opts.units = list.split(',').map(|u| parse_size(u).map(|b| b as usize)).collect::<Result<_, _>>()?;
    }
    let rows = sheaf_bench::lab::run(&pages, &opts)?;
    let v = serde_json::json!({ "source": what, "sample_bytes": pages.len(), "threads": opts.threads, "repeat": opts.repeat, "rows": rows });
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", out.display()), e))?;
        let write = |name: &str, text: String| {
            let p = out.join(name);
            std::fs::write(&p, text).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", p.display()), e))
        };
        write("lab.json", serde_json::to_string_pretty(&v).expect("serialises"))?;
        let mut csv = String::from("codec,unit,ratio,scan_mb_s,scan_x,fetch_p50_us,fetch_p99_us,fetch_x,update_us,update_x\n");
        for r in &rows {
            csv.push_str(&format!(
                "{},{},{:.4},{:.1},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}\n",
                r.codec, r.unit, r.ratio, r.scan_mb_s, r.scan_x, r.fetch_p50_us, r.fetch_p99_us, r.fetch_x, r.update_us, r.update_x
            ));
        }
        write("lab.csv", csv)?;
        sheaf_bench::plot::write_lab_plots(&rows, out)?;
    }
    if a.json {
        println!("{v}");
    } else {
        println!("{what}: {} of pages ({} pages), scan on {} core{}, median of {}", format_size(pages.len() as u64), pages.len() / sheaf_bench::lab::PAGE, opts.threads, if opts.threads == 1 { "" } else { "s" }, opts.repeat);
        print!("{}", sheaf_bench::lab::table(&rows));
        println!("(× = cost as a multiple of raw pages: copying them for scan and fetch, changing one in place for update)");
    }
    Ok(())
}

fn extract(a: ExtractArgs, settings: &Settings) -> Result<(), Error> {
    let set = if a.stripes.is_empty() {
        repo::open_backup(&a.repo, &a.s3, settings, &a.set, None)?
    } else {
        if a.repo.repo.is_some() {
            return Err(Error::invalid("give stripes or --repo, not both"));
        }
        open_stripes(&a.stripes, &a.s3, settings, &a.repo.keys, None)?
    };
    let opts = sheaf_pg::extract::ExtractOptions { relation: a.relation, database: a.database, block: a.block, dest: a.to.clone() };
    let r = sheaf_pg::extract::extract(&set, &opts)?;
    if a.json {
        println!("{}", serde_json::to_value(&r).expect("report serialises"));
    } else {
        let read = format!("read {} of the set's {} in {:.3} s", format_size(r.bytes_read), format_size(r.set_bytes), r.seconds);
        match &r.page {
            Some(p) => println!(
                "page {} of {} (database {}, {}) to {}: LSN {}, checksum {}; {read}",
                p.block,
                r.relation,
                r.database,
                r.path,
                a.to.join(&r.files[0]).display(),
                p.lsn,
                p.checksum
            ),
            None => println!(
                "extracted {} (database {}, {}): {} file{} ({}) to {}; {read}",
                r.relation,
                r.database,
                r.path,
                r.files.len(),
                if r.files.len() == 1 { "" } else { "s" },
                format_size(r.bytes_written),
                a.to.display()
            ),
        }
    }
    if let Some(p) = r.page.as_ref().filter(|p| p.checksum.starts_with("mismatch")) {
        return Err(Error::corrupt(format!("page {} of {}: checksum {} (the page is written for inspection)", p.block, r.relation, p.checksum)));
    }
    Ok(())
}

fn show(path: Option<&std::path::Path>, a: ShowArgs) -> Result<(), Error> {
    let c = open_catalog(path)?;
    let run = c
        .show(a.id, true)
        .map_err(|e| Error::new(ErrorKind::Io, e.to_string()))?
        .ok_or_else(|| Error::invalid(format!("no run {} in {}: see `sheaf list`", a.id, c.path().display())))?;
    let v = serde_json::to_value(&run).expect("run serialises");
    if a.json {
        println!("{v}");
    } else {
        for (k, val) in v.as_object().expect("an object") {
            if k != "details" && !val.is_null() {
                println!("{k:>20}: {}", val.as_str().map(str::to_string).unwrap_or_else(|| val.to_string()));
            }
        }
        // From the full report: what the columns do not hold.
        for k in ["encryption", "auto_levels"] {
            if let Some(val) = v.pointer(&format!("/details/{k}")).filter(|x| !x.is_null()) {
                println!("{k:>20}: {}", val.as_str().map(str::to_string).unwrap_or_else(|| val.to_string()));
            }
        }
    }
    Ok(())
}
