//! `sheaf wal-receive`: WAL streamed into the repository as the server writes it, over a
//! physical replication slot, for a recovery point near zero (and zero as a synchronous standby).
//!
//! ```text
//!  server ──START_REPLICATION──► receiver: spool/SEGMENT.partial, fsync, report flush ──► server
//!                                   │ complete: renamed SEGMENT          (synchronous commit waits
//!                                   ▼                                     for that report)
//!                                uploader: SEGMENT → wal/T/SEGMENT.wal (as wal-push; summarized)
//!                                          SEGMENT.partial → wal/T/SEGMENT.streaming, every few
//!                                          seconds and at the end
//! ```
//! - **Durability first.** The flush position reported to the server is what is on the spool's
//!   disk (written and fsynced), never more; the repository follows: complete segments as soon as
//!   they are, the segment being received every `partial_every` and when the receiver stops.
//! - **Resuming.** A receiver starts where its spool's partial segment starts (it is received
//!   again, whole: the server keeps it for the slot), else at the slot's restart point, else at
//!   the server's current position. A partial segment left by a receiver that stopped is so
//!   completed when it starts again.
//! - **Beside wal-push.** A complete segment the archiver already stored is not stored twice (the
//!   same bytes: success; other bytes under the name: refused loudly, as wal-push refuses).
//! - **Recovery.** `sheaf wal-fetch` serves `SEGMENT.streaming` for a segment the archive lacks, so
//!   a restore replays up to the last byte received.
//! - **Timelines.** At a timeline's end the server says which follows; its history file goes into
//!   the repository and streaming goes on there, from the start of the segment it began in.
//! - **Several repositories.** Every repository given gets every segment, history file and
//!   streamed copy; a segment leaves the spool only once every one has it. A repository that is
//!   away (or cannot be opened yet) is tried again every `retry_every`, and the others go on.

use std::collections::HashMap;
use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sheaf_core::repo::Repo;
use sheaf_core::storage::try_lock_exclusive;
use sheaf_core::{CodecSpec, Error, ErrorKind, Result};

use crate::archive;
use crate::lsn::Lsn;
use crate::repo::meta::{foreign, RepoMeta};
use crate::repo::paths;
use crate::wal::{history_name, segment_name, WalFile, WalKind};
use crate::wire::{Copy, Replication, Row};

/// How often the receiver tells the server where it stands when nothing else makes it.
const STATUS_EVERY: Duration = Duration::from_secs(10);

/// What to receive, and how.
#[derive(Clone)]
pub struct ReceiveOptions {
    /// The server (a replication connection is made to it; its `application_name`, default
    /// `sheaf`, is what `synchronous_standby_names` names).
    pub url: String,
    /// The physical replication slot (made when missing).
    pub slot: String,
    /// The spool folder for this repository (the segment being received, and complete ones until
    /// they are in the repository).
    pub spool: PathBuf,
    /// Codec for the WAL stored in the repository.
    pub codec: CodecSpec,
    /// How often the segment being received is copied to the repository.
    pub partial_every: Duration,
    /// Pause before connecting again after the connection failed.
    pub retry_every: Duration,
    /// Set to stop (what was received is stored first).
    pub stop: Arc<AtomicBool>,
}

/// What a receiver did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReceiveReport {
    /// WAL bytes received.
    pub bytes: u64,
    /// Complete segments stored in the repository.
    pub segments: Vec<String>,
    /// Of those, how many the archiver had stored already.
    pub already_archived: u64,
    /// Copies of the segment being received stored in the repository.
    pub partial_uploads: u64,
    /// The last position flushed to the spool and reported to the server (in JSON, `""` before
    /// anything was).
    #[serde(serialize_with = "lsn_or_empty")]
    pub flushed: Option<Lsn>,
    /// The timeline last streamed.
    pub timeline: u32,
    /// Connections made.
    pub connections: u32,
    /// Timeline history files stored.
    pub histories: Vec<String>,
    /// The last failure met (the receiver then connected again).
    pub last_error: Option<String>,
}

