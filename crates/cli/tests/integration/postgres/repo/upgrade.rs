//! Issue 54, part 1: one repository through `pg_upgrade` from the suite's server to PostgreSQL
//! 18. Before `sheaf repo upgrade`, the new cluster's backups and WAL are refused, naming the
//! command; after, both clusters' backups and WAL live in the one repository: info groups them by
//! history, a backup of each is restored to a point in time and drilled on its own major's server,
//! verify and check cover both, and expire removes the old history whole when the policy keeps
//! nothing of it. With `--link` (the full scenario) and `--copy` (where the old cluster can start
//! again: the refusals).

use super::super::cluster::{give_to_server, Cluster};
use super::*;
use crate::integration::common::{assert_fails, names, stdout};
use sheaf_pg::drill::scratch::{as_server_user, server_bin_for, ScratchCluster};

/// The major the old cluster is upgraded to.
const NEW_MAJOR: u32 = 18;

fn archive_command(repo: &Path) -> String {
    format!("archive_command = '{} wal-push %p --repo {}'", SHEAF, repo.display())
}

/// Stop `old` and upgrade it with `pg_upgrade MODE` (`--link` or `--copy`) into a new PostgreSQL
/// 18 cluster archiving into `repo`, which is started and returned.
fn pg_upgrade(old: &mut Cluster, repo: &Path, mode: &str) -> Cluster {
    let bin = server_bin_for(NEW_MAJOR, None).unwrap_or_else(|e| panic!("the upgrade test needs PostgreSQL {NEW_MAJOR} (scripts/install-deps.sh installs it): {e}"));
    let cmd = archive_command(repo);
    let mut new = Cluster(ScratchCluster::create_on(bin.clone(), None, &[], &["archive_mode = on", &cmd, "archive_timeout = 0"]).unwrap_or_else(|e| panic!("{e}")));
    new.stop();
    old.stop();
    let out = as_server_user(bin.join("pg_upgrade"))
        .current_dir(&new.sock)
        .arg("-b")
        .arg(&old.bin)
        .arg("-B")
        .arg(&bin)
        .arg("-d")
        .arg(&old.data)
        .arg("-D")
        .arg(&new.data)
        .args(["-p", &old.port.to_string(), "-P", &new.port.to_string(), "-s"])
        .arg(&new.sock)
        .arg(mode)
        .output()
        .unwrap();
    assert!(out.status.success(), "pg_upgrade {mode}: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    new.start();
    new
}

fn backup(repo: &Path, c: &Cluster) -> String {
    let b = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", repo.to_str().unwrap(), "--json"])), "backup"));
    b["postgres"]["repository_id"].as_str().unwrap().to_string()
}

/// A drill of backup `id` to restore point `point`, whose table t must then hold `rows` rows; its
/// record.
fn drill_to(repo: &Path, base: &Path, id: &str, point: &str, rows: u32) -> serde_json::Value {
    let sql = base.join(format!("check-{point}.sql"));
    std::fs::write(&sql, format!("SELECT count(*) = {rows} FROM t;\n")).unwrap();
    give_to_server(&sql);
    let work = base.join(format!("drill-{point}"));
    let args = ["drill", "--repo", repo.to_str().unwrap(), "--set", id, "--target-name", point, "--to", work.to_str().unwrap()];
    let d = json(ok(run(sheaf().args(args).args(["--check-sql", sql.to_str().unwrap(), "--check-db", "app", "--json"])), "drill"));
    assert_eq!(d["passed"], true, "{d}");
    assert_eq!(d["backup"], id, "{d}");
    d
}

#[test]
fn one_repository_through_pg_upgrade_with_link() {
    let (base, repo, mut old) = setup();
    let r = repo.to_str().unwrap();
    let old_major = old.sql("postgres", "SHOW server_version_num").parse::<u32>().unwrap() / 10000;
    old.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    let b1 = backup(&repo, &old);
    old.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(101, 150) g");
    old.sql("postgres", "SELECT pg_create_restore_point('before_upgrade')");
    let before = utc_now(&old);
    old.sql("app", "INSERT INTO t (id, batch) SELECT g, 3 FROM generate_series(151, 160) g");
    archive_now(&old);

    let mut new = pg_upgrade(&mut old, &repo, "--link");
    let new_url = new.url("postgres");
    let new_id = new.sql("postgres", "SELECT system_identifier FROM pg_control_system()");
    assert_eq!(new.sql("app", "SELECT count(*) FROM t"), "160", "pg_upgrade carried the data over");

    // Before `repo upgrade`: the new cluster's backup and WAL are refused, naming the command.
    let o = run(sheaf().args(["backup", &new_url, "--repo", r]));
    assert_fails(&o, 2, &["sheaf repo upgrade", &new_id]);
    new.sql("postgres", "SELECT pg_logical_emit_message(false, 'sheaf-test', 'switch')");
    let seg = new.sql("postgres", "SELECT pg_walfile_name(pg_switch_wal())");
    let o = run(sheaf().args(["wal-push", new.data.join("pg_wal").join(&seg).to_str().unwrap(), "--repo", r]));
    assert_fails(&o, 2, &["sheaf repo upgrade", &new_id]);
    assert!(names(&repo).iter().all(|n| !n.starts_with("history/")), "nothing of the new cluster's was written");

    // The upgrade, recorded; again, nothing to do.
    let said = ok(run(sheaf().args(["repo", "upgrade", "--repo", r, &new_url])), "repo upgrade");
    assert!(said.contains("as history 2") && said.contains(&new_id), "{said}");
    let again = ok(run(sheaf().args(["repo", "upgrade", "--repo", r, &new_url])), "repo upgrade again");
    assert!(again.contains("nothing to do"), "{again}");
    // The archiver's retries now go through, into the new history.
    archive_now(&new);
    assert!(repo.join("history/2/wal/00000001").join(format!("{seg}.wal")).is_file(), "{:?}", names(&repo));

    let b2 = backup(&repo, &new);
    new.sql("app", "INSERT INTO t (id, batch) SELECT g, 4 FROM generate_series(161, 200) g");
    new.sql("postgres", "SELECT pg_create_restore_point('after_upgrade')");
    archive_now(&new);
    assert!(repo.join(format!("history/2/backups/{b2}.json")).is_file() && repo.join(format!("backups/{b1}.json")).is_file());

    // info groups the backups by history.
    let text = ok(run(sheaf().args(["info", "--repo", r])), "info");
    let h1 = text.find("history 1 (").unwrap_or_else(|| panic!("{text}"));
    let h2 = text.find("history 2 (").unwrap_or_else(|| panic!("{text}"));
    assert!(h1 < text.find(&b1).unwrap() && text.find(&b1).unwrap() < h2 && h2 < text.find(&b2).unwrap(), "{text}");
    assert!(text.contains(&format!("PostgreSQL {old_major}")) && text.contains("PostgreSQL 18") && text.contains("archives and backs up now"), "{text}");
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info --json"));
    let histories = info["histories"].as_array().unwrap();
    assert_eq!(histories.len(), 2, "{info}");
    assert_eq!(histories[0]["backups"][0]["id"], b1.as_str());
    assert_eq!(histories[1]["backups"][0]["id"], b2.as_str());
    assert_eq!(info["meta"]["system_identifier"], new_id.as_str(), "the top level is the newest history");

    // A point in time in each history, drilled on its own major's server.
    let d1 = drill_to(&repo, base.path(), &b1, "before_upgrade", 150);
    assert!(d1["server_version"].as_str().unwrap().starts_with(&format!("PostgreSQL {old_major}.")), "{d1}");
    let d2 = drill_to(&repo, base.path(), &b2, "after_upgrade", 200);
    assert!(d2["server_version"].as_str().unwrap().starts_with("PostgreSQL 18."), "{d2}");
    // A restore to a moment before the upgrade finds the old history by itself: the new one
    // holds no backup that early.
    let back = recover(&repo, &base.path().join("back"), &["--target-time", &before]);
    assert_eq!(back.sql("app", "SELECT count(*) FROM t"), "150");
    assert!(back.sql("postgres", "SHOW server_version").starts_with(&format!("{old_major}.")));
    drop(back);

    // verify and check cover both histories.
    let v = json(ok(run(sheaf().args(["verify", "--repo", r, "--json"])), "verify"));
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["histories"].as_array().unwrap().len(), 2, "{v}");
    assert!(v["histories"].as_array().unwrap().iter().all(|h| h["ok"] == true && h["backups"].as_array().unwrap().len() == 1), "{v}");
    let o = run(sheaf().args(["check", "--repo", r, &new_url]));
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("history 1 (") && stdout(&o).contains("upgraded since"), "{}", stdout(&o));

    // A copy of the whole repository holds both histories, and verifies.
    let copy = base.path().join("copy");
    let c = json(ok(run(sheaf().args(["copy", "--repo", r, "--to-repo", copy.to_str().unwrap(), "--all", "--json"])), "copy"));
    assert_eq!((c["copied"].clone(), c["histories_added"].clone()), (serde_json::json!([b1, b2]), serde_json::json!([2])), "{c}");
    let v = json(ok(run(sheaf().args(["verify", "--repo", copy.to_str().unwrap(), "--json"])), "verify the copy"));
    assert_eq!((v["ok"].as_bool(), v["histories"].as_array().map(Vec::len)), (Some(true), Some(2)), "{v}");

    // Retention counts fulls across histories: two keep both, one removes the old history whole.
    let dry = json(ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "2", "--dry-run", "--json"])), "expire --dry-run"));
    assert!(dry["histories"].as_array().unwrap().iter().all(|h| h["plan"]["removed"].as_array().unwrap().is_empty()), "{dry}");
    let e = json(ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--json"])), "expire"));
    let hs = e["histories"].as_array().unwrap();
    assert_eq!(hs[0]["plan"]["removed"], serde_json::json!([b1]), "{e}");
    assert!(hs[0]["plan"]["wal_removed"].as_u64().unwrap() > 0, "{e}");
    assert_eq!(hs[1]["plan"]["kept"], serde_json::json!([b2]), "{e}");
    let left: Vec<String> = names(&repo).into_iter().filter(|n| (n.starts_with("backups/") || n.starts_with("wal/")) && repo.join(n).is_file()).collect();
    assert!(left.is_empty(), "the old history's backups and WAL are gone: {left:?}");
    let v = json(ok(run(sheaf().args(["verify", "--repo", r, "--json"])), "verify after expire"));
    assert_eq!(v["ok"], true, "{v}");
    drill_to(&repo, base.path(), &b2, "after_upgrade", 200);
    new.stop();
}

