//! `sheaf repo upgrade`: after `pg_upgrade`, the new cluster recorded as the repository's next
//! history ([`crate::repo::histories`]), once it is shown to be the old one upgraded.
//!
//! What shows it, since pg_upgrade leaves no mark sheaf could read in the new cluster: its
//! system identifier is new (initdb made it), its major is the same or newer (pg_upgrade never
//! goes back), its WAL segment size the same (pg_upgrade refuses another), and its WAL starts
//! past the end of the old cluster's: pg_upgrade sets the new cluster's next WAL file to the
//! old one's (`pg_resetwal -l`), where a cluster from a fresh initdb starts at the first segment.

use serde::Serialize;
use sheaf_core::repo::Place;
use sheaf_core::{Error, ErrorKind, Result};

use crate::cluster::walname::{WalFile, WalKind};
use crate::connect::server::Server;
use crate::repo::histories::{self, major_text, HistoryRecord};
use crate::repo::inventory::archived;
use crate::repo::records::{backups, complete, Found};

/// What `repo upgrade` did.
#[derive(Clone, Debug, Serialize)]
pub struct Upgraded {
    /// The history the cluster is recorded as.
    pub history: u32,
    /// Its record.
    pub record: HistoryRecord,
    /// The cluster of the history before, and its server version.
    pub from: crate::cluster::system::SystemId,
    /// Its server version.
    pub from_version: String,
    /// The repository recorded this cluster already (as its newest history): nothing was written.
    pub already: bool,
    /// Backups of the old cluster left unfinished (killed, no writer running): the upgraded
    /// cluster's backups go into their own history and never go on from them; `expire` removes
    /// them.
    pub left_unfinished: Vec<crate::repo::id::BackupId>,
}

fn major(version: &str) -> u32 {
    major_text(version).parse().unwrap_or(0)
}

/// Record the cluster at `url` as the next history of the repository at `place`, after
/// `pg_upgrade` made it from the cluster the repository records now. Run again for the same
/// cluster, it changes nothing and says so.
///
/// # Errors
/// A cluster that is not the repository's newest cluster upgraded (named with the evidence
/// against it): one of an older history, an older major, another WAL segment size, WAL that
/// does not start past the old cluster's end; a repository this user may not write; the server's
/// and the store's errors.
pub fn upgrade(place: &Place, url: &str) -> Result<Upgraded> {
    let repo = crate::repo::meta::open(place)?;
    repo.check_writer()?;
    let old = repo.meta().clone();
    let mut server = Server::connect(url)?;
    let facts = server.check_with(false)?;
    let new = facts.system_identifier;
    let shown = server.url().to_string();
    let done = |record: HistoryRecord, already| Upgraded {
        history: record.history,
        record,
        from: old.system_identifier,
        from_version: old.server_version.clone(),
        already,
        left_unfinished: Vec::new(),
    };
    if new == old.system_identifier {
        let record = HistoryRecord {
            history: old.history,
            system_identifier: new,
            wal_segment_size: old.wal_segment_size,
            server_version: old.server_version.clone(),
            created: old.created.clone(),
            upgraded_from: new,
            start_lsn: Default::default(),
        };
        return Ok(done(record, true));
    }
    let all = histories::all(&repo)?;
    if let Some(h) = all.iter().find(|h| h.repo.meta().system_identifier == new) {
        return Err(Error::invalid(format!(
            "{shown} is cluster {new}, {} of the repository at {}, which was upgraded since to cluster {} (history {}): a repository goes forward only; back up the old cluster into a repository of its own if it runs again (sheaf init --repo NEW_PLACE ...)",
            h.describe(),
            repo.display(),
            old.system_identifier,
            old.history
        )));
    }
    let not_successor = |why: String| {
        Error::invalid(format!(
            "{shown} (cluster {new}, PostgreSQL {}) is not the repository's cluster {} (PostgreSQL {}) upgraded with pg_upgrade: {why}. Give it a repository of its own (sheaf init --repo NEW_PLACE ...), or check the URL",
            major_text(&facts.version),
            old.system_identifier,
            major_text(&old.server_version)
        ))
    };
    let (from_major, to_major) = (major(&old.server_version), major(&facts.version));
    if to_major < from_major {
        return Err(not_successor(format!("its major version is older, and pg_upgrade never goes back from {from_major} to {to_major}")));
    }
    if facts.wal_segment_size != old.wal_segment_size {
        return Err(not_successor(format!("its WAL segments are {} bytes, the old cluster's {}, and pg_upgrade keeps the size", facts.wal_segment_size, old.wal_segment_size)));
    }
    // Where the old cluster's WAL ended, as far as the repository knows: its newest archived
    // segment, or its newest backup's end.
    let seg = old.wal_segment_size;
    let wal_end = archived(&repo)?.into_iter().filter(|(w, _)| w.kind == WalKind::Segment).map(|(w, _)| w.segno).max();
    let backup_end = complete(&repo)?.iter().filter_map(|r| WalFile::parse(&r.stop_wal, seg)).map(|w| w.segno).max();
    // A history recorded by an upgrade and holding nothing yet ends, at least, where its WAL
    // began when it was recorded.
    let recorded = match old.history {
        1 => None,
        n => Some(repo.root().get_json::<HistoryRecord>(&histories::record(n))?.start_lsn.segment_number(seg)),
    };
    let redo = server.checkpoint_redo()?;
    if let Some(end) = wal_end.max(backup_end).max(recorded).filter(|&end| redo.segment_number(seg) <= end) {
        return Err(not_successor(format!(
            "its WAL starts at {redo} (segment {}), not past where the old cluster's ends in the repository (segment {end}); pg_upgrade carries the old cluster's WAL position over, where a new initdb starts again at the first segment",
            redo.segment_number(seg)
        )));
    }
    let n = old.history + 1;
    let record = HistoryRecord {
        history: n,
        system_identifier: new,
        wal_segment_size: facts.wal_segment_size,
        server_version: facts.version.clone(),
        created: sheaf_core::time::utc_now(),
        upgraded_from: old.system_identifier,
        start_lsn: redo,
    };
    let root = repo.root();
    // The history's folder first (on a filesystem): its objects are made only below it.
    root.prepare(&format!("{}/{}", histories::folder(n), sheaf_core::repo::META))?;
    root.put_json(&histories::record(n), &record, false).map_err(|e| {
        if e.kind() == ErrorKind::Target {
            Error::new(
                ErrorKind::Target,
                format!("{}: another `sheaf repo upgrade` recorded history {n} at the same time: run `sheaf info` to see which cluster it records", repo.display()),
            )
        } else {
            e.context("the new cluster could not be recorded")
        }
    })?;
    tracing::info!(history = n, cluster = %new, from = %old.system_identifier, "repository upgraded");
    // Only said: a listing that fails here does not undo what was recorded.
    let left_unfinished = match backups(&repo) {
        Ok(found) => found.into_iter().filter_map(|f| if let Found::Unfinished { id, running: false, .. } = f { Some(id) } else { None }).collect(),
        Err(e) => {
            tracing::warn!("cannot list the old cluster's backups left unfinished: {e}");
            Vec::new()
        }
    };
    Ok(Upgraded { left_unfinished, ..done(record, false) })
}