/// An LSN as its text, none as `""`: the report's `flushed` as it has always been written.
fn lsn_or_empty<S: serde::Serializer>(lsn: &Option<Lsn>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match lsn {
        Some(l) => l.serialize(s),
        None => s.serialize_str(""),
    }
}

/// Where the receiver's messages go (it never prints by itself).
pub type Events = Arc<dyn Fn(&str) + Send + Sync>;

/// The object a segment's streamed copy is stored at while the segment is not complete.
pub fn streaming_object(name: &str) -> String {
    format!("{}{}/{name}.streaming", paths::WAL, name.get(..8).unwrap_or("00000000"))
}

/// What the receiver and the uploader share.
#[derive(Default)]
struct State {
    /// The segment being received: its spool file, its name, and its flushed bytes (the
    /// position in it up to which it is on disk).
    partial: Option<(PathBuf, String)>,
    /// Flushed WAL position.
    flushed: Lsn,
    /// Bumped whenever the partial has more on disk.
    version: u64,
    /// Set once the receiver is done: the uploader stores what is left and ends.
    done: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    report: Mutex<ReceiveReport>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn report(&self) -> std::sync::MutexGuard<'_, ReceiveReport> {
        self.report.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A repository the receiver stores into, as the uploader sees it: opened when it can be.
struct Target<'a> {
    repo: &'a Repo,
    meta: Option<RepoMeta>,
    /// Not tried again before then, after a failure (but always when the receiver stops).
    retry_at: Option<Instant>,
    /// The segment being received as last stored here: (name, version).
    partial: Option<(String, u64)>,
}

impl Target<'_> {
    /// Whether to try it now: it is not waiting out a failure, or the receiver stops.
    fn due(&self, done: bool) -> bool {
        done || self.retry_at.is_none_or(|t| Instant::now() >= t)
    }

    /// Its contents, opened now if they were not: an unreachable repository at the start is one
    /// to catch up once it is back.
    fn meta(&mut self, system: &str) -> Result<&RepoMeta> {
        if self.meta.is_none() {
            let m = crate::repo::meta::open(self.repo)?;
            if m.system_identifier != system {
                return Err(foreign(self.repo, &m, "the server", system));
            }
            self.meta = Some(m);
        }
        Ok(self.meta.as_ref().expect("opened above"))
    }

    /// A failure here: said, and the repository left alone for `wait`.
    fn failed(&mut self, e: Error, wait: Duration, several: bool) -> Error {
        self.retry_at = Some(Instant::now() + wait);
        if several {
            e.context(format!("repository {}", self.repo.display()))
        } else {
            e
        }
    }
}

