//! What a bench is asked to do: the sweep, the source, the peers, and where its work goes.

use std::path::PathBuf;

use sheaf_core::manifest::BackupType;

use crate::matrix::Matrix;
use crate::peers::Peer;
use crate::source::Source;

/// Everything a bench needs.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// The sweep.
    pub matrix: Matrix,
    /// What to back up.
    pub source: Source,
    /// Peers to measure on the same source.
    pub peers: Vec<Peer>,
    /// Drop the page cache before every operation (root only).
    pub drop_caches: bool,
    /// The sheaf executable whose operations are measured.
    pub sheaf: PathBuf,
    /// The catalog the runs are recorded in (else the children's default).
    pub catalog: Option<PathBuf>,
    /// Where restores go (else a scratch folder beside each target's stripes).
    pub restore_dir: Option<PathBuf>,
    /// Flags that give sheaf's runs their encryption secret (a key or passphrase file), if any.
    pub key_args: Vec<String>,
    /// Incrementals to measure (`--type` with diff or incr), or `None`: full backups only.
    pub incremental: Option<Incremental>,
    /// Asked (Ctrl-C, SIGTERM), the bench stops: the operation being measured is ended, no other
    /// starts, and the bench unwinds, stopping its servers and removing its work folders.
    pub stop: sheaf_core::stop::Stop,
}

/// Incrementals measured: each permutation (and each peer) takes a full into a repository, then
/// for each type asked the change and that backup, each restored (its chain) and timed.
#[derive(Clone, Debug, PartialEq)]
pub struct Incremental {
    /// Whether the fulls are rows of the report too (`full` in `--type`).
    pub full_rows: bool,
    /// The types taken after the full, in order, each after a change of its own (repeats make a
    /// longer chain).
    pub types: Vec<BackupType>,
    /// The share of the pages each change touches, in percent.
    pub change_percent: f64,
    /// A former primary put back (`rewind` in `--type`): per permutation and repeat, a primary
    /// and its standby of the bench's data, the standby promoted and changed, the old primary
    /// put back by `pg_rewind` and by `sheaf restore --delta` (see `runner::rewind`).
    pub rewind: bool,
}

impl Incremental {
    /// Whether permutations and peers take cycles of backups (a full, then the types): not for
    /// `--type rewind` alone, whose failover takes backups of its own.
    pub fn cycles(&self) -> bool {
        self.full_rows || !self.types.is_empty()
    }

    /// How the report names each of `types`: the type, numbered from its second time on (`incr`,
    /// `incr 2`, ...: the second incremental of the chain).
    pub fn labels(&self) -> Vec<String> {
        self.types
            .iter()
            .enumerate()
            .map(|(i, t)| match self.types[..=i].iter().filter(|x| *x == t).count() {
                1 => t.to_string(),
                n => format!("{t} {n}"),
            })
            .collect()
    }
}
