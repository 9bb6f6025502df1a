//! Several repositories: each gets the WAL, a restore falls back to the next when one is away,
//! and a second one may have a secret of its own.

use std::time::{Duration, Instant};

use super::super::cluster::{pg_dir, Cluster};
use super::super::sheaf;
use super::*;
use crate::integration::common::{assert_fails, run, stderr, SHEAF};
use sheaf_pg::repo::paths;

/// Two repositories: init, wal-push and a backup into each; with the first away, archiving keeps
/// filling the second (and fails for the first, so the archiver retries), and a restore from the
/// pair falls back to the second and recovers to its end; back again, the first catches up.
#[test]
fn two_repositories_each_get_the_wal_and_restore_falls_back_when_one_is_away() {
    let (base, r1) = repo_dir();
    let r2 = base.path().join("repo2");
    pg_dir(&r2);
    let (s1, s2) = (r1.to_str().unwrap(), r2.to_str().unwrap());
    let cmd = format!("archive_command = '{SHEAF} wal-push %p --repo {s1} --repo {s2}'");
    let c = Cluster::new(&[], &["archive_mode = on", cmd.as_str(), "archive_timeout = 0"]);
    let both = ["--repo", s1, "--repo", s2];
    ok(run(sheaf().arg("init").args(both).arg(c.url("postgres"))), "init both");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t (id int, batch int, at timestamptz DEFAULT clock_timestamp())");
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--repo-target", "3"]).args(both));
    assert_fails(&o, 2, &["--repo-target 3", "1 to 2"]);
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo-target", "all"]).args(both)), "backup into each");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    let seg = archive_now(&c);
    for r in [&r1, &r2] {
        assert!(r.join(paths::wal_object(&seg)).exists(), "{seg} in {}", r.display());
    }
    let info = json(ok(run(sheaf().args(["info", "--json"]).args(both)), "info"));
    let repos = info["repositories"].as_array().unwrap();
    assert_eq!(repos.len(), 2);
    assert!(repos.iter().all(|r| r["backups"].as_array().unwrap().len() == 1), "{info}");
    // A pin goes into every repository that holds the backup.
    let ids: Vec<&str> = repos.iter().map(|r| r["backups"][0]["id"].as_str().unwrap()).collect();
    let said = ok(run(sheaf().args(["keep", "--set", ids[0]]).args(both)), "keep in both");
    let pinned = json(ok(run(sheaf().args(["keep", "--json"]).args(both)), "keep --json"));
    let held: Vec<usize> = pinned["repositories"].as_array().unwrap().iter().map(|r| r["pins"].as_array().unwrap().len()).collect();
    assert_eq!(held, if ids[0] == ids[1] { vec![1, 1] } else { vec![1, 0] }, "{said}{pinned}");
    ok(run(sheaf().args(["keep", "--set", ids[0], "--release"]).args(both)), "release in both");
    assert_fails(&run(sheaf().args(["keep", "--set", "20000101-000000Z"]).args(both)), 2, &["no backup 20000101-000000Z in any repository"]);

    // wal-summarize fills in each repository; an incremental into the second alone is
    // consolidated where it is, and the first says it has nothing to do.
    let sums = json(ok(run(sheaf().args(["wal-summarize", "--json"]).args(both)), "wal-summarize in both"));
    let per: Vec<&str> = sums["repositories"].as_array().unwrap().iter().map(|r| r["repo"].as_str().unwrap()).collect();
    assert_eq!(per.len(), 2, "{sums}");
    assert!(per[1].ends_with("repo2"), "{sums}");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 0 FROM generate_series(1, 10) g");
    c.sql("app", "DELETE FROM t WHERE batch = 0");
    let incr = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--type", "incr", "--repo-target", "2", "--json"]).args(both)), "incremental into the second"));
    let incr_id = incr["postgres"]["repository_id"].as_str().unwrap().to_string();
    let o = run(sheaf().args(["consolidate", "--set", &incr_id]).args(both));
    let said = ok(o, "consolidate in the pair");
    assert!(said.contains(&format!("{incr_id} is not in {s1}")) && said.contains(&format!("consolidated into full backup {incr_id}-full in {s2}")), "{said}");
    assert!(r2.join(paths::record(&format!("{incr_id}-full"))).exists() && !r1.join(paths::record(&format!("{incr_id}-full"))).exists());
    assert_fails(&run(sheaf().args(["consolidate", "--set", "20000101-000000Z"]).args(both)), 2, &["no backup 20000101-000000Z in any repository"]);
    assert_fails(&run(sheaf().args(["consolidate", "--set", &incr_id, "--repo-target", "1"]).args(both)), 2, &[&format!("no backup {incr_id} in the repository")]);

    // The first goes away.
    let away = base.path().join("away");
    std::fs::rename(&r1, &away).unwrap();
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 100) g");
    c.sql("postgres", "SELECT pg_logical_emit_message(false, 'sheaf-test', 'switch')");
    let seg2 = c.sql("postgres", "SELECT pg_walfile_name(pg_switch_wal())");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !r2.join(paths::wal_object(&seg2)).exists() || c.sql("postgres", "SELECT failed_count > 0 FROM pg_stat_archiver") != "t" {
        assert!(Instant::now() < deadline, "{seg2} not in the second repository, or no failure for the first");
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = run(sheaf().args(["check", &c.url("postgres"), "--archive-timeout", "3"]).args(both));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("cannot read the repository at {s1}")), "{}", String::from_utf8_lossy(&o.stdout));

    // A restore from the pair falls back to the second, and recovers to its end.
    let dir = base.path().join("back");
    ok(run(sheaf().args(["restore", "--to", dir.to_str().unwrap()]).args(both)), "restore from the pair");
    let back = start_restored(&dir, false);
    assert_eq!(batches(&back), "1:100,2:100");
    drop(back);
    // So do an extract and a restore of files from the pair, each saying which it passed over.
    let ext = base.path().join("extracted");
    let o = run(sheaf().args(["extract", "--relation", "t", "--database", "app", "--to", ext.to_str().unwrap()]).args(both));
    let said = ok(o.clone(), "extract from the pair");
    assert!(String::from_utf8_lossy(&o.stderr).contains("repository 1"), "{}", String::from_utf8_lossy(&o.stderr));
    // Its file as the backup read it (empty here: the rows were still in shared buffers).
    let rel = c.sql("app", "SELECT pg_relation_filepath('t')");
    assert!(said.contains(&format!("extracted public.t (database app, {rel})")), "{said}");
    assert!(ext.join(rel.rsplit('/').next().unwrap()).is_file(), "{rel} extracted");
    let only = base.path().join("only");
    let o = run(sheaf().args(["restore", "--only", "global/pg_control", "--to", only.to_str().unwrap()]).args(both));
    assert!(String::from_utf8_lossy(&o.stderr).contains("repository 1"), "{}", String::from_utf8_lossy(&o.stderr));
    ok(o, "files from the pair");
    assert!(only.join("global/pg_control").is_file());

    // Back again: the archiver's retries fill the first.
    std::fs::rename(&away, &r1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !r1.join(paths::wal_object(&seg2)).exists() {
        assert!(Instant::now() < deadline, "{seg2} never reached the first repository");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Another cluster's repository as the second: wal-push and backup refuse it, naming both.
    let other = Cluster::new(&[], &[]);
    let foreign = base.path().join("foreign");
    pg_dir(&foreign);
    let f = foreign.to_str().unwrap();
    ok(run(sheaf().args(["init", "--repo", f, &other.url("postgres")])), "init another cluster's");
    let pair = ["--repo", s1, "--repo", f];
    let wal = std::fs::read_dir(c.data.join("pg_wal")).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).find(|p| p.file_name().unwrap().len() == 24).unwrap();
    let o = run(sheaf().arg("wal-push").arg(&wal).args(pair));
    assert!(!o.status.success() && stderr(&o).contains("holds cluster") && stderr(&o).contains(f), "{}", stderr(&o));
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--repo-target", "all"]).args(pair));
    assert!(!o.status.success() && stderr(&o).contains("holds cluster"), "{}", stderr(&o));
}