/// Receive WAL from `opts.url` into every repository of `repos` (each with what it holds, or why
/// it could not be read: it is tried again as the receiver goes) until `opts.stop` is set,
/// connecting again after failures (the server restarting, the link lost).
///
/// # Errors
/// What no new connection mends: a server of another cluster, a slot that is not physical, a
/// spool another receiver holds, a server older than 15, repositories of different clusters, none
/// that can be read; and storing into a repository failing when the receiver stops.
pub fn receive(repos: Vec<(Repo, Result<RepoMeta>)>, opts: &ReceiveOptions, events: &Events) -> Result<ReceiveReport> {
    if opts.slot.is_empty() || !opts.slot.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        return Err(Error::invalid(format!("--slot {}: a slot name is lower-case letters, digits and underscores", opts.slot)));
    }
    // What the server is checked against: the first repository that can be read; the others of
    // the same cluster.
    let mut repos = repos;
    if repos.len() == 1 && repos[0].1.is_err() {
        return Err(repos.pop().expect("one").1.expect_err("checked above"));
    }
    let mut first: Option<RepoMeta> = None;
    for (repo, meta) in &repos {
        match (meta, &first) {
            (Ok(m), None) => first = Some(m.clone()),
            (Ok(m), Some(f)) if m.system_identifier != f.system_identifier => return Err(foreign(repo, m, "the first repository", &f.system_identifier)),
            (Ok(_), Some(_)) => {}
            (Err(e), _) => events(&format!("repository {} cannot be read now; it is tried again as WAL comes: {e}", repo.display())),
        }
    }
    let meta = first.ok_or_else(|| Error::new(ErrorKind::Target, "none of the repositories given can be read"))?;
    fs::create_dir_all(&opts.spool).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot make the spool folder {}", opts.spool.display()), e))?;
    let lock_path = opts.spool.join("receiver.lock");
    let lock =
        File::options().create(true).truncate(false).write(true).open(&lock_path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot open {}", lock_path.display()), e))?;
    if !try_lock_exclusive(&lock).map_err(|e| Error::io(ErrorKind::Io, format!("cannot lock {}", lock_path.display()), e))? {
        return Err(Error::invalid(format!("another sheaf wal-receive uses the spool {} (one receiver per repository and spool)", opts.spool.display())));
    }
    let targets: Vec<Target> = repos.iter().map(|(repo, m)| Target { repo, meta: m.as_ref().ok().cloned(), retry_at: None, partial: None }).collect();
    let shared = Shared { state: Mutex::new(State::default()), wake: Condvar::new(), report: Mutex::new(ReceiveReport::default()) };
    let result = std::thread::scope(|s| {
        let uploader = s.spawn(|| upload_loop(targets, &meta, opts, &shared, events));
        let r = receive_loop(&repos, &meta, opts, &shared, events);
        shared.lock().done = true;
        shared.wake.notify_all();
        let up = uploader.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Io, "the uploader failed")));
        r.and(up)
    });
    drop(lock);
    result.map(|()| shared.report().clone())
}

fn receive_loop(repos: &[(Repo, Result<RepoMeta>)], meta: &RepoMeta, opts: &ReceiveOptions, shared: &Shared, events: &Events) -> Result<()> {
    while !opts.stop.load(Ordering::Relaxed) {
        shared.report().connections += 1;
        match session(repos, meta, opts, shared, events) {
            Ok(()) => return Ok(()),
            // What may pass on a second try (the link, a server restarting), as the error says;
            // a refusal or damage ends the receiver, to be mended first.
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => {
                events(&format!("{e}; connecting again in {} s", opts.retry_every.as_secs()));
                shared.report().last_error = Some(e.to_string());
                let until = Instant::now() + opts.retry_every;
                while Instant::now() < until && !opts.stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
    Ok(())
}

fn cell<'a>(rows: &'a [Row], col: usize, what: &str) -> Result<Option<&'a str>> {
    let row = rows.first().ok_or_else(|| Error::corrupt(format!("{what} answered no row")))?;
    Ok(row.get(col).ok_or_else(|| Error::corrupt(format!("{what} answered too few columns")))?.as_deref())
}

fn lsn_cell(rows: &[Row], col: usize, what: &str) -> Result<Option<Lsn>> {
    cell(rows, col, what)?.map(|t| t.parse().map_err(|_| Error::corrupt(format!("{what}: '{t}' is not an LSN")))).transpose()
}

/// The segment a spool's partial file holds, if it has one: (timeline, segment number).
fn spool_partial(spool: &Path, seg: u64) -> Option<(u32, u64, PathBuf)> {
    let mut found: Vec<(u32, u64, PathBuf)> = fs::read_dir(spool)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let w = WalFile::parse(&name, seg).filter(|w| w.kind == WalKind::Partial)?;
            Some((w.timeline, w.segno, e.path()))
        })
        .collect();
    found.sort();
    found.pop()
}

