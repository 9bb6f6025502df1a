//! What a bench is asked to do: the sweep, the source, the peers, and where its work goes.

use std::path::PathBuf;

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
}
