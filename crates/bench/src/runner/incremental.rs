//! Incrementals measured (`sheaf bench --type full,incr --change 5%`). The bench's cluster archives
//! its WAL into a sheaf repository (summarized as it goes, as `wal-push` does for users). Each
//! sheaf permutation and each peer then takes, per repeat, a full backup and for each type asked a
//! change of the pages followed by that backup; every backup is timed and restored (an incremental
//! through its chain: sheaf's restore, pgBackRest's restore, `pg_combinebackup`), and the restore
//! timed; sheaf's incrementals also by `restore --delta` onto the backup before, and the cycle's
//! last backup by `sheaf consolidate` (its chain written as one full backup).
//!
//! Peers: pgBackRest's diff and incr (file level), and PostgreSQL 17+'s `pg_basebackup
//! --incremental` (plain, uncompressed: measured beside sheaf's `-c none`), rebuilt with
//! `pg_combinebackup`.

use std::path::{Path, PathBuf};

use sheaf_core::manifest::BackupType;
use sheaf_core::{Error, ErrorKind, Result};

use super::case::Ctx;
use super::event::Event;
use super::options::Incremental;
use super::work::{holds_cluster, remove, tree_bytes};
use crate::change;
use crate::matrix::Permutation;
use crate::measure::{self, Cost};
use crate::peers::{BackRest, PeerRun};
use crate::results::{Sample, Setting};

/// One backup of a cycle, measured: its type, size, what it read, and the two costs.
pub(super) struct Measured {
    /// The row's type: `full`, or a label of [`Incremental::labels`].
    pub(super) label: String,
    pub(super) size: u64,
    pub(super) bytes_read: Option<u64>,
    pub(super) buffers_used: Option<usize>,
    pub(super) backup: Cost,
    pub(super) restore: Cost,
    /// An incremental's `restore --delta` onto a restore of the backup before it.
    pub(super) delta: Option<Cost>,
}

/// The archive command that pushes the cluster's WAL into `repo`.
pub(super) fn wal_push_command(sheaf: &Path, repo: &Path, key_args: &[String]) -> String {
    let quote = |s: &str| sheaf_core::text::shell_quote(s).into_owned();
    let mut cmd = format!("{} wal-push %p --repo {}", quote(&sheaf.display().to_string()), quote(&repo.display().to_string()));
    for a in key_args {
        cmd.push(' ');
        cmd.push_str(&quote(a));
    }
    cmd
}

/// The text of `postgres.repository_id` in `sheaf backup --repo --json`.
pub(super) fn repository_id(stdout: &str) -> Result<String> {
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| Error::new(ErrorKind::Io, format!("sheaf backup --json printed no JSON ({e})")))?;
    v.pointer("/postgres/repository_id")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| Error::new(ErrorKind::Io, "sheaf backup --repo --json lacks postgres.repository_id"))
}