/// A second repository with a passphrase of its own (repo2-passphrase-file in the config file):
/// each repository is sealed with its own secret, and opens with it only.
#[test]
fn a_second_repository_may_have_its_own_passphrase() {
    use std::os::unix::fs::PermissionsExt;
    let (base, r1) = repo_dir();
    let r2 = base.path().join("repo2");
    pg_dir(&r2);
    let (p1, p2, config) = (base.path().join("one"), base.path().join("two"), base.path().join("sheaf.toml"));
    std::fs::write(&p1, "the first secret\n").unwrap();
    std::fs::write(&p2, "the second secret\n").unwrap();
    let text = format!("repo = \"{}\"\nrepo2 = \"{}\"\npassphrase-file = \"{}\"\nrepo2-passphrase-file = \"{}\"\n", r1.display(), r2.display(), p1.display(), p2.display());
    std::fs::write(&config, text).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    for f in [&p1, &p2] {
        super::super::cluster::server_secret(f);
    }
    let cfg = config.to_str().unwrap();
    let cmd = format!("archive_command = 'env SHEAF_CONFIG={cfg} {SHEAF} wal-push %p'");
    let c = Cluster::new(&[], &["archive_mode = on", cmd.as_str(), "archive_timeout = 0"]);
    let sheaf_cfg = || {
        let mut s = sheaf();
        s.env("SHEAF_CONFIG", cfg);
        s
    };
    ok(run(sheaf_cfg().args(["init", &c.url("postgres")])), "init both");
    c.sql("postgres", "CREATE DATABASE app");
    ok(run(sheaf_cfg().args(["backup", &c.url("postgres"), "--repo-target", "all"])), "backup into each");
    let seg = archive_now(&c);
    for r in [&r1, &r2] {
        assert!(r.join(paths::wal_object(&seg)).exists(), "{seg} in {}", r.display());
    }
    let info = json(ok(run(sheaf_cfg().args(["info", "--json"])), "info"));
    assert_eq!(info["repositories"].as_array().unwrap().len(), 2, "{info}");
    for (repo, right, wrong) in [(&r1, &p1, &p2), (&r2, &p2, &p1)] {
        let o = run(sheaf().args(["info", "--repo", repo.to_str().unwrap(), "--passphrase-file", wrong.to_str().unwrap()]));
        assert!(!o.status.success() && stderr(&o).contains("wrong passphrase"), "{}: {}", repo.display(), stderr(&o));
        ok(run(sheaf().args(["info", "--repo", repo.to_str().unwrap(), "--passphrase-file", right.to_str().unwrap()])), "info with its own secret");
    }
}
