//! A former primary put back as a standby of the new one (`sheaf bench --type rewind`): what a
//! failover leaves behind, measured against the tool DBAs use for it, `pg_rewind`.
//!
//! Per sheaf permutation and repeat, on copies of the bench's data (the bench's own cluster goes
//! on untouched): a primary (a clone of the bench's cluster, promoted to run alone) archives into
//! a repository of its own and is backed up in full; its streaming standby is promoted and about
//! `--change` of the pages change on it, while the old primary writes a little more on its own
//! timeline (keeping its WAL since the split in `pg_wal`, `wal_keep_size`) and is then stopped
//! cleanly; the new primary is backed up (an incremental on the full).
//! Then, each on its own copy of the stopped former primary, the cache dropped before each:
//! `pg_rewind` against the running new primary, and `sheaf restore --delta` of that backup; and
//! the same backup restored into an empty folder, for scale.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use sheaf_core::{Error, ErrorKind, Result};
use sheaf_pg::drill::scratch::{self, ScratchCluster};

use super::case::Ctx;
use super::incremental::{repository_id, wal_push_command};
use super::options::Incremental;
use super::work::{holds_cluster, remove};
use crate::change;
use crate::matrix::Permutation;
use crate::measure::Cost;
use crate::results::RewindSample;

/// Wait until `standby` has replayed everything `primary` has written so far.
fn caught_up(primary: &ScratchCluster, standby: &ScratchCluster) -> Result<()> {
    let lsn = primary.query("postgres", "SELECT pg_current_wal_lsn()")?;
    for _ in 0..3000 {
        if standby.query("postgres", &format!("SELECT pg_last_wal_replay_lsn() >= '{}'", lsn.trim()))? == "t" {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(Error::new(ErrorKind::Source, format!("the bench's standby did not replay up to {} in 10 minutes (see {})", lsn.trim(), standby.log().display())))
}

/// `cp -a from to`: a copy of a stopped data directory, owners and modes kept.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    remove(to)?;
    let out = Command::new("cp").arg("-a").arg(from).arg(to).output().map_err(|e| Error::io(ErrorKind::Target, "cannot run cp", e))?;
    if !out.status.success() {
        return Err(Error::new(ErrorKind::Target, format!("cp -a {} {}: {}", from.display(), to.display(), String::from_utf8_lossy(&out.stderr).trim())));
    }
    Ok(())
}

/// The parts of `sheaf restore --delta --json` the report shows: method, how, bytes written, kept.
fn delta_figures(stdout: &str) -> Result<(String, String, u64, u64)> {
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| Error::new(ErrorKind::Io, format!("sheaf restore --delta --json printed no JSON ({e})")))?;
    let d = v.get("delta").ok_or_else(|| Error::new(ErrorKind::Io, "sheaf restore --delta --json lacks delta"))?;
    let text = |k: &str| d.get(k).and_then(serde_json::Value::as_str).unwrap_or_default().to_string();
    let n = |k: &str| d.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    Ok((text("method"), text("how"), n("bytes_rewritten") + n("bytes_created"), n("bytes_kept")))
}

