//! The runner: every permutation of the matrix, each repeat a backup, a verify and a restore (to
//! disk targets), each operation a child process of sheaf measured on its own; then the peers,
//! timed the same way. Every operation starts with nothing dirty (or a dropped cache) and is
//! timed until durable.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sheaf_core::{Error, ErrorKind, Result};
use sheaf_pg::scratch::{self, ScratchCluster};

use crate::matrix::{BenchTarget, Matrix, Permutation};
use crate::measure::{self, Cost, Finished};
use crate::peers::{self, BackRest, Peer, PeerRun};
use crate::results::{rows, BenchResult, RunInfo, Sample, Setting};
use crate::stats::summarize;

/// What to back up.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// A directory tree.
    Path(PathBuf),
    /// A running PostgreSQL server (libpq URL).
    Url(String),
    /// A throwaway cluster loaded with TPC-H at this scale, torn down afterwards.
    Tpch(f64),
    /// `files:COUNTxSIZE`: COUNT generated files of SIZE bytes (seeded, 1,000 to a folder), removed
    /// afterwards: the many-small-files case (schema-per-tenant clusters, mail spools).
    Files {
        /// How many files.
        count: u64,
        /// Bytes each.
        size: u64,
    },
}

impl Source {
    /// Parse a positional source or `--dataset tpch:SCALE` / `files:COUNTxSIZE`.
    ///
    /// # Errors
    /// Neither or both given, or a dataset that is neither.
    pub fn from_args(source: Option<&str>, dataset: Option<&str>) -> Result<Source> {
        match (source, dataset) {
            (Some(_), Some(_)) => Err(Error::invalid("give a source or --dataset, not both")),
            (None, None) => Err(Error::invalid(
                "nothing to back up: give a source (a directory or a postgres:// URL) or --dataset tpch:SCALE (a throwaway cluster loaded with TPC-H)",
            )),
            (Some(s), None) if s.starts_with("postgres://") || s.starts_with("postgresql://") => Ok(Source::Url(s.to_string())),
            (Some(s), None) => Ok(Source::Path(PathBuf::from(s))),
            (None, Some(d)) if d.starts_with("files:") => {
                let (count, size) = sheaf_core::datagen::parse_files_spec(&d["files:".len()..]).map_err(|e| Error::invalid(format!("--dataset {d}: {}", e.message())))?;
                Ok(Source::Files { count, size })
            }
            (None, Some(d)) => {
                let scale = d.strip_prefix("tpch:").and_then(|s| s.parse::<f64>().ok()).filter(|s| *s > 0.0 && *s <= 100.0);
                scale.map(Source::Tpch).ok_or_else(|| Error::invalid(format!("--dataset '{d}': give tpch:SCALE, e.g. tpch:1 (about 1 GB) or tpch:0.01, or files:COUNTxSIZE, e.g. files:100000x8KiB")))
            }
        }
    }

    /// How the report names it (no password).
    pub fn describe(&self) -> String {
        match self {
            Source::Path(p) => p.display().to_string(),
            Source::Url(u) => sheaf_pg::server::redact(u),
            Source::Tpch(s) => format!("TPC-H scale {s} in a throwaway PostgreSQL cluster"),
            Source::Files { count, size } => format!("{count} generated files of {} (seeded text, 1,000 to a folder)", sheaf_core::size::format_size(*size)),
        }
    }
}

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