/// One connection: from where to stream, then each timeline in turn until stopped or failed.
fn session(repos: &[(Repo, Result<RepoMeta>)], meta: &RepoMeta, opts: &ReceiveOptions, shared: &Shared, events: &Events) -> Result<()> {
    let seg = meta.wal_segment_size;
    let mut c = Replication::connect(&opts.url)?;
    let major: u32 = c.server_version.split(|ch: char| !ch.is_ascii_digit()).next().and_then(|v| v.parse().ok()).unwrap_or(0);
    if major < 15 {
        return Err(Error::invalid(format!("the server runs PostgreSQL {}: sheaf wal-receive needs 15 or later (READ_REPLICATION_SLOT)", c.server_version)));
    }
    let id = c.query("IDENTIFY_SYSTEM")?;
    let system = cell(&id, 0, "IDENTIFY_SYSTEM")?.unwrap_or_default().to_string();
    for (repo, m) in repos {
        if let Some(m) = m.as_ref().ok().filter(|m| m.system_identifier != system) {
            return Err(foreign(repo, m, "the server", &system));
        }
    }
    let server_tli: u32 = cell(&id, 1, "IDENTIFY_SYSTEM")?.and_then(|t| t.parse().ok()).unwrap_or(1);
    let server_pos = lsn_cell(&id, 2, "IDENTIFY_SYSTEM")?.unwrap_or_default();
    let slot = c.query(&format!("READ_REPLICATION_SLOT {}", opts.slot))?;
    let restart = match cell(&slot, 0, "READ_REPLICATION_SLOT")? {
        None => {
            c.query(&format!("CREATE_REPLICATION_SLOT {} PHYSICAL RESERVE_WAL", opts.slot))?;
            events(&format!(
                "made the physical replication slot {}: the server keeps WAL for it until it is received. If you stop receiving for good, drop it (SELECT pg_drop_replication_slot('{}')), or pg_wal grows",
                opts.slot, opts.slot
            ));
            None
        }
        Some("physical") => {
            let lsn = lsn_cell(&slot, 1, "READ_REPLICATION_SLOT")?;
            let tli: Option<u32> = cell(&slot, 2, "READ_REPLICATION_SLOT")?.and_then(|t| t.parse().ok());
            lsn.filter(|&l| l > Lsn(0)).map(|l| (tli.unwrap_or(server_tli), l))
        }
        Some(other) => return Err(Error::invalid(format!("replication slot {} is a {other} slot: wal-receive needs a physical one (give another --slot)", opts.slot))),
    };
    let (mut tli, mut start) = match spool_partial(&opts.spool, seg) {
        Some((t, segno, _)) => (t, Lsn::at_segment(segno, seg)),
        None => match restart {
            Some((t, lsn)) => (t, lsn.segment_start(seg)),
            None => {
                let from = server_pos.segment_start(seg);
                events(&format!("streaming from {from}, the server's position now: WAL before it reaches the repository through wal-push"));
                (server_tli, from)
            }
        },
    };
    // A connection that starts on a later timeline (the server was promoted while we were away)
    // stores that timeline's history file first, if a repository lacks it (or cannot say): a
    // restore follows the timelines through them.
    let history = crate::repo::paths::wal_object(&history_name(tli));
    if tli > 1 && !repos.iter().all(|(r, _)| r.exists(&history).unwrap_or(false)) {
        store_history(&mut c, opts, shared, tli)?;
    }
    loop {
        shared.report().timeline = tli;
        c.start_copy(&format!("START_REPLICATION SLOT {} PHYSICAL {start} TIMELINE {tli}", opts.slot))?;
        let Some((next, at, left)) = stream(&mut c, opts, shared, tli, start, seg)? else { return Ok(()) };
        // The timeline ended. Its last segment never completes: its streamed copy is stored, and
        // the spool lets it go (the next timeline's first segment holds the same bytes up to the
        // switch, and the promoted server archives it as NAME.partial).
        if let Some(o) = left {
            {
                let mut st = shared.lock();
                if st.partial.as_ref().is_some_and(|(p, _)| *p == o.path) {
                    st.partial = None;
                }
            }
            // Into every repository that takes it; one away misses only this copy (the promoted
            // server archives the same bytes as NAME.partial through wal-push).
            let mut stored = 0;
            let mut failed = None;
            for (repo, _) in repos {
                match put_streamed(repo, &o.path, &o.name, opts) {
                    Ok(()) => stored += 1,
                    Err(e) => {
                        events(&format!("cannot store {}'s streamed copy in {}: {e}", o.name, repo.display()));
                        failed = Some(e);
                    }
                }
            }
            if let Some(e) = failed.filter(|_| stored == 0) {
                return Err(e);
            }
            fs::remove_file(&o.path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot remove {}", o.path.display()), e))?;
        }
        // Then the timeline's history file, and the next timeline from its first segment.
        store_history(&mut c, opts, shared, next)?;
        events(&format!("timeline {tli} ended; streaming timeline {next} from {at}"));
        tli = next;
        start = at.segment_start(seg);
    }
}

/// Fetch timeline `tli`'s history file from the server into the spool, where the uploader
/// stores it into every repository (before the new timeline's segments: its name sorts first).
fn store_history(c: &mut Replication, opts: &ReceiveOptions, shared: &Shared, tli: u32) -> Result<()> {
    let h = c.query(&format!("TIMELINE_HISTORY {tli}"))?;
    let name = cell(&h, 0, "TIMELINE_HISTORY")?.unwrap_or_default().to_string();
    let content = cell(&h, 1, "TIMELINE_HISTORY")?.unwrap_or_default().to_string();
    if WalFile::parse(&name, 1 << 24).is_none_or(|w| w.kind != WalKind::History) {
        return Err(Error::corrupt(format!("the server named timeline {tli}'s history file '{name}'")));
    }
    sheaf_core::whole::write_whole_with(&opts.spool.join(&name), content.as_bytes(), 0o666, ErrorKind::Io)?;
    shared.wake.notify_all();
    Ok(())
}

/// The spool file at `path` (segment `name`, still being received) as its streamed copy.
fn put_streamed(repo: &Repo, path: &Path, name: &str, opts: &ReceiveOptions) -> Result<()> {
    let mut f = File::open(path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot open {}", path.display()), e))?;
    repo.put(&streaming_object(name), &mut f, opts.codec, true, &path.display().to_string()).map(|_| ())
}

/// A standby status update: written, flushed (and applied: never, as pg_receivewal says).
fn status(c: &mut Replication, written: Lsn, flushed: Lsn) -> Result<()> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64) - 946_684_800_000_000;
    let mut m = Vec::with_capacity(34);
    m.push(b'r');
    m.extend_from_slice(&written.0.to_be_bytes());
    m.extend_from_slice(&flushed.0.to_be_bytes());
    m.extend_from_slice(&0u64.to_be_bytes());
    m.extend_from_slice(&now.to_be_bytes());
    m.push(0);
    c.send_copy(&m)
}

