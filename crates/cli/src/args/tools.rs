//! The arguments of the tools around the backups: generate, demo, bench, load-tpch, lab, and the
//! history catalog's list and show.

use std::path::PathBuf;

use clap::Args;

use super::shared::{KeyArgs, RepoArg, S3Args};

#[derive(Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args)]
pub struct ManArgs {
    /// The folder to write the pages into (made if missing): sheaf.1, and sheaf-COMMAND.1 for
    /// each command (sheaf-key-add.1 for a command's own commands).
    #[arg(long = "to", value_name = "DIR")]
    pub to: PathBuf,
}

#[derive(Args)]
pub struct GenerateArgs {
    /// Directory to create; refused if it exists and is not empty.
    pub dir: PathBuf,
    /// Total bytes.
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub size: String,
    /// Number of large files (plus 100 small ones).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub files: u64,
    /// Share of the data that repeats earlier data, 0.0 (incompressible) .. 1.0; 0.6 compresses
    /// about 2.5:1 with zstd:low.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.6)]
    pub repeat: f64,
    /// Seed: the same seed gives the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Many small files instead, COUNTxSIZE (e.g. 100000x8KiB), 1,000 to a folder; --size and
    /// --files do not apply.
    #[arg(long, value_name = "COUNTxSIZE")]
    pub small: Option<String>,
}

#[derive(Args)]
pub struct DemoArgs {
    /// TPC-H scale factor: 0.1 is about 100 MB of data, 1 about 1 GB.
    #[arg(long, default_value_t = 0.1)]
    pub scale: f64,
    /// Codecs to compare, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "lz4,deflate:1,zstd:low,zstd:medium,zstd:high")]
    pub compression: String,
    /// Stripes per backup.
    #[arg(long, default_value_t = 2)]
    pub stripes: usize,
    /// Print the rows as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The database a bench measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// PostgreSQL (or a directory): pg_basebackup and pgBackRest are its peers.
    Postgres,
    /// MariaDB: a mariadb:// URL, or --dataset sysbench:TABLESxROWS (default sysbench:4x250000,
    /// about 240 MB); mariadb-backup is its peer.
    Mariadb,
}

#[derive(Args)]
pub struct BenchArgs {
    /// What to back up: a directory, a postgres:// URL or a mariadb:// URL. Or use --dataset.
    pub source: Option<String>,
    /// tpch:SCALE: a throwaway PostgreSQL cluster loaded with TPC-H (1 is about 1.4 GB on disk),
    /// removed afterwards. sysbench:TABLESxROWS: a throwaway MariaDB server loaded by sysbench
    /// (10x1000000 is about 2.4 GB). files:COUNTxSIZE: that many generated files (seeded text,
    /// 1,000 to a folder, beside the first directory target), e.g. files:100000x8KiB; measure it
    /// with --peers tar.
    #[arg(long, value_name = "tpch:SCALE|sysbench:TABLESxROWS|files:COUNTxSIZE")]
    pub dataset: Option<String>,
    /// The database measured: postgres, or mariadb (a MariaDB server, by default a throwaway one
    /// loaded by sysbench, with mariadb-backup as the peer unless --peers says otherwise).
    #[arg(long, value_enum, default_value = "postgres")]
    pub engine: Engine,
    /// A TOML plan with any of these settings; flags win over it.
    #[arg(long, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Codecs, comma-separated [default: lz4,deflate:1,zstd:low,zstd:medium,zstd:high].
    #[arg(long, short = 'c', value_name = "LIST")]
    pub compression: Option<String>,
    /// Stripe counts [default: 1].
    #[arg(long, value_name = "LIST")]
    pub stripes: Option<String>,
    /// Transfer sizes (MAXTRANSFERSIZE) [default: 1MiB].
    #[arg(long, value_name = "LIST")]
    pub transfer_size: Option<String>,
    /// Buffer counts (BUFFERCOUNT), or `default` [default: default].
    #[arg(long, value_name = "LIST")]
    pub buffer_count: Option<String>,
    /// Targets: `nul` (read + compress only), existing directories (the bench works in a folder
    /// of its own inside each, removed after), DIR+DIR to deal the stripes over several
    /// directories (volumes), and s3://BUCKET/PREFIX (objects under a prefix of their own, removed
    /// after; reached as AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ... say) [default: nul].
    #[arg(long, value_name = "LIST")]
    pub target: Option<String>,
    /// Runs per permutation [default: 3].
    #[arg(long, value_name = "N")]
    pub repeat: Option<usize>,
    /// Peers to measure in the same run, when installed: pg_basebackup (server- and client-side
    /// compression) and pgbackrest (needs --dataset tpch:SCALE, whose WAL it archives) for
    /// PostgreSQL sources; mariadb-backup (--parallel --stream=mbstream through the codec's tool,
    /// restored with mbstream -x and --prepare) for MariaDB sources; tar (piped through zstd, lz4
    /// or gzip at the same level and threads) for directory sources.
    #[arg(long, value_name = "LIST")]
    pub peers: Option<String>,
    /// Backup types: full, and diff or incr to measure incrementals. With diff or incr each
    /// permutation (and each peer) takes a full into a repository in the --target directory, then
    /// for each type a --change of the pages and that backup, each restored (an incremental
    /// through its chain) and timed; `full,incr,incr,incr` measures a chain of three. Needs
    /// --dataset tpch:SCALE (the change writes to the source) and one directory target. Peers:
    /// pgbackrest's diff and incr, and pg_basebackup --incremental with pg_combinebackup
    /// (PostgreSQL 17+, SHEAF_PG=18; beside -c none). `rewind` adds a former primary put back:
    /// a primary and its standby cloned from the cluster, the standby promoted and changed, then
    /// pg_rewind against it and sheaf restore --delta from the repository, each timed on a copy of
    /// the old primary [default: full].
    #[arg(long = "type", value_name = "LIST")]
    pub backup_type: Option<String>,
    /// The change before each incremental: updates touching this share of lineitem's and orders'
    /// pages, half scattered and half in one run [default: 5%].
    #[arg(long, value_name = "PERCENT")]
    pub change: Option<String>,
    /// Drop the page cache before every operation (root; not in most containers).
    #[arg(long)]
    pub drop_caches: bool,
    /// Directory for report.csv, report.json, report.md, samples.csv and the plots
    /// [default: ./sheaf-bench-<UTC time>].
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Where restores go (a scratch folder in it, removed after) [default: beside the stripes].
    #[arg(long, value_name = "DIR")]
    pub restore_dir: Option<PathBuf>,
    /// Print the results as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Run nothing: write the table, report files and plots again from the report.json of an
    /// earlier bench (into --out).
    #[arg(long, value_name = "REPORT_JSON", conflicts_with_all = ["source", "dataset", "plan"])]
    pub from: Option<PathBuf>,
    /// Encrypted runs: sheaf's backups, verifies and restores use this secret (peers do not
    /// encrypt).
    #[command(flatten)]
    pub keys: KeyArgs,
}

