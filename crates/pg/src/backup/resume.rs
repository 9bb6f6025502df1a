//! Resuming a full backup into the repository that stopped: its journal kept beside its stripes
//! (`backups/ID/resume-AAAA-...`, sealed as every repository object is), and the search for the
//! backup to go on from ([`find`]). What may be taken from an earlier attempt, and why that is
//! enough for PostgreSQL, is [`sheaf_core::Resume`]'s (crates/core/src/backup/resume.rs).

use std::sync::Arc;

use sheaf_core::{BackupOptions, CodecKind, CodecSpec, Journal, Result, Resumable, Resume};

use crate::repo::id::BackupId;
use crate::repo::paths;
use crate::repo::records::{backups, BackupLock, Found};
use crate::repo::Repo;

/// Journal objects' names begin so, in the backup's folder.
const PREFIX: &str = "resume-";

/// A backup's journal in the repository: `AAAA/NAME` is `backups/ID/resume-AAAA-NAME`.
#[derive(Debug)]
pub struct RepoJournal {
    repo: Repo,
    dir: String,
}

impl RepoJournal {
    /// Backup `id`'s journal.
    pub fn of(repo: &Repo, id: &str) -> RepoJournal {
        RepoJournal { repo: repo.clone(), dir: format!("{}/", paths::backup_dir(id)) }
    }

    fn object(&self, name: &str) -> String {
        format!("{}{PREFIX}{}", self.dir, name.replacen('/', "-", 1))
    }

    /// Every journal object, by its name in the repository.
    fn objects(&self) -> Result<Vec<String>> {
        Ok(self.repo.list(&self.dir)?.into_iter().map(|o| o.name).filter(|n| n.strip_prefix(&self.dir).is_some_and(|r| r.starts_with(PREFIX))).collect())
    }

    /// Whether an attempt recorded a frame written: what a failed backup stored is worth keeping.
    ///
    /// # Errors
    /// The repository cannot be listed.
    pub fn stored_something(&self) -> Result<bool> {
        Ok(self.objects()?.iter().any(|o| o.contains("-index-")))
    }

    /// Remove the journal (once the backup it records is published, or abandoned).
    ///
    /// # Errors
    /// An object cannot be removed.
    pub fn remove(&self) -> Result<()> {
        for o in self.objects()? {
            self.repo.delete(&o)?;
        }
        // A journal object whose writing was killed midway left its upload open (S3).
        self.repo.abort_uploads(&format!("{}{PREFIX}", self.dir)).map(drop)
    }
}

impl Journal for RepoJournal {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let plain = CodecSpec { kind: CodecKind::None, level: 0, named: None };
        self.repo.put(&self.object(name), &mut &bytes[..], plain, false, "a backup's journal").map(drop)
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let o = self.object(name);
        if !self.repo.exists(&o)? {
            return Ok(None);
        }
        self.repo.get_bytes(&o).map(Some)
    }

    fn list(&self) -> Result<Vec<String>> {
        Ok(self
            .objects()?
            .into_iter()
            .filter_map(|n| {
                let rest = n.strip_prefix(&self.dir)?.strip_prefix(PREFIX)?;
                let (attempt, name) = rest.split_once('-')?;
                Some(format!("{attempt}/{name}"))
            })
            .collect())
    }
}

/// What [`find`] found.
pub enum Previous {
    /// Nothing to go on from.
    Nothing,
    /// Go on from backup `id`, whose lock (if any) was this when it was found.
    Resume(BackupId, Arc<Resume>, Option<BackupLock>),
    /// Backup `id` was left unfinished, and removed as `--no-resume` asks.
    Removed(BackupId),
    /// Backup `id` was left unfinished but cannot be resumed, and why; its leftovers removed.
    Afresh(BackupId, String),
}

