//! `sheaf keep` on a real repository: a pinned backup outlives `expire` with the WAL that makes
//! it consistent, and restores; released, it goes.

use super::repo::{archive_now, json, ok, recover, setup};
use super::sheaf;
use crate::integration::common::{assert_fails, run};

#[test]
fn a_pinned_backup_outlives_expire_and_restores() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let url = c.url("postgres");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    let first = json(ok(run(sheaf().args(["backup", &url, "--repo", r, "--json"])), "backup 1"));
    let first = first["postgres"]["repository_id"].as_str().unwrap().to_string();
    // Enough WAL between the two that expire has segments to remove.
    for b in 2..=4 {
        c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {b} FROM generate_series(1, 100) g"));
        archive_now(&c);
    }
    std::thread::sleep(std::time::Duration::from_millis(1100));
    ok(run(sheaf().args(["backup", &url, "--repo", r])), "backup 2");
    archive_now(&c);

    let o = run(sheaf().args(["keep", "--repo", r, "--set", "20000101-000000Z"]));
    assert_fails(&o, 2, &["no backup 20000101-000000Z"]);
    let o = run(sheaf().args(["keep", "--repo", r, "--set", &first, "--until", "2001-01-01 00:00:00Z"]));
    assert_fails(&o, 2, &["already past"]);
    let o = run(sheaf().args(["keep", "--repo", r, "--set", &first, "--until", "2099-01-01"]));
    assert_fails(&o, 2, &["--until", "2026-11-22 10:15:00+00"]);
    ok(run(sheaf().args(["keep", "--repo", r, "--set", &first])), "keep");
    let info = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(info.lines().any(|l| l.starts_with(&first) && l.contains("[kept until released]")), "{info}");

    let plan = json(ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--json"])), "expire"));
    assert_eq!(plan["removed"].as_array().unwrap().len(), 0, "{plan}");
    assert!(plan["wal_removed"].as_u64().unwrap() >= 1, "the WAL after the pinned backup's end goes: {plan}");
    let back = recover(&repo, &base.path().join("pinned"), &["--set", &first, "--target", "immediate"]);
    assert_eq!(back.sql("app", "SELECT count(*) FROM t"), "100");
    drop(back);

    ok(run(sheaf().args(["keep", "--repo", r, "--set", &first, "--release"])), "release");
    let plan = json(ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--json"])), "expire"));
    assert_eq!(plan["removed"], serde_json::json!([first]), "{plan}");
    let pins = json(ok(run(sheaf().args(["keep", "--repo", r, "--json"])), "keep list"));
    assert_eq!(pins["pins"], serde_json::json!([]));
}
