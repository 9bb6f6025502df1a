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
//! drop-caches = false
//! out = "bench-report"
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sheaf_core::{Error, ErrorKind, Result};

use crate::matrix::Matrix;
use crate::peers::Peer;
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
    Ok(Resolved {
        matrix,
        source: Source::from_args(source.as_deref(), dataset.as_deref())?,
        peers: Peer::parse_list(&pick(flags.peers, plan.peers, "none"))?,
        drop_caches: flags.drop_caches || plan.drop_caches.unwrap_or(false),
        out: flags.out.or(plan.out),
        restore_dir: flags.restore_dir.or(plan.restore_dir),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matrix::BenchTarget;

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
}
