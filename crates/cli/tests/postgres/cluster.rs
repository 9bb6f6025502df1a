//! The test side of [`sheaf_pg::scratch`]: panicking shorthands, and the `sheaf` binary.

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use sheaf_pg::scratch::ScratchCluster;

pub use sheaf_pg::scratch::server_dir;

pub struct Cluster(pub ScratchCluster);

impl Deref for Cluster {
    type Target = ScratchCluster;
    fn deref(&self) -> &ScratchCluster {
        &self.0
    }
}

impl DerefMut for Cluster {
    fn deref_mut(&mut self) -> &mut ScratchCluster {
        &mut self.0
    }
}

impl Cluster {
    pub fn new(initdb_args: &[&str], settings: &[&str]) -> Cluster {
        Cluster(ScratchCluster::create(None, initdb_args, settings).unwrap_or_else(|e| panic!("{e}")))
    }

    pub fn over(data: &Path, sock: &Path) -> Cluster {
        Cluster(ScratchCluster::over(data, sock).unwrap_or_else(|e| panic!("{e}")))
    }

    pub fn sql(&self, db: &str, sql: &str) -> String {
        self.query(db, sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub fn start(&mut self) {
        self.0.start().unwrap_or_else(|e| panic!("{e}"));
    }
}

pub fn pg_dir(path: &Path) {
    server_dir(path).unwrap_or_else(|e| panic!("{e}"));
}

pub fn sheaf() -> Command {
    // Never the user's own history catalog.
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let catalog = DIR.get_or_init(|| tempfile::tempdir().unwrap()).path().join("catalog.db");
    let mut c = Command::new(env!("CARGO_BIN_EXE_sheaf"));
    c.env("SHEAF_CATALOG", catalog);
    c
}

pub fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().unwrap()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