/// The segment file being written.
struct Open {
    segno: u64,
    name: String,
    path: PathBuf,
    file: File,
}

fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

/// What streaming a timeline to its end leaves: the next timeline, where it starts, and the
/// timeline's last segment, synced and never to complete.
type TimelineEnd = (u32, Lsn, Option<Open>);

/// Stream timeline `tli` from `start` (a segment's start) until stopped (`None`) or the timeline
/// ends.
fn stream(c: &mut Replication, opts: &ReceiveOptions, shared: &Shared, tli: u32, start: Lsn, seg: u64) -> Result<Option<TimelineEnd>> {
    let mut open: Option<Open> = None;
    let (mut written, mut flushed) = (start, start);
    let mut last_status = Instant::now();
    let io = |what: &str, p: &Path, e: std::io::Error| Error::io(ErrorKind::Io, format!("{what} {}", p.display()), e);
    loop {
        if opts.stop.load(Ordering::Relaxed) {
            if let Some(o) = &open {
                o.file.sync_data().map_err(|e| io("cannot sync", &o.path, e))?;
            }
            let _ = status(c, written, flushed);
            return Ok(None);
        }
        match c.next_copy_within(Duration::from_millis(500))? {
            None => {}
            Some(Copy::Done) => {
                c.end_copy()?;
                let rows = c.finish_copy()?;
                if let Some(o) = &open {
                    o.file.sync_data().map_err(|e| io("cannot sync", &o.path, e))?;
                }
                let next: u32 = cell(&rows, 0, "the end of the timeline")?
                    .and_then(|t| t.parse().ok())
                    .ok_or_else(|| Error::corrupt("the server ended the stream without naming the next timeline"))?;
                let at = lsn_cell(&rows, 1, "the end of the timeline")?.unwrap_or(written);
                return Ok(Some((next, at, open)));
            }
            Some(Copy::Data(d)) => match d.first() {
                Some(b'w') if d.len() >= 25 => {
                    let at = Lsn(be64(&d[1..]));
                    let data = &d[25..];
                    if at > written {
                        return Err(Error::corrupt(format!("the server sent WAL from {at} where {written} was next: a gap")));
                    }
                    let mut pos = at;
                    let mut rest = data;
                    while !rest.is_empty() {
                        let segno = pos.segment_number(seg);
                        if open.as_ref().is_none_or(|o| o.segno != segno) {
                            if let Some(o) = open.take() {
                                complete(o, shared)?;
                            }
                            open = Some(open_segment(&opts.spool, tli, segno, seg, shared)?);
                        }
                        let o = open.as_ref().expect("just opened");
                        let off = pos.segment_offset(seg);
                        let n = rest.len().min((seg - off) as usize);
                        o.file.write_all_at(&rest[..n], off).map_err(|e| io("cannot write", &o.path, e))?;
                        pos += n as u64;
                        rest = &rest[n..];
                        if pos.segment_offset(seg) == 0 {
                            let o = open.take().expect("open");
                            complete(o, shared)?;
                        }
                    }
                    written = written.max(pos);
                    shared.report().bytes += data.len() as u64;
                    // A burst is flushed once, at its end.
                    if !c.has_message() {
                        flushed = flush(open.as_ref(), shared, written)?;
                        status(c, written, flushed)?;
                        last_status = Instant::now();
                    }
                }
                // Asked where it stands (a server shutting down waits until all it sent is
                // flushed): all that was written is flushed first.
                Some(b'k') if d.len() >= 18 && d[17] != 0 => {
                    flushed = flush(open.as_ref(), shared, written)?;
                    status(c, written, flushed)?;
                    last_status = Instant::now();
                }
                _ => {}
            },
        }
        if flushed < written && !c.has_message() {
            flushed = flush(open.as_ref(), shared, written)?;
            status(c, written, flushed)?;
            last_status = Instant::now();
        }
        if last_status.elapsed() >= STATUS_EVERY {
            status(c, written, flushed)?;
            last_status = Instant::now();
        }
    }
}

