//! The archiver's look-ahead, its drop record, and recovery's prefetch, kept in a local spool.
//!
//! - **Look-ahead** ([`push_ahead`]): when PostgreSQL asks for one segment and more are `.ready`
//!   behind it, one call pushes up to `parallel` of them at once and leaves a marker for each extra
//!   one (`out/NAME.ok`: the file's size, mtime and inode when it was pushed). The archiver's next
//!   calls find their marker and return at once. A marker whose file changed is ignored.
//! - **Queue bound**: in [`crate::wal::queue`], which keeps its drop records in the spool too.
//! - **Prefetch** ([`Spool::serve`], [`prefetch`]): recovery asks for segments one at a time;
//!   after each, a background prefetcher keeps the next `parallel` segments fetched and checked in
//!   `in/`, so the next call is a rename. Each file is written under a temporary name and renamed,
//!   so a name in `in/` is always whole.
//!
//! The spool lives by default in `pg_wal/.sheaf/` (one folder per repository, by a hash of its
//! location): on the same filesystem as pg_wal, so a prefetched segment is renamed into place, and
//! gone with the cluster whose files it describes. PostgreSQL ignores it; base backups leave out
//! pg_wal's contents.

use std::fs::{self, File};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::repo::Repo;
use serde::{Deserialize, Serialize};
use sheaf_core::blob::BlobInfo;
use sheaf_core::storage::try_lock_exclusive;
use sheaf_core::whole::{Durability, WholeFile};
use sheaf_core::{CodecSpec, Error, ErrorKind, Result};

use crate::cluster::walname::{self, segment_name, WalFile, WalKind};
use crate::wal::archive::{fetch, fetch_tmp_name as tmp_name, push, Pushed};

/// One repository's spool.
#[derive(Clone, Debug)]
pub struct Spool {
    dir: PathBuf,
}

fn io(what: String, e: std::io::Error) -> Error {
    Error::io(ErrorKind::Io, what, e)
}

/// FNV-1a, 64 bits: a stable name for a repository's folder (not a security boundary).
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

impl Spool {
    /// The spool for the repository `key` names (its location and, for S3, the endpoint): under
    /// `base` (the `spool` setting) if given, else `WAL_DIR/.sheaf`.
    pub fn new(base: Option<&Path>, wal_dir: &Path, key: &str) -> Spool {
        let base = base.map_or_else(|| wal_dir.join(".sheaf"), Path::to_path_buf);
        Spool { dir: base.join(format!("{:016x}", fnv(key))) }
    }

    /// Its folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its folder `part`, made if missing.
    pub(crate) fn sub(&self, part: &str) -> Result<PathBuf> {
        let d = self.dir.join(part);
        sheaf_core::whole::create_dirs(&d).map_err(|e| io(format!("cannot create the spool folder {} (set spool = \"DIR\" or --spool to move it)", d.display()), e))?;
        Ok(d)
    }
}

/// Write `bytes` as the whole of `path`, durably (a marker or a state file of the spool).
pub(crate) fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    sheaf_core::whole::write_whole_with(path, bytes, 0o666, ErrorKind::Io)
}

// ---------------------------------------------------------------------------------------------
// Look-ahead.

/// What a pushed file looked like, so a marker is only trusted for that very file.
#[derive(Serialize, Deserialize, PartialEq, Eq, Debug)]
struct Stamp {
    len: u64,
    mtime_ns: i128,
    ino: u64,
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let m = fs::metadata(path)?;
    Ok(Stamp { len: m.len(), mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()), ino: m.ino() })
}

/// A look-ahead push that did not get through (the archiver retries it itself).
#[derive(Clone, Debug, Serialize)]
pub struct AheadFailure {
    /// The file.
    pub name: String,
    /// Why.
    pub error: String,
}

/// What [`push_ahead`] did.
#[derive(Clone, Debug, Serialize)]
pub struct PushReport {
    /// The file PostgreSQL asked for.
    pub name: String,
    /// True when an earlier call had pushed it already (its marker was found).
    pub from_spool: bool,
    /// What was pushed now: the asked-for file first, then the look-ahead.
    pub pushed: Vec<Pushed>,
    /// Look-ahead pushes that failed.
    pub ahead_failed: Vec<AheadFailure>,
    /// The spool could not be used (look-ahead was skipped); the push itself went on.
    pub spool_error: Option<String>,
    /// Segments whose block summary was made now (for incrementals).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub summarized: Vec<String>,
    /// A summary that could not be made: the push stands; an incremental reads every page where
    /// summaries are missing (`sheaf wal-summarize` fills them in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_error: Option<String>,
}

