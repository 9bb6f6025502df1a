//! `sheaf undelete`: after a wipe of a locked repository, make what the lock kept readable again.
//!
//! In a bucket with Object Lock (and so versioning), a delete without a version only puts a
//! delete marker on top of the object and an overwrite only puts a new version on top; the locked
//! version underneath cannot be removed before its date, even with the repository's own
//! credentials. Reads see the top, so after such a wipe the repository looks empty or garbled.
//! This removes what lies on top: the delete markers over the repository's objects and, given
//! the moment the damage began (`since`), every version written after it over an object that
//! existed before it. Nothing of the data underneath is touched; objects that are removed again
//! soon anyway (locks, probes, streamed copies) are left as they are.
//!
//! Repository objects are written once under names of their own, so a version on top of one after
//! `since` is damage, not a newer backup; objects first written after `since` are left as they are
//! (new WAL, or the attacker's own, which `verify` and restore's checks would refuse).

use serde::Serialize;
use sheaf_core::repo::Place;
use sheaf_core::storage::ObjectVersion;
use sheaf_core::Result;

use crate::repo::paths;

/// What removing the top of each object brings back.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UndeletePlan {
    /// `(name, version)` of each delete marker or overwrite to remove, in order.
    pub remove: Vec<(String, String)>,
    /// Objects readable again once they are gone.
    pub revealed: Vec<String>,
}

/// Decide what to remove: the delete markers on top of the repository's objects, and with `since`
/// (seconds since the epoch) every version written at or after it over an object that existed
/// before it.
///
/// # Errors
/// A store that keeps no versions; when it cannot be listed.
pub fn plan_undelete(repo: &Place, since: Option<i64>) -> Result<UndeletePlan> {
    let versions = repo.versions("")?;
    let mut plan = UndeletePlan::default();
    let mut rest = versions.as_slice();
    while let Some(first) = rest.first() {
        let n = rest.iter().take_while(|v| v.name == first.name).count();
        let (one, next) = rest.split_at(n);
        rest = next;
        if paths::UNLOCKED.iter().any(|s| first.name.ends_with(s)) {
            continue;
        }
        undo_one(one, since, &mut plan);
    }
    Ok(plan)
}

/// The versions of one object, newest first.
fn undo_one(versions: &[ObjectVersion], since: Option<i64>, plan: &mut UndeletePlan) {
    let damaged = |v: &ObjectVersion| match since {
        Some(t) => v.modified >= t,
        None => v.deleted,
    };
    // The newest data version that is not damage is what reads should get.
    let Some(keep) = versions.iter().position(|v| !v.deleted && !damaged(v)) else { return };
    if keep == 0 {
        return;
    }
    // Without a moment, only markers lie above the newest data version, whatever wrote it.
    let on_top = &versions[..keep];
    plan.remove.extend(on_top.iter().map(|v| (v.name.clone(), v.version.clone())));
    plan.revealed.push(versions[keep].name.clone());
}

/// What [`undelete`] did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UndeleteReport {
    /// Versions removed.
    pub removed: usize,
    /// Objects readable again.
    pub revealed: Vec<String>,
    /// Objects whose top could not be removed, with the server's words (a version on top that is
    /// locked itself: whoever wrote it locked it, and it stays until its date).
    pub stuck: Vec<String>,
}

/// Carry out a plan. A version the server refuses to remove (locked by whoever wrote it) is
/// reported, and the rest goes on.
///
/// # Errors
/// None of its own; every refusal is in the report.
pub fn undelete(repo: &Place, plan: &UndeletePlan) -> Result<UndeleteReport> {
    let mut report = UndeleteReport::default();
    let mut failed: Vec<String> = Vec::new();
    for (name, version) in &plan.remove {
        match repo.delete_version(name, version) {
            Ok(()) => report.removed += 1,
            Err(e) => {
                if !failed.contains(name) {
                    failed.push(name.clone());
                    report.stuck.push(format!("{name}: {e}"));
                }
            }
        }
    }
    report.revealed = plan.revealed.iter().filter(|n| !failed.contains(n)).cloned().collect();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(version: &str, modified: i64, deleted: bool) -> ObjectVersion {
        ObjectVersion { name: "wal/x.wal".into(), version: version.into(), modified, latest: false, deleted, size: 1 }
    }

    #[test]
    fn markers_on_top_go_and_the_data_under_them_comes_back() {
        let mut plan = UndeletePlan::default();
        undo_one(&[v("m2", 30, true), v("m1", 20, true), v("d", 10, false)], None, &mut plan);
        assert_eq!(plan.remove.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(), ["m2", "m1"]);
        assert_eq!(plan.revealed, ["wal/x.wal"]);
    }

    #[test]
    fn without_a_moment_an_overwrite_is_left_and_with_one_it_goes() {
        let versions = [v("m", 30, true), v("garbage", 25, false), v("d", 10, false)];
        let mut plan = UndeletePlan::default();
        undo_one(&versions, None, &mut plan);
        assert_eq!(plan.remove.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(), ["m"], "the garbage reads until a moment is given");
        let mut plan = UndeletePlan::default();
        undo_one(&versions, Some(20), &mut plan);
        assert_eq!(plan.remove.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(), ["m", "garbage"]);
        assert_eq!(plan.revealed, ["wal/x.wal"]);
    }

    #[test]
    fn what_is_whole_or_new_is_left_alone() {
        let mut plan = UndeletePlan::default();
        undo_one(&[v("d", 10, false)], None, &mut plan);
        undo_one(&[v("m", 30, true)], None, &mut plan);
        undo_one(&[v("new", 30, false)], Some(20), &mut plan);
        assert!(plan.remove.is_empty() && plan.revealed.is_empty(), "{plan:?}");
    }
}
