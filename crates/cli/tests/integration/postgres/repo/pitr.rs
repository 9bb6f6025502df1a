//! Point-in-time recovery from the repository: to a time, a restore point, an LSN and the end,
//! across timelines, with retention and gaps in the archive; each restored cluster started and
//! holding exactly the rows committed before its target.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use super::super::cluster::Cluster;
use super::super::sheaf;
use super::*;
use crate::integration::common::{run, stderr};

#[test]
fn point_in_time_recovery_to_a_time_a_name_an_lsn_and_the_end() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let again = run(sheaf().args(["init", "--repo", r, &c.url("postgres")]));
    assert_eq!(again.status.code(), Some(5), "a second init is refused: {}", stderr(&again));
    ok(run(c.tool("pgbench").args(["-i", "-s", "1", "-q", "app"])), "pgbench -i");
    // A write load the whole time from the backup on.
    let mut load = c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-T", "600", "app"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let backup = ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--stripes", "2", "--json"])), "backup --repo");
    let report: serde_json::Value = serde_json::from_str(&backup).unwrap();
    let id = report["postgres"]["repository_id"].as_str().unwrap().to_string();

    let insert = |b: i32| c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {b} FROM generate_series(1, 100) g"));
    insert(1);
    std::thread::sleep(Duration::from_millis(300));
    let t1 = utc_now(&c);
    std::thread::sleep(Duration::from_millis(300));
    insert(2);
    c.sql("app", "SELECT pg_create_restore_point('after_two')");
    insert(3);
    let lsn3 = c.sql("app", "SELECT pg_current_wal_insert_lsn()");
    insert(4);
    // runuser's child outlives a kill of runuser: end the load from the server's side.
    let _ = load.kill();
    let _ = load.wait();
    // Waits for each to exit (pg_terminate_backend's timeout): no commit is in flight after it.
    c.sql("postgres", "SELECT count(pg_terminate_backend(pid, 60000)) FROM pg_stat_activity WHERE application_name = 'pgbench'");
    let invariant = pgbench_invariant(&c);
    let last = archive_now(&c);

    // The repository says what it holds.
    let info: serde_json::Value = serde_json::from_str(&ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info")).unwrap();
    assert_eq!(info["backups"].as_array().unwrap().len(), 1, "{info}");
    assert_eq!(info["backups"][0]["id"], id.as_str());
    assert_eq!(info["gaps"].as_array().unwrap().len(), 0, "{info}");
    assert_eq!(info["wal"][0]["last"], last.as_str(), "{info}");
    let text = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(text.contains(&id) && text.contains("WAL timeline 1:"), "{text}");
    ok(run(sheaf().args(["verify", "--repo", r])), "verify --repo");

    let at = |n: &str| base.path().join(n);
    let r1 = recover(&repo, &at("by_time"), &["--target-time", &t1]);
    assert_eq!(batches(&r1), "1:100", "to the time");
    drop(r1);
    let r2 = recover(&repo, &at("by_name"), &["--target-name", "after_two"]);
    assert_eq!(batches(&r2), "1:100,2:100", "to the restore point");
    drop(r2);
    let r3 = recover(&repo, &at("by_lsn"), &["--target-lsn", &lsn3, "--set", &id]);
    assert_eq!(batches(&r3), "1:100,2:100,3:100", "to the LSN");
    drop(r3);
    let r4 = recover(&repo, &at("to_end"), &[]);
    assert_eq!(batches(&r4), "1:100,2:100,3:100,4:100", "to the end");
    assert_eq!(pgbench_invariant(&r4), invariant, "the pgbench balances agree with the source's");
    assert_eq!(r4.sql("app", "SELECT sum(abalance) = (SELECT sum(delta) FROM pgbench_history) FROM pgbench_accounts"), "t");
    drop(r4);

    // Targets the archive cannot reach are refused before a byte is written.
    let before = run(sheaf().args(["restore", "--repo", r, "--to", at("early").to_str().unwrap(), "--target-time", "2000-01-01 00:00:00Z"]));
    assert_eq!(before.status.code(), Some(2), "{}", stderr(&before));
    assert!(stderr(&before).contains("no backup is consistent before the target"), "{}", stderr(&before));
    let after = run(sheaf().args(["restore", "--repo", r, "--to", at("late").to_str().unwrap(), "--target-time", "2099-01-01 00:00:00Z"]));
    assert_eq!(after.status.code(), Some(2), "{}", stderr(&after));
    assert!(stderr(&after).contains("past the end of the archive") && stderr(&after).contains("pg_switch_wal"), "{}", stderr(&after));
    assert!(!at("early").exists() && !at("late").exists(), "nothing written for a refused target");
}