impl Ctx<'_> {
    /// Make the repository, and archive the cluster's WAL into it from now on (checked: one segment
    /// archived), with PostgreSQL's own WAL summaries on where pg_basebackup's incrementals need
    /// them.
    pub(super) fn incremental_setup(&mut self, repo: &Path, summarize_wal: bool) -> Result<()> {
        let cluster = self.src.cluster.as_ref().expect("incrementals run on the bench's own cluster");
        sheaf_pg::drill::scratch::server_dir(repo)?;
        let mut c = self.repo_op("init");
        c.arg("--repo").arg(repo).arg(&self.src.arg);
        let f = self.measure(c)?;
        if !f.ok() {
            return Err(f.failure("sheaf init (the bench's repository)"));
        }
        let cmd = wal_push_command(&self.opts.sheaf, repo, &self.opts.key_args);
        cluster.query("postgres", &format!("ALTER SYSTEM SET archive_command = '{}'", cmd.replace('\'', "''")))?;
        if summarize_wal {
            cluster.query("postgres", "ALTER SYSTEM SET summarize_wal = on")?;
        }
        cluster.query("postgres", "SELECT pg_reload_conf()")?;
        self.archive = Some(cmd);
        change::archive_now(cluster)
    }

    /// Change the pages before the next incremental (untimed), each round elsewhere.
    fn change(&mut self, inc: &Incremental) -> Result<()> {
        self.round += 1;
        (self.note)(Event::Note(&format!("changing about {} % of the pages (round {}, untimed)", inc.change_percent, self.round)));
        let cluster = self.src.cluster.as_ref().expect("incrementals run on the bench's own cluster");
        change::touch(cluster, "tpch", inc.change_percent, self.round)
    }

    /// One sheaf backup of type `t` into `repo`, timed, then restored and timed; with `before`
    /// (the backup before it), also `restore --delta` onto a restore of that one (made untimed),
    /// timed. Returns the measures and the new backup's id.
    fn repo_backup(&mut self, p: &Permutation, t: BackupType, repo: &Path, dir: &Path, repeat: usize, before: Option<&str>) -> Result<(Measured, String)> {
        let (kind, stripes, repo_arg) = (t.to_string(), p.stripes.to_string(), repo.display().to_string());
        let (b, (bytes_read, size, buffers_used)) =
            self.timed_backup(self.repo_op("backup"), p, &["--repo", &repo_arg, "--type", &kind, "--stripes", &stripes], &format!("{t}, run {repeat}"))?;
        let id = repository_id(&b.stdout)?;
        let restore = |ctx: &Self, set: &str, to: &Path| {
            let mut c = ctx.sheaf_op("restore");
            c.arg("--repo").arg(repo).args(["--set", set, "--target", "immediate", "--json", "--to"]).arg(to);
            c
        };
        let dest = self.restore_dir(dir);
        let (r, restored) = self.timed_restore(&dest, |_| Ok(()), restore(self, &id, &dest), holds_cluster)?;
        if !r.ok() || !restored {
            return Err(r.failure(&format!("sheaf restore of the {t} backup {id} ({})", p.name())));
        }
        let delta = match before {
            None => None,
            Some(before) => {
                // The copy one change behind, restored untimed; then the delta onto it, timed.
                let copy_command = restore(self, before, &dest);
                let stop = self.opts.stop.clone();
                let copy = move |_: &Path| {
                    let f = measure::run(copy_command, &stop)?;
                    if f.ok() {
                        Ok(())
                    } else {
                        Err(f.failure(&format!("sheaf restore of backup {before} (the copy a delta restore updates)")))
                    }
                };
                let mut c = restore(self, &id, &dest);
                c.arg("--delta");
                let (r, restored) = self.timed_restore(&dest, copy, c, holds_cluster)?;
                if !r.ok() || !restored {
                    return Err(r.failure(&format!("sheaf restore --delta of the {t} backup {id} ({})", p.name())));
                }
                Some(r.cost)
            }
        };
        Ok((Measured { label: t.to_string(), size, bytes_read: Some(bytes_read), buffers_used: Some(buffers_used), backup: b.cost, restore: r.cost, delta }, id))
    }

    /// One repeat of a sheaf permutation: the full, then each type after a change.
    pub(super) fn sheaf_cycle(&mut self, p: &Permutation, inc: &Incremental, repo: &Path, dir: &Path, repeat: usize) -> Result<Vec<Sample>> {
        let mut out = Vec::new();
        let setting = |label: String| Setting {
            tool: "sheaf".into(),
            compression: p.compression.clone(),
            settings: String::new(),
            stripes: p.stripes,
            transfer_size: p.transfer_size,
            buffer_count: p.buffer_count,
            target: dir.display().to_string(),
            backup_type: label,
        };
        let mut ids: Vec<String> = Vec::new();
        let mut take = |ctx: &mut Self, t: BackupType, label: String| -> Result<()> {
            let (m, id) = ctx.repo_backup(p, t, repo, dir, repeat, ids.last().map(String::as_str))?;
            ids.push(id);
            if t != BackupType::Full || inc.full_rows {
                out.push(Sample {
                    setting: setting(label),
                    buffers_used: m.buffers_used,
                    repeat,
                    bytes_read: m.bytes_read.unwrap_or(0),
                    size_bytes: m.size,
                    backup: m.backup,
                    verify: None,
                    restore: Some(m.restore),
                    delta_restore: m.delta,
                    consolidate: None,
                });
            }
            Ok(())
        };
        take(self, BackupType::Full, "full".into())?;
        for (&t, label) in inc.types.iter().zip(inc.labels()) {
            self.change(inc)?;
            take(self, t, label)?;
        }
        // The last backup's chain written as one full backup, timed: what keeping chains short
        // costs, beside the full backup's time in the same cycle.
        if let (Some(last), Some(&t)) = (ids.last(), inc.types.last()) {
            let mut c = self.repo_op("consolidate");
            c.arg("--repo").arg(repo).args(["--set", last, "-c", &p.compression, "--stripes", &p.stripes.to_string(), "--json"]);
            self.settle()?;
            let f = self.measure(c)?;
            if !f.ok() {
                return Err(f.failure(&format!("sheaf consolidate of the {t} backup {last} ({})", p.name())));
            }
            if let Some(s) = out.last_mut() {
                s.consolidate = Some(f.cost);
            }
        }
        Ok(out)
    }

    /// One repeat of pgBackRest: a full, then each type after a change, each restored; the
    /// repository then keeps only the newest full, untimed.
    pub(super) fn backrest_cycle(&mut self, br: &BackRest, run: &PeerRun, inc: &Incremental, dir: &Path, repeat: usize) -> Result<Vec<Measured>> {
        let (full, mut before) = self.backrest_backup(br, run, BackupType::Full, dir, repeat, None)?;
        let mut out = vec![full];
        for (&t, label) in inc.types.iter().zip(inc.labels()) {
            self.change(inc)?;
            let (m, id) = self.backrest_backup(br, run, t, dir, repeat, Some(&before))?;
            out.push(Measured { label, ..m });
            before = id;
        }
        let e = self.measure(br.command(&["expire", "--repo1-retention-full=1"]))?;
        if !e.ok() {
            return Err(e.failure("pgbackrest expire"));
        }
        Ok(out)
    }

    /// One repeat of `pg_basebackup` (plain format) and its incrementals against the full (diff)
    /// or the one before (incr), each rebuilt into a data directory by `pg_combinebackup`, timed
    /// as the restore.
    pub(super) fn basebackup_cycle(&mut self, bin: &Path, inc: &Incremental, dir: &Path, repeat: usize) -> Result<Vec<Measured>> {
        let url = self.src.url.clone().expect("peers need a PostgreSQL source");
        let root = dir.join(&self.work_name).join("pg_basebackup");
        remove(&root)?;
        std::fs::create_dir_all(&root).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", root.display()), e))?;
        let combine = bin.with_file_name("pg_combinebackup");
        let mut taken: Vec<PathBuf> = Vec::new();
        let mut out = Vec::new();
        let labels = std::iter::once("full".to_string()).chain(inc.labels());
        for (k, (t, label)) in std::iter::once(BackupType::Full).chain(inc.types.iter().copied()).zip(labels).enumerate() {
            if k > 0 {
                self.change(inc)?;
            }
            let into = root.join(k.to_string());
            let mut c = std::process::Command::new(bin);
            c.args(["-d", &url, "-D"]).arg(&into).args(["-Fp", "-c", "fast"]);
            // A diff builds on the full, an incr on the backup before it.
            let parent = match t {
                BackupType::Full => None,
                BackupType::Diff => taken.first(),
                BackupType::Incr => taken.last(),
            };
            if let Some(parent) = parent {
                c.arg(format!("--incremental={}", parent.join("backup_manifest").display()));
            }
            self.settle()?;
            let b = self.measure(c)?;
            if !b.ok() {
                let _ = remove(&root);
                return Err(b.failure(&format!("pg_basebackup -Fp ({t}, run {repeat})")));
            }
            let size = tree_bytes(&into);
            // The chain this backup needs: the full, the parent's chain, itself.
            let chain: Vec<PathBuf> = match t {
                BackupType::Full => vec![into.clone()],
                BackupType::Diff => vec![taken[0].clone(), into.clone()],
                BackupType::Incr => taken.iter().cloned().chain(std::iter::once(into.clone())).collect(),
            };
            taken.push(into);
            let dest = self.restore_dir(dir);
            let mut c = std::process::Command::new(&combine);
            c.arg("-o").arg(&dest).args(&chain);
            let (r, restored) = self.timed_restore(&dest, |_| Ok(()), c, holds_cluster)?;
            if !r.ok() || !restored {
                let _ = remove(&root);
                return Err(r.failure(&format!("pg_combinebackup ({t}, run {repeat})")));
            }
            out.push(Measured { label, size, bytes_read: None, buffers_used: None, backup: b.cost, restore: r.cost, delta: None });
        }
        remove(&root)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_command_quotes_its_paths() {
        let cmd = wal_push_command(Path::new("/opt/my sheaf/sheaf"), Path::new("/srv/it's/repo"), &["--encryption-key-file".into(), "/k".into()]);
        assert_eq!(shlex::split(&cmd).unwrap(), ["/opt/my sheaf/sheaf", "wal-push", "%p", "--repo", "/srv/it's/repo", "--encryption-key-file", "/k"]);
        assert_eq!(repository_id(r#"{"postgres":{"repository_id":"20261124T101010Z"}}"#).unwrap(), "20261124T101010Z");
        assert!(repository_id("{}").unwrap_err().to_string().contains("repository_id"));
    }
}
