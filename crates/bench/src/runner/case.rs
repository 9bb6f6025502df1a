//! One case of the sweep: the context every run shares (the sheaf command, settling before an
//! operation, where restores go), and one repeat of a sheaf permutation: backup, verify, restore.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sheaf_core::{Error, ErrorKind, Result};
use sheaf_pg::drill::scratch::ScratchCluster;

use super::event::{Clock, Event};
use super::options::BenchOptions;
use super::prepare::Prepared;
use super::trash::Trash;
use crate::matrix::{BenchTarget, Permutation};
use crate::measure::{self, Finished};
use crate::results::{Sample, Setting};

/// The parts of `sheaf backup --json` the bench uses.
fn backup_figures(f: &Finished) -> Result<(u64, u64, usize)> {
    let v: serde_json::Value = serde_json::from_str(f.stdout.trim()).map_err(|e| Error::new(ErrorKind::Io, format!("sheaf backup --json printed no JSON ({e}): {}", f.stdout)))?;
    let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).ok_or_else(|| Error::new(ErrorKind::Io, format!("sheaf backup --json lacks {k}")));
    Ok((n("bytes_read")?, n("bytes_written")?, n("buffer_count")? as usize))
}

/// Wait until the cluster's archiver has nothing left to push, so that no run pays for the
/// previous one's WAL.
fn archiver_idle(cluster: &ScratchCluster) -> Result<()> {
    let status = cluster.data.join("pg_wal/archive_status");
    for _ in 0..2400 {
        let ready = std::fs::read_dir(&status).map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().ends_with(".ready"))).unwrap_or(false);
        if !ready {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Err(Error::new(ErrorKind::Source, "the cluster's WAL archiver (pgBackRest archive-push) did not catch up in 10 minutes"))
}

/// Before an operation: nothing dirty, the archiver idle, the cache dropped if asked.
fn settle(opts: &BenchOptions, cluster: Option<&ScratchCluster>, archiving: bool) -> Result<()> {
    if let (Some(c), true) = (cluster, archiving) {
        archiver_idle(c)?;
    }
    if opts.drop_caches {
        measure::drop_caches()
    } else {
        measure::sync_all();
        Ok(())
    }
}

/// What every run of one bench shares.
pub(super) struct Ctx<'a> {
    pub(super) opts: &'a BenchOptions,
    pub(super) src: &'a Prepared,
    pub(super) archiving: bool,
    pub(super) work_name: String,
    pub(super) note: &'a dyn Fn(Event),
    pub(super) clock: Clock,
    pub(super) trash: Trash,
    /// The archive command that stores the cluster's WAL in the bench's repository (incrementals).
    pub(super) archive: Option<String>,
    /// Changes made so far (each the next round, so that each touches other pages).
    pub(super) round: u64,
}

