//! Backups taken on a hot standby, and hybrid backups (started and stopped on the primary, the
//! files read from a standby), of a primary under pgbench's load that archives into the
//! repository: each restores to a cluster that starts, with pgbench's balances agreeing and
//! pg_amcheck clean, and an incremental builds on a standby's backup. What cannot work is refused
//! with its fix, and leaves nothing that looks complete.

use std::process::{Child, Stdio};

use super::cluster::Cluster;
use super::repo::{archive_now, json, ok, recover, setup};
use super::sheaf;
use crate::integration::common::{assert_fails, has_bytes, run, stderr, wait_while_running};

/// pgbench's three balances (accounts, tellers, branches): every transaction moves all three
/// alike, so they agree in any consistent copy.
fn balances(c: &Cluster) -> String {
    let r = c.sql(
        "app",
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(tbalance) FROM pgbench_tellers) || ' ' || (SELECT sum(bbalance) FROM pgbench_branches)",
    );
    let parts: Vec<&str> = r.split(' ').collect();
    assert!(parts.len() == 3 && parts.iter().all(|p| *p == parts[0]), "pgbench's balances disagree: {r}");
    r
}

fn amcheck(c: &Cluster) {
    let o = run(c.tool("pg_amcheck").args(["--all", "--heapallindexed", "--install-missing"]));
    assert!(o.status.success(), "pg_amcheck: {}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
}

/// pgbench writing on `c` until [`stop_load`].
fn load(c: &Cluster) -> Child {
    c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-T", "600", "app"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

fn stop_load(c: &Cluster, mut load: Child) {
    // runuser's child outlives a kill of runuser: end the load from the server's side.
    let _ = load.kill();
    let _ = load.wait();
    // Waits for each to exit (pg_terminate_backend's timeout): no commit is in flight after it.
    c.sql("postgres", "SELECT count(pg_terminate_backend(pid, 60000)) FROM pg_stat_activity WHERE application_name = 'pgbench'");
}

#[test]
fn a_standby_backup_restores_and_an_incremental_builds_on_it() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    ok(run(c.tool("pgbench").args(["-i", "-s", "2", "-q", "app"])), "pgbench -i");
    let sb = Cluster::standby_of(&c, &[]);
    let writes = load(&c);
    let full = json(ok(run(sheaf().args(["backup", &sb.url("postgres"), "--repo", r, "--json"])), "backup on the standby"));
    assert_eq!(full["postgres"]["taken_on"], "standby", "{full}");
    assert!(full["postgres"]["backup_label"].is_null(), "the report leaves the label out");
    let full_id = full["postgres"]["repository_id"].as_str().unwrap().to_string();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let incr = json(ok(run(sheaf().args(["backup", &sb.url("postgres"), "--repo", r, "--type", "incr", "--check-changes", "--json"])), "incremental on the standby"));
    assert_eq!((incr["postgres"]["backup_type"].as_str(), incr["postgres"]["taken_on"].as_str()), (Some("incr"), Some("standby")), "{incr}");
    assert!(incr["postgres"]["method"].as_str().unwrap().contains("WAL summaries"), "{incr}");
    let incr_id = incr["postgres"]["repository_id"].as_str().unwrap().to_string();
    stop_load(&c, writes);
    let at_end = balances(&c);
    archive_now(&c);

    // Each backup alone is consistent where it stopped, read only from the standby's files.
    for (name, id) in [("full", &full_id), ("incr", &incr_id)] {
        let alone = recover(&repo, &base.path().join(name), &["--set", id, "--target", "immediate"]);
        balances(&alone);
        assert_eq!(alone.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0", "no slot copied");
        amcheck(&alone);
    }
    // And the chain replays the primary's archive to its end.
    let end = recover(&repo, &base.path().join("end"), &[]);
    assert_eq!(balances(&end), at_end, "the restored cluster holds what the primary committed");
    amcheck(&end);
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    assert_eq!(info["backups"].as_array().unwrap().len(), 2, "{info}");
    ok(run(sheaf().args(["verify", "--repo", r])), "verify --repo");
}

#[test]
fn a_hybrid_backup_reads_the_standby_and_the_primary_s_control_file() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    ok(run(c.tool("pgbench").args(["-i", "-s", "2", "-q", "app"])), "pgbench -i");
    let sb = Cluster::standby_of(&c, &[]);
    // A TRUNCATE gives pgbench_history a new file: a standby that had not written out its
    // catalogs would hand over the old one.
    c.sql("app", "TRUNCATE pgbench_history");
    let writes = load(&c);
    let out = json(ok(run(sheaf().args(["backup", "--primary", &c.url("postgres"), "--standby", &sb.url("postgres"), "--repo", r, "--json"])), "hybrid backup"));
    assert_eq!(out["postgres"]["taken_on"], "hybrid", "{out}");
    assert!(out["postgres"]["standby_url"].as_str().unwrap().contains(&sb.port.to_string()), "{out}");
    let id = out["postgres"]["repository_id"].as_str().unwrap().to_string();
    stop_load(&c, writes);
    let at_end = balances(&c);
    archive_now(&c);

    let alone = recover(&repo, &base.path().join("alone"), &["--set", &id, "--target", "immediate"]);
    balances(&alone);
    amcheck(&alone);
    // The primary's configuration, not the standby's (which names its primary).
    let auto = std::fs::read_to_string(alone.data.join("postgresql.auto.conf")).unwrap();
    assert!(!auto.contains("primary_conninfo"), "{auto}");
    assert!(!alone.data.join("standby.signal").exists());
    drop(alone);
    let end = recover(&repo, &base.path().join("end"), &[]);
    assert_eq!(balances(&end), at_end);
}

#[test]
fn a_standby_with_a_tablespace_backs_up_to_stripes_from_its_own_places() {
    let c = Cluster::new(&[], &[]);
    let ts = c.base.path().join("ts");
    super::cluster::pg_dir(&ts);
    c.sql("postgres", &format!("CREATE TABLESPACE space LOCATION '{}'", ts.display()));
    c.sql("postgres", "CREATE TABLE far TABLESPACE space AS SELECT g FROM generate_series(1, 50000) g");
    let standby_ts = c.base.path().join("standby-ts");
    let sb = Cluster::standby_with(&c, &[(ts.clone(), standby_ts.clone())], &[]);
    c.sql("postgres", "INSERT INTO far SELECT g FROM generate_series(50001, 60000) g");
    sb.catch_up(&c);
    let out = c.base.path().join("out");
    super::cluster::pg_dir(&out);
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let stripe = out.join("s.sheaf");
    let report = json(ok(run(sheaf().args(["backup", &sb.url("postgres"), "--to", stripe.to_str().unwrap(), "--json"])), "backup of the standby"));
    // The standby's tablespace is read where the standby keeps it, not where the primary does.
    assert_eq!(report["postgres"]["tablespaces"][0]["location"], standby_ts.to_str().unwrap(), "{report}");
    let to = out.join("restored");
    let moved = out.join("restored-ts");
    ok(run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", to.to_str().unwrap(), "--tablespace", &format!("{}={}", standby_ts.display(), moved.display())])), "restore");
    assert!(!to.join("standby.signal").exists(), "a standby's signal is left out");
    let sock = c.base.path().join("restored-sock");
    super::cluster::pg_dir(&sock);
    let r = Cluster::over(&to, &sock);
    assert_eq!(r.sql("postgres", "SELECT count(*), sum(g) FROM far"), "60000|1800030000");
    assert_eq!(r.sql("postgres", "SELECT pg_is_in_recovery()"), "f");
}

#[test]
fn what_a_backup_from_a_standby_cannot_do_is_refused() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let sb = Cluster::standby_of(&c, &[]);
    let (p, s) = (c.url("postgres"), sb.url("postgres"));
    // Only the backups that succeeded are recorded, and no slot is left anywhere.
    let nothing_kept = |backups: usize| {
        let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
        assert_eq!(info["backups"].as_array().unwrap().len(), backups, "a failed backup left a record: {info}");
        assert_eq!(sb.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0", "a slot was left on the standby");
        assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0", "a slot was left on the primary");
    };

    // Servers in the wrong parts.
    let o = run(sheaf().args(["backup", &s, "--standby", &s, "--repo", r]));
    assert_fails(&o, 2, &["is a standby", "drop --standby"]);
    let o = run(sheaf().args(["backup", "--primary", &p, "--standby", &p, "--repo", r]));
    assert_fails(&o, 2, &["is not a standby"]);
    let o = run(sheaf().args(["backup", &p, "--primary", &p, "--repo", r]));
    assert_fails(&o, 2, &["--primary is for a backup taken on a standby"]);
    let o = run(sheaf().args(["backup", &s, "--primary", &s, "--repo", r]));
    assert_fails(&o, 2, &["in recovery too"]);
    let o = run(sheaf().args(["backup", &s, "--to", base.path().join("x.sheaf").to_str().unwrap(), "--wal-from", "archive"]));
    assert_fails(&o, 2, &["--wal-from archive", "--repo"]);
    // A role that may not back up, on the standby.
    c.sql("postgres", "CREATE ROLE weak LOGIN");
    sb.catch_up(&c);
    let weak = s.replacen("postgres://postgres@", "postgres://weak@", 1);
    let o = run(sheaf().args(["backup", &weak, "--repo", r]));
    assert_fails(&o, 2, &["role weak may not take a backup", "REPLICATION"]);
    nothing_kept(0);

    // An idle primary does not finish the segment the stop lies in: waited for, said, bounded.
    let o = run(sheaf().args(["backup", &s, "--repo", r, "--wal-from", "archive", "--wal-timeout", "3"]));
    assert_fails(&o, 7, &["did not reach the repository's archive within 3 s", "--primary"]);
    assert!(stderr(&o).contains("waiting up to 3 s for WAL file"), "{}", stderr(&o));
    nothing_kept(0);
    // Asked to switch, the primary archives it.
    let out = json(ok(run(sheaf().args(["backup", &s, "--repo", r, "--wal-from", "archive", "--primary", &p, "--json"])), "backup with --primary"));
    assert_eq!(out["postgres"]["taken_on"], "standby");
    let id = out["postgres"]["repository_id"].as_str().unwrap().to_string();
    let alone = recover(&repo, &base.path().join("from-archive"), &["--set", &id, "--target", "immediate"]);
    drop(alone);
    nothing_kept(1);

    // A standby that does not replay cannot serve a hybrid backup.
    sb.sql("postgres", "SELECT pg_wal_replay_pause()");
    let o = run(sheaf().args(["backup", "--primary", &p, "--standby", &s, "--repo", r, "--wal-timeout", "3"]));
    assert_fails(&o, 7, &["did not replay the backup's start checkpoint", "within 3 s", "--wal-timeout"]);
    sb.sql("postgres", "SELECT pg_wal_replay_resume()");
    nothing_kept(1);

    // WAL written with full_page_writes off, replayed during the backup.
    // Uncompressed, so that --max-rate (on the bytes written) makes the backup last a few seconds.
    let slow = ["--repo", r, "--compression", "none", "--max-rate", "8MiB"];
    let mut backup = sheaf().arg("backup").arg(&s).args(slow).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    wait_while_running(&mut backup, "the backup reading the standby's files", || has_bytes(&repo.join("backups"), ".partial"));
    c.sql("postgres", "ALTER SYSTEM SET full_page_writes = off");
    c.sql("postgres", "SELECT pg_reload_conf()");
    c.sql("app", "CREATE TABLE torn AS SELECT g FROM generate_series(1, 1000) g");
    c.sql("postgres", "CHECKPOINT");
    let o = backup.wait_with_output().unwrap();
    assert_fails(&o, 7, &["full_page_writes = off", "CHECKPOINT", "not kept"]);
    // And until a restartpoint has passed it, the next backup is refused at its start.
    let o = run(sheaf().args(["backup", &s, "--repo", r]));
    assert_fails(&o, 7, &["full_page_writes = off", "pg_backup_start"]);
    c.sql("postgres", "ALTER SYSTEM SET full_page_writes = on");
    c.sql("postgres", "SELECT pg_reload_conf()");
    c.sql("postgres", "CHECKPOINT");
    sb.catch_up(&c);
    sb.sql("postgres", "CHECKPOINT");
    nothing_kept(1);

    // Promoted mid-backup: refused, nothing kept, no slot or backup left on the new primary.
    let mut backup = sheaf().arg("backup").arg(&s).args(slow).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    wait_while_running(&mut backup, "the backup reading the standby's files", || has_bytes(&repo.join("backups"), ".partial"));
    sb.promote().unwrap();
    let o = backup.wait_with_output().unwrap();
    assert_fails(&o, 7, &["was promoted while the backup ran", "take the backup again"]);
    nothing_kept(1);
    assert_eq!(sb.sql("postgres", "SELECT pg_is_in_recovery()"), "f");
}
