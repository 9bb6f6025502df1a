//! Issue 54: a repository for the cluster's whole life. Annotations: given at backup time, edited
//! later beside the record, shown by info, picking the backup a restore and a drill use, removed
//! by expire with their backup. One backup removed by its id; each repository expired by its own
//! retention; archive retention leaving older backups only what makes them consistent.

use super::super::cluster::{pg_dir, Cluster};
use super::*;
use crate::integration::common::{assert_fails, run, stderr, SHEAF};

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

/// Two repositories, one config file: `repo` keeps one full (`retention-full`), `repo2` keeps
/// three with point-in-time recovery from the newest on (`repo2-retention-full`,
/// `repo2-retention-archive`). `expire --set` removes one backup, refusing the newest and a base
/// another builds on; a plain `expire` applies each repository's own policy; the older backups of
/// the second keep only the WAL that makes each consistent, which info, verify and restore say.
#[test]
fn one_backup_removed_by_id_and_each_repository_expired_by_its_own_retention() {
    let (base, r1) = repo_dir();
    let r2 = base.path().join("repo2");
    pg_dir(&r2);
    let (s1, s2) = (r1.to_str().unwrap(), r2.to_str().unwrap());
    let conf = base.path().join("sheaf.toml");
    std::fs::write(&conf, format!("repo = '{s1}'\nrepo2 = '{s2}'\nretention-full = 1\nrepo2-retention-full = 3\nrepo2-retention-archive = 1\n")).unwrap();
    let cf = conf.to_str().unwrap();
    let cmd = format!("archive_command = '{SHEAF} wal-push %p --repo {s1} --repo {s2}'");
    let c = Cluster::new(&[], &["archive_mode = on", cmd.as_str(), "archive_timeout = 0"]);
    ok(run(sheaf().args(["init", "--config", cf, &c.url("postgres")])), "init both");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t (id int, batch int, at timestamptz DEFAULT clock_timestamp())");
    let backup = |batch: u32, kind: &str| {
        c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {batch} FROM generate_series(1, 100) g"));
        ok(run(sheaf().args(["backup", &c.url("postgres"), "--config", cf, "--repo-target", "all", "--type", kind])), "backup into both");
        archive_now(&c);
    };
    // f1, f2 full; i2 incremental on f2; f3 full; then more rows, archived.
    backup(1, "full");
    backup(2, "full");
    backup(3, "incr");
    backup(4, "full");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 5 FROM generate_series(1, 100) g");
    archive_now(&c);
    let ids = |repo: &str| -> Vec<String> {
        let info = json(ok(run(sheaf().args(["info", "--repo", repo, "--json"])), "info"));
        info["backups"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap().to_string()).collect()
    };
    // Each repository took its own backups: their ids differ.
    let (one, two) = (ids(s1), ids(s2));
    let [f1, f2, i2, f3] = [&one[0], &one[1], &one[2], &one[3]];
    let (g1, g3) = (&two[0], &two[3]);

    // One backup by its id: not a base another builds on, not the newest, not one unknown.
    assert_fails(&run(sheaf().args(["expire", "--repo", s1, "--set", f2])), 2, &[&format!("backup {f2} is the base of {i2}"), &format!("sheaf expire --set {i2}")]);
    assert_fails(&run(sheaf().args(["expire", "--repo", s1, "--set", f3])), 2, &["the newest finished backup", "take another backup first"]);
    let o = run(sheaf().args(["expire", "--repo", s1, "--set", "20200101-000000F"]));
    assert!(!o.status.success() && stderr(&o).contains("no backup 20200101-000000F") && stderr(&o).contains(f1.as_str()), "{}", stderr(&o));
    assert_fails(&run(sheaf().args(["expire", "--repo", s1, "--set", i2, "--keep-full", "2"])), 2, &["--keep-full"]);
    let said = ok(run(sheaf().args(["expire", "--repo", s1, "--set", i2, "--dry-run"])), "expire --set --dry-run");
    assert!(said.contains(&format!("would remove 1 backup ({i2})")), "{said}");
    assert_eq!(ids(s1).len(), 4, "a dry run removes nothing");
    ok(run(sheaf().args(["expire", "--repo", s1, "--set", i2])), "expire --set");
    assert_eq!(ids(s1), [f1.clone(), f2.clone(), f3.clone()]);

    // Each repository by its own policy: the first keeps its newest full, the second keeps all
    // three fulls but point-in-time recovery only from the newest on.
    let said = ok(run(sheaf().args(["expire", "--config", cf])), "expire both");
    assert!(said.contains(&format!("{s1}:")) && said.contains(&format!("{s2}:")), "{said}");
    assert!(said.contains("kept without point-in-time recovery past their end"), "{said}");
    assert_eq!(ids(s1), std::slice::from_ref(f3));
    assert_eq!(ids(s2).len(), 4, "the second repository keeps its three fulls and the incremental");
    let info = json(ok(run(sheaf().args(["info", "--repo", s2, "--json"])), "info repo2"));
    let end_only: Vec<&str> = info["to_its_end_only"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(end_only.contains(&g1.as_str()) && !end_only.contains(&g3.as_str()), "{info}");
    assert!(!info["retention_gaps"].as_array().unwrap().is_empty() && info["gaps"].as_array().unwrap().is_empty(), "{info}");
    let text = ok(run(sheaf().args(["info", "--repo", s2])), "info repo2");
    assert!(text.lines().any(|l| l.starts_with(g1.as_str()) && l.contains("[to its end only")), "{text}");
    // Retention, not damage: verify passes.
    ok(run(sheaf().args(["verify", "--repo", s2])), "verify repo2");

    // The oldest restores to its own end, and says why when asked for more.
    let dir = base.path().join("nope");
    let o = run(sheaf().args(["restore", "--repo", s2, "--set", g1, "--to", dir.to_str().unwrap()]));
    assert!(!o.status.success() && stderr(&o).contains("keeps only the WAL that makes it consistent") && stderr(&o).contains("--target immediate"), "{}", stderr(&o));
    let back = recover(&r2, &base.path().join("f1"), &["--set", g1, "--target", "immediate"]);
    assert_eq!(batches(&back), "1:100");
    drop(back);
    let back = recover(&r2, &base.path().join("end"), &[]);
    assert_eq!(batches(&back), "1:100,2:100,3:100,4:100,5:100");
    drop(back);

    // A policy of nothing is named where it was set.
    std::fs::write(&conf, format!("repo = '{s1}'\nrepo2 = '{s2}'\nrepo2-retention-archive = 0\n")).unwrap();
    assert_fails(&run(sheaf().args(["expire", "--config", cf])), 2, &["repo2-retention-archive = 0", "sheaf.toml"]);
}
