//! Issue 54: a repository for the cluster's whole life. Annotations: given at backup time, edited
//! later beside the record, shown by info, picking the backup a restore and a drill use, removed
//! by expire with their backup.

use super::*;
use crate::integration::common::{run, stderr};

fn backup_annotated(repo: &TestRepo, c: &Cluster, annotations: &[&str]) -> String {
    let mut cmd = repo.sheaf();
    cmd.args(["backup", &c.url("postgres"), "--repo", &repo.arg, "--json"]);
    for a in annotations {
        cmd.args(["--annotation", a]);
    }
    let b = json(ok(run(&mut cmd), "backup"));
    b["postgres"]["repository_id"].as_str().unwrap().to_string()
}

/// The annotations `info --json` shows for backup `id`.
fn shown(repo: &TestRepo, id: &str) -> serde_json::Value {
    let info = json(ok(run(repo.sheaf().args(["info", "--repo", &repo.arg, "--json"])), "info"));
    info["backups"].as_array().unwrap().iter().find(|b| b["id"] == id).map(|b| b["annotations"].clone()).unwrap_or_else(|| panic!("{id} not in {info}"))
}

#[test]
fn annotations_mark_backups_and_pick_what_restore_and_drill_use() {
    let (base, _) = repo_dir();
    let repo = TestRepo::folder(base.path());
    let c = repo.cluster();
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    let first = backup_annotated(&repo, &c, &["release=41", "why=nightly"]);
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 100) g");
    let second = backup_annotated(&repo, &c, &["release=42"]);
    archive_now(&c);
    assert_eq!(shown(&repo, &first), serde_json::json!({ "release": "41", "why": "nightly" }));

    // Edited later: set, replaced and removed in one call; the record itself is never rewritten.
    let record = std::fs::read(Path::new(&repo.arg).join(format!("backups/{first}.json"))).unwrap();
    let out = ok(run(repo.sheaf().args(["annotate", "--repo", &repo.arg, "--set", &first, "why=before the 2026-12 migration", "ticket=OPS-1234", "release="])), "annotate");
    assert!(out.contains("ticket=OPS-1234") && !out.contains("release"), "{out}");
    assert_eq!(shown(&repo, &first), serde_json::json!({ "ticket": "OPS-1234", "why": "before the 2026-12 migration" }));
    assert_eq!(std::fs::read(Path::new(&repo.arg).join(format!("backups/{first}.json"))).unwrap(), record, "the record stands as written");
    let text = ok(run(repo.sheaf().args(["info", "--repo", &repo.arg])), "info");
    assert!(text.lines().any(|l| l.starts_with(&first) && l.contains("ticket=OPS-1234")), "{text}");

    // Bad input, named.
    let o = run(repo.sheaf().args(["annotate", "--repo", &repo.arg, "--set", "20200101-000000Z", "x=1"]));
    assert!(!o.status.success() && stderr(&o).contains("no backup 20200101-000000Z") && stderr(&o).contains(&first), "{}", stderr(&o));
    let o = run(repo.sheaf().args(["annotate", "--repo", &repo.arg, "--set", &first, "bad key=1"]));
    assert!(!o.status.success() && stderr(&o).contains("a key is 1 to 64 letters"), "{}", stderr(&o));

    // A restore and a drill pick the newest backup that carries the annotation.
    let back = repo.recover(&base.path().join("back"), &["--annotation", "ticket=OPS-1234", "--target", "immediate"]);
    assert_eq!(batches(&back), "1:100", "the first backup, at its consistency point");
    drop(back);
    let o = run(repo.sheaf().args(["restore", "--repo", &repo.arg, "--annotation", "ticket=OPS-9", "--to", base.path().join("none").to_str().unwrap()]));
    assert!(!o.status.success() && stderr(&o).contains("no finished backup is annotated ticket=OPS-9") && stderr(&o).contains("ticket has: OPS-1234"), "{}", stderr(&o));
    let work = base.path().join("drill");
    let d = json(ok(run(repo.sheaf().args(["drill", "--repo", &repo.arg, "--annotation", "release=42", "--to", work.to_str().unwrap(), "--json"])), "drill"));
    assert_eq!(d["backup"], second.as_str(), "{d}");
    assert_eq!(d["passed"], true, "{d}");

    // Expire removes a backup's annotations with it.
    let edited = Path::new(&repo.arg).join(format!("annotations/{first}.annotations"));
    assert!(edited.is_file());
    ok(run(repo.sheaf().args(["expire", "--repo", &repo.arg, "--keep-full", "1"])), "expire");
    assert!(!edited.exists(), "the annotations went with their backup");
    assert_eq!(shown(&repo, &second), serde_json::json!({ "release": "42" }));
}
