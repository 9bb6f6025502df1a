//! A backup written into the repository: stripes under `backups/ID/`, a lock while it runs, and
//! the record, published only after every stripe is.

use std::sync::Arc;

use crate::repo::Repo;
use sheaf_core::{BackupOptions, BackupReport, Error, ErrorKind, Progress, Result};

use crate::backup::direct::backup_postgres;
use crate::backup::incremental::{may_build_on, Parent};
use crate::backup::options::{PgBackupOptions, PgBackupReport};
use crate::backup::resume::{self, Previous, RepoJournal};
use crate::maintain::expire::{apply, HistoryPlan, Retention};
use crate::repo::id::BackupId;
use crate::repo::paths;
use crate::repo::records::{chain_of, complete, now_unix, open_chain, open_set, pick, BackupLock, BackupRecord, BackupRef};
use sheaf_core::manifest::BackupType;
use sheaf_core::{Lineage, Schemes};

/// What kind of backup goes into the repository, and what follows it.
#[derive(Clone, Debug, Default)]
pub struct Kind {
    /// Stripes under `backups/ID/`, 1 to 64.
    pub stripes: usize,
    /// `full`, `diff` or `incr`.
    pub backup_type: BackupType,
    /// Decide what changed by the page scan and fail if the WAL summaries missed any of it.
    pub check_changes: bool,
    /// Read every page instead of using the WAL summaries.
    pub page_scan: bool,
    /// expire-auto: apply this retention once the backup is published.
    pub expire_after: Option<Retention>,
    /// `--annotation KEY=VALUE`: kept in its record.
    pub annotations: std::collections::BTreeMap<String, String>,
    /// `--no-resume`: a full backup starts afresh even where an unfinished one could be gone on
    /// from (which is then removed), and leaves nothing to resume if it stops.
    pub no_resume: bool,
}

/// A backup published in the repository.
#[derive(Debug)]
pub struct InRepo {
    /// The backup's report.
    pub backup: PgBackupReport,
    /// Its record.
    pub record: BackupRecord,
    /// With [`Kind::expire_after`]: what expire removed, or why it failed. A failure is the
    /// expire's, never the backup's: the backup stands, and `sheaf expire` finishes the work.
    pub expired: Option<Result<Vec<HistoryPlan>>>,
    /// An unfinished backup found and not gone on from: why (it was removed).
    pub not_resumed: Option<String>,
}

