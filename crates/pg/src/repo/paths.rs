//! The repository's layout, in one place: every name the repository's files have, relative to its
//! root. `repo.json` is the core's ([`sheaf_core::repo::META`]); the rest is PostgreSQL's:
//!
//! ```text
//! repo.json                          the repository's meta
//! backups/ID.json                    a finished backup's record (published last)
//! backups/ID.lock                    a backup being written
//! backups/ID/ID_K.sheaf              its stripes
//! wal/TTTTTTTT/NAME.wal              an archived WAL file, by timeline
//! wal/TTTTTTTT/NAME.sum              a segment's block summary (crate::wal::summarize)
//! dropped/NAME.json                  a WAL file wal-push --queue-max left out
//! keep/ID.json                       a pinned backup (crate::repo::keep)
//! annotations/ID.annotations         a backup's annotations as edited since (crate::repo::annotations)
//! drills/DRILL_ID.json               a drill's record (crate::repo::drills)
//! retention.json                     how far back expire removed WAL (crate::repo::horizon)
//! verify.ledger                      what verify read back whole (crate::repo::ledger)
//! history/N.json                     the cluster pg_upgrade made, as history N (crate::repo::histories)
//! history/N/...                      its backups, WAL and records, named as above
//! ```

/// Name endings of objects a locked repository writes without a lock: they are removed again
/// soon (a running backup's lock, wal-receive's copy of the segment in progress, `check`'s
/// probe) or rewritten each time (verify's ledger, a backup's annotations), and are not needed
/// to restore.
pub const UNLOCKED: [&str; 5] = [".lock", ".streaming", ".probe", ".ledger", ".annotations"];

/// Where backups, their records and locks live.
pub const BACKUPS: &str = "backups/";
/// Where archived WAL lives.
pub const WAL: &str = "wal/";
/// Where the records of dropped WAL live.
pub const DROPPED: &str = "dropped/";

/// A finished backup's record.
pub fn record(id: &str) -> String {
    format!("{BACKUPS}{id}.json")
}

/// The lock of a backup being written.
pub fn lock(id: &str) -> String {
    format!("{BACKUPS}{id}.lock")
}

/// The folder of a backup's stripes.
pub fn backup_dir(id: &str) -> String {
    format!("{BACKUPS}{id}")
}

/// Stripe `k` (from 1) of a backup.
pub fn stripe(id: &str, k: usize) -> String {
    format!("{BACKUPS}{id}/{id}_{k}.sheaf")
}

/// Whether `object` belongs to backup `id` (its stripes, record or lock).
pub fn of_backup(object: &str, id: &str) -> bool {
    backup_id(object) == Some(id)
}

/// The backup id an object under `backups/` belongs to: its folder's name (a stripe), or its name
/// less `.json` or `.lock` (an id may hold a `.`: `20261121-103045.123Z`).
pub fn backup_id(object: &str) -> Option<&str> {
    let rest = object.strip_prefix(BACKUPS)?;
    let id = match rest.split_once('/') {
        Some((dir, _)) => dir,
        None => rest.strip_suffix(".json").or_else(|| rest.strip_suffix(".lock"))?,
    };
    (!id.is_empty()).then_some(id)
}

/// Where an archived WAL file lives.
pub fn wal_object(name: &str) -> String {
    format!("{WAL}{}/{name}.wal", name.get(..8).unwrap_or("00000000"))
}

/// The WAL file name an object under `wal/` holds.
pub fn wal_name(object: &str) -> Option<&str> {
    object.rsplit('/').next().and_then(|n| n.strip_suffix(".wal"))
}

/// Where the block summary of archived segment `name` lives.
pub fn summary_object(name: &str) -> String {
    let wal = wal_object(name);
    format!("{}.sum", wal.strip_suffix(".wal").unwrap_or(&wal))
}

/// The object a segment's streamed copy is stored at while the segment is not complete
/// (`sheaf wal-receive`).
pub fn streaming_object(name: &str) -> String {
    format!("{WAL}{}/{name}.streaming", name.get(..8).unwrap_or("00000000"))
}

/// The record of a WAL file dropped from the archive.
pub fn dropped(name: &str) -> String {
    format!("{DROPPED}{name}.json")
}

/// Every name at a repository's top: its files, and the folders its objects live in.
pub const LAYOUT: [&str; 12] = [
    sheaf_core::repo::META,
    sheaf_core::keyring::KEYS_DIR,
    BACKUPS,
    WAL,
    DROPPED,
    crate::repo::keep::KEEP,
    crate::repo::drills::DRILLS,
    ANNOTATIONS,
    "check/",
    crate::repo::horizon::HORIZON,
    crate::repo::ledger::LEDGER,
    HISTORIES,
];

/// A name inside a history after the first (`history/N/REST`): its folder with the slash
/// (`history/N/`), and REST.
fn in_history(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(HISTORIES)?;
    let (n, inner) = rest.split_once('/')?;
    (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| (&name[..name.len() - inner.len()], inner))
}

