//! A locked repository (S3 Object Lock, on MinIO): every object backups and wal-push write is
//! locked; an attacker holding the repository's own credentials cannot remove any of it, only hide
//! it, and `sheaf undelete` brings it back for a restore that replays to the end. Expire leaves
//! what is locked and says until when; a lock shorter than the retention is refused.

use sheaf_core::Schemes;

use super::repo::{archive_now, json, ok, TestRepo};
use crate::integration::common::{assert_fails, run, stderr};

#[test]
fn a_locked_repository_survives_a_wipe_with_its_own_credentials() {
    let repo = TestRepo::locked_bucket();
    let base = super::cluster::server_tempdir("sheaf-lock.");
    let r = repo.arg.clone();
    let c = repo.cluster_init(&["--lock", "1"]);
    let url = c.url("postgres");

    // Where no lock can hold, init says so and writes nothing.
    let o = run(repo.sheaf().args(["init", "--repo", "s3://plain/cluster", "--lock", "1", &url]));
    assert_fails(&o, 2, &["does not have Object Lock enabled", "--object-lock-enabled-for-bucket"]);
    let o = run(repo.sheaf().args(["init", "--repo", base.path().join("folder").to_str().unwrap(), "--lock", "1", &url]));
    assert_fails(&o, 2, &["cannot lock objects", "S3 bucket created with Object Lock"]);
    let o = run(repo.sheaf().args(["init", "--repo", "s3://locked/other", "--lock", "0", &url]));
    assert_fails(&o, 2, &["--lock 0", "1 .. 3660"]);
    let o = run(repo.sheaf().args(["init", "--repo", "s3://locked/other", "--lock", "1", "--lock-mode", "forever", &url]));
    assert_fails(&o, 2, &["forever", "governance", "compliance"]);

    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    let first = json(ok(run(repo.sheaf().args(["backup", &url, "--repo", &r, "--stripes", "2", "--json"])), "backup 1"));
    let first = first["postgres"]["repository_id"].as_str().unwrap().to_string();
    for b in 2..=3 {
        c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {b} FROM generate_series(1, 100) g"));
        archive_now(&c);
    }
    let second = json(ok(run(repo.sheaf().args(["backup", &url, "--repo", &r, "--json"])), "backup 2"));
    let second = second["postgres"]["repository_id"].as_str().unwrap().to_string();
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 4 FROM generate_series(1, 100) g");
    archive_now(&c);

    let info = ok(run(repo.sheaf().args(["info", "--repo", &r])), "info");
    assert!(info.contains("locked: every object for 1 days after it is written (governance mode"), "{info}");
    assert!(info.lines().any(|l| l.starts_with(&first) && l.contains("[locked until ")), "{info}");
    let inventory = json(ok(run(repo.sheaf().args(["info", "--repo", &r, "--json"])), "info --json"));
    assert_eq!(inventory["meta"]["lock"], serde_json::json!({ "days": 1, "mode": "governance" }), "{inventory}");
    let until = inventory["backups"][0]["locked_until"].as_i64().expect("the record says until when");
    let now = sheaf_core::time::now_ms() / 1000;
    assert!((now + 86_000..=now + 86_400).contains(&until), "{until} is a day from now ({now})");

    let o = run(repo.sheaf().args(["check", "--repo", &r, &url]));
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(said.contains("is locked until") && said.contains("governance mode"), "{said}{}", stderr(&o));

    // Expire leaves the older backup (and the WAL before the newer one) in place, and says why.
    let plan = json(ok(run(repo.sheaf().args(["expire", "--repo", &r, "--keep-full", "1", "--json"])), "expire"));
    assert_eq!(plan["removed"], serde_json::json!([]), "{plan}");
    assert_eq!(plan["locked"].as_array().unwrap().len(), 1, "{plan}");
    assert!(plan["locked"][0].as_str().unwrap().starts_with(&format!("{first} (until ")), "{plan}");
    assert!(plan["wal_locked"].as_u64().unwrap() >= 1 && plan["wal_removed"] == 0, "{plan}");
    let said = ok(run(repo.sheaf().args(["expire", "--repo", &r, "--keep-full", "1"])), "expire");
    assert!(said.contains("left in place, still locked") && said.contains("older WAL file"), "{said}");
    // A retention longer than the lock would leave its oldest backups unprotected.
    let o = run(repo.sheaf().args(["expire", "--repo", &r, "--keep-within", "3d"]));
    assert_fails(&o, 2, &["longer than the repository's lock (1 days)"]);

    // A pin with a date locks what it keeps that long: the backup, and the WAL it needs.
    let pinned = sheaf_core::time::utc(now + 3 * 86_400);
    let said = ok(run(repo.sheaf().args(["keep", "--repo", &r, "--set", &first, "--until", &pinned])), "keep --until");
    assert!(said.contains(&format!("locked until {pinned}")), "{said}");
    let said = ok(run(repo.sheaf().args(["keep", "--repo", &r, "--set", &second, "--until", &pinned])), "keep the second too");
    assert!(said.contains("locked until"), "{said}");

    // The attacker holds the repository's credentials: each version it tries to remove for good
    // is refused; a plain delete of everything only hides it; so does an overwrite.
    let env: Vec<(String, String)> = repo.env().to_vec();
    let attacker = sheaf_s3::S3Schemes::with_env(sheaf_s3::S3Options::default(), move |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()));
    let (store, _) = attacker.resolve("s3", "locked", "x").unwrap();
    let kept = store.retention().expect("S3 keeps versions and locks");
    let record = format!("cluster/backups/{first}.json");
    let three_days = now + 3 * 86_400;
    assert_eq!(kept.lock_of(&record).unwrap(), Some((sheaf_core::storage::LockMode::Governance, three_days)));
    let versions = kept.versions("cluster/").unwrap();
    assert!(versions.len() > 10, "{versions:?}");
    let mut refused = 0;
    for v in &versions {
        // Delete markers, and what is removed again soon (the backups' own locks, check's probe),
        // are not data, and not locked.
        let spare = v.deleted || sheaf_pg::repo::paths::UNLOCKED.iter().any(|s| v.name.ends_with(s));
        match kept.delete_version(&v.name, &v.version) {
            Ok(()) => assert!(spare, "{} was removed for good with the repository's credentials", v.name),
            Err(e) => {
                assert!(!spare && e.to_string().contains("WORM"), "{}: {e}", v.name);
                refused += 1;
            }
        }
    }
    assert!(refused >= 10, "{refused} of {versions:?}");
    // The damage begins at a second of its own: S3 dates versions to the second, and undelete
    // --since takes what was written from that second on as damage.
    let since = sheaf_core::time::now_ms() / 1000 + 1;
    while sheaf_core::time::now_ms() / 1000 < since {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut sink = store.create(&record, &sheaf_core::storage::WriteOptions { overwrite: true, ..Default::default() }).unwrap();
    sink.write_all(b"{\"paid\": false}").unwrap();
    sink.publish().unwrap();
    let listed = store.list("cluster/").unwrap();
    for o in &listed {
        store.delete(&o.name).unwrap();
    }
    assert!(store.list("cluster/").unwrap().is_empty(), "the repository looks empty");
    let o = run(repo.sheaf().args(["info", "--repo", &r]));
    assert_fails(&o, 7, &["there is no sheaf repository"]);

    // Undelete without a moment lifts the delete markers; the overwrite stays on top until the
    // moment the damage began is given.
    let plan = json(ok(run(repo.sheaf().args(["undelete", "--repo", &r, "--dry-run", "--json"])), "undelete --dry-run"));
    assert_eq!(plan["remove"].as_array().unwrap().len(), listed.len(), "{plan}");
    let brought = json(ok(run(repo.sheaf().args(["undelete", "--repo", &r, "--json"])), "undelete"));
    assert_eq!(brought["removed"].as_u64().unwrap() as usize, listed.len(), "{brought}");
    let o = run(repo.sheaf().args(["verify", "--repo", &r]));
    assert!(!o.status.success(), "the overwritten record is still on top: {}", stderr(&o));
    let since = sheaf_core::time::utc(since);
    let back = json(ok(run(repo.sheaf().args(["undelete", "--repo", &r, "--since", &since, "--json"])), "undelete --since"));
    assert_eq!(back["revealed"], serde_json::json!([format!("backups/{first}.json")]), "only the overwritten record: {back}");
    assert_eq!(back["removed"], 1, "{back}");
    ok(run(repo.sheaf().args(["verify", "--repo", &r])), "verify after undelete");

    // And it restores to the end of the archive.
    assert_eq!(c.sql("app", "SELECT count(*) FROM t"), "400");
    drop(c);
    let back = repo.recover(&base.path().join("restored"), &[]);
    assert_eq!(back.sql("app", "SELECT count(*) FROM t"), "400", "every batch, replayed from the locked WAL");
}
