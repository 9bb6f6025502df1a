//! `sheaf keep`: a backup pinned, forever or until a date ([`crate::repo::keep::Pin`]), is never
//! expired, nor the backups it builds on, nor the WAL it needs to become consistent (from its
//! start to its stop; not the WAL after it, which only recovery past it would need). In a locked
//! repository a pin with a date also locks what it keeps until then.

use crate::repo::Repo;
use sheaf_core::{Error, ErrorKind, Result};

use crate::cluster::walname::{WalFile, WalKind};
use crate::repo::keep::{pin_object, Pin};
use crate::repo::paths;
use crate::repo::records::{backups, BackupRecord, Found};

/// Pin finished backup `id` until `until` (seconds since the epoch; `None`: until released),
/// replacing a pin it has. In a locked repository a pin with a date also locks what it keeps until
/// then (a lock is only ever lengthened): a kept backup stays as safe from deletion as the newest.
///
/// # Errors
/// No such finished backup; a date already past; a lock the store refuses.
pub fn pin(repo: &Repo, id: &str, until: Option<i64>, now: i64) -> Result<Pin> {
    let repo = &crate::repo::histories::with_backup(repo, id)?;
    let meta = repo.meta();
    let found = backups(repo)?;
    let record = match found.iter().find(|f| f.id() == id) {
        Some(Found::Complete(r)) => r.clone(),
        Some(Found::Unfinished { .. }) => return Err(Error::invalid(format!("backup {id} is not finished: only a finished backup can be kept"))),
        None => return Err(Error::new(ErrorKind::InvalidInput, format!("no backup {id} in {} (sheaf info lists them)", repo.display()))),
    };
    if let Some(u) = until.filter(|&u| u <= now) {
        return Err(Error::invalid(format!("--until {} is already past: give a date to come", sheaf_core::time::utc(u))));
    }
    // A pin promises a backup that restores by itself: the WAL that makes it consistent must be
    // there. A backup kept only as the data of an incremental's chain may have lost it to
    // retention; pinning it then would promise what cannot be kept.
    let gone = own_wal_missing(repo, &record)?;
    if !gone.is_empty() {
        let builders: Vec<&str> = found.iter().filter_map(Found::record).filter(|r| r.chain.iter().any(|c| c == id)).map(|r| r.id.as_str()).collect();
        return Err(Error::new(
            ErrorKind::Incomplete,
            format!(
                "backup {id} cannot be restored by itself: the WAL that makes it consistent is gone ({}){}; a pin would not bring it back{}",
                gone.join(", "),
                if builders.is_empty() { String::new() } else { format!(" (retention removed it: {id} is kept as the data of {})", builders.join(", ")) },
                builders.last().map(|b| format!(": pin {b}, the newest backup built on it, instead")).unwrap_or_default()
            ),
        ));
    }
    let mut p = Pin { id: id.into(), until, pinned_at: sheaf_core::time::utc_now(), locked_until: None };
    if let (Some(lock), Some(u)) = (&meta.lock, until) {
        for o in kept_objects(repo, &record, &found)? {
            if o.locked_until < u {
                repo.extend_lock(&o.name, lock.mode, u).map_err(|e| e.context(format!("cannot lock what backup {id} needs until {}", sheaf_core::time::utc(u))))?;
            }
        }
        p.locked_until = Some(u);
    }
    repo.put_json(&pin_object(id), &p, true)?;
    Ok(p)
}

/// The segments from `r`'s start to its stop that are not archived.
fn own_wal_missing(repo: &Repo, r: &BackupRecord) -> Result<Vec<String>> {
    let meta = repo.meta();
    let seg = meta.wal_segment_size;
    let (Some(start), Some(stop)) = (WalFile::parse(&r.start_wal, seg), WalFile::parse(&r.stop_wal, seg)) else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    for s in start.segno..=stop.segno.max(start.segno) {
        let name = crate::cluster::walname::segment_name(r.timeline, s, seg);
        if !repo.exists(&paths::wal_object(&name))? {
            out.push(name);
        }
    }
    Ok(out)
}

/// An object a pin keeps, with until when it is locked at the latest.
struct Kept {
    name: String,
    locked_until: i64,
}

/// What a pinned backup needs: its objects and those of the backups it builds on, the WAL from its
/// start to its stop with its backup history file, and the timeline histories up to its own.
fn kept_objects(repo: &Repo, r: &BackupRecord, found: &[Found]) -> Result<Vec<Kept>> {
    let meta = repo.meta();
    let secs = meta.lock.map_or(0, |l| l.seconds());
    let mut out = Vec::new();
    for b in std::iter::once(r).chain(r.chain.iter().filter_map(|c| found.iter().filter_map(Found::record).find(|x| &x.id == c))) {
        let until = b.locked_until.unwrap_or(b.start_unix + secs);
        for n in b.stripes.iter().cloned().chain([paths::record(&b.id)]) {
            out.push(Kept { name: n, locked_until: until });
        }
    }
    let seg = meta.wal_segment_size;
    let (Some(start), Some(stop)) = (WalFile::parse(&r.start_wal, seg), WalFile::parse(&r.stop_wal, seg)) else { return Ok(out) };
    for o in repo.list(paths::WAL)? {
        let Some(w) = paths::wal_name(&o.name).and_then(|n| WalFile::parse(n, seg)) else { continue };
        let needed = match w.kind {
            WalKind::History => w.timeline <= r.timeline,
            WalKind::Segment | WalKind::Backup => w.timeline == r.timeline && (start.segno..=stop.segno).contains(&w.segno),
            WalKind::Partial => false,
        };
        if needed {
            out.push(Kept { locked_until: o.modified + secs, name: o.name });
        }
    }
    Ok(out)
}

/// Release backup `id`'s pin; whether it had one.
///
/// # Errors
/// The store's.
pub fn release(repo: &Repo, id: &str) -> Result<bool> {
    let o = pin_object(id);
    // In whichever history the backup is (after pg_upgrade, one per cluster).
    for h in crate::repo::histories::all(repo)? {
        if h.repo.exists(&o)? {
            h.repo.delete(&o)?;
            return Ok(true);
        }
    }
    Ok(false)
}