/// Back up the cluster at `pg.url` into the repository, `stripes` stripes under `backups/ID/`; the
/// record is published only after every stripe is. `opts.targets` is ignored. A `diff` builds on
/// the newest full backup, an `incr` on the newest backup of any type; with none to build on, a
/// full backup is taken and the report says why. `schemes` opens the parent.
///
/// With [`Kind::expire_after`], the retention is applied once the backup is published.
///
/// # Errors
/// A cluster other than the repository's (before anything is written), and everything
/// [`backup_postgres`] refuses. A failed backup leaves no record and no lock.
pub fn backup_to_repo(repo: &Repo, pg: &PgBackupOptions, opts: &BackupOptions, kind: Kind, schemes: &dyn Schemes, progress: Arc<dyn Progress>) -> Result<InRepo> {
    crate::repo::meta::postgres_only(repo, "a PostgreSQL cluster's backup")?;
    let meta = repo.meta();
    let Kind { stripes, backup_type, check_changes, page_scan, expire_after, annotations, no_resume } = kind;
    if !(1..=64).contains(&stripes) {
        return Err(Error::invalid(format!("--stripes {stripes}: give 1 to 64")));
    }
    // The parent, opened before anything is written: one missing, damaged, under another key or of
    // another cluster is named now.
    let records = complete(repo)?;
    let mut no_parent = None;
    let candidate = if backup_type == BackupType::Full { None } else { records.iter().rev().find(|r| may_build_on(backup_type, r.backup_type)) };
    let parent = match candidate {
        None if backup_type == BackupType::Full => None,
        None => {
            no_parent = Some(format!(
                "the repository holds no {} to build a {backup_type} on: taking a full backup",
                if backup_type == BackupType::Diff { "full backup" } else { "backup" }
            ));
            None
        }
        Some(p) => {
            let chain = chain_of(&records, p)?;
            let set = open_set(repo, p, schemes).map_err(|e| e.context(format!("parent backup {}", p.id)))?;
            let lineage = Lineage { backup_type, chain: chain.iter().map(|r| r.backup_id.clone()).collect() };
            let mut parent = Parent::new(lineage, &p.id, p.start_lsn, p.stop_lsn, p.timeline, &set);
            parent.summaries = Some(repo.clone());
            parent.check_changes = check_changes;
            parent.page_scan = page_scan;
            Some((parent, chain.iter().map(|r| r.id.clone()).collect::<Vec<_>>()))
        }
    };
    // A full backup goes on from one left unfinished, where it can; else that one is removed.
    let mut not_resumed = None;
    let mut resume = None;
    if parent.is_none() {
        match resume::find(repo, stripes, opts, meta.system_identifier.0, no_resume)? {
            Previous::Removed(id) => not_resumed = Some(format!("backup {id} was left unfinished: removed, as --no-resume asks")),
            Previous::Resume(id, r, seen) => resume = Some((id, r, seen)),
            Previous::Afresh(id, why) => not_resumed = Some(format!("backup {id} was left unfinished and cannot be resumed: {why}; starting afresh")),
            Previous::Nothing => {}
        }
    }
    let start_ms = sheaf_core::time::now_ms();
    let start_unix = start_ms.div_euclid(1000);
    let mut id = BackupId::at(start_ms);
    if let Some((old, _, _)) = &resume {
        id = old.clone();
    } else if repo.exists(&paths::record(&id))? || repo.exists(&paths::lock(&id))? {
        id = id.of_process(std::process::id());
    }
    let mut pg = pg.clone();
    pg.expect_system_identifier = Some(meta.system_identifier);
    pg.archive = Some(repo.clone());
    pg.parent = parent.as_ref().map(|p| p.0.clone());
    let mut lock = BackupLock::ours(&id, start_unix);
    lock.chain = parent.as_ref().map(|p| p.1.clone()).unwrap_or_default();
    // A full backup keeps a journal and leaves its stripes unfinished if it stops, for the next
    // one to go on from, where the repository's storage can take them over.
    let mut opts = opts.clone();
    let mut taken_over = None;
    if parent.is_none() && !no_resume && repo.location(&paths::stripe(&id, 1)).store().can_resume() {
        let facts = serde_json::json!({ "system_identifier": meta.system_identifier.0 });
        opts.journal = Some(sheaf_core::Journaled { journal: Arc::new(RepoJournal::of(repo, &id)), facts });
        if let Some((_, r, seen)) = resume {
            opts.resume = Some(r);
            taken_over = Some(seen);
        }
    }
    publish_or_clean_up(repo, &id, stripes, lock, taken_over, &opts, |opts, names| {
        let mut r = backup_postgres(&pg, opts, progress)?;
        if r.full_because.is_none() {
            r.full_because = no_parent;
        }
        let chain = match (r.backup_type, &parent) {
            (BackupType::Full, _) | (_, None) => Vec::new(),
            (_, Some((_, ids))) => ids.clone(),
        };
        let f = &r.facts;
        let stop_ms = sheaf_core::time::now_ms();
        let stop_unix = stop_ms / 1000;
        let record = BackupRecord {
            id: id.clone(),
            backup_id: r.report.backup_id.clone(),
            label: r.report.label.clone(),
            start_time: sheaf_core::time::utc(start_unix),
            stop_time: sheaf_core::time::utc(stop_unix),
            start_unix,
            stop_unix,
            stop_ms,
            start_lsn: f.start_lsn,
            stop_lsn: f.stop_lsn,
            timeline: f.timeline,
            start_wal: f.start_wal_file.clone(),
            stop_wal: f.stop_wal_file.clone(),
            bytes_read: r.report.bytes_read,
            bytes_written: r.report.bytes_written,
            compression: r.report.compression.clone(),
            stripes: names.to_vec(),
            server_version: f.server_version.clone(),
            backup_type: r.backup_type,
            chain,
            method: r.method.clone(),
            bytes_held: r.report.bytes_held,
            locked_until: repo.write_lock().map(|l| l.until),
            annotations,
            resumed: r.report.resumed.clone(),
            mariadb: None,
        };
        Ok((r, record))
    })
    .map(|(backup, record)| {
        let expired = expire_after.map(|keep| apply(repo, &keep, sheaf_core::time::now_ms() / 1000));
        InRepo { backup, record, expired, not_resumed }
    })
}