impl PushReport {
    /// The answer for a file an earlier call's look-ahead pushed: nothing done now.
    pub fn from_spool(path: &Path) -> PushReport {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        PushReport { name, from_spool: true, pushed: Vec::new(), ahead_failed: Vec::new(), spool_error: None, summarized: Vec::new(), summary_error: None }
    }
}

/// The `.ready` segments in `wal_dir` after `name`, oldest first.
fn ready_after(wal_dir: &Path, name: &str, seg_size: u64) -> Vec<String> {
    let Ok(dir) = fs::read_dir(wal_dir.join("archive_status")) else { return Vec::new() };
    let mut v: Vec<String> = dir
        .filter_map(|e| e.ok()?.file_name().into_string().ok()?.strip_suffix(".ready").map(str::to_string))
        .filter(|n| n.as_str() > name && WalFile::parse(n, seg_size).is_some_and(|w| w.kind == WalKind::Segment))
        .collect();
    v.sort();
    v
}

impl Spool {
    /// Whether an earlier call pushed the file at `path` (the same file, unchanged): then the
    /// archiver's call is answered with no repository access. The marker is consumed either way.
    pub fn take_pushed(&self, path: &Path) -> bool {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return false };
        let marker = self.dir.join("out").join(format!("{name}.ok"));
        let Ok(text) = fs::read(&marker) else { return false };
        let _ = fs::remove_file(&marker);
        let Ok(recorded) = serde_json::from_slice::<Stamp>(&text) else { return false };
        stamp(path).is_ok_and(|now| now == recorded)
    }

    fn mark_pushed(&self, name: &str, st: &Stamp) -> Result<()> {
        let out = self.sub("out")?;
        write_whole(&out.join(format!("{name}.ok")), &serde_json::to_vec(st).expect("serialises"))
    }

    /// Markers whose file is gone from pg_wal (the archiver will never ask for them again).
    fn forget_stale(&self, wal_dir: &Path) {
        let Ok(dir) = fs::read_dir(self.dir.join("out")) else { return };
        for e in dir.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.strip_suffix(".ok").is_some_and(|seg| !wal_dir.join(seg).exists()) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// Archive the file at `path`, and with `parallel > 1` the `.ready` segments after it at the same
/// time (look-ahead), leaving markers so the archiver's next calls return at once (the caller asks
/// [`Spool::take_pushed`] first).
///
/// # Errors
/// The asked-for file's push failed ([`push`]'s errors). Look-ahead failures are reported, not
/// raised: the archiver will ask for those files itself.
pub fn push_ahead(repo: &Repo, spool: &Spool, path: &Path, codec: CodecSpec, parallel: usize) -> Result<PushReport> {
    let meta = repo.meta();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let mut report =
        PushReport { name: name.clone(), from_spool: false, pushed: Vec::new(), ahead_failed: Vec::new(), spool_error: None, summarized: Vec::new(), summary_error: None };
    let wal_dir = walname::wal_dir(path);
    let is_segment = WalFile::parse(&name, meta.wal_segment_size).is_some_and(|w| w.kind == WalKind::Segment);
    let mut todo = vec![path.to_path_buf()];
    if parallel > 1 && is_segment {
        if let Err(e) = spool.sub("out") {
            report.spool_error = Some(e.to_string());
        } else {
            spool.forget_stale(wal_dir);
            let ahead = ready_after(wal_dir, &name, meta.wal_segment_size);
            todo.extend(ahead.iter().filter(|n| !spool.dir.join("out").join(format!("{n}.ok")).exists()).take(parallel - 1).map(|n| wal_dir.join(n)));
        }
    }
    // One thread per file (at most `parallel`); each stamps its file before pushing it, so a
    // marker never vouches for bytes that changed after they were read. Each segment's summary
    // follows the one before it: they are made here in order, each as soon as its segment is
    // archived, while the later ones are still being pushed (made after the whole batch, they
    // left a core idle for as long as they took).
    let seg = meta.wal_segment_size;
    let (mut made, mut summary_error) = (Vec::new(), None);
    let results: Vec<(Option<Stamp>, Result<Pushed>)> = std::thread::scope(|s| {
        let handles: Vec<_> = todo
            .iter()
            .map(|p| {
                s.spawn(move || {
                    let st = stamp(p).ok();
                    (st, push(repo, p, codec))
                })
            })
            .collect();
        let mut out = Vec::with_capacity(handles.len());
        for (h, local) in handles.into_iter().zip(&todo) {
            let (st, r) = h.join().expect("a push thread panicked");
            if let (Ok(done), None) = (&r, &summary_error) {
                if WalFile::parse(&done.name, seg).is_some_and(|w| w.kind == WalKind::Segment) {
                    let n = done.name.as_str();
                    match crate::wal::summarize::read_summary(repo, n) {
                        Ok(Some(_)) => {}
                        Ok(None) => match crate::wal::summarize::summarize_and_store(repo, n, Some(local)) {
                            Ok(_) => made.push(n.to_string()),
                            Err(e) => summary_error = Some(format!("no block summary for {n}: {e}")),
                        },
                        Err(e) => summary_error = Some(format!("no block summary for {n}: {e}")),
                    }
                }
            }
            out.push((st, r));
        }
        out
    });
    let mut results = results.into_iter().zip(&todo);
    let ((_, first), _) = results.next().expect("the asked-for file");
    for ((st, r), p) in results {
        let n = p.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        match (r, st) {
            (Ok(done), Some(st)) => {
                if let Err(e) = spool.mark_pushed(&n, &st) {
                    report.spool_error = Some(e.to_string());
                }
                report.pushed.push(done);
            }
            (Ok(done), None) => report.pushed.push(done),
            (Err(e), _) => report.ahead_failed.push(AheadFailure { name: n, error: e.to_string() }),
        }
    }
    report.pushed.insert(0, first?);
    report.summary_error = summary_error;
    report.summarized = made;
    Ok(report)
}

// ---------------------------------------------------------------------------------------------
// Prefetch.

/// An exclusive, non-blocking lock on `path`: `Ok(None)` when another process holds it.
fn try_lock(path: &Path) -> Result<Option<File>> {
    let f = fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).map_err(|e| io(format!("cannot open {}", path.display()), e))?;
    let locked = try_lock_exclusive(&f).map_err(|e| io(format!("cannot lock {}", path.display()), e))?;
    Ok(locked.then_some(f))
}

