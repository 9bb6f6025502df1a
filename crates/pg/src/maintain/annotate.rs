//! `sheaf annotate`: a finished backup's annotations edited ([`crate::repo::annotations`]).

use std::collections::BTreeMap;

use sheaf_core::{Error, ErrorKind, Result};

use crate::repo::annotations::{apply, write, Change};
use crate::repo::records::{backups, Found};
use crate::repo::Repo;

/// Make `changes` to finished backup `id`'s annotations (its id, or its set's backup id); what
/// they are then.
///
/// # Errors
/// No such finished backup (naming those there are); the store's.
pub fn annotate(repo: &Repo, id: &str, changes: &[Change]) -> Result<BTreeMap<String, String>> {
    let repo = &crate::repo::histories::with_backup(repo, id)?;
    let found = backups(repo)?;
    let record = match found.iter().find(|f| f.id() == id || f.record().is_some_and(|r| r.backup_id == id)) {
        Some(Found::Complete(r)) => r,
        Some(Found::Unfinished { .. }) => return Err(Error::invalid(format!("backup {id} is not finished: only a finished backup is annotated"))),
        None => {
            let ids: Vec<&str> = found.iter().filter_map(Found::record).map(|r| r.id.as_str()).collect();
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("no backup {id} in {}; it holds: {}", repo.display(), if ids.is_empty() { "none".into() } else { ids.join(", ") }),
            ));
        }
    };
    let mut map = record.annotations.clone();
    apply(&mut map, changes);
    write(repo, &record.id, &map)?;
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::annotations::given;
    use crate::repo::paths;
    use crate::repo::records::{complete, pick, test_record, BackupRecord, BackupRef};

    #[test]
    fn annotations_are_edited_beside_the_record_and_read_back_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let repo = crate::repo::meta::test_repo(&dir.path().join("r"));
        let mut r = test_record("20261129-100000F");
        r.annotations = given(&["release=42".parse().unwrap()]);
        repo.put_json(&paths::record(&r.id), &r, false).unwrap();
        let e = annotate(&repo, "20261129-999999F", &["x=1".parse().unwrap()]).unwrap_err();
        assert!(e.to_string().contains("it holds: 20261129-100000F"), "{e}");
        let now = annotate(&repo, "20261129-100000F", &["why=before the migration".parse().unwrap(), "release=".parse().unwrap()]).unwrap();
        assert_eq!(now.get("why").map(String::as_str), Some("before the migration"));
        assert!(!now.contains_key("release"));
        // The record stands as written; what backups() gives carries the edit.
        let stored: BackupRecord = repo.get_json(&paths::record(&r.id)).unwrap();
        assert_eq!(stored.annotations.get("release").map(String::as_str), Some("42"));
        let listed = complete(&repo).unwrap();
        assert_eq!(listed[0].annotations, now);
        let picked = pick(&listed, &BackupRef::Annotated("why".into(), "before the migration".into())).unwrap();
        assert_eq!(picked.id, r.id);
        let e = pick(&listed, &BackupRef::Annotated("why".into(), "other".into())).unwrap_err();
        assert!(e.to_string().contains("why has: before the migration"), "{e}");
    }
}