/// Write backup `id` into the repository and publish it, or leave nothing: its `stripes`
/// stripes under `backups/ID/` prepared, `lock` put while it runs (so that expire keeps what it
/// reads), `write` given the options with the stripes as targets and the repository's KDF, and
/// its record put only once `write` has finished. When `write` fails (or is interrupted), its
/// stripes and folder are removed, unless it keeps a journal (`opts.journal`): then its unfinished
/// stripes and journal stay for the next backup to go on from. The journal goes once the stripes
/// are published, before the record; the lock goes either way.
///
/// # Errors
/// Preparing the stripes or putting the lock; `write`'s; putting the record.
pub fn publish_or_clean_up<T>(
    repo: &Repo,
    id: &BackupId,
    stripes: usize,
    lock: BackupLock,
    taken_over: Option<Option<BackupLock>>,
    opts: &BackupOptions,
    write: impl FnOnce(&BackupOptions, &[String]) -> Result<(T, BackupRecord)>,
) -> Result<(T, BackupRecord)> {
    let names: Vec<String> = (1..=stripes).map(|k| paths::stripe(id, k)).collect();
    let mut opts = opts.clone();
    opts.targets = names.iter().map(|n| repo.location(n)).collect();
    // The repository's KDF, with a data key of the backup's own.
    opts.encryption = repo.encryption()?;
    for n in &names {
        repo.prepare(n)?;
    }
    let journaled = opts.journal.is_some();
    if let Some(seen) = taken_over {
        // Taken over from the writer that stopped: its lock, unless another backup took it over
        // meanwhile.
        let now: Option<BackupLock> = if repo.exists(&paths::lock(id))? { repo.get_json(&paths::lock(id)).ok() } else { None };
        if now != seen {
            return Err(Error::new(ErrorKind::Target, format!("backup {id} was taken over by another backup while this one prepared to resume it: run one backup at a time"))
                .transient(true));
        }
        repo.delete(&paths::lock(id))?;
    }
    repo.put_json(&paths::lock(id), &lock, false)?;
    let result = write(&opts, &names).and_then(|(t, record)| {
        if journaled {
            RepoJournal::of(repo, id).remove()?;
        }
        repo.put_json(&paths::record(id), &record, false)?;
        Ok((t, record))
    });
    // A full backup stopped by an interrupt, or by its storage failing or filling, keeps what it
    // stored for the next to go on from; one the source or the settings made fail (a refusal, a
    // server that stopped or changed) keeps nothing, as one that stored nothing.
    let result = match result {
        Err(e) if journaled => {
            let kept = matches!(e.kind(), ErrorKind::Cancelled | ErrorKind::Target | ErrorKind::Io | ErrorKind::NoSpace | ErrorKind::Incomplete)
                && RepoJournal::of(repo, id).stored_something().unwrap_or(false);
            if kept {
                Err(e.note(format!("what backup {id} stored stays: the next full backup goes on from it (--no-resume starts afresh and removes it)")))
            } else {
                let _ = resume::abandon(repo, id);
                Err(e)
            }
        }
        r => r,
    };
    if result.is_err() && !journaled {
        for n in &names {
            let _ = repo.delete(n);
        }
        repo.prune(&paths::backup_dir(id));
    }
    let _ = repo.delete(&paths::lock(id));
    result
}

/// Write backup `id`'s chain (an incremental or differential and the backups it builds on) as one
/// new full backup into the repository, without the database: `ID-full`, recorded with the
/// incremental's LSNs, timeline and WAL, so that it serves recovery exactly as the chain does and
/// the next incremental can build on it. `opts.targets` is ignored.
///
/// # Errors
/// A backup that is full already, a chain that is not all there or does not read back (named),
/// and whatever a backup meets writing; a failed consolidation leaves no record.
pub fn consolidate_in_repo(
    repo: &Repo,
    which: &BackupRef,
    stripes: usize,
    opts: &BackupOptions,
    threads: Option<usize>,
    schemes: &dyn Schemes,
    progress: Arc<dyn Progress>,
) -> Result<(BackupReport, BackupRecord)> {
    crate::repo::meta::postgres_only(repo, "consolidating a chain")?;
    if !(1..=64).contains(&stripes) {
        return Err(Error::invalid(format!("--stripes {stripes}: give 1 to 64")));
    }
    let records = complete(repo)?;
    let of = pick(&records, which)?;
    if of.chain.is_empty() {
        return Err(Error::invalid(format!("backup {} is a full backup already: consolidate an incremental or differential (sheaf info --repo lists them)", of.id)));
    }
    let new_id = of.id.consolidated();
    if repo.exists(&paths::record(&new_id))? {
        return Err(Error::new(ErrorKind::TargetNotEmpty, format!("backup {} was consolidated already, as {new_id}", of.id)));
    }
    let sets = open_chain(repo, &records, of, schemes, false)?;
    // While it runs, expire keeps the chain it reads.
    let mut lock = BackupLock::ours(&new_id, now_unix());
    lock.chain = of.chain.iter().cloned().chain(std::iter::once(of.id.clone())).collect();
    publish_or_clean_up(repo, &new_id, stripes, lock, None, opts, |opts, names| {
        let report = sheaf_core::consolidate(&sets.iter().collect::<Vec<_>>(), opts, threads, progress)?;
        let record = BackupRecord {
            id: new_id.clone(),
            backup_id: report.backup_id.clone(),
            stripes: names.to_vec(),
            bytes_written: report.bytes_written,
            bytes_held: report.bytes_held,
            compression: report.compression.clone(),
            backup_type: BackupType::Full,
            chain: Vec::new(),
            method: Some(format!("consolidated from {} ({} backups)", of.id, of.chain.len() + 1)),
            locked_until: repo.write_lock().map(|l| l.until),
            ..of.clone()
        };
        Ok((report, record))
    })
}
