//! A bench plan: the same settings as the flags, in a TOML file, so that a sweep can be kept,
//! reviewed and rerun. Flags given on the command line win over the plan; the plan wins over the
//! defaults.
//!
//! ```toml
//! dataset = "tpch:1"            # or: source = "/srv/data" / "postgres://..."
//! compression = ["lz4", "deflate:1", "zstd:low", "zstd:medium", "zstd:high"]
//! stripes = [1, 2]
//! transfer-size = ["1MiB"]
//! buffer-count = ["default"]
//! target = ["nul", "/mnt/backup"]
//! repeat = 3
//! peers = ["pg_basebackup", "pgbackrest"]
//! type = ["full", "incr"]       # incrementals: into a repository, after --change of the pages
//! change = "5%"
//! drop-caches = false
//! out = "bench-report"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sheaf_core::manifest::BackupType;
use sheaf_core::{Error, ErrorKind, Result};

use crate::matrix::{BenchTarget, Matrix};
use crate::peers::Peer;
use crate::runner::Incremental;
use crate::source::Source;

/// Default codecs: the seeds' set.
pub const DEFAULT_COMPRESSION: &str = "lz4,deflate:1,zstd:low,zstd:medium,zstd:high";
/// Default stripe counts.
pub const DEFAULT_STRIPES: &str = "1";
/// Default transfer sizes.
pub const DEFAULT_TRANSFER_SIZE: &str = "1MiB";
/// Default buffer counts.
pub const DEFAULT_BUFFER_COUNT: &str = "default";
/// Default targets.
pub const DEFAULT_TARGET: &str = "nul";
/// Default repeats.
pub const DEFAULT_REPEAT: usize = 3;
/// Default share of the pages changed before an incremental, in percent.
pub const DEFAULT_CHANGE_PERCENT: f64 = 5.0;

/// One list item: a number or a string.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Item {
    /// `27`.
    Int(i64),
    /// `"1MiB"`.
    Text(String),
}

/// A value that is a list (or one item, or a comma-separated string).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum List {
    /// One item.
    One(Item),
    /// Several.
    Many(Vec<Item>),
}

impl List {
    /// The comma-separated form the flags use.
    pub fn joined(&self) -> String {
        let text = |i: &Item| match i {
            Item::Int(n) => n.to_string(),
            Item::Text(s) => s.clone(),
        };
        match self {
            List::One(i) => text(i),
            List::Many(v) => v.iter().map(text).collect::<Vec<_>>().join(","),
        }
    }
}

/// The plan file.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Plan {
    /// A directory or postgres:// URL.
    pub source: Option<String>,
    /// `tpch:SCALE`.
    pub dataset: Option<String>,
    /// Codecs.
    pub compression: Option<List>,
    /// Stripe counts.
    pub stripes: Option<List>,
    /// Transfer sizes.
    #[serde(alias = "transfer_size")]
    pub transfer_size: Option<List>,
    /// Buffer counts.
    #[serde(alias = "buffer_count")]
    pub buffer_count: Option<List>,
    /// Targets.
    pub target: Option<List>,
    /// Repeats.
    pub repeat: Option<usize>,
    /// Peers.
    pub peers: Option<List>,
    /// Drop caches before each operation.
    #[serde(alias = "drop_caches")]
    pub drop_caches: Option<bool>,
    /// Report directory.
    pub out: Option<PathBuf>,
    /// Where restores go.
    #[serde(alias = "restore_dir")]
    pub restore_dir: Option<PathBuf>,
    /// Backup types.
    #[serde(rename = "type")]
    pub backup_type: Option<List>,
    /// The change before each incremental.
    pub change: Option<Item>,
}

impl Plan {
    /// Read a plan file.
    ///
    /// # Errors
    /// The file unreadable, or not a plan (TOML's message gives the line and the key).
    pub fn load(path: &Path) -> Result<Plan> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot read plan {}", path.display()), e))?;
        Plan::parse(&text).map_err(|e| Error::invalid(format!("plan {}: {e}", path.display())))
    }

    /// Parse a plan's text.
    ///
    /// # Errors
    /// TOML errors, unknown keys among them.
    pub fn parse(text: &str) -> std::result::Result<Plan, toml::de::Error> {
        toml::from_str(text)
    }
}

/// The flags as given (`None`: not on the command line).
#[derive(Clone, Debug, Default)]
pub struct Flags {
    /// Positional source.
    pub source: Option<String>,
    /// `--dataset`.
    pub dataset: Option<String>,
    /// `--compression`.
    pub compression: Option<String>,
    /// `--stripes`.
    pub stripes: Option<String>,
    /// `--transfer-size`.
    pub transfer_size: Option<String>,
    /// `--buffer-count`.
    pub buffer_count: Option<String>,
    /// `--target`.
    pub target: Option<String>,
    /// `--repeat`.
    pub repeat: Option<usize>,
    /// `--peers`.
    pub peers: Option<String>,
    /// `--drop-caches` (false: not given).
    pub drop_caches: bool,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// `--restore-dir`.
    pub restore_dir: Option<PathBuf>,
    /// `--type`.
    pub backup_type: Option<String>,
    /// `--change`.
    pub change: Option<String>,
}

