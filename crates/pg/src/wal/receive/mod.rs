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

mod shared;
mod stream;
mod upload;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};

use crate::repo::Repo;
use sheaf_core::repo::Place;
use sheaf_core::retry::Backoff;
use sheaf_core::storage::try_lock_exclusive;
use sheaf_core::{Error, ErrorKind, Result};

use crate::cluster::lsn::Lsn;
use crate::cluster::system::SystemId;
use crate::cluster::walname::{history_name, WalFile, WalKind};
use crate::connect::wire::{cell, lsn_cell, Replication};
use crate::repo::meta::{foreign, RepoMeta};
use crate::repo::paths;

pub use shared::{Events, ReceiveOptions, ReceiveReport};
use shared::{Shared, State};
use stream::stream;
pub use upload::fetch_streamed;
use upload::{put_streamed, upload_loop, Target};

/// Receive WAL from `opts.url` into every repository of `repos` (each with what it holds, or why
/// it could not be read: it is tried again as the receiver goes) until `opts.stop` is set,
/// connecting again after failures (the server restarting, the link lost).
///
/// # Errors
/// What no new connection mends: a server of another cluster, a slot that is not physical, a
/// spool another receiver holds, a server older than 15, repositories of different clusters, none
/// that can be read; and storing into a repository failing when the receiver stops.
pub fn receive(repos: Vec<(Place, Result<Repo>)>, opts: &ReceiveOptions, events: &Events) -> Result<ReceiveReport> {
    for (_, r) in &repos {
        if let Ok(r) = r {
            crate::repo::meta::postgres_only(r, "receiving WAL")?;
        }
    }
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
    for (place, opened) in &repos {
        match (opened, &first) {
            (Ok(r), None) => first = Some(r.meta().clone()),
            (Ok(r), Some(f)) if r.meta().system_identifier != f.system_identifier => return Err(foreign(r, "the first repository", f.system_identifier)),
            (Ok(_), Some(_)) => {}
            (Err(e), _) => events(&format!("repository {} cannot be read now; it is tried again as WAL comes: {e}", place.display())),
        }
    }
    let meta = first.ok_or_else(|| Error::new(ErrorKind::Target, "none of the repositories given can be read"))?;
    sheaf_core::whole::create_dirs(&opts.spool).map_err(|e| Error::io(ErrorKind::InvalidInput, format!("cannot make the spool folder {}", opts.spool.display()), e))?;
    let lock_path = opts.spool.join("receiver.lock");
    let lock =
        File::options().create(true).truncate(false).write(true).open(&lock_path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot open {}", lock_path.display()), e))?;
    if !try_lock_exclusive(&lock).map_err(|e| Error::io(ErrorKind::Io, format!("cannot lock {}", lock_path.display()), e))? {
        return Err(Error::invalid(format!("another sheaf wal-receive uses the spool {} (one receiver per repository and spool)", opts.spool.display())));
    }
    let shared = Shared { state: Mutex::new(State::default()), wake: Condvar::new(), report: Mutex::new(ReceiveReport::default()) };
    hand_over(&repos, &meta, opts, &shared, events);
    let targets: Vec<Target> = repos.iter().map(|(place, r)| Target { place, repo: r.as_ref().ok().cloned(), retry_at: None, partial: None }).collect();
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

/// What a receiver that stopped (killed, or the host lost power) left in the spool's partial
/// segment is on the spool's disk and was reported flushed: synchronous commits returned on it.
/// It goes into every repository as the segment's streamed copy now, before the server is asked
/// for anything, so that a restore finds it even when the server is gone for good. A repository
/// that cannot take it is said; the uploader stores it again as streaming goes on.
fn hand_over(repos: &[(Place, Result<Repo>)], meta: &RepoMeta, opts: &ReceiveOptions, shared: &Shared, events: &Events) {
    let Some((_, _, path)) = spool_partial(&opts.spool, meta.wal_segment_size) else { return };
    let Some(name) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".partial")).map(str::to_string) else { return };
    let mut stored = false;
    for repo in repos.iter().filter_map(|(_, r)| r.as_ref().ok()) {
        // Archived whole already (wal-push, or this receiver before it stopped): nothing to add.
        if repo.exists(&paths::wal_object(&name)).unwrap_or(false) {
            continue;
        }
        match upload::put_streamed(repo, &path, &name, opts) {
            Ok(()) => stored = true,
            Err(e) => events(&format!("cannot store what the spool holds of {name} in {} (the uploader tries again): {e}", repo.display())),
        }
    }
    if stored {
        shared.report().partial_uploads += 1;
        events(&format!("stored what the spool held of {name}, left by a receiver that stopped, as its streamed copy"));
    }
}

/// Receive, connecting again every `retry_every` for as long as the error says it may pass (the
/// link, a server restarting); a refusal or damage ends the receiver, to be mended first. Asked
/// to stop (during a pause too), it ends normally.
fn receive_loop(repos: &[(Place, Result<Repo>)], meta: &RepoMeta, opts: &ReceiveOptions, shared: &Shared, events: &Events) -> Result<()> {
    let again = Backoff::new(u32::MAX, opts.retry_every, opts.retry_every);
    again.run_telling(
        |_| {
            if opts.stop.asked() {
                return Ok(());
            }
            shared.report().connections += 1;
            session(repos, meta, opts, shared, events)
        },
        |e, pause| {
            events(&format!("{e}; connecting again in {} s", pause.as_secs()));
            shared.report().last_error = Some(e.to_string());
            // Alive while it waits: a beat a second.
            let until = std::time::Instant::now() + pause;
            while let Some(left) = until.checked_duration_since(std::time::Instant::now()).filter(|d| !d.is_zero()) {
                opts.beat.beat();
                if opts.stop.sleep(left.min(std::time::Duration::from_secs(1))).is_err() {
                    break;
                }
            }
        },
    )
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
fn session(repos: &[(Place, Result<Repo>)], meta: &RepoMeta, opts: &ReceiveOptions, shared: &Shared, events: &Events) -> Result<()> {
    let seg = meta.wal_segment_size;
    let mut c = Replication::connect(&opts.url)?;
    let major: u32 = c.server_version.split(|ch: char| !ch.is_ascii_digit()).next().and_then(|v| v.parse().ok()).unwrap_or(0);
    crate::connect::server::supported_major(major, &c.server_version, &crate::connect::session::redact(&opts.url))?;
    let id = c.query("IDENTIFY_SYSTEM")?;
    let system: SystemId = cell(&id, 0, "IDENTIFY_SYSTEM")?.unwrap_or_default().parse()?;
    if let Some(repo) = repos.iter().filter_map(|(_, r)| r.as_ref().ok()).find(|r| r.meta().system_identifier != system) {
        return Err(foreign(repo, "the server", system));
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
            for (place, opened) in repos {
                let put = match opened {
                    Ok(repo) => put_streamed(repo, &o.path, &o.name, opts),
                    Err(_) => crate::repo::meta::open(place).and_then(|repo| put_streamed(&repo, &o.path, &o.name, opts)),
                };
                match put {
                    Ok(()) => stored += 1,
                    Err(e) => {
                        events(&format!("cannot store {}'s streamed copy in {}: {e}", o.name, place.display()));
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