/// What the runner tells its caller.
#[derive(Debug)]
pub enum Event<'a> {
    /// Something is being prepared.
    Note(&'a str),
    /// Something did not go as asked but the bench goes on (a peer missing or failing).
    Warning(&'a str),
    /// A run starts: `index` from 1 of `total`, `eta` once one run has finished.
    Run {
        /// Which run, from 1.
        index: usize,
        /// Runs in all.
        total: usize,
        /// Tool and permutation.
        what: &'a str,
        /// Which repeat, from 1.
        repeat: usize,
        /// Repeats per permutation.
        repeats: usize,
        /// Time left, estimated from the runs so far.
        eta: Option<Duration>,
    },
}

/// Work directories to remove if the bench is interrupted (signal handlers cannot unwind).
static WORK_DIRS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn work_dirs() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    WORK_DIRS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stop the operation being measured and remove every work directory of running benches: for an
/// interrupt handler (signal handlers cannot unwind).
pub fn cleanup() {
    measure::stop_current();
    let dirs = work_dirs().clone();
    for d in dirs {
        // The bench's own thread may be removing it too (its run just failed): retry until gone.
        for _ in 0..100 {
            if std::fs::symlink_metadata(&d).is_err() {
                break;
            }
            let _ = std::fs::remove_dir_all(&d);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// A work directory `NAME` in `parent`, created now and removed on drop (or by [`cleanup`]).
struct WorkDir(PathBuf);

impl WorkDir {
    /// `parent` must exist (a mistyped target is an error, not a new folder); `name` must not
    /// (created atomically, never through a planted link).
    fn create(parent: &Path, name: &str) -> Result<WorkDir> {
        if !parent.is_dir() {
            return Err(Error::new(ErrorKind::Target, format!("{} is not a directory: create it, or name another --target or --restore-dir", parent.display())));
        }
        let path = parent.join(name);
        std::fs::create_dir(&path).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", path.display()), e))?;
        let dir = WorkDir(path);
        work_dirs().push(dir.0.clone());
        // Peers run as the server's user (pgBackRest) and must reach into it.
        set_mode(&dir.0, 0o755)?;
        Ok(dir)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        work_dirs().retain(|d| d != &self.0);
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| Error::io(ErrorKind::Target, format!("chmod {}", path.display()), e))
}

fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(ErrorKind::Target, format!("cannot remove {}", path.display()), e)),
    }
}

/// Bytes of all files under `path`.
fn tree_bytes(path: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(path) else { return 0 };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// The prepared source: what children are pointed at, and the cluster when we made one.
struct Prepared {
    arg: String,
    cluster: Option<ScratchCluster>,
    url: Option<String>,
}

fn prepare_source(opts: &BenchOptions, backrest: bool, work_name: &str, note: &dyn Fn(Event)) -> Result<(Prepared, Option<WorkDir>)> {
    match &opts.source {
        Source::Path(p) => {
            if !p.is_dir() {
                return Err(Error::new(ErrorKind::Source, format!("{} is not a directory: give a directory, a postgres:// URL or --dataset tpch:SCALE", p.display())));
            }
            Ok((Prepared { arg: p.display().to_string(), cluster: None, url: None }, None))
        }
        Source::Url(u) => Ok((Prepared { arg: u.clone(), cluster: None, url: Some(u.clone()) }, None)),
        Source::Files { count, size } => {
            // Beside the first directory target (the disk being measured), else in the temporary folder.
            let parent = opts.matrix.target.iter().find_map(|t| t.dirs().first().cloned()).unwrap_or_else(std::env::temp_dir);
            let dir = WorkDir::create(&parent, &format!("{work_name}-files"))?;
            note(Event::Note(&format!("generating {count} files of {} in {}", sheaf_core::size::format_size(*size), dir.0.display())));
            sheaf_core::datagen::make_small_files(&dir.0, *count, *size, 0.6, 1)
                .map_err(|e| Error::io(ErrorKind::Target, format!("cannot generate files in {}", dir.0.display()), e))?;
            Ok((Prepared { arg: dir.0.display().to_string(), cluster: None, url: None }, Some(dir)))
        }
        Source::Tpch(scale) => {
            note(Event::Note("starting a throwaway PostgreSQL cluster (installing Debian's postgresql if missing)"));
            // pgBackRest needs the WAL archived through it; archiving stays off otherwise. During
            // the load the archiver discards (only WAL from each backup's start matters), and
            // pgBackRest takes over once the data is in.
            let settings: &[&str] = if backrest { &["archive_mode = on", "archive_command = 'true'"] } else { &[] };
            let cluster = ScratchCluster::create(None, &[], settings)?;
            note(Event::Note(&format!("cluster in {} on port {}", cluster.data.display(), cluster.port)));
            cluster.query("postgres", "CREATE DATABASE tpch")?;
            note(Event::Note(&format!("loading TPC-H scale {scale} (tpchgen)")));
            crate::tpch::load(&cluster.url("tpch"), *scale, &|t| note(Event::Note(&format!("  {t}"))))?;
            // Settle the pages (hint bits, visibility map) so that every run reads the same bytes.
            cluster.query("tpch", "VACUUM ANALYZE")?;
            cluster.query("postgres", "CHECKPOINT")?;
            // pgBackRest's config, logs and locks.
            let home = if backrest {
                let dir = WorkDir::create(&std::env::temp_dir(), &format!("{work_name}-pgbackrest"))?;
                scratch::server_dir(&dir.0)?;
                set_mode(&dir.0, 0o755)?;
                Some(dir)
            } else {
                None
            };
            let url = cluster.url("postgres");
            Ok((Prepared { arg: url.clone(), cluster: Some(cluster), url: Some(url) }, home))
        }
    }
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

/// Runs so far, for the ETA.
struct Clock {
    start: Instant,
    done: usize,
    total: usize,
}

impl Clock {
    fn eta(&self) -> Option<Duration> {
        (self.done > 0).then(|| self.start.elapsed().mul_f64((self.total - self.done) as f64 / self.done as f64))
    }
}

/// The parts of `sheaf backup --json` the bench uses.
fn backup_figures(f: &Finished) -> Result<(u64, u64, usize)> {
    let v: serde_json::Value = serde_json::from_str(f.stdout.trim())
        .map_err(|e| Error::new(ErrorKind::Io, format!("sheaf backup --json printed no JSON ({e}): {}", f.stdout)))?;
    let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).ok_or_else(|| Error::new(ErrorKind::Io, format!("sheaf backup --json lacks {k}")));
    Ok((n("bytes_read")?, n("bytes_written")?, n("buffer_count")? as usize))
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

struct Ctx<'a> {
    opts: &'a BenchOptions,
    src: &'a Prepared,
    archiving: bool,
    work_name: String,
    note: &'a dyn Fn(Event),
    clock: Clock,
    trash: Trash,
}

/// Restored trees, set aside until the bench ends instead of deleted between runs. Deleting tens
/// of thousands of files taxes every file created in the minutes after it on ext4 without a journal
/// (it skips inodes deleted in the last 60 s, or 360 s where their block is dirty again, for
/// each new inode): in one run, tar's restore of 100,000 small files took 7.4 to 31 s depending
/// on what had been deleted before it. Where space runs short they are deleted after all, with a
/// warning, as are peers' backups (few large files, cheap to delete).
#[derive(Default)]
struct Trash {
    /// Trees set aside, and how many so far (names are unique).
    kept: Vec<PathBuf>,
    made: usize,
    /// The most space one restore took, and that the warning was given.
    largest: u64,
    warned: bool,
}

impl Trash {
    /// Before a restore into `dest`: room for it, free space permitting without deleting what
    /// earlier restores left; returns the free space, for [`Trash::set_aside`].
    fn make_room(&mut self, dest: &Path, note: &dyn Fn(Event)) -> Result<Option<u64>> {
        remove(dest)?;
        let parent = dest.parent().unwrap_or(dest);
        let free = || sheaf_core::restore::free_space(parent).map(|(_, f)| f);
        if !self.kept.is_empty() && free().is_some_and(|f| f < self.largest.saturating_add(self.largest / 2).saturating_add(1 << 30)) {
            for d in self.kept.drain(..) {
                remove(&d)?;
            }
            if !self.warned {
                self.warned = true;
                note(Event::Warning(&format!(
                    "{} is short of space: restored trees were deleted between runs, and restores soon after such deletes can be slower (ext4 without a journal)",
                    parent.display()
                )));
            }
        }
        Ok(free())
    }

    /// After a restore into `dest` (which had `before` bytes free): set it aside until the end.
    fn set_aside(&mut self, dest: &Path, before: Option<u64>) -> Result<()> {
        let parent = dest.parent().unwrap_or(dest);
        if let (Some(b), Some((_, after))) = (before, sheaf_core::restore::free_space(parent)) {
            self.largest = self.largest.max(b.saturating_sub(after));
        }
        if std::fs::symlink_metadata(dest).is_err() {
            return Ok(());
        }
        self.made += 1;
        let aside = parent.join(format!("restored-{}", self.made));
        match std::fs::rename(dest, &aside) {
            Ok(()) => self.kept.push(aside),
            Err(_) => remove(dest)?,
        }
        Ok(())
    }
}

impl Ctx<'_> {
    fn sheaf(&self) -> Command {
        let mut c = Command::new(&self.opts.sheaf);
        if let Some(cat) = &self.opts.catalog {
            c.arg("--catalog").arg(cat);
        }
        c
    }

    /// [`Ctx::sheaf`] for an operation on the bench's sets: with the encryption secret's flags.
    fn sheaf_op(&self, op: &str) -> Command {
        let mut c = self.sheaf();
        c.arg(op).args(&self.opts.key_args);
        c
    }

    fn settle(&self) -> Result<()> {
        settle(self.opts, self.src.cluster.as_ref(), self.archiving)
    }

    fn announce(&mut self, what: &str, repeat: usize) {
        let ev = Event::Run { index: self.clock.done + 1, total: self.clock.total, what, repeat, repeats: self.opts.matrix.repeat, eta: self.clock.eta() };
        (self.note)(ev);
    }

    /// Where a restore goes: always inside this bench's own work folder (in --restore-dir, or
    /// beside the stripes), never a path of the user's.
    fn restore_dir(&self, target_dir: &Path) -> PathBuf {
        self.opts.restore_dir.as_deref().unwrap_or(target_dir).join(&self.work_name).join("restore")
    }

    /// With a warm cache asked for, make it warm: one untimed read of the whole source (a backup
    /// to nul without compression), so the first timed run does not read cold and the report's
    /// "warm" holds from the first run on.
    fn warm_up(&mut self) -> Result<()> {
        if self.opts.drop_caches {
            return Ok(());
        }
        (self.note)(Event::Note("warming the cache: one untimed read of the source"));
        let mut c = self.sheaf();
        c.arg("backup").arg(&self.src.arg).args(["--to", "nul", "-c", "none", "--json", "--label", "sheaf bench: cache warm-up (untimed)"]);
        let b = measure::run(c)?;
        if !b.ok() {
            return Err(b.failure("sheaf backup to nul (the cache warm-up)"));
        }
        let (bytes_read, _, _) = backup_figures(&b)?;
        (self.note)(Event::Note(&format!("cache warm: read {} in {:.1} s, untimed", sheaf_core::size::format_size(bytes_read), b.cost.seconds)));
        Ok(())
    }

    /// One repeat of a sheaf permutation.
    fn sheaf_run(&mut self, p: &Permutation, repeat: usize) -> Result<Sample> {
        let stripes: Vec<String> = (0..p.stripes)
            .map(|k| p.target.stripe_location(&self.work_name, k).unwrap_or_else(|| "nul".to_string()))
            .collect();
        let mut c = self.sheaf_op("backup");
        c.arg(&self.src.arg);
        for s in &stripes {
            c.arg("--to").arg(s);
        }
        c.args(["-c", &p.compression, "--transfer-size", &p.transfer_size.to_string(), "--json", "--label"])
            .arg(format!("sheaf bench: {}, run {repeat}", p.name()));
        if let Some(b) = p.buffer_count {
            c.args(["--buffer-count", &b.to_string()]);
        }
        self.settle()?;
        let b = measure::run(c)?;
        if !b.ok() {
            return Err(b.failure(&format!("sheaf backup ({})", p.name())));
        }
        let (bytes_read, size_bytes, buffers_used) = backup_figures(&b)?;
        let (mut verify, mut restore) = (None, None);
        if p.target != BenchTarget::Nul {
            let mut c = self.sheaf_op("verify");
            c.args([&stripes[0], "--json"]);
            self.settle()?;
            let v = measure::run(c)?;
            if !v.ok() {
                return Err(v.failure(&format!("sheaf verify ({})", p.name())));
            }
            verify = Some(v.cost);
            // Objects restore into --restore-dir, else the temporary folder.
            let dest = self.restore_dir(p.target.dirs().first().map_or_else(std::env::temp_dir, Clone::clone).as_path());
            let free = self.trash.make_room(&dest, self.note)?;
            let mut c = self.sheaf_op("restore");
            c.args([&stripes[0], "--json", "--to"]).arg(&dest);
            self.settle()?;
            let r = measure::run(c)?;
            self.trash.set_aside(&dest, free)?;
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
            },
            buffers_used: Some(buffers_used),
            repeat,
            bytes_read,
            size_bytes,
            backup: b.cost,
            verify,
            restore,
        })
    }

    /// One repeat of pg_basebackup into `dir`, restored by extracting its tar files.
    fn basebackup_run(&mut self, bin: &Path, run: &PeerRun, dir: &Path, repeat: usize) -> Result<(u64, Cost, Cost)> {
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
        let free = self.trash.make_room(&dest, self.note)?;
        std::fs::create_dir_all(&dest).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", dest.display()), e))?;
        self.settle()?;
        let r = measure::run(peers::basebackup_restore_command(&out, &dest, run))?;
        let restored = dest.join("PG_VERSION").exists();
        self.trash.set_aside(&dest, free)?;
        remove(&dest.with_extension("ts"))?;
        remove(&out)?;
        if !r.ok() || !restored {
            return Err(r.failure(&format!("extracting pg_basebackup's tar files ({})", run.settings())));
        }
        Ok((size, b.cost, r.cost))
    }

    /// One repeat of tar through the codec's tool into `dir`, restored with the decompressor into
    /// a fresh folder; both timed until durable, as sheaf's runs are.
    fn tar_run(&mut self, run: &PeerRun, dir: &Path, repeat: usize) -> Result<(u64, Cost, Cost)> {
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
        let free = self.trash.make_room(&dest, self.note)?;
        std::fs::create_dir_all(&dest).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", dest.display()), e))?;
        self.settle()?;
        let r = measure::run(peers::tar_restore_command(&out, &dest, run))?;
        let restored = std::fs::read_dir(&dest).map(|mut d| d.next().is_some()).unwrap_or(false);
        self.trash.set_aside(&dest, free)?;
        let _ = std::fs::remove_file(&out);
        if !r.ok() || !restored {
            return Err(r.failure(&format!("extracting tar ({})", run.settings())));
        }
        Ok((size, b.cost, r.cost))
    }

    /// One repeat of pgBackRest: a full backup into the repository, then a restore.
    fn backrest_run(&mut self, br: &BackRest, run: &PeerRun, dir: &Path, repeat: usize) -> Result<(u64, Cost, Cost)> {
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
        let free = self.trash.make_room(&dest, self.note)?;
        scratch::server_dir(&dest)?;
        let process_max: Vec<&str> = run.options.iter().filter(|o| o.starts_with("--process-max")).map(String::as_str).collect();
        let pg1 = format!("--pg1-path={}", dest.display());
        let mut args = vec!["restore", pg1.as_str()];
        args.extend(process_max);
        self.settle()?;
        let r = measure::run(br.command(&args))?;
        let restored = dest.join("PG_VERSION").exists();
        self.trash.set_aside(&dest, free)?;
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

/// The repository size of the newest backup in `pgbackrest info --output=json`.
fn backrest_size(json: &str) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    v.get(0)?.get("backup")?.as_array()?.last()?.pointer("/info/repository/size")?.as_u64()
}