/// Where the histories after the first live (crate::repo::histories).
pub const HISTORIES: &str = "history/";

/// The record of history `n` (2 on).
pub fn history_record(n: u32) -> String {
    format!("{HISTORIES}{n}.json")
}

/// The folder history `n` (2 on) lives in, its objects named as at the root below it.
pub fn history_folder(n: u32) -> String {
    format!("{HISTORIES}{n}")
}

/// Where backups' annotations, edited after the backup, live.
pub const ANNOTATIONS: &str = "annotations/";

/// Backup `id`'s annotations as edited since it was taken (`sheaf annotate`).
pub fn annotations(id: &str) -> String {
    format!("{ANNOTATIONS}{id}.annotations")
}

/// Why a database host without the right to manage the repository may not make a change to
/// `name` (`None`: it may): the rule a backup host's agent keeps for the clients it serves a
/// repository to (`sheaf agent --serve-repo`, a client granted `repos=`). What such a client does
/// in its work — push WAL, back up, verify, check, drill, restore — only adds objects, rewrites
/// what is derived or its own (summaries, the ledger, a probe, records of dropped WAL, when a key
/// was last used), and removes what a running or failed backup left (its lock, stripes no record
/// names) or a stream in progress. Replacing or removing archived WAL, a finished backup,
/// `repo.json` or a key record, adding keys to a repository that has its meta, and moving the
/// retention horizon are management (`expire`, `key`), refused; so is any name outside the
/// layout ([`LAYOUT`]).
///
/// `replace`: the object is there already (a create over it); `delete`: a removal; neither: a
/// new object. `exists` says whether another object is there.
pub fn kept_from_clients(name: &str, replace: bool, delete: bool, exists: &dyn Fn(&str) -> bool) -> Option<&'static str> {
    let meta = sheaf_core::repo::META;
    if !LAYOUT.iter().any(|top| if top.ends_with('/') { name.starts_with(top) } else { name == *top }) {
        // A repository lives at the top of the folder served: names below a sub-folder
        // (`sheaf://HOST:PORT/NAME/deeper`) would escape every rule here.
        return Some("not an object of a repository's layout (a repository is served at its folder's top: give sheaf://HOST:PORT/NAME)");
    }
    if let Some((folder, inner)) = in_history(name) {
        // A history after the first is laid out as the root is, under its folder: the same rules,
        // but for what only the root has.
        if inner == meta || inner.starts_with(sheaf_core::keyring::KEYS_DIR) || inner.starts_with(HISTORIES) {
            return Some("a history holds no repository meta, keys or histories of its own");
        }
        let inside = |n: &str| if n == meta { exists(n) } else { exists(&format!("{folder}{n}")) };
        return kept_from_clients(inner, replace, delete, &inside);
    }
    if name.starts_with(HISTORIES) {
        let number = name.strip_prefix(HISTORIES).and_then(|r| r.strip_suffix(".json")).unwrap_or_default();
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            return Some("not an object of a repository's layout");
        }
        // A history's record (`history/N.json`): added by `repo upgrade`, never changed.
        if replace || delete {
            return Some("a history's record is written once, by `sheaf repo upgrade`");
        }
        return None;
    }
    if name == crate::repo::horizon::HORIZON {
        // How far back expire removed WAL: raised, it makes later gaps look intended.
        return Some("the retention horizon is expire's");
    }
    let key_record = name.starts_with(sheaf_core::keyring::KEYS_DIR) && !name.ends_with(".used");
    if delete {
        if !exists(meta) {
            // A repository being made (init's key record before its meta): nothing to keep yet.
            return None;
        }
        // A stripe (inside a backup's folder) of a backup that has no record.
        let in_folder = name.strip_prefix(BACKUPS).is_some_and(|r| r.contains('/'));
        let unfinished_backup = in_folder && backup_id(name).is_some_and(|id| !exists(&record(id)));
        let passing = name.ends_with(".probe") || name.ends_with(".streaming") || (name.starts_with(BACKUPS) && name.ends_with(".lock"));
        return (!(passing || unfinished_backup)).then_some("removing backups, archived WAL and the repository's records is expire's and the key commands'");
    }
    if key_record && exists(meta) {
        return Some("changing the repository's keys is `sheaf key`'s");
    }
    if !replace {
        return None;
    }
    if name == meta {
        return Some("the repository's meta is written once, by init");
    }
    if name.starts_with(BACKUPS) {
        return Some("a backup's objects are written once");
    }
    if name.starts_with(WAL) && !name.ends_with(".sum") && !name.ends_with(".streaming") {
        return Some("archived WAL is written once");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_adds_and_tidies_but_never_replaces_or_removes_what_restores_need() {
        let there = ["repo.json", "backups/20261129-100000F.json"];
        let exists = |n: &str| there.contains(&n);
        let allowed = |name: &str, replace: bool, delete: bool| kept_from_clients(name, replace, delete, &exists).is_none();
        // Its work.
        assert!(allowed("wal/00000001/000000010000000000000003.wal", false, false));
        assert!(allowed("wal/00000001/000000010000000000000003.sum", true, false), "a summary is derived, rewritten");
        assert!(allowed("wal/00000001/000000010000000000000003.streaming", true, true));
        assert!(allowed("backups/20261129-110000F/20261129-110000F_1.sheaf", false, false));
        assert!(allowed("backups/20261129-110000F.lock", false, true));
        assert!(allowed("backups/20261129-110000F/20261129-110000F_1.sheaf", false, true), "a failed backup's stripes go");
        assert!(allowed("check/1-2.probe", true, true));
        assert!(allowed("verify.ledger", true, false));
        assert!(allowed("drills/20261129-120000Z.json", false, false));
        assert!(allowed("annotations/20261129-100000F.annotations", true, false), "annotating is a client's");
        assert!(!allowed("annotations/20261129-100000F.annotations", false, true), "removing them is expire's");
        assert!(allowed("dropped/000000010000000000000003.json", true, false));
        assert!(allowed("keys/abc.used", true, false));
        // Management.
        assert!(!allowed("wal/00000001/000000010000000000000003.wal", true, false));
        assert!(!allowed("wal/00000001/000000010000000000000003.wal", false, true));
        assert!(!allowed("backups/20261129-100000F.json", false, true));
        assert!(!allowed("backups/20261129-100000F/20261129-100000F_1.sheaf", false, true), "a finished backup's stripes stay");
        assert!(!allowed("backups/20261129-100000F/20261129-100000F_1.sheaf", true, false));
        assert!(!allowed("repo.json", true, false));
        assert!(!allowed("keys/abc.key", false, false), "a new key is sheaf key's");
        assert!(!allowed("keep/x.json", false, true));
        assert!(!allowed("retention.json", false, false), "the horizon is expire's");
        assert!(!allowed("retention.json", true, false));
        // A repository below the served folder's top escapes nothing: its names are refused.
        for sub in ["main/repo.json", "main/wal/00000001/000000010000000000000003.wal", "x", "wal"] {
            assert!(!allowed(sub, false, false) && !allowed(sub, true, false) && !allowed(sub, false, true), "{sub}");
        }
        // A history after the first: the root's rules below its folder.
        let there = ["repo.json", "history/2.json", "history/2/backups/20261129-100000F.json"];
        let exists = |n: &str| there.contains(&n);
        let allowed = |name: &str, replace: bool, delete: bool| kept_from_clients(name, replace, delete, &exists).is_none();
        assert!(allowed("history/3.json", false, false), "repo upgrade through the agent");
        assert!(!allowed("history/2.json", true, false) && !allowed("history/2.json", false, true));
        assert!(allowed("history/2/wal/00000001/000000010000000000000009.wal", false, false));
        assert!(!allowed("history/2/wal/00000001/000000010000000000000009.wal", true, false));
        assert!(allowed("history/2/backups/20261130-100000F/20261130-100000F_1.sheaf", false, true), "an unfinished backup's stripe");
        assert!(!allowed("history/2/backups/20261129-100000F/20261129-100000F_1.sheaf", false, true), "a finished one's");
        assert!(!allowed("history/2/retention.json", false, false));
        for odd in ["history/2/repo.json", "history/2/keys/a.key", "history/2/history/3.json", "history/x/wal/a", "history/2/elsewhere"] {
            assert!(!allowed(odd, false, false), "{odd}");
        }
        // Before the meta exists (init through the agent), its key record may come and go.
        let none = |_: &str| false;
        assert!(kept_from_clients("keys/abc.key", false, false, &none).is_none());
        assert!(kept_from_clients("keys/abc.key", false, true, &none).is_none());
    }

    #[test]
    fn names_in_the_repository() {
        assert_eq!(wal_object("00000002.history"), "wal/00000002/00000002.history.wal");
        assert_eq!(wal_name(&wal_object("000000010000000000000003")), Some("000000010000000000000003"));
        assert_eq!(stripe("20261122-101500Z", 2), "backups/20261122-101500Z/20261122-101500Z_2.sheaf");
        assert_eq!(backup_id(&stripe("a", 1)), Some("a"));
        assert_eq!(backup_id(&record("b")), Some("b"));
        assert!(of_backup(&lock("a"), "a") && of_backup(&stripe("a", 1), "a") && !of_backup(&stripe("ab", 1), "a"));
        let id = "20261121-103045.123Z";
        for o in [record(id), lock(id), stripe(id, 2)] {
            assert_eq!(backup_id(&o), Some(id), "{o}");
        }
        assert!(!of_backup(&record(id), "20261121-103045") && backup_id("backups/x.partial").is_none());
        assert_eq!(summary_object("000000020000000100000003"), "wal/00000002/000000020000000100000003.sum");
    }

    #[test]
    fn streamed_copies_live_beside_the_archived_segments() {
        assert_eq!(streaming_object("000000020000000100000003"), "wal/00000002/000000020000000100000003.streaming");
        assert_eq!(wal_name(&streaming_object("000000020000000100000003")), None, "not taken for an archived file");
    }
}