/// The unfinished backup a full backup of the cluster with system identifier `system_identifier`
/// goes on from: the newest one left by a writer that no longer runs, newer than every finished
/// backup, whose journal and stripes check out for `opts` (the stripes its targets name). One that
/// cannot be resumed (other settings, another cluster, nothing it holds unchanged) is removed,
/// and [`Previous::Afresh`] says why.
///
/// # Errors
/// The repository cannot be listed or read; a stripe another process still writes.
pub fn find(repo: &Repo, stripes: usize, opts: &BackupOptions, system_identifier: u64, no_resume: bool) -> Result<Previous> {
    if !repo.location(&paths::stripe("x", 1)).store().can_resume() {
        return Ok(Previous::Nothing);
    }
    let all = backups(repo)?;
    let newest_done = all.iter().filter_map(|f| f.record().map(|r| r.id.clone())).max();
    let Some(Found::Unfinished { id, objects, lock, .. }) = all.iter().rev().find(|f| matches!(f, Found::Unfinished { running: false, .. })) else {
        return Ok(Previous::Nothing);
    };
    if newest_done.as_ref().is_some_and(|d| d > id) {
        return Ok(Previous::Nothing);
    }
    let journal = RepoJournal::of(repo, id);
    if !objects.iter().any(|o| o.ends_with("-head")) {
        return Ok(Previous::Nothing);
    }
    if no_resume {
        abandon(repo, id)?;
        return Ok(Previous::Removed(id.clone()));
    }
    let mut opts = opts.clone();
    opts.targets = (1..=stripes).map(|k| repo.location(&paths::stripe(id, k))).collect();
    opts.encryption = repo.encryption()?;
    // What it stored that cannot be read now (the repository's link or disk failing, another
    // process holding a stripe) stays as it is: this backup fails, saying so, and the next one
    // tries again. Only what was read and found wanting is given up.
    let prepared = match Resume::prepare(&journal, &opts.settings(), &[("", "global/pg_control")]) {
        Ok(p) => p,
        Err(e) if e.kind() == sheaf_core::ErrorKind::Corrupt => Resumable::Afresh(format!("its journal is damaged ({e})")),
        Err(e) => {
            return Err(e
                .context("cannot read back what a stopped backup stored")
                .note(format!("backup {id}, left unfinished, stays for the next backup to go on from (or pass --no-resume to remove it and start afresh)")))
        }
    };
    let why = match prepared {
        Resumable::Ready(r) => match r.facts().get("system_identifier").and_then(serde_json::Value::as_u64) {
            Some(s) if s == system_identifier => return Ok(Previous::Resume(id.clone(), Arc::from(r), lock.clone())),
            s => format!(
                "it is of another cluster (system identifier {}, not {system_identifier}): the cluster was replaced in between",
                s.map_or_else(|| "unknown".to_string(), |s| s.to_string())
            ),
        },
        Resumable::Afresh(why) => why,
    };
    abandon(repo, id)?;
    Ok(Previous::Afresh(id.clone(), why))
}

/// Remove what unfinished backup `id` left: its journal, lock and unfinished stripes.
///
/// # Errors
/// An object cannot be removed.
pub fn abandon(repo: &Repo, id: &str) -> Result<()> {
    let journal = RepoJournal::of(repo, id);
    // Its stripes, as many as its first attempt wrote, given up: a file's `.partial` removed, an
    // upload left open aborted (its parts are not objects the listing below would find).
    let head = journal.get("0000/head").ok().flatten().and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let stripes = head.as_ref().and_then(|h| h["starts"].as_array()).map_or(0, Vec::len);
    for k in 1..=stripes {
        if let Ok(Some(u)) = repo.location(&paths::stripe(id, k)).resume(0) {
            u.abandon();
        }
    }
    journal.remove()?;
    for o in repo.list(&format!("{}/", paths::backup_dir(id)))? {
        repo.delete(&o.name)?;
    }
    repo.delete(&paths::lock(id))?;
    repo.prune(&paths::backup_dir(id));
    Ok(())
}