impl Spool {
    /// Move the prefetched `name` to `dest`, if the spool holds it.
    fn take_fetched(&self, name: &str, dest: &Path) -> Result<bool> {
        let at = self.dir.join("in").join(name);
        match fs::rename(&at, dest) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::XDEV.raw_os_error()) => {
                // A spool on another filesystem: copy, then let go of the spooled one.
                // PostgreSQL makes the file durable itself; it is never seen half-written.
                let mut to = WholeFile::create_named(dest, &tmp_name(name), 0o666, ErrorKind::Io)?.sync(Durability::RenameOnly);
                fs::File::open(&at).and_then(|mut from| std::io::copy(&mut from, &mut to)).map_err(|e| io(format!("cannot copy {} to {}", at.display(), dest.display()), e))?;
                to.commit()?;
                let _ = fs::remove_file(&at);
                Ok(true)
            }
            Err(e) => Err(io(format!("cannot move {} to {}", at.display(), dest.display()), e)),
        }
    }

    /// While a running prefetcher is fetching `name`, wait for it (at most `limit`).
    fn await_in_flight(&self, name: &str, limit: Duration) {
        let dir = self.dir.join("in");
        let t0 = Instant::now();
        while dir.join(tmp_name(name)).exists() && t0.elapsed() < limit {
            // The prefetcher holds the lock for as long as it runs; a crashed one leaves its
            // temporary file behind but not the lock.
            match try_lock(&dir.join(".lock")) {
                Ok(Some(_free)) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => return,
            }
        }
    }

    /// The newest file recovery asked for, so the prefetcher knows where to look ahead from.
    fn want(&self, name: &str) -> Result<()> {
        let dir = self.sub("in")?;
        write_whole(&dir.join(".want"), name.as_bytes())
    }
}