/// Set up pgBackRest on the cluster with its repository in `repo`: config and stanza, then WAL
/// archiving through it. On failure archiving is back to discarding, so nothing waits on it.
fn backrest_setup(cluster: &ScratchCluster, home: &Path, repo: &Path) -> Result<BackRest> {
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
fn backrest_teardown(cluster: &ScratchCluster) {
    let _ = cluster.query("postgres", "ALTER SYSTEM SET archive_command = 'true'");
    let _ = cluster.query("postgres", "SELECT pg_reload_conf()");
}

/// A bench that ran, completely or not.
#[derive(Debug)]
pub struct Outcome {
    /// What was measured (all of it, or up to the failure).
    pub result: BenchResult,
    /// The sheaf operation that failed and stopped the sweep; the result holds the runs before it.
    pub failure: Option<Error>,
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

/// Refuse a target or restore folder inside a directory source: the backup would read its own
/// stripes, and restores would land in the data.
fn check_overlap(opts: &BenchOptions) -> Result<()> {
    let Source::Path(src) = &opts.source else { return Ok(()) };
    let Ok(src) = src.canonicalize() else { return Ok(()) };
    let dirs = opts.matrix.target.iter().flat_map(|t| t.dirs().to_vec());
    for d in dirs.chain(opts.restore_dir.clone()) {
        if d.canonicalize().is_ok_and(|d| d.starts_with(&src)) {
            return Err(Error::invalid(format!(
                "{} is inside the source {}: the backups would read their own stripes; choose a folder outside it",
                d.display(),
                src.display()
            )));
        }
    }
    Ok(())
}

/// Run the bench. `note` hears progress; the library prints nothing.
///
/// # Errors
/// Bad options, or the source or a target unusable before anything ran. A sheaf operation that
/// fails later stops the sweep and comes back in [`Outcome::failure`] with the runs before it;
/// peers that fail are warnings, their rows left out.
pub fn run(opts: &BenchOptions, note: &dyn Fn(Event)) -> Result<Outcome> {
    let started = Instant::now();
    let started_at = sheaf_core::time::utc_now();
    let mut warnings: Vec<String> = Vec::new();
    let warn = |w: String, warnings: &mut Vec<String>| {
        note(Event::Warning(&w));
        warnings.push(w);
    };
    if opts.drop_caches {
        measure::drop_caches()?;
    }
    check_overlap(opts)?;
    let mut dir_targets: Vec<PathBuf> = Vec::new();
    for t in &opts.matrix.target {
        if let BenchTarget::Dir(d) = t {
            if !dir_targets.contains(&d[0]) {
                dir_targets.push(d[0].clone());
            }
        }
    }
    if matches!(opts.source, Source::Tpch(_)) && opts.peers.contains(&Peer::PgBasebackup) {
        // Installing PostgreSQL brings pg_basebackup: before looking for it.
        scratch::ensure_installed()?;
    }
    // Peers: only those that apply and are installed.
    let mut peers: Vec<Peer> = Vec::new();
    for &p in &opts.peers {
        let why = match (&opts.source, p) {
            (Source::Path(_) | Source::Files { .. }, Peer::PgBasebackup | Peer::PgBackRest) => Some("it backs up PostgreSQL servers, and the source is a directory".to_string()),
            (Source::Url(_) | Source::Tpch(_), Peer::Tar) => Some("it is measured on directory sources (a running server's files are not consistent to tar)".to_string()),
            (Source::Url(_), Peer::PgBackRest) => Some("it must archive the server's WAL, which sheaf sets up only on the clusters it makes (--dataset tpch:SCALE)".to_string()),
            _ if dir_targets.is_empty() => Some("peers write to disk: give a directory in --target".to_string()),
            _ if peers::find(p.program()).is_none() => Some(format!(
                "{} is not installed (Debian: apt-get install {})",
                p.program(),
                match p {
                    Peer::PgBackRest => "pgbackrest",
                    Peer::Tar => "tar",
                    Peer::PgBasebackup => "postgresql-client",
                }
            )),
            _ => None,
        };
        match why {
            Some(why) => warn(format!("peer {} skipped: {why}", p.program()), &mut warnings),
            None => peers.push(p),
        }
    }
    // Unique across hosts sharing a target and across runs of this process.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let work_name = format!("sheaf-bench-{}-{nanos:08x}", std::process::id());
    // Work folders first: a missing target fails before a cluster is built and loaded.
    let mut works: Vec<WorkDir> = Vec::new();
    let parents = opts.matrix.target.iter().flat_map(|t| t.dirs().to_vec());
    // Restores from object storage land in --restore-dir, else the temporary folder.
    let s3_restores = opts.matrix.target.iter().any(|t| matches!(t, BenchTarget::S3(_))) && opts.restore_dir.is_none();
    let restores = opts.restore_dir.clone().or_else(|| s3_restores.then(std::env::temp_dir));
    for d in parents.chain(restores) {
        if !works.iter().any(|w| w.0 == d.join(&work_name)) {
            works.push(WorkDir::create(&d, &work_name)?);
        }
    }
    let backrest = peers.contains(&Peer::PgBackRest);
    let (src, home) = prepare_source(opts, backrest, &work_name, note)?;
    let cores = sheaf_core::backup::available_cores();
    // pg_basebackup's runs before pgBackRest's, so that none of them shares the machine with
    // pgBackRest's WAL archiving.
    let mut peer_runs: Vec<PeerRun> = opts.matrix.compression.iter().flat_map(|c| peers::runs_for(&peers, c, cores)).collect();
    peer_runs.sort_by_key(|r| r.tool == "pgbackrest");
    let perms = opts.matrix.permutations();
    let total = (perms.len() + peer_runs.len() * dir_targets.len()) * opts.matrix.repeat;
    let mut ctx = Ctx {
        opts,
        src: &src,
        archiving: backrest,
        work_name: work_name.clone(),
        note,
        clock: Clock { start: Instant::now(), done: 0, total },
        trash: Trash::default(),
    };
    ctx.warm_up()?;
    let mut samples = Vec::new();
    let mut failure = None;
    'sweep: for p in &perms {
        for r in 1..=opts.matrix.repeat {
            ctx.announce(&format!("sheaf {}", p.name()), r);
            match ctx.sheaf_run(p, r) {
                Ok(s) => samples.push(s),
                Err(e) => {
                    failure = Some(e);
                    break 'sweep;
                }
            }
            ctx.clock.done += 1;
        }
    }
    let sheaf_read: Vec<f64> = samples.iter().map(|s| s.bytes_read as f64).collect();
    let source_bytes = summarize(&sheaf_read).map_or(0, |s| s.median as u64);
    let basebackup = peers::find("pg_basebackup");
    for dir in dir_targets.iter().filter(|_| failure.is_none()) {
        let mut backrest_ready: Option<Option<BackRest>> = None;
        for run in &peer_runs {
            let setting = Setting {
                tool: run.tool.to_string(),
                compression: run.codec.clone(),
                settings: run.settings(),
                stripes: 1,
                transfer_size: 0,
                buffer_count: None,
                target: dir.display().to_string(),
            };
            let br = if run.tool == "pgbackrest" {
                // Set up on the first of its runs on this target, after pg_basebackup's.
                let ready = backrest_ready.get_or_insert_with(|| match (&home, &src.cluster) {
                    (Some(h), Some(c)) => match backrest_setup(c, &h.0, &dir.join(&work_name).join("pgbackrest")) {
                        Ok(b) => Some(b),
                        Err(e) => {
                            warn(format!("peer pgbackrest skipped on {}: {e}", dir.display()), &mut warnings);
                            None
                        }
                    },
                    _ => None,
                });
                match ready {
                    Some(b) => Some(&*b),
                    None => {
                        ctx.clock.done += opts.matrix.repeat;
                        continue;
                    }
                }
            } else {
                None
            };
            for r in 1..=opts.matrix.repeat {
                ctx.announce(&format!("{} {} ({}) -> {}", run.tool, run.codec, run.settings(), dir.display()), r);
                ctx.clock.done += 1;
                let result = match br {
                    Some(br) => ctx.backrest_run(br, run, dir, r),
                    None if run.tool == "tar" => ctx.tar_run(run, dir, r),
                    None => ctx.basebackup_run(basebackup.as_deref().expect("checked above"), run, dir, r),
                };
                match result {
                    Ok((size, backup, restore)) => samples.push(Sample {
                        setting: setting.clone(),
                        buffers_used: None,
                        repeat: r,
                        bytes_read: source_bytes,
                        size_bytes: size,
                        backup,
                        verify: None,
                        restore: Some(restore),
                    }),
                    Err(e) => {
                        samples.retain(|s| s.setting != setting);
                        warn(format!("{} {} left out: {e}", run.tool, run.settings()), &mut warnings);
                        ctx.clock.done += opts.matrix.repeat - r;
                        break;
                    }
                }
            }
        }
        if let (Some(Some(_)), Some(c)) = (&backrest_ready, &src.cluster) {
            backrest_teardown(c);
        }
    }
    drop(works);
    drop(src);
    drop(home);
    if let Some(e) = &failure {
        warnings.push(format!("the sweep stopped early: {e}"));
    }
    let rows = rows(&samples, cores);
    Ok(Outcome {
        result: BenchResult {
            info: RunInfo {
                started: started_at,
                source: opts.source.describe(),
                cores,
                cache: if opts.drop_caches { "dropped before every operation".into() } else { "warm (an untimed read of the whole source first; each operation starts after sync, nothing dirty)".into() },
                repeats: opts.matrix.repeat,
                sheaf_version: env!("CARGO_PKG_VERSION").to_string(),
                seconds: started.elapsed().as_secs_f64(),
                warnings,
            },
            rows,
            samples,
        },
        failure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_with_clear_errors() {
        assert_eq!(Source::from_args(Some("/srv/data"), None).unwrap(), Source::Path("/srv/data".into()));
        assert_eq!(Source::from_args(Some("postgres://u:pw@h/db"), None).unwrap().describe(), sheaf_pg::server::redact("postgres://u:pw@h/db"));
        assert_eq!(Source::from_args(None, Some("tpch:0.5")).unwrap(), Source::Tpch(0.5));
        assert_eq!(Source::from_args(None, Some("files:100000x8KiB")).unwrap(), Source::Files { count: 100_000, size: 8192 });
        assert!(Source::from_args(None, Some("files:many")).unwrap_err().to_string().contains("COUNTxSIZE"));
        for (s, d, needle) in [
            (None, Some("tpch:0"), "give tpch:SCALE"),
            (None, Some("tpcds:1"), "give tpch:SCALE"),
            (Some("/x"), Some("tpch:1"), "not both"),
            (None, None, "nothing to back up"),
        ] {
            assert!(Source::from_args(s, d).unwrap_err().to_string().contains(needle), "{s:?} {d:?}");
        }
    }

    #[test]
    fn restored_trees_wait_for_the_end_unless_space_runs_short() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("restore");
        let mut t = Trash::default();
        let warnings = std::cell::RefCell::new(Vec::new());
        let note = |e: Event| {
            if let Event::Warning(w) = e {
                warnings.borrow_mut().push(w.to_string());
            }
        };
        for round in 1..=2 {
            let free = t.make_room(&dest, &note).unwrap();
            std::fs::create_dir_all(dest.join("sub")).unwrap();
            std::fs::write(dest.join("sub/f"), vec![7u8; 1 << 20]).unwrap();
            t.set_aside(&dest, free).unwrap();
            assert!(!dest.exists(), "round {round}: the name is free for the next restore");
            assert!(d.path().join(format!("restored-{round}/sub/f")).exists(), "round {round}: kept, not deleted");
        }
        assert!(warnings.borrow().is_empty());
        // Not room for another restore the size of the largest: what was kept goes, once said.
        t.largest = u64::MAX / 2;
        for _ in 0..2 {
            t.make_room(&dest, &note).unwrap();
            assert!(!d.path().join("restored-1").exists() && !d.path().join("restored-2").exists());
            std::fs::create_dir_all(&dest).unwrap();
            t.set_aside(&dest, None).unwrap();
        }
        assert_eq!(warnings.borrow().len(), 1, "{:?}", warnings.borrow());
        assert!(warnings.borrow()[0].contains("short of space"));
    }

    #[test]
    fn backrest_size_reads_the_newest_backup() {
        let json = r#"[{"name":"bench","backup":[{"info":{"repository":{"size":10}}},{"info":{"repository":{"size":42}}}]}]"#;
        assert_eq!(backrest_size(json), Some(42));
        assert_eq!(backrest_size("[]"), None);
        assert_eq!(backrest_size("not json"), None);
    }
}