#[test]
fn pg_upgrade_with_copy_and_the_clusters_that_are_not_its_successor() {
    let (base, repo, mut old) = setup();
    let r = repo.to_str().unwrap();
    old.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    let b1 = backup(&repo, &old);
    archive_now(&old);
    let old_id = old.sql("postgres", "SELECT system_identifier FROM pg_control_system()");

    // A cluster of the new major from a fresh initdb is no upgrade of the old one: its WAL starts
    // at the first segment, before the old cluster's ends.
    let bin = server_bin_for(NEW_MAJOR, None).unwrap();
    let stranger = Cluster(ScratchCluster::create_on(bin, None, &[], &[]).unwrap_or_else(|e| panic!("{e}")));
    let stranger_id = stranger.sql("postgres", "SELECT system_identifier FROM pg_control_system()");
    let o = run(sheaf().args(["repo", "upgrade", "--repo", r, &stranger.url("postgres")]));
    assert_fails(&o, 2, &["is not the repository's cluster", &stranger_id, &old_id, "its WAL starts at", "sheaf init --repo NEW_PLACE"]);
    drop(stranger);

    // A full backup killed midway stays in the old history; the upgraded cluster's backups go
    // into a history of their own, so its first full starts afresh without touching it, and
    // expire removes it as it removes any backup left unfinished.
    super::resume::kill_at_rate(&old, &repo, 512 << 10, false, "2MiB");
    let stopped = super::resume::partial(&repo).expect("the killed backup's stripe");
    let stopped_id = stopped.parent().unwrap().file_name().unwrap().to_str().unwrap().to_string();

    let mut new = pg_upgrade(&mut old, &repo, "--copy");
    let new_url = new.url("postgres");
    let said = ok(run(sheaf().args(["repo", "upgrade", "--repo", r, &new_url])), "repo upgrade");
    assert!(said.contains(&format!("backup {stopped_id} of the old cluster was left unfinished")) && said.contains("sheaf expire removes it"), "{said}");
    let o = run(sheaf().args(["backup", &new_url, "--repo", r, "--json"]));
    assert!(!stderr(&o).contains("left unfinished"), "{}", stderr(&o));
    let b2 = json(ok(o, "the upgraded cluster's first backup"));
    assert!(b2.get("resumed").is_none(), "{b2}");
    assert!(stopped.is_file(), "the old history's stopped backup is left to expire: {:?}", names(&repo));
    let b2 = b2["postgres"]["repository_id"].as_str().unwrap().to_string();
    archive_now(&new);

    // With --copy the old cluster can start again: the repository goes forward only.
    old.start();
    let o = run(sheaf().args(["repo", "upgrade", "--repo", r, &old.url("postgres")]));
    assert_fails(&o, 2, &["history 1", "goes forward only"]);
    let o = run(sheaf().args(["backup", &old.url("postgres"), "--repo", r]));
    assert_fails(&o, 2, &["history 1", "has been upgraded since", "only that cluster backs up into it"]);
    // Its WAL, archived late, still goes to its own history: it only lengthens what recovers there.
    let late = archive_now(&old);
    assert!(repo.join("wal/00000001").join(format!("{late}.wal")).is_file(), "{:?}", names(&repo));
    old.stop();

    // Both histories restore, each on its own major; expire --set removes the old backup, which
    // is no longer the newest once a newer history holds one.
    let back = recover(&repo, &base.path().join("old"), &["--set", &b1, "--target", "immediate"]);
    assert_eq!(back.sql("app", "SELECT count(*) FROM t"), "100");
    drop(back);
    let d = json(ok(run(sheaf().args(["drill", "--repo", r, "--set", &b2, "--to", base.path().join("drill").to_str().unwrap(), "--json"])), "drill"));
    assert_eq!(d["passed"], true, "{d}");
    ok(run(sheaf().args(["expire", "--repo", r, "--set", &b1])), "expire --set");
    assert!(!repo.join(format!("backups/{b1}.json")).exists());
    assert!(stopped.is_file(), "expire --set removes that one backup only");
    let e = json(ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--json"])), "expire"));
    assert!(e.to_string().contains(&stopped_id) && !repo.join("backups").join(&stopped_id).exists(), "{e}\n{:?}", names(&repo));
    new.stop();
}