/// Flags and plan merged.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The sweep.
    pub matrix: Matrix,
    /// The source.
    pub source: Source,
    /// Peers.
    pub peers: Vec<Peer>,
    /// Drop caches.
    pub drop_caches: bool,
    /// Report directory, if one was named.
    pub out: Option<PathBuf>,
    /// Where restores go.
    pub restore_dir: Option<PathBuf>,
    /// Incrementals to measure, if asked.
    pub incremental: Option<Incremental>,
}

/// `--type` and `--change` for the source and targets: what incrementals to measure, if any.
fn incremental(types: &str, change: Option<String>, source: &Source, matrix: &Matrix) -> Result<Option<Incremental>> {
    // The full once; the others in order, repeats kept (`full,incr,incr,incr`: a chain of three).
    let (mut full_rows, mut after, mut rewind) = (false, Vec::new(), false);
    for t in types.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if t.eq_ignore_ascii_case("rewind") {
            rewind = true;
            continue;
        }
        match BackupType::parse(t).map_err(|e| Error::invalid(format!("--type: {} (or rewind: a former primary put back)", e.message())))? {
            BackupType::Full => full_rows = true,
            t => after.push(t),
        }
    }
    if after.is_empty() && !rewind {
        if change.is_some() {
            return Err(Error::invalid("--change is the change before an incremental: give --type full,incr (or diff) with it"));
        }
        return Ok(None);
    }
    if !matches!(source, Source::Tpch(_)) {
        return Err(Error::invalid(
            "--type diff, incr or rewind changes the source between the full and the incremental (--change): it runs on --dataset tpch:SCALE, a cluster the bench makes and removes, never on yours",
        ));
    }
    if !matches!(matrix.target.as_slice(), [BenchTarget::Dir(d)] if d.len() == 1) {
        return Err(Error::invalid("--type diff, incr or rewind backs up into one repository: give one directory in --target (not nul, s3:// or DIR+DIR)"));
    }
    let change_percent = change.as_deref().map_or(Ok(DEFAULT_CHANGE_PERCENT), crate::change::parse_percent)?;
    Ok(Some(Incremental { full_rows, types: after, change_percent, rewind }))
}

