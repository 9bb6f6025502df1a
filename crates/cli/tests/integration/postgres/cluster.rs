//! The test side of [`sheaf_pg::drill::scratch`]: panicking shorthands for the clusters the tests start.

use std::ops::{Deref, DerefMut};
use std::path::Path;

use sheaf_pg::drill::scratch::ScratchCluster;

pub use sheaf_pg::drill::scratch::server_dir;

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

    /// A streaming hot standby of `primary`, started.
    pub fn standby_of(primary: &Cluster, settings: &[&str]) -> Cluster {
        Cluster::standby_with(primary, &[], settings)
    }

    /// A streaming hot standby of `primary` with each tablespace at its new place (old, new).
    pub fn standby_with(primary: &Cluster, tablespaces: &[(std::path::PathBuf, std::path::PathBuf)], settings: &[&str]) -> Cluster {
        Cluster(ScratchCluster::standby_of(primary, tablespaces, settings).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Wait until this standby has replayed everything `primary` has written so far.
    pub fn catch_up(&self, primary: &Cluster) {
        let lsn = primary.sql("postgres", "SELECT pg_current_wal_insert_lsn()");
        let t0 = std::time::Instant::now();
        while self.sql("postgres", &format!("SELECT pg_last_wal_replay_lsn() >= '{lsn}'")) != "t" {
            assert!(t0.elapsed().as_secs() < 60, "the standby did not replay to {lsn} in 60 s: {}", std::fs::read_to_string(self.log()).unwrap_or_default());
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
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

/// Give `path` to the cluster's user (a file the test made as root, for sheaf run as that user).
pub fn give_to_server(path: &Path) {
    let (uid, gid) = sheaf_pg::drill::scratch::server_owner().unwrap();
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

/// A secret's file as the cluster's user keeps one, who runs archive_command and sheaf here: its
/// own, mode 0600 (sheaf warns of one others may read, as libpq does of a .pgpass).
pub fn server_secret(path: &Path) {
    give_to_server(path);
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
}

/// A temporary folder of the cluster's user (mode 0755, so that root and the server both reach
/// in): where a test's repository, restores and spools go, as that user makes them.
pub fn server_tempdir(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new().prefix(prefix).tempdir().unwrap();
    server_dir(d.path()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    d
}

/// No server process left on `data`: an immediate shutdown removes the pid file a moment before
/// the postmaster has exited, so this waits up to 10 s.
pub fn assert_no_server_on(data: &Path) {
    let t0 = std::time::Instant::now();
    loop {
        let procs = std::process::Command::new("pgrep").args(["-a", "-f", data.to_str().unwrap()]).output().unwrap();
        if procs.stdout.is_empty() {
            break;
        }
        assert!(t0.elapsed().as_secs() < 10, "server left running on {}: {}", data.display(), String::from_utf8_lossy(&procs.stdout));
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
