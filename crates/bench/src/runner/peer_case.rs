//! One repeat of a peer on the same source, timed as sheaf's runs are: pg_basebackup, tar, and
//! pgBackRest (with its stanza and WAL archiving set up on the bench's own cluster).

use std::path::Path;

use sheaf_core::manifest::BackupType;
use sheaf_core::{Error, ErrorKind, Result};
use sheaf_pg::drill::scratch::{self, ScratchCluster};

use super::case::Ctx;
use super::incremental::Measured;
use super::work::{holds_cluster, remove, set_mode, tree_bytes};
use crate::measure::{self, Cost};
use crate::peers::{self, BackRest, PeerRun};

impl Ctx<'_> {
    /// One repeat of pg_basebackup into `dir`, restored by extracting its tar files.
    pub(super) fn basebackup_run(&mut self, bin: &Path, run: &PeerRun, dir: &Path, repeat: usize) -> Result<(u64, Cost, Cost)> {
        let url = self.src.url.as_deref().expect("peers need a PostgreSQL source");
        let out = dir.join(&self.work_name).join("pg_basebackup");
        remove(&out)?;
        self.settle()?;
        let b = self.measure(peers::basebackup_command(bin, url, &out, run))?;
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
        let b = self.measure(peers::tar_backup_command(Path::new(&self.src.arg), &out, run))?;
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

    /// One repeat of mariadb-backup streamed through the codec's tool into `dir`, restored by
    /// extracting the stream and `--prepare`; both timed as sheaf's runs are.
    pub(super) fn mariabackup_run(&mut self, run: &PeerRun, dir: &Path, repeat: usize) -> Result<(u64, Cost, Cost)> {
        let address = self.src.mariadb.clone().expect("mariadb-backup needs a MariaDB source");
        let base = dir.join(&self.work_name);
        let (out, tmp) = (base.join("mariabackup.xb"), base.join("mariabackup.tmp"));
        let _ = std::fs::remove_file(&out);
        remove(&tmp)?;
        create_dir(&tmp)?;
        self.settle()?;
        let b = self.measure(peers::mariabackup_command(&address, &tmp, &out, run))?;
        let log = std::fs::read_to_string(tmp.join("log")).unwrap_or_default();
        remove(&tmp)?;
        if !b.ok() {
            let _ = std::fs::remove_file(&out);
            return Err(b.failure(&format!("mariadb-backup {} (run {repeat}): {}", run.settings(), log.lines().rev().take(3).collect::<Vec<_>>().join(" / "))));
        }
        let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
        let dest = self.restore_dir(dir);
        let prepared = |d: &Path| d.join("ibdata1").exists();
        let (r, restored) = self.timed_restore(&dest, create_dir, peers::mariabackup_restore_command(&out, &dest, run), prepared)?;
        let _ = std::fs::remove_file(&out);
        let _ = std::fs::remove_file(dest.with_extension("prepare.log"));
        if !r.ok() || !restored {
            return Err(r.failure(&format!("extracting and preparing mariadb-backup's stream ({})", run.settings())));
        }
        Ok((size, b.cost, r.cost))
    }

    /// One repeat of pgBackRest: a full backup into the repository, then a restore.
    pub(super) fn backrest_run(&mut self, br: &BackRest, run: &PeerRun, dir: &Path, repeat: usize) -> Result<(u64, Cost, Cost)> {
        let (m, _) = self.backrest_backup(br, run, BackupType::Full, dir, repeat, None)?;
        // Keep only this backup, untimed, so that no timed backup pays for expiring the last one.
        let e = self.measure(br.command(&["expire", "--repo1-retention-full=1"]))?;
        if !e.ok() {
            return Err(e.failure("pgbackrest expire"));
        }
        Ok((m.size, m.backup, m.restore))
    }

    /// A pgBackRest backup of type `t` (its own words: full, diff, incr), timed, then restored
    /// (the newest backup, through whatever it builds on) and timed; with `before` (the label of
    /// the backup before it), also `restore --delta` onto a restore of that one (made untimed),
    /// timed. Returns the measures and the new backup's label.
    pub(super) fn backrest_backup(&mut self, br: &BackRest, run: &PeerRun, t: BackupType, dir: &Path, repeat: usize, before: Option<&str>) -> Result<(Measured, String)> {
        let kind = format!("--type={t}");
        let mut args: Vec<&str> = vec!["backup", &kind];
        args.extend(run.options.iter().map(String::as_str));
        self.settle()?;
        let b = self.measure(br.command(&args))?;
        if !b.ok() {
            return Err(b.failure(&format!("pgbackrest backup {kind} {} (run {repeat})", run.settings())));
        }
        let info = self.measure(br.command(&["info", "--output=json"]))?;
        let (size, label) = backrest_newest(&info.stdout).ok_or_else(|| Error::new(ErrorKind::Io, format!("pgbackrest info printed no backup size and label: {}", info.stdout)))?;
        let dest = self.restore_dir(dir);
        let process_max: Vec<&str> = run.options.iter().filter(|o| o.starts_with("--process-max")).map(String::as_str).collect();
        let pg1 = format!("--pg1-path={}", dest.display());
        let restore = |set: &str, delta: bool| {
            let set = format!("--set={set}");
            let mut args = vec!["restore", pg1.as_str(), set.as_str(), "--type=immediate"];
            if delta {
                args.push("--delta");
            }
            args.extend(process_max.iter().copied());
            br.command(&args)
        };
        let (r, restored) = self.timed_restore(&dest, scratch::server_dir, restore(&label, false), holds_cluster)?;
        if !r.ok() || !restored {
            return Err(r.failure(&format!("pgbackrest restore ({kind} {})", run.settings())));
        }
        let delta = match before {
            None => None,
            Some(before) => {
                let copy_command = restore(before, false);
                let stop = self.opts.stop.clone();
                let copy = move |d: &Path| {
                    scratch::server_dir(d)?;
                    let f = measure::run(copy_command, &stop)?;
                    if f.ok() {
                        Ok(())
                    } else {
                        Err(f.failure(&format!("pgbackrest restore --set={before} (the copy a delta restore updates)")))
                    }
                };
                let (r, restored) = self.timed_restore(&dest, copy, restore(&label, true), holds_cluster)?;
                if !r.ok() || !restored {
                    return Err(r.failure(&format!("pgbackrest restore --delta ({kind} {})", run.settings())));
                }
                Some(r.cost)
            }
        };
        Ok((Measured { label: t.to_string(), size, bytes_read: None, buffers_used: None, backup: b.cost, restore: r.cost, delta }, label))
    }
}

