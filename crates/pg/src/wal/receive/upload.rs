//! The uploader: what the receiver finished (segments, history files) into every repository as
//! wal-push stores it, and the segment being received as its streamed copy, every few seconds.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::repo::Repo;
use sheaf_core::repo::Place;
use sheaf_core::{Error, ErrorKind, Result};

use super::shared::{Events, ReceiveOptions, Shared};
use crate::cluster::system::SystemId;
use crate::cluster::walname::{WalFile, WalKind};
use crate::repo::meta::{foreign, RepoMeta};
use crate::repo::paths::streaming_object;
use crate::wal::archive;

/// A repository the receiver stores into, as the uploader sees it: opened when it can be.
pub(super) struct Target<'a> {
    pub(super) place: &'a Place,
    pub(super) repo: Option<Repo>,
    /// Not tried again before then, after a failure (but always when the receiver stops).
    pub(super) retry_at: Option<Instant>,
    /// The segment being received as last stored here: (name, version).
    pub(super) partial: Option<(String, u64)>,
}

impl Target<'_> {
    /// Whether to try it now: it is not waiting out a failure, or the receiver stops.
    fn due(&self, done: bool) -> bool {
        done || self.retry_at.is_none_or(|t| Instant::now() >= t)
    }

    /// The repository, opened now if it was not: an unreachable repository at the start is one
    /// to catch up once it is back.
    fn repo(&mut self, system: SystemId) -> Result<&Repo> {
        if self.repo.is_none() {
            let r = crate::repo::meta::open(self.place)?;
            if r.meta().system_identifier != system {
                return Err(foreign(&r, "the server", system));
            }
            self.repo = Some(r);
        }
        Ok(self.repo.as_ref().expect("opened above"))
    }

    /// A failure here: said, and the repository left alone for `wait`.
    fn failed(&mut self, e: Error, wait: Duration, several: bool) -> Error {
        self.retry_at = Some(Instant::now() + wait);
        if several {
            e.context(format!("repository {}", self.place.display()))
        } else {
            e
        }
    }
}

/// The spool file at `path` (segment `name`, still being received) as its streamed copy.
pub(super) fn put_streamed(repo: &Repo, path: &Path, name: &str, opts: &ReceiveOptions) -> Result<()> {
    let mut f = File::open(path).map_err(|e| Error::io(ErrorKind::Io, format!("cannot open {}", path.display()), e))?;
    repo.put(&streaming_object(name), &mut f, opts.codec, true, &path.display().to_string()).map(|_| ())
}

/// Store complete segments (and history files) as they come, and the segment being received
/// every `partial_every` and at the end, into every repository.
pub(super) fn upload_loop(mut targets: Vec<Target>, meta: &RepoMeta, opts: &ReceiveOptions, shared: &Shared, events: &Events) -> Result<()> {
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
                let r = t.repo(meta.system_identifier).and_then(|repo| put_streamed(repo, &path, &name, opts));
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
    let repo = t.repo(meta.system_identifier)?;
    let pushed = archive::push(repo, path, opts.codec)?;
    if kind != WalKind::Segment {
        return Ok(pushed.already);
    }
    if !pushed.already {
        if let Err(e) = crate::wal::summarize::summarize_and_store(repo, name, Some(path)) {
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
pub fn fetch_streamed(repo: &Repo, name: &str, dest: &Path) -> Result<Option<sheaf_core::blob::BlobInfo>> {
    let meta = repo.meta();
    if !WalFile::parse(name, meta.wal_segment_size).is_some_and(|w| w.kind == WalKind::Segment) {
        return Ok(None);
    }
    archive::fetch_object(repo, &streaming_object(name), dest, false)
}