#[derive(Args)]
pub struct LoadTpchArgs {
    /// libpq URL of the database to load into (tables are dropped and created).
    pub url: String,
    /// TPC-H scale factor: 1 is about 1 GB of data.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
}

#[derive(Args)]
pub struct LabArgs {
    /// A backup's stripes (files or s3:// objects) to take the relation from (with --relation).
    #[arg(value_name = "STRIPE")]
    pub stripes: Vec<String>,
    /// A relation file (a PostgreSQL data file, or any file of 8 KiB pages).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["stripes", "url", "relation", "database"])]
    pub file: Option<PathBuf>,
    /// A running server (on this host: its files are read directly), with --relation.
    #[arg(long, value_name = "URL", conflicts_with = "stripes")]
    pub url: Option<String>,
    /// The database lab instead, on this server: a table made three times (TOAST compression
    /// pglz, lz4, and none: STORAGE EXTERNAL) in the URL's database and dropped after, from up to
    /// --rows rows of --relation (your table) or generated wide text; a full scan, seeks by key
    /// and in-place updates timed on each.
    #[arg(long, value_name = "URL", conflicts_with_all = ["stripes", "file", "url", "compression", "unit"])]
    pub db_url: Option<String>,
    /// Database lab: rows copied from --relation, or generated (about 2.3 KB of text each).
    #[arg(long, value_name = "N", default_value_t = 50_000)]
    pub rows: u32,
    /// The relation, SCHEMA.NAME (with --url or stripes).
    #[arg(long, value_name = "NAME")]
    pub relation: Option<String>,
    /// Its database, for a backup (default: the one that has it).
    #[arg(long, value_name = "DB")]
    pub database: Option<String>,
    /// Codecs to compare with raw [default: lz4,deflate:1,zstd:low,zstd:medium,zstd:high].
    #[arg(long, short = 'c', value_name = "LIST")]
    pub compression: Option<String>,
    /// Unit sizes, each a multiple of 8 KiB [default: 8KiB,64KiB,1MiB].
    #[arg(long, value_name = "LIST")]
    pub unit: Option<String>,
    /// How much of the relation to measure on, from its start (held in memory).
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub sample: String,
    /// Timed runs of each measurement; the median is kept.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub repeat: usize,
    /// Cores for the full scan.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub threads: usize,
    /// Random pages fetched, and updated, per run.
    #[arg(long, value_name = "N", default_value_t = 2000)]
    pub accesses: usize,
    /// Also write lab.csv, lab.json and the plots (lab-cost, lab-fetch: SVG and PNG) into DIR.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub repo: RepoArg,
    #[command(flatten)]
    pub s3: S3Args,
}

#[derive(Args)]
pub struct ListArgs {
    /// How many runs.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct ShowArgs {
    /// The run's number (as `sheaf list` shows it), or a backup's id: its id in the repository
    /// (20261129-103307.323Z, as `sheaf info` lists it) or its set id (the 32 hex digits a backup
    /// prints); either shows the backup's run.
    pub id: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `sheaf version`.
#[derive(Args)]
pub struct VersionArgs {
    /// Also the commit and build date, the codecs and their libraries, ISA-L, the crypto provider.
    #[arg(long, short)]
    pub verbose: bool,
    /// As JSON.
    #[arg(long)]
    pub json: bool,
}