/// A restore folder made for a peer that extracts into an existing one.
fn create_dir(dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", dest.display()), e))
}

/// What the newest backup in `pgbackrest info --output=json` stored in the repository (its
/// `delta`: for a full, its whole size; for a diff or incr, only what it copied), and its label.
fn backrest_newest(json: &str) -> Option<(u64, String)> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let newest = v.get(0)?.get("backup")?.as_array()?.last()?;
    let repo = newest.pointer("/info/repository")?;
    let size = repo.get("delta").or_else(|| repo.get("size"))?.as_u64()?;
    Some((size, newest.get("label")?.as_str()?.to_string()))
}

/// Set up pgBackRest on the cluster with its repository in `repo`: config and stanza, then WAL
/// archiving through it (after `also`, the archive command already in place, if any). On failure
/// archiving is back to `also` (or discarding), so nothing waits on it.
pub(super) fn backrest_setup(cluster: &ScratchCluster, home: &Path, repo: &Path, also: Option<&str>, stop: &sheaf_core::stop::Stop) -> Result<BackRest> {
    let setup = || -> Result<BackRest> {
        scratch::server_dir(repo)?;
        let config = home.join("pgbackrest.conf");
        let text = BackRest::config_text(&cluster.data, &cluster.sock, cluster.port, repo, home);
        std::fs::write(&config, text).map_err(|e| Error::io(ErrorKind::Io, format!("cannot write {}", config.display()), e))?;
        set_mode(&config, 0o644)?;
        let br = BackRest { config: config.clone() };
        let f = measure::run(br.command(&["stanza-create"]), stop)?;
        if !f.ok() {
            return Err(f.failure("pgbackrest stanza-create"));
        }
        let mut cmd = format!("{} --config={} --stanza=bench archive-push %p", crate::peers::backrest_program(), config.display());
        if let Some(first) = also {
            cmd = format!("{first} && {cmd}");
        }
        cluster.query("postgres", &format!("ALTER SYSTEM SET archive_command = '{}'", cmd.replace('\'', "''")))?;
        cluster.query("postgres", "SELECT pg_reload_conf()")?;
        cluster.query("postgres", "SELECT pg_switch_wal()")?;
        Ok(br)
    };
    setup().inspect_err(|_| backrest_teardown(cluster, also))
}

/// Archiving back to `also` or to discarding (pgBackRest's runs on this target are over, or
/// failed).
pub(super) fn backrest_teardown(cluster: &ScratchCluster, also: Option<&str>) {
    let cmd = also.unwrap_or("true").replace('\'', "''");
    let _ = cluster.query("postgres", &format!("ALTER SYSTEM SET archive_command = '{cmd}'"));
    let _ = cluster.query("postgres", "SELECT pg_reload_conf()");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backrest_size_reads_the_newest_backup() {
        let json = r#"[{"name":"bench","backup":[{"label":"A","info":{"repository":{"size":10}}},{"label":"B","info":{"repository":{"size":42}}}]}]"#;
        assert_eq!(backrest_newest(json), Some((42, "B".into())));
        let incr = r#"[{"name":"bench","backup":[{"label":"A","info":{"repository":{"size":10,"delta":10}}},{"label":"A_I","info":{"repository":{"size":12,"delta":2}}}]}]"#;
        assert_eq!(backrest_newest(incr), Some((2, "A_I".into())), "an incremental's own files");
        assert_eq!(backrest_newest("[]"), None);
        assert_eq!(backrest_newest("not json"), None);
    }
}