impl Spool {
    /// Serve `name` to `dest` from the prefetch spool, if the prefetcher has it (waiting for it
    /// while it is being fetched). A segment asked for becomes the point the prefetcher reads
    /// ahead from, whether served here or not. Needs no repository access: a hit is a rename.
    ///
    /// # Errors
    /// The spool's I/O.
    pub fn serve(&self, name: &str, dest: &Path) -> Result<bool> {
        // Said first, so the prefetcher neither fetches this one (its window starts after it) nor
        // removes it while it is taken (it keeps the newest asked-for segment).
        if walname::is_segment_name(name) {
            self.want(name)?;
        }
        self.await_in_flight(name, Duration::from_secs(120));
        self.take_fetched(name, dest)
    }

    /// Whether a prefetcher holds this spool.
    pub fn prefetcher_running(&self) -> bool {
        let lock = self.dir.join("in").join(".lock");
        lock.exists() && matches!(try_lock(&lock), Ok(None))
    }
}

/// What a prefetcher did before it stopped.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PrefetchReport {
    /// Segments fetched into the spool.
    pub fetched: usize,
    /// The first segment the archive did not hold, if it got there.
    pub end: Option<String>,
    /// Fetches that failed.
    pub errors: Vec<String>,
    /// False when another prefetcher was running already (this one did nothing).
    pub ran: bool,
    /// It stopped because the server it fetched for no longer runs.
    pub server_gone: bool,
}

/// The server whose recovery a prefetcher serves, known by its data directory's `postmaster.pid`
/// as the prefetcher starts. Where there is none (`pg_rewind --restore-target-wal` runs
/// restore_command with its target stopped; a script or a person may too), nothing is watched and
/// the prefetcher ends only as it always does.
#[derive(Clone, Debug)]
pub struct RecoveringServer {
    pid_file: PathBuf,
    /// The postmaster's process id when the prefetcher started, if a server was running.
    seen: Option<u32>,
}

/// The postmaster's process id that `pid_file` names (its first line; negative for a
/// single-user server), if it can be read.
fn postmaster_pid(pid_file: &Path) -> Option<u32> {
    let text = fs::read_to_string(pid_file).ok()?;
    text.lines().next()?.trim().parse::<i64>().ok().and_then(|p| u32::try_from(p.unsigned_abs()).ok())
}

impl RecoveringServer {
    /// The server of the data directory that `dest` (restore_command's `%p`, in the data
    /// directory's `pg_wal`, or relative to it) is in.
    pub fn of_destination(dest: &Path) -> RecoveringServer {
        let dest = std::path::absolute(dest).unwrap_or_else(|_| dest.to_path_buf());
        let data = walname::wal_dir(&dest).parent().unwrap_or(Path::new("."));
        let pid_file = data.join("postmaster.pid");
        let seen = postmaster_pid(&pid_file).filter(|&p| sheaf_core::host::process_alive(p));
        RecoveringServer { pid_file, seen }
    }

    /// Whether the server seen at the start still runs: a stopped server removed its pid file, one
    /// killed left a file naming a process that is gone, one started again names another. True
    /// when no server was seen.
    pub fn running(&self) -> bool {
        let Some(seen) = self.seen else { return true };
        postmaster_pid(&self.pid_file) == Some(seen) && sheaf_core::host::process_alive(seen)
    }
}