#[test]
fn timelines_retention_and_gaps() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let insert = |c: &Cluster, b: i32| c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {b} FROM generate_series(1, 100) g"));
    let id_of = |out: String| -> String {
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["postgres"]["repository_id"].as_str().unwrap().to_string()
    };
    let first = id_of(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--json"])), "backup 1"));
    insert(&c, 1);
    archive_now(&c);
    let second = id_of(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--json"])), "backup 2"));
    assert_ne!(first, second);
    insert(&c, 2);
    std::thread::sleep(Duration::from_millis(300));
    let mid = utc_now(&c);
    std::thread::sleep(Duration::from_millis(300));
    insert(&c, 3);
    archive_now(&c);

    // Back to the middle, promoted onto timeline 2, which archives into the same repository.
    let p = recover_with(&repo, &base.path().join("branch"), &["--target-time", &mid], true);
    assert_eq!(batches(&p), "1:100,2:100");
    assert_eq!(p.sql("postgres", "SELECT timeline_id FROM pg_control_checkpoint()"), "2");
    insert(&p, 5);
    archive_now(&p);
    assert!(repo.join("wal/00000002/00000002.history.wal").exists(), "the new timeline's history is archived");
    drop(p);

    // The latest timeline by default: from backup 2 on timeline 1, across the switch, to timeline 2's end.
    let q = recover(&repo, &base.path().join("on_two"), &[]);
    assert_eq!(batches(&q), "1:100,2:100,5:100", "timeline 2");
    drop(q);
    let one = recover(&repo, &base.path().join("on_one"), &["--target-timeline", "1"]);
    assert_eq!(batches(&one), "1:100,2:100,3:100", "timeline 1 to its end");
    drop(one);

    // Retention: a dry run removes nothing; then the older backup and the WAL before the newer go.
    let dry: serde_json::Value = serde_json::from_str(&ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--dry-run", "--json"])), "dry run")).unwrap();
    assert_eq!(dry["removed"], serde_json::json!([first.clone()]), "{dry}");
    assert!(dry["wal_removed"].as_u64().unwrap() >= 1, "{dry}");
    assert!(repo.join(format!("backups/{first}.json")).exists(), "a dry run removes nothing");
    let done: serde_json::Value = serde_json::from_str(&ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--json"])), "expire")).unwrap();
    assert_eq!(done["kept"], serde_json::json!([second.clone()]));
    assert!(!repo.join(format!("backups/{first}.json")).exists() && !repo.join(format!("backups/{first}")).exists());
    assert!(repo.join("wal/00000002/00000002.history.wal").exists(), "history files stay");
    let kept_from = done["wal_kept_from"].as_str().unwrap().to_string();
    let oldest_left = std::fs::read_dir(repo.join("wal/00000001")).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).min().unwrap();
    assert!(oldest_left.starts_with(&kept_from), "WAL from the kept backup's start on: {oldest_left} vs {kept_from}");
    // What is kept still recovers to the end of the archive.
    let after = recover(&repo, &base.path().join("after_expire"), &[]);
    assert_eq!(batches(&after), "1:100,2:100,5:100");
    drop(after);
    let never = run(sheaf().args(["expire", "--repo", r, "--keep-full", "0"]));
    assert_eq!(never.status.code(), Some(2), "{}", stderr(&never));

    // A gap in the archive: named by info, verify and restore, which writes nothing.
    insert(&c, 6);
    archive_now(&c);
    insert(&c, 7);
    archive_now(&c);
    let mut segs: Vec<PathBuf> = std::fs::read_dir(repo.join("wal/00000001"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().len() == "000000010000000000000001.wal".len() && p.extension().is_some_and(|e| e == "wal"))
        .collect();
    segs.sort();
    assert!(segs.len() >= 3, "{segs:?}");
    let hole = segs[1].clone();
    std::fs::remove_file(&hole).unwrap();
    let info = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(info.contains("WAL GAP on timeline 1"), "{info}");
    let verify = run(sheaf().args(["verify", "--repo", r]));
    assert_eq!(verify.status.code(), Some(4), "{}", stderr(&verify));
    assert!(stderr(&verify).contains("missing"), "{}", stderr(&verify));
    let gap = run(sheaf().args(["restore", "--repo", r, "--to", base.path().join("gap").to_str().unwrap(), "--target-timeline", "1"]));
    assert_eq!(gap.status.code(), Some(4), "{}", stderr(&gap));
    assert!(stderr(&gap).contains("the archive has a gap"), "{}", stderr(&gap));
    assert!(!base.path().join("gap").exists());
}