/// Everything written up to `written` on disk: the segment being written synced (those before
/// it were when they completed); the new flush position, shared with the uploader.
fn flush(open: Option<&Open>, shared: &Shared, written: Lsn) -> Result<Lsn> {
    if let Some(o) = open {
        o.file.sync_data().map_err(|e| Error::io(ErrorKind::Io, format!("cannot sync {}", o.path.display()), e))?;
    }
    {
        let mut st = shared.lock();
        if st.flushed != written {
            st.flushed = written;
            st.version += 1;
        }
    }
    shared.report().flushed = Some(written);
    Ok(written)
}

/// The spool file for a segment, made at its full size (zeros past what is received), and known
/// to the uploader as the segment being received.
fn open_segment(spool: &Path, tli: u32, segno: u64, seg: u64, shared: &Shared) -> Result<Open> {
    let name = segment_name(tli, segno, seg);
    let path = spool.join(format!("{name}.partial"));
    let file =
        File::options().create(true).truncate(false).read(true).write(true).open(&path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot open {}", path.display()), e))?;
    file.set_len(seg).map_err(|e| Error::io(ErrorKind::Io, format!("cannot size {}", path.display()), e))?;
    shared.lock().partial = Some((path.clone(), name.clone()));
    Ok(Open { segno, name, path, file })
}

/// A segment received whole: on disk, renamed to its name, handed to the uploader.
fn complete(o: Open, shared: &Shared) -> Result<()> {
    o.file.sync_data().map_err(|e| Error::io(ErrorKind::Io, format!("cannot sync {}", o.path.display()), e))?;
    let done = o.path.with_file_name(&o.name);
    fs::rename(&o.path, &done).map_err(|e| Error::io(ErrorKind::Io, format!("cannot rename {}", o.path.display()), e))?;
    if let Some(dir) = done.parent() {
        let _ = File::open(dir).and_then(|d| d.sync_all());
    }
    let mut st = shared.lock();
    if st.partial.as_ref().is_some_and(|(p, _)| *p == o.path) {
        st.partial = None;
    }
    drop(st);
    shared.wake.notify_all();
    Ok(())
}

/// Store complete segments (and history files) as they come, and the segment being received
/// every `partial_every` and at the end, into every repository.
fn upload_loop(mut targets: Vec<Target>, meta: &RepoMeta, opts: &ReceiveOptions, shared: &Shared, events: &Events) -> Result<()> {
    let several = targets.len() > 1;
    // What each spool file has reached: per name, per repository, whether it is there (and was
    // there already).
    let mut reached: HashMap<String, Vec<Option<bool>>> = HashMap::new();
    let mut last_partial = Instant::now();
    loop {
        let (done, partial, version) = {
            let st = shared.lock();
            let (st, _) = shared.wake.wait_timeout(st, Duration::from_millis(500)).unwrap_or_else(|p| p.into_inner());
            (st.done, st.partial.clone(), st.version)
        };
        let stored = store_complete(&mut targets, &mut reached, meta, opts, shared, events, done);
        let due = done || last_partial.elapsed() >= opts.partial_every;
        let mut failed = None;
        if let Some((path, name)) = partial.filter(|(p, _)| due && p.exists()) {
            let mut put = false;
            for t in targets.iter_mut().filter(|t| t.partial.as_ref().is_none_or(|(n, v)| *n != name || *v != version)) {
                if !t.due(done) {
                    continue;
                }
                let r = t.meta(&meta.system_identifier).map(|_| ()).and_then(|()| put_streamed(t.repo, &path, &name, opts));
                match r {
                    Ok(()) => {
                        t.partial = Some((name.clone(), version));
                        put = true;
                    }
                    Err(e) => {
                        let e = t.failed(e, opts.retry_every, several);
                        events(&format!("cannot store the segment being received (trying again): {e}"));
                        failed = Some(e);
                    }
                }
            }
            if put && failed.is_none() {
                shared.report().partial_uploads += 1;
            }
            last_partial = Instant::now();
        }
        if done {
            return stored.and(failed.map_or(Ok(()), |e| Err(e.context("cannot store the segment being received"))));
        }
        if let Err(e) = stored {
            events(&format!("{e} (trying again)"));
        }
    }
}

/// Every complete segment and history file in the spool into every repository, oldest first;
/// each leaves the spool once every repository has it (a segment's streamed copy then leaves the
/// repositories). A repository that fails is left alone until it is due again (with `done`, it
/// is tried now); the others go on.
///
/// # Errors
/// The first repository's failure, once every repository has been tried.
fn store_complete(
    targets: &mut [Target],
    reached: &mut HashMap<String, Vec<Option<bool>>>,
    meta: &RepoMeta,
    opts: &ReceiveOptions,
    shared: &Shared,
    events: &Events,
    done: bool,
) -> Result<()> {
    let several = targets.len() > 1;
    let mut names: Vec<(String, WalKind)> = fs::read_dir(&opts.spool)
        .map_err(|e| Error::io(ErrorKind::Io, format!("cannot list {}", opts.spool.display()), e))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter_map(|n| WalFile::parse(&n, meta.wal_segment_size).filter(|w| matches!(w.kind, WalKind::Segment | WalKind::History)).map(|w| (n, w.kind)))
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let mut first_error = None;
    // Tried once per call: one that fails is not asked again for the next file.
    let mut tried: Vec<bool> = targets.iter().map(|t| t.due(done)).collect();
    for (name, kind) in names {
        let path = opts.spool.join(&name);
        let got = reached.entry(name.clone()).or_insert_with(|| vec![None; targets.len()]);
        for (k, t) in targets.iter_mut().enumerate() {
            if got[k].is_some() || !tried[k] {
                continue;
            }
            match store_one(t, meta, &path, &name, kind, opts, events) {
                Ok(already) => got[k] = Some(already),
                Err(e) => {
                    tried[k] = false;
                    let e = t.failed(e.context(format!("cannot store received {name}")), opts.retry_every, several);
                    if first_error.is_none() {
                        first_error = Some(e);
                    } else {
                        events(&e.to_string());
                    }
                }
            }
        }
        if got.iter().all(Option::is_some) {
            let already = got.iter().all(|g| *g == Some(true));
            reached.remove(&name);
            fs::remove_file(&path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot remove {}", path.display()), e))?;
            let mut r = shared.report();
            if kind == WalKind::History {
                r.histories.push(name);
            } else {
                r.already_archived += u64::from(already);
                r.segments.push(name);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// One spool file into one repository, as wal-push stores it (a segment summarized, its streamed
/// copy removed); whether it was there already.
fn store_one(t: &mut Target, meta: &RepoMeta, path: &Path, name: &str, kind: WalKind, opts: &ReceiveOptions, events: &Events) -> Result<bool> {
    let repo = t.repo;
    let m = t.meta(&meta.system_identifier)?;
    let pushed = archive::push(repo, m, path, opts.codec)?;
    if kind != WalKind::Segment {
        return Ok(pushed.already);
    }
    if !pushed.already {
        if let Err(e) = crate::summarize::summarize_and_store(repo, m, name, Some(path)) {
            events(&format!("{name}: no block summary in {} ({e}); sheaf wal-summarize makes it later", repo.display()));
        }
    }
    let streamed = streaming_object(name);
    if repo.exists(&streamed)? {
        repo.delete(&streamed)?;
    }
    Ok(pushed.already)
}

/// Restore a segment's streamed copy (what `sheaf wal-receive` had received of a segment the
/// archive does not hold whole) to `dest`, as [`archive::fetch`] restores archived files.
/// `Ok(None)` when there is none.
///
/// # Errors
/// As [`archive::fetch`].
pub fn fetch_streamed(repo: &Repo, meta: &RepoMeta, name: &str, dest: &Path) -> Result<Option<sheaf_core::blob::BlobInfo>> {
    if !WalFile::parse(name, meta.wal_segment_size).is_some_and(|w| w.kind == WalKind::Segment) {
        return Ok(None);
    }
    archive::fetch_object(repo, &streaming_object(name), dest, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_says_flushed_as_before() {
        let none = serde_json::to_value(ReceiveReport::default()).unwrap();
        assert_eq!(none["flushed"], "", "nothing flushed yet");
        let some = serde_json::to_value(ReceiveReport { flushed: Some(Lsn(0x1_0300_0000)), ..Default::default() }).unwrap();
        assert_eq!(some["flushed"], "1/3000000");
    }

    #[test]
    fn streamed_copies_live_beside_the_archived_segments() {
        assert_eq!(streaming_object("000000020000000100000003"), "wal/00000002/000000020000000100000003.streaming");
        assert_eq!(paths::wal_name(&streaming_object("000000020000000100000003")), None, "not taken for an archived file");
    }

    #[test]
    fn the_spool_s_partial_segment_is_where_streaming_resumes() {
        let d = tempfile::tempdir().unwrap();
        let seg = 16 << 20;
        assert_eq!(spool_partial(d.path(), seg), None);
        fs::write(d.path().join("000000010000000000000004"), b"").unwrap();
        fs::write(d.path().join("000000010000000000000005.partial"), b"").unwrap();
        fs::write(d.path().join("receiver.lock"), b"").unwrap();
        let (t, s, _) = spool_partial(d.path(), seg).unwrap();
        assert_eq!((t, s), (1, 5));
    }
}