impl Ctx<'_> {
    /// Run and measure `cmd` ([`measure::run`]), ended when the bench is asked to stop.
    pub(super) fn measure(&self, cmd: Command) -> Result<Finished> {
        measure::run(cmd, &self.opts.stop)
    }

    fn sheaf(&self) -> Command {
        let mut c = Command::new(&self.opts.sheaf);
        if let Some(cat) = &self.opts.catalog {
            c.arg("--catalog").arg(cat);
        }
        c
    }

    /// [`Ctx::sheaf`] for an operation on the bench's sets: with the encryption secret's flags.
    pub(super) fn sheaf_op(&self, op: &str) -> Command {
        let mut c = self.sheaf();
        c.arg(op).args(&self.opts.key_args);
        c
    }

    /// [`Ctx::sheaf_op`] for an operation that writes into the bench's repository (made for the
    /// cluster's user, whose archive_command pushes WAL into it): run as root, it runs as that
    /// user, since sheaf refuses to write into another user's repository, and records into that
    /// user's own catalog.
    pub(super) fn repo_op(&self, op: &str) -> Command {
        if !sheaf_core::host::is_root() {
            return self.sheaf_op(op);
        }
        let mut c = sheaf_pg::drill::scratch::as_server_user(&self.opts.sheaf);
        c.arg(op).args(&self.opts.key_args);
        c
    }

    pub(super) fn settle(&self) -> Result<()> {
        settle(self.opts, self.src.cluster.as_ref(), self.archiving)
    }

    pub(super) fn announce(&mut self, what: &str, repeat: usize) {
        let ev = Event::Run { index: self.clock.done + 1, total: self.clock.total, what, repeat, repeats: self.opts.matrix.repeat, eta: self.clock.eta() };
        (self.note)(ev);
    }

    /// Where a restore goes: always inside this bench's own work folder (in --restore-dir, or
    /// beside the stripes), never a path of the user's.
    pub(super) fn restore_dir(&self, target_dir: &Path) -> PathBuf {
        self.opts.restore_dir.as_deref().unwrap_or(target_dir).join(&self.work_name).join("restore")
    }

    /// Time `command` restoring into `dest`, with room made for it and `make` run first (both
    /// untimed) and the tree set aside after; returns what the command left and whether
    /// `restored` finds a restore in `dest`.
    pub(super) fn timed_restore(
        &mut self,
        dest: &Path,
        make: impl FnOnce(&Path) -> Result<()>,
        command: Command,
        restored: impl FnOnce(&Path) -> bool,
    ) -> Result<(Finished, bool)> {
        let free = self.trash.make_room(dest, self.note)?;
        make(dest)?;
        self.settle()?;
        let r = self.measure(command)?;
        let restored = restored(dest);
        self.trash.set_aside(dest, free)?;
        Ok((r, restored))
    }

    /// The disk's own rate, beside the restores of this repeat: `dd oflag=direct` of `bytes`
    /// (what a full restore writes) into the folder restores go to in `target_dir`, settled as a
    /// restore is; `None` (with a note) where dd cannot run.
    pub(super) fn disk_probe(&mut self, target_dir: &Path, bytes: u64, repeat: usize) -> Result<Option<crate::results::DiskProbe>> {
        let out = self.restore_dir(target_dir).with_file_name("dd.out");
        let mut c = Command::new("dd");
        c.arg("if=/dev/zero").arg(format!("of={}", out.display())).args(["bs=1M", &format!("count={}", bytes.div_ceil(1 << 20)), "oflag=direct", "status=none"]);
        self.settle()?;
        let f = self.measure(c);
        let _ = std::fs::remove_file(&out);
        match f {
            Ok(f) if f.ok() => Ok(Some(crate::results::DiskProbe { repeat, bytes: bytes.div_ceil(1 << 20) << 20, cost: f.cost })),
            Ok(f) => {
                (self.note)(Event::Warning(&format!("the disk's rate is not measured: {}", f.failure("dd oflag=direct"))));
                Ok(None)
            }
            Err(e) => {
                (self.note)(Event::Warning(&format!("the disk's rate is not measured: dd: {e}")));
                Ok(None)
            }
        }
    }

    /// With a warm cache asked for, make it warm: one untimed read of the whole source (a backup
    /// to nul without compression), so the first timed run does not read cold and the report's
    /// "warm" holds from the first run on.
    pub(super) fn warm_up(&mut self) -> Result<()> {
        if self.opts.drop_caches {
            return Ok(());
        }
        (self.note)(Event::Note("warming the cache: one untimed read of the source"));
        let mut c = self.sheaf();
        c.arg("backup").arg(&self.src.arg).args(["--to", "nul", "-c", "none", "--json", "--label", "sheaf bench: cache warm-up (untimed)"]);
        let b = self.measure(c)?;
        if !b.ok() {
            return Err(b.failure("sheaf backup to nul (the cache warm-up)"));
        }
        let (bytes_read, _, _) = backup_figures(&b)?;
        (self.note)(Event::Note(&format!("cache warm: read {} in {:.1} s, untimed", sheaf_core::size::format_size(bytes_read), b.cost.seconds)));
        Ok(())
    }

    /// `c` (`sheaf backup`, from [`Ctx::sheaf_op`] or [`Ctx::repo_op`]) of the source with permutation `p`'s settings and `where_to` (`--to`
    /// stripes, or a repository and its type), timed after settling; its figures (bytes read,
    /// bytes written, buffers used). `what` ends the label and names a failure.
    pub(super) fn timed_backup(&self, mut c: Command, p: &Permutation, where_to: &[&str], what: &str) -> Result<(Finished, (u64, u64, usize))> {
        c.arg(&self.src.arg).args(where_to);
        c.args(["-c", &p.compression, "--transfer-size", &p.transfer_size.to_string(), "--json", "--label"]).arg(format!("sheaf bench: {}, {what}", p.name()));
        if let Some(b) = p.buffer_count {
            c.args(["--buffer-count", &b.to_string()]);
        }
        self.settle()?;
        let b = self.measure(c)?;
        if !b.ok() {
            return Err(b.failure(&format!("sheaf backup ({}, {what})", p.name())));
        }
        let figures = backup_figures(&b)?;
        Ok((b, figures))
    }

    /// One repeat of a sheaf permutation.
    pub(super) fn sheaf_run(&mut self, p: &Permutation, repeat: usize) -> Result<Sample> {
        let stripes: Vec<String> = (0..p.stripes).map(|k| p.target.stripe_location(&self.work_name, k).unwrap_or_else(|| "nul".to_string())).collect();
        let to: Vec<&str> = stripes.iter().flat_map(|s| ["--to", s.as_str()]).collect();
        let (b, (bytes_read, size_bytes, buffers_used)) = self.timed_backup(self.sheaf_op("backup"), p, &to, &format!("run {repeat}"))?;
        let (mut verify, mut restore) = (None, None);
        if p.target != BenchTarget::Nul {
            let mut c = self.sheaf_op("verify");
            c.args([&stripes[0], "--json"]);
            self.settle()?;
            let v = self.measure(c)?;
            if !v.ok() {
                return Err(v.failure(&format!("sheaf verify ({})", p.name())));
            }
            verify = Some(v.cost);
            // Objects restore into --restore-dir, else the temporary folder.
            let dest = self.restore_dir(p.target.dirs().first().map_or_else(std::env::temp_dir, Clone::clone).as_path());
            let mut c = self.sheaf_op("restore");
            c.args([&stripes[0], "--json", "--to"]).arg(&dest);
            let (r, _) = self.timed_restore(&dest, |_| Ok(()), c, |_| true)?;
            if !r.ok() {
                return Err(r.failure(&format!("sheaf restore ({})", p.name())));
            }
            restore = Some(r.cost);
            remove_stripes(&p.target, &stripes);
        }
        Ok(Sample {
            setting: Setting {
                tool: "sheaf".into(),
                compression: p.compression.clone(),
                settings: String::new(),
                stripes: p.stripes,
                transfer_size: p.transfer_size,
                buffer_count: p.buffer_count,
                target: p.target.to_string(),
                backup_type: "full".into(),
            },
            buffers_used: Some(buffers_used),
            repeat,
            bytes_read,
            size_bytes,
            backup: b.cost,
            verify,
            restore,
            delta_restore: None,
            consolidate: None,
        })
    }
}

/// Remove a run's stripes: files, or objects through sheaf's own S3 store (configured by the
/// environment, as the measured children were). Best effort: a leftover is named by the next run's
/// "already exists".
fn remove_stripes(target: &BenchTarget, stripes: &[String]) {
    match target {
        BenchTarget::Dir(_) => stripes.iter().for_each(|s| {
            let _ = std::fs::remove_file(s);
        }),
        BenchTarget::S3(_) => {
            let schemes = sheaf_s3::S3Schemes::new(sheaf_s3::S3Options::default());
            for s in stripes {
                if let Ok(l) = sheaf_core::Location::parse(s, &schemes) {
                    let _ = l.store().delete(l.name());
                }
            }
        }
        BenchTarget::Nul => {}
    }
}