/// Merge: flags over the plan over the defaults.
///
/// # Errors
/// Any value that does not parse, named.
pub fn resolve(flags: Flags, plan: Plan) -> Result<Resolved> {
    let pick = |flag: Option<String>, planned: Option<List>, default: &str| flag.or_else(|| planned.map(|l| l.joined())).unwrap_or_else(|| default.to_string());
    // A source on the command line replaces the plan's source or dataset, whichever it had.
    let (source, dataset) = if flags.source.is_some() || flags.dataset.is_some() { (flags.source, flags.dataset) } else { (plan.source, plan.dataset) };
    let matrix = Matrix::from_flags(
        &pick(flags.compression, plan.compression, DEFAULT_COMPRESSION),
        &pick(flags.stripes, plan.stripes, DEFAULT_STRIPES),
        &pick(flags.transfer_size, plan.transfer_size, DEFAULT_TRANSFER_SIZE),
        &pick(flags.buffer_count, plan.buffer_count, DEFAULT_BUFFER_COUNT),
        &pick(flags.target, plan.target, DEFAULT_TARGET),
        flags.repeat.or(plan.repeat).unwrap_or(DEFAULT_REPEAT),
    )?;
    let source = Source::from_args(source.as_deref(), dataset.as_deref())?;
    let change = flags.change.or_else(|| {
        plan.change.map(|c| match c {
            Item::Int(n) => n.to_string(),
            Item::Text(t) => t,
        })
    });
    let incremental = incremental(&pick(flags.backup_type, plan.backup_type, "full"), change, &source, &matrix)?;
    Ok(Resolved {
        incremental,
        matrix,
        source,
        peers: Peer::parse_list(&pick(flags.peers, plan.peers, "none"))?,
        drop_caches: flags.drop_caches || plan.drop_caches.unwrap_or(false),
        out: flags.out.or(plan.out),
        restore_dir: flags.restore_dir.or(plan.restore_dir),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLAN: &str = r#"
dataset = "tpch:0.01"
compression = ["lz4", "zstd:high"]
stripes = [1, 2]
transfer-size = "64KiB,1MiB"
buffer_count = [7, "default"]
target = ["nul", "/mnt/a+/mnt/b"]
repeat = 2
peers = ["pg_basebackup"]
drop-caches = true
out = "report"
"#;

    #[test]
    fn a_plan_gives_the_whole_sweep() {
        let r = resolve(Flags::default(), Plan::parse(PLAN).unwrap()).unwrap();
        assert_eq!(r.source, Source::Tpch(0.01));
        assert_eq!(r.matrix.compression.iter().map(|c| c.to_string()).collect::<Vec<_>>(), ["lz4", "zstd:high"]);
        assert_eq!(r.matrix.stripes, [1, 2]);
        assert_eq!(r.matrix.transfer_size, [65536, 1 << 20]);
        assert_eq!(r.matrix.buffer_count, [Some(7), None]);
        assert_eq!(r.matrix.target, [BenchTarget::Nul, BenchTarget::Dir(vec!["/mnt/a".into(), "/mnt/b".into()])]);
        assert_eq!(r.matrix.repeat, 2);
        assert_eq!(r.peers, [Peer::PgBasebackup]);
        assert!(r.drop_caches);
        assert_eq!(r.out, Some(PathBuf::from("report")));
    }

    #[test]
    fn flags_win_over_the_plan_and_the_plan_over_defaults() {
        let flags = Flags { source: Some("/srv/data".into()), stripes: Some("4".into()), repeat: Some(1), ..Flags::default() };
        let r = resolve(flags, Plan::parse(PLAN).unwrap()).unwrap();
        assert_eq!(r.source, Source::Path("/srv/data".into()), "a source on the command line replaces the plan's dataset");
        assert_eq!(r.matrix.stripes, [4]);
        assert_eq!(r.matrix.repeat, 1);
        assert_eq!(r.matrix.compression.len(), 2, "from the plan");
        let r = resolve(Flags { dataset: Some("tpch:1".into()), ..Flags::default() }, Plan::default()).unwrap();
        assert_eq!(r.matrix.compression.len(), 5, "defaults: the seeds' codecs");
        assert_eq!((r.matrix.repeat, r.matrix.target.clone(), r.peers.clone()), (3, vec![BenchTarget::Nul], vec![]));
    }

    #[test]
    fn mistakes_in_a_plan_are_named() {
        let e = Plan::parse("stripe = [1]").unwrap_err().to_string();
        assert!(e.contains("unknown field `stripe`"), "{e}");
        let e = resolve(Flags::default(), Plan::parse("dataset = \"tpch:1\"\nstripes = [0]").unwrap()).unwrap_err().to_string();
        assert!(e.contains("'0' is not a stripe count"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = Plan::load(&dir.path().join("missing.toml")).unwrap_err().to_string();
        assert!(e.contains("cannot read plan"), "{e}");
    }

    #[test]
    fn incrementals_need_a_cluster_of_the_bench_and_one_directory() {
        let plan = Plan::parse("dataset = \"tpch:0.1\"\ntarget = \"/var/tmp\"\ntype = [\"full\", \"incr\"]\nchange = 2").unwrap();
        let r = resolve(Flags::default(), plan.clone()).unwrap();
        assert_eq!(r.incremental, Some(Incremental { full_rows: true, types: vec![BackupType::Incr], change_percent: 2.0, rewind: false }));
        let flags = Flags { backup_type: Some("diff,incr,incr".into()), change: Some("10%".into()), ..Flags::default() };
        let inc = resolve(flags, plan.clone()).unwrap().incremental.unwrap();
        assert_eq!(inc, Incremental { full_rows: false, types: vec![BackupType::Diff, BackupType::Incr, BackupType::Incr], change_percent: 10.0, rewind: false });
        assert_eq!(inc.labels(), ["diff", "incr", "incr 2"], "a chain of incrementals, each a row");
        // A former primary put back, alone or after a chain.
        let inc = resolve(Flags { backup_type: Some("full,Rewind".into()), ..Flags::default() }, plan.clone()).unwrap().incremental.unwrap();
        assert_eq!(inc, Incremental { full_rows: true, types: vec![], change_percent: 2.0, rewind: true });
        assert!(inc.cycles(), "the fulls are rows");
        let inc = resolve(Flags { backup_type: Some("rewind".into()), ..Flags::default() }, plan.clone()).unwrap().incremental.unwrap();
        assert!(inc.rewind && !inc.cycles(), "the failover alone: no cycles of backups beside it");
        let r = resolve(Flags { backup_type: Some("full".into()), ..Flags::default() }, Plan { change: None, ..plan.clone() }).unwrap();
        assert_eq!(r.incremental, None, "full alone is the plain sweep");
        for (flags, needle) in [
            (Flags { source: Some("/srv/data".into()), ..Flags::default() }, "--dataset tpch:SCALE"),
            (Flags { target: Some("nul".into()), ..Flags::default() }, "one directory"),
            (Flags { target: Some("/a,/b".into()), ..Flags::default() }, "one directory"),
            (Flags { change: Some("80%".into()), ..Flags::default() }, "at most 50"),
            (Flags { backup_type: Some("full,weekly".into()), ..Flags::default() }, "--type: backup type 'weekly'"),
            (Flags { backup_type: Some("rewind".into()), target: Some("nul".into()), ..Flags::default() }, "one directory"),
            (Flags { backup_type: Some("full".into()), change: Some("5%".into()), ..Flags::default() }, "give --type full,incr"),
        ] {
            let e = resolve(flags, plan.clone()).unwrap_err().to_string();
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }
}