/// Keep the `parallel` segments after the newest one recovery asked for fetched into the spool,
/// until recovery has asked for nothing new for `idle`, the archive ends, or `server` no longer
/// runs (stopped, or its data directory removed: nothing is fetched into a cluster that is gone;
/// checked before each round of fetches).
/// What it fetched and recovery did not take is removed when it stops for being idle or for the
/// server.
///
/// # Errors
/// The spool cannot be used.
pub fn prefetch(repo: &Repo, spool: &Spool, parallel: usize, idle: Duration, server: &RecoveringServer) -> Result<PrefetchReport> {
    let meta = repo.meta();
    let mut report = PrefetchReport::default();
    if !server.running() {
        report.server_gone = true;
        return Ok(report);
    }
    let dir = spool.sub("in")?;
    let Some(_lock) = try_lock(&dir.join(".lock"))? else { return Ok(report) };
    report.ran = true;
    // Left by a prefetcher that was killed: nobody else writes them while we hold the lock.
    for e in fs::read_dir(&dir).map_err(|e| io(format!("cannot read {}", dir.display()), e))?.flatten() {
        if e.file_name().to_string_lossy().ends_with(".sheaf-fetch") {
            let _ = fs::remove_file(e.path());
        }
    }
    let seg = meta.wal_segment_size;
    let (mut last_want, mut since) = (String::new(), Instant::now());
    loop {
        if !server.running() {
            report.server_gone = true;
            for e in fs::read_dir(&dir).into_iter().flatten().flatten() {
                if WalFile::parse(&e.file_name().to_string_lossy(), seg).is_some() {
                    let _ = fs::remove_file(e.path());
                }
            }
            return Ok(report);
        }
        let want = fs::read_to_string(dir.join(".want")).unwrap_or_default();
        let Some(w) = WalFile::parse(want.trim(), seg).filter(|w| w.kind == WalKind::Segment) else { return Ok(report) };
        if want != last_want {
            (last_want, since) = (want.clone(), Instant::now());
        }
        let window: Vec<String> = (1..=parallel as u64).map(|i| segment_name(w.timeline, w.segno + i, seg)).collect();
        // What recovery is past, or on another timeline, is of no more use; the newest asked-for
        // segment may be being taken right now.
        for e in fs::read_dir(&dir).map_err(|e| io(format!("cannot read {}", dir.display()), e))?.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if WalFile::parse(&n, seg).is_some() && !window.contains(&n) && n != w.name {
                let _ = fs::remove_file(e.path());
            }
        }
        let missing: Vec<&String> = window.iter().filter(|n| !dir.join(n).exists()).collect();
        if missing.is_empty() {
            if since.elapsed() > idle {
                // Recovery has ended (or stopped asking): what is left would stay in pg_wal.
                for n in &window {
                    let _ = fs::remove_file(dir.join(n));
                }
                return Ok(report);
            }
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let results: Vec<(&String, Result<Option<BlobInfo>>)> = std::thread::scope(|s| {
            let handles: Vec<_> = missing
                .iter()
                .map(|n| {
                    let at = dir.join(n);
                    s.spawn(move || (*n, fetch(repo, n, &at, true)))
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a fetch thread panicked")).collect()
        });
        let mut stop = false;
        for (n, r) in results {
            match r {
                Ok(Some(_)) => report.fetched += 1,
                Ok(None) => {
                    // The archive's end (for now): recovery will ask, get a quiet miss, and the
                    // next successful fetch starts a new prefetcher.
                    if report.end.as_ref().is_none_or(|e| n < e) {
                        report.end = Some(n.clone());
                    }
                    stop = true;
                }
                Err(e) => {
                    report.errors.push(format!("{n}: {e}"));
                    stop = true;
                }
            }
        }
        if stop {
            return Ok(report);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spool_folder_is_stable_per_repository() {
        assert_eq!(fnv("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv("/r/one"), fnv("/r/two"));
    }

    #[test]
    fn ready_after_lists_later_segments_in_order() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir(d.path().join("archive_status")).unwrap();
        for n in ["000000010000000000000003", "000000010000000000000001", "000000010000000000000002", "00000002.history", "000000010000000000000004.00000028.backup"] {
            File::create(d.path().join("archive_status").join(format!("{n}.ready"))).unwrap();
        }
        File::create(d.path().join("archive_status").join("000000010000000000000005.done")).unwrap();
        assert_eq!(ready_after(d.path(), "000000010000000000000001", 16 << 20), ["000000010000000000000002", "000000010000000000000003"]);
    }

    #[test]
    fn a_marker_vouches_only_for_the_file_it_stamped() {
        let d = tempfile::tempdir().unwrap();
        let spool = Spool { dir: d.path().join("spool") };
        let f = d.path().join("000000010000000000000001");
        fs::write(&f, b"one").unwrap();
        spool.mark_pushed("000000010000000000000001", &stamp(&f).unwrap()).unwrap();
        assert!(spool.take_pushed(&f));
        assert!(!spool.take_pushed(&f), "consumed");
        spool.mark_pushed("000000010000000000000001", &stamp(&f).unwrap()).unwrap();
        fs::write(&f, b"changed!").unwrap();
        assert!(!spool.take_pushed(&f), "the file changed since");
    }
}