impl Ctx<'_> {
    /// One repeat of a former primary put back (see the module's text), in `dir`'s work folder.
    pub(super) fn rewind_cycle(&mut self, p: &Permutation, inc: &Incremental, dir: &Path, repeat: usize) -> Result<RewindSample> {
        let bench = self.src.cluster.as_ref().expect("rewind runs on the bench's own cluster");
        let work = dir.join(&self.work_name);
        let repo = work.join("rewind-repo");
        remove(&repo)?;
        scratch::server_dir(&repo)?;
        let step = |what: &str| (self.note)(super::event::Event::Note(&format!("former primary put back: {what} (untimed)")));

        // The primary: a clone of the bench's cluster, promoted to run on its own, archiving into
        // the repository (set while it is a standby, which archives nothing).
        step("a primary and its standby, cloned from the bench's cluster");
        let mut old = ScratchCluster::standby_in(Some(&work), bench, &[], &[])?;
        let mut init = self.repo_op("init");
        init.arg("--repo").arg(&repo).arg(old.url("postgres"));
        let f = self.measure(init)?;
        if !f.ok() {
            return Err(f.failure("sheaf init (the former primary's repository)"));
        }
        let archive = wal_push_command(&self.opts.sheaf, &repo, &self.opts.key_args);
        old.query("postgres", &format!("ALTER SYSTEM SET archive_command = '{}'", archive.replace('\'', "''")))?;
        // pg_rewind reads the former primary's WAL back to the checkpoint before the split, from
        // its pg_wal: kept there, as a primary set up for failover does.
        old.query("postgres", "ALTER SYSTEM SET wal_keep_size = '1GB'")?;
        old.query("postgres", "SELECT pg_reload_conf()")?;
        old.promote()?;
        change::archive_now(&old)?;
        let (codec, stripes) = (p.compression.clone(), p.stripes.to_string());
        let backup = |ctx: &Self, url: &str, kind: &str| -> Result<String> {
            let mut c = ctx.repo_op("backup");
            c.arg(url).arg("--repo").arg(&repo).args(["--type", kind, "-c", &codec, "--stripes", &stripes, "--json"]);
            let f = ctx.measure(c)?;
            if !f.ok() {
                return Err(f.failure(&format!("sheaf backup --type {kind} (former primary put back)")));
            }
            repository_id(&f.stdout)
        };
        backup(self, &old.url("postgres"), "full")?;

        // The split: the standby promoted and changed; the old primary writes on, then stops.
        let mut new = ScratchCluster::standby_in(Some(&work), &old, &[], &[])?;
        caught_up(&old, &new)?;
        new.promote()?;
        step(&format!("the standby promoted, about {} % of the pages changed on it", inc.change_percent));
        self.round += 1;
        change::touch(&new, "tpch", inc.change_percent, self.round)?;
        old.query("tpch", "UPDATE orders SET o_comment = o_comment WHERE o_orderkey % 5000 = 1")?;
        old.query("postgres", "CHECKPOINT")?;
        old.stop();
        let id = backup(self, &new.url("postgres"), "incr")?;
        change::archive_now(&new)?;

        // Each way on its own copy of the stopped former primary, one copy at a time (each is
        // the size of the cluster).
        let (for_rewind, for_sheaf) = (work.join("rewind-pg_rewind"), work.join("rewind-sheaf"));
        copy_tree(&old.data, &for_rewind)?;
        let pg_rewind = old.bin.join("pg_rewind");
        let rewind = if pg_rewind.exists() {
            let mut c = scratch::as_server_user(&pg_rewind);
            c.arg("--target-pgdata").arg(&for_rewind).arg("--source-server").arg(format!("host={} port={} user={} dbname=postgres", new.sock.display(), new.port, new.user));
            self.settle()?;
            let f = self.measure(c)?;
            if !f.ok() {
                return Err(f.failure("pg_rewind of the former primary"));
            }
            Some(f.cost)
        } else {
            None
        };
        remove(&for_rewind)?;
        copy_tree(&old.data, &for_sheaf)?;
        let restore = |ctx: &Self, to: &Path| {
            let mut c = ctx.sheaf_op("restore");
            c.arg("--repo").arg(&repo).args(["--set", &id, "--target", "immediate", "--json", "--to"]).arg(to);
            c
        };
        let mut c = restore(self, &for_sheaf);
        c.arg("--delta");
        self.settle()?;
        let d = self.measure(c)?;
        if !d.ok() || !holds_cluster(&for_sheaf) {
            return Err(d.failure(&format!("sheaf restore --delta of backup {id} onto the former primary")));
        }
        let (delta_method, delta_how, delta_bytes_written, delta_bytes_kept) = delta_figures(&d.stdout)?;
        remove(&for_sheaf)?;
        let dest = self.restore_dir(dir);
        let (r, restored) = self.timed_restore(&dest, |_| Ok(()), restore(self, &dest), holds_cluster)?;
        if !r.ok() || !restored {
            return Err(r.failure(&format!("sheaf restore of backup {id} (the new primary's)")));
        }
        new.stop();
        drop((new, old));
        remove(&repo)?;
        let sheaf_delta: Cost = d.cost;
        Ok(RewindSample {
            compression: p.compression.clone(),
            stripes: p.stripes,
            repeat,
            pg_rewind: rewind,
            sheaf_delta,
            sheaf_restore: r.cost,
            delta_method,
            delta_how,
            delta_bytes_written,
            delta_bytes_kept,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delta_says_how_it_found_the_change() {
        let json = r#"{"delta":{"method":"wal","how":"WAL summaries: 12 blocks","bytes_rewritten":100,"bytes_created":20,"bytes_kept":900}}"#;
        assert_eq!(delta_figures(json).unwrap(), ("wal".to_string(), "WAL summaries: 12 blocks".to_string(), 120, 900));
        assert!(delta_figures("{}").unwrap_err().to_string().contains("lacks delta"));
    }
}
