//! `sheaf keep` on a real repository: a pinned backup outlives `expire` with the WAL that makes
//! it consistent, and restores; the WAL expire removed after it is told from a real gap by
//! verify, info, check and the metrics alike; released, it goes.

use super::cluster::Cluster;
use super::monitor::sample;
use super::repo::{archive_now, json, ok, setup, start_restored};
use super::sheaf;
use crate::integration::common::{assert_fails, run, stderr};

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
    // A test restore that keeps archiving into the repository it came from is named as such;
    // --archive-mode off turns archiving off in the restored cluster.
    let dir = base.path().join("pinned");
    let restore =
        |mode: &str| run(sheaf().args(["restore", "--repo", r, "--to", dir.to_str().unwrap(), "--force", "--set", &first, "--target", "immediate", "--archive-mode", mode]));
    let o = restore("preserve");
    assert!(o.status.success() && stderr(&o).contains("archives a new timeline into") && stderr(&o).contains("--archive-mode off"), "{}", stderr(&o));
    let o = restore("off");
    assert!(o.status.success() && !stderr(&o).contains("archives a new timeline"), "{}", stderr(&o));
    let back = start_restored(&dir, true);
    assert_eq!(back.sql("app", "SELECT count(*) FROM t"), "100");
    assert_eq!(back.sql("postgres", "SHOW archive_mode"), "off");
    drop(back);
    // What retention removed is not damage: verify, info, check and the metrics agree.
    retention_is_not_damage(r, &url, &c);

    ok(run(sheaf().args(["keep", "--repo", r, "--set", &first, "--release"])), "release");
    // expire-auto: refused before the backup without a policy; with one, expire runs after it.
    let o = run(sheaf().args(["backup", &url, "--repo", r, "--expire-auto"]));
    assert_fails(&o, 2, &["expire-auto", "retention-full"]);
    let third = json(ok(run(sheaf().env("SHEAF_RETENTION_FULL", "1").args(["backup", &url, "--repo", r, "--expire-auto", "--json"])), "backup --expire-auto"));
    let removed = &third["postgres"]["expire"]["removed"];
    assert!(removed.as_array().is_some_and(|a| a.len() == 2 && a[0] == first.as_str()), "the released backup and the second go: {third}");
    assert_eq!(third["postgres"]["expire"]["kept"], serde_json::json!([third["postgres"]["repository_id"]]), "{third}");
    let pins = json(ok(run(sheaf().args(["keep", "--repo", r, "--json"])), "keep list"));
    assert_eq!(pins["pins"], serde_json::json!([]));
}

/// After `keep` and `expire`: the gap expire left after the pinned backup is retention's, and all
/// four say so; then a segment the newest backup needs is taken away, and all four fail.
fn retention_is_not_damage(r: &str, url: &str, c: &Cluster) {
    // The newest backup's WAL runs on for a few segments.
    archive_now(c);
    archive_now(c);
    let prom = |what: &str| {
        let text = ok(run(sheaf().args(["info", "--repo", r, "--format", "prometheus"])), what);
        (sample(&text, "sheaf_wal_gaps{"), sample(&text, "sheaf_wal_retention_gaps{"))
    };
    let said = ok(run(sheaf().args(["verify", "--repo", r])), "verify after keep and expire");
    assert!(said.contains("removed by retention"), "{said}");
    let info = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(!info.contains("WAL GAP") && info.contains("WAL removed by retention"), "{info}");
    assert_eq!(prom("metrics"), (Some(0.0), Some(1.0)));
    let o = run(sheaf().args(["check", url, "--repo", r, "--archive-timeout", "30s"]));
    assert_eq!(o.status.code(), Some(0), "check: {}", crate::integration::common::stdout(&o));

    // A real gap: a segment in the middle of the newest backup's WAL.
    let v = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info --json"));
    let last = v["wal"].as_array().unwrap().last().unwrap().clone();
    assert!(last["segments"].as_u64().unwrap() >= 3, "{v}");
    let first = last["first"].as_str().unwrap();
    let seg = u64::from_str_radix(&first[16..], 16).unwrap() + 1;
    let name = format!("{}{:08X}", &first[..16], seg);
    let object = std::path::Path::new(r).join("wal").join(&name[..8]).join(format!("{name}.wal"));
    std::fs::remove_file(&object).unwrap_or_else(|e| panic!("{}: {e}", object.display()));
    let o = run(sheaf().args(["verify", "--repo", r]));
    assert_fails(&o, 4, &[&name]);
    let info = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(info.contains("WAL GAP"), "{info}");
    assert_eq!(prom("metrics with a gap"), (Some(1.0), Some(1.0)));
    let o = run(sheaf().args(["check", url, "--repo", r, "--archive-timeout", "30s"]));
    assert_eq!(o.status.code(), Some(2), "check: {}", crate::integration::common::stdout(&o));
}
