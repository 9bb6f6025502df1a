//! One repeat of a peer on the same source, timed as sheaf's runs are: pg_basebackup, tar, and
//! pgBackRest (with its stanza and WAL archiving set up on the bench's own cluster).

use std::path::Path;

use sheaf_core::{Error, ErrorKind, Result};
use sheaf_pg::scratch::{self, ScratchCluster};

use super::case::Ctx;
use super::work::{remove, set_mode, tree_bytes};
use crate::measure::{self, Cost};
use crate::peers::{self, BackRest, PeerRun};

impl Ctx<'_> {
    /// One repeat of pg_basebackup into `dir`, restored by extracting its tar files.
    pub(super) fn basebackup_run(&mut self, bin: &Path, run: &PeerRun, dir: &Path, repeat: usize) -> Result<(u64, Cost, Cost)> {
        let url = self.src.url.as_deref().expect("peers need a PostgreSQL source");
        let out = dir.join(&self.work_name).join("pg_basebackup");
        remove(&out)?;
        self.settle()?;
        let b = measure::run(peers::basebackup_command(bin, url, &out, run))?;
        if !b.ok() {
            let _ = remove(&out);
            return Err(b.failure(&format!("pg_basebackup {} (run {repeat})", run.settings())));
        }
        let size = tree_bytes(&out);
        let dest = self.restore_dir(dir);
        let (r, restored) = self.timed_restore(&dest, create_dir, peers::basebackup_restore_command(&out, &dest, run), holds_cluster)?;
        remove(&dest.with_extension("ts"))?;
        remove(&out)?;
        if !r.ok() || !restored {
            return Err(r.failure(&format!("extracting pg_basebackup's tar files ({})", run.settings())));
        }
        Ok((size, b.cost, r.cost))
    }

    /// One repeat of tar through the codec's tool into `dir`, restored with the decompressor into
    /// a fresh folder; both timed until durable, as sheaf's runs are.
    pub(super) fn tar_run(&mut self, run: &PeerRun, dir: &Path, repeat: usize) -> Result<(u64, Cost, Cost)> {
        let out = dir.join(&self.work_name).join("tar.out");
        let _ = std::fs::remove_file(&out);
        self.settle()?;
        let b = measure::run(peers::tar_backup_command(Path::new(&self.src.arg), &out, run))?;
        if !b.ok() {
            let _ = std::fs::remove_file(&out);
            return Err(b.failure(&format!("{} (run {repeat})", run.settings())));
        }
        let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        let dest = self.restore_dir(dir);
        let not_empty = |d: &Path| std::fs::read_dir(d).map(|mut d| d.next().is_some()).unwrap_or(false);
        let (r, restored) = self.timed_restore(&dest, create_dir, peers::tar_restore_command(&out, &dest, run), not_empty)?;
        let _ = std::fs::remove_file(&out);
        if !r.ok() || !restored {
            return Err(r.failure(&format!("extracting tar ({})", run.settings())));
        }
        Ok((size, b.cost, r.cost))
    }

    /// One repeat of pgBackRest: a full backup into the repository, then a restore.
    pub(super) fn backrest_run(&mut self, br: &BackRest, run: &PeerRun, dir: &Path, repeat: usize) -> Result<(u64, Cost, Cost)> {
        let mut args: Vec<&str> = vec!["backup", "--type=full"];
        args.extend(run.options.iter().map(String::as_str));
        self.settle()?;
        let b = measure::run(br.command(&args))?;
        if !b.ok() {
            return Err(b.failure(&format!("pgbackrest backup {} (run {repeat})", run.settings())));
        }
        let info = measure::run(br.command(&["info", "--output=json"]))?;
        let size = backrest_size(&info.stdout).ok_or_else(|| Error::new(ErrorKind::Io, format!("pgbackrest info printed no backup size: {}", info.stdout)))?;
        let dest = self.restore_dir(dir);
        let process_max: Vec<&str> = run.options.iter().filter(|o| o.starts_with("--process-max")).map(String::as_str).collect();
        let pg1 = format!("--pg1-path={}", dest.display());
        let mut args = vec!["restore", pg1.as_str()];
        args.extend(process_max);
        let (r, restored) = self.timed_restore(&dest, scratch::server_dir, br.command(&args), holds_cluster)?;
        if !r.ok() || !restored {
            return Err(r.failure(&format!("pgbackrest restore ({})", run.settings())));
        }
        // Keep only this backup, untimed, so that no timed backup pays for expiring the last one.
        let e = measure::run(br.command(&["expire", "--repo1-retention-full=1"]))?;
        if !e.ok() {
            return Err(e.failure("pgbackrest expire"));
        }
        Ok((size, b.cost, r.cost))
    }
}

/// A restore folder made for a peer that extracts into an existing one.
fn create_dir(dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", dest.display()), e))
}

/// Whether `dest` holds a restored data directory.
fn holds_cluster(dest: &Path) -> bool {
    dest.join("PG_VERSION").exists()
}

/// The repository size of the newest backup in `pgbackrest info --output=json`.
fn backrest_size(json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get(0)?.get("backup")?.as_array()?.last()?.pointer("/info/repository/size")?.as_u64()
}

/// Set up pgBackRest on the cluster with its repository in `repo`: config and stanza, then WAL
/// archiving through it. On failure archiving is back to discarding, so nothing waits on it.
pub(super) fn backrest_setup(cluster: &ScratchCluster, home: &Path, repo: &Path) -> Result<BackRest> {
    let setup = || -> Result<BackRest> {
        scratch::server_dir(repo)?;
        let config = home.join("pgbackrest.conf");
        let text = BackRest::config_text(&cluster.data, &cluster.sock, cluster.port, repo, home);
        std::fs::write(&config, text).map_err(|e| Error::io(ErrorKind::Io, format!("cannot write {}", config.display()), e))?;
        set_mode(&config, 0o644)?;
        let br = BackRest { config: config.clone() };
        let f = measure::run(br.command(&["stanza-create"]))?;
        if !f.ok() {
            return Err(f.failure("pgbackrest stanza-create"));
        }
        let cmd = format!("pgbackrest --config={} --stanza=bench archive-push %p", config.display());
        cluster.query("postgres", &format!("ALTER SYSTEM SET archive_command = '{}'", cmd.replace('\'', "''")))?;
        cluster.query("postgres", "SELECT pg_reload_conf()")?;
        cluster.query("postgres", "SELECT pg_switch_wal()")?;
        Ok(br)
    };
    setup().inspect_err(|_| backrest_teardown(cluster))
}

/// Archiving back to discarding (pgBackRest's runs on this target are over, or failed).
pub(super) fn backrest_teardown(cluster: &ScratchCluster) {
    let _ = cluster.query("postgres", "ALTER SYSTEM SET archive_command = 'true'");
    let _ = cluster.query("postgres", "SELECT pg_reload_conf()");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backrest_size_reads_the_newest_backup() {
        let json = r#"[{"name":"bench","backup":[{"info":{"repository":{"size":10}}},{"info":{"repository":{"size":42}}}]}]"#;
        assert_eq!(backrest_size(json), Some(42));
        assert_eq!(backrest_size("[]"), None);
        assert_eq!(backrest_size("not json"), None);
    }
}
