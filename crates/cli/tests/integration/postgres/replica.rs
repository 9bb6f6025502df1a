//! Replicas from the repository: a standby restored with `--standby` catches up from the archive
//! and streams from its primary (through a slot the restore made), a cascading standby built the
//! same way streams from the first, and a delta onto a stopped standby leaves a standby. Recovery
//! to a transaction, at it and just before it; pg_wal restored where `--link-map` says; every
//! refusal before a byte is written.

use std::path::Path;
use std::time::{Duration, Instant};

use super::cluster::{pg_dir, server_tempdir, Cluster};
use super::repo::{archive_now, archiving_with, json, ok, recover, setup, TestRepo};
use super::sheaf;
use crate::integration::common::{assert_fails, run, wait_for};

/// The libpq connection string that reaches `c` over its socket, as a standby's primary_conninfo.
fn conninfo(c: &Cluster, name: &str) -> String {
    format!("host={} port={} user=postgres application_name={name}", c.sock.display(), c.port)
}

/// Start a standby restored into `dir`, its restore_command given `repo`'s environment (as the
/// server's would carry it), once it accepts connections (it is consistent).
fn start_standby(repo: &TestRepo, dir: &Path) -> Cluster {
    let auto_path = dir.join("postgresql.auto.conf");
    let auto = std::fs::read_to_string(&auto_path).unwrap();
    std::fs::write(&auto_path, auto.replace("restore_command = '", &format!("restore_command = '{}", repo.env_prefix()))).unwrap();
    assert!(dir.join("standby.signal").exists() && !dir.join("recovery.signal").exists(), "a standby's signal, only");
    let sock = dir.parent().unwrap().join(format!("sock-{}", dir.file_name().unwrap().to_str().unwrap()));
    pg_dir(&sock);
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    Cluster::over(dir, &sock)
}

/// Wait until `primary` sees a walsender streaming to `name`.
fn wait_streaming(primary: &Cluster, name: &str) {
    let sql = format!("SELECT count(*) FROM pg_stat_replication WHERE application_name = '{name}' AND state = 'streaming'");
    wait_for(&format!("{name} streaming from its primary"), Duration::from_secs(90), || primary.sql("postgres", &sql) == "1");
}

/// Wait until `standby` holds `n` rows of `batch`.
fn wait_rows(standby: &Cluster, batch: u32, n: u32) {
    let sql = format!("SELECT count(*) FROM t WHERE batch = {batch}");
    let t0 = Instant::now();
    while standby.query("app", &sql).ok().as_deref() != Some(n.to_string().as_str()) {
        assert!(t0.elapsed() < Duration::from_secs(90), "batch {batch} did not reach the standby: {}", std::fs::read_to_string(standby.log()).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn insert(c: &Cluster, batch: u32, n: u32) {
    c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {batch} FROM generate_series(1, {n}) g"));
}

/// A standby of the repository's cluster in `dir`: restored, started, streaming, caught up.
fn standby_from(repo: &TestRepo, primary: &Cluster, dir: &Path, name: &str, extra: &[&str]) -> (Cluster, serde_json::Value) {
    let info = conninfo(primary, name);
    let out = ok(
        run(repo.sheaf().args(["restore", "--repo", &repo.arg, "--to", dir.to_str().unwrap(), "--standby", "--primary-conninfo", &info, "--json"]).args(extra)),
        &format!("restore --standby {name}"),
    );
    let report = json(out);
    let s = start_standby(repo, dir);
    assert_eq!(s.sql("postgres", "SELECT pg_is_in_recovery()"), "t");
    wait_streaming(primary, name);
    (s, report)
}

/// The whole standby story on one repository: the first from the repository, the second
/// cascading from the first, a delta that leaves a standby, and what is refused.
fn standbys(repo: &TestRepo, base: &Path, primary: &Cluster) {
    insert(primary, 1, 1000);
    ok(run(repo.sheaf().args(["backup", &primary.url("postgres"), "--repo", &repo.arg])), "backup");
    // Written after the backup: the standby gets them from the archive (archived) and then from
    // the primary (not archived yet).
    insert(primary, 2, 500);
    archive_now(primary);
    insert(primary, 3, 250);

    let first = base.join("first");
    let (s1, report) = standby_from(repo, primary, &first, "first", &["--slot", "first_slot", "--create-slot"]);
    let st = &report["startup"];
    assert_eq!((st["starts_as"].as_str(), st["signal"].as_str(), st["slot_created"].as_str()), (Some("standby"), Some("standby.signal"), Some("first_slot")), "{report}");
    let written: Vec<&str> = st["settings"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(written, ["restore_command", "primary_conninfo", "primary_slot_name"], "{report}");
    for (batch, n) in [(1, 1000), (2, 500), (3, 250)] {
        wait_rows(&s1, batch, n);
    }
    insert(primary, 4, 100);
    wait_rows(&s1, 4, 100);
    assert_eq!(primary.sql("postgres", "SELECT active FROM pg_replication_slots WHERE slot_name = 'first_slot'"), "t", "it streams through the slot made for it");

    // Another standby may not take a slot in use; nothing is written.
    let taken = base.join("taken");
    let info = conninfo(primary, "taken");
    let o = run(repo.sheaf().args([
        "restore",
        "--repo",
        &repo.arg,
        "--to",
        taken.to_str().unwrap(),
        "--standby",
        "--primary-conninfo",
        &info,
        "--slot",
        "first_slot",
        "--create-slot",
    ]));
    assert_fails(&o, 2, &["first_slot", "in use", "another --slot"]);
    assert!(std::fs::read_dir(&taken).map_or(true, |mut d| d.next().is_none()), "nothing written for a refused slot");

    // A cascading standby, built from the repository, streams from the first.
    let second = base.join("second");
    let (mut s2, _) = standby_from(repo, &s1, &second, "second", &[]);
    insert(primary, 5, 50);
    wait_rows(&s2, 5, 50);
    assert_eq!(s2.sql("postgres", "SELECT pg_is_in_recovery()"), "t");

    // Stopped cleanly and left behind, then rebuilt in place with --delta (no --standby): it
    // stays a standby of the first, with its own settings, on the same timeline.
    s2.stop();
    insert(primary, 6, 75);
    archive_now(primary);
    let before_conf = std::fs::read_to_string(second.join("postgresql.conf")).unwrap();
    let delta = json(ok(run(repo.sheaf().args(["restore", "--repo", &repo.arg, "--to", second.to_str().unwrap(), "--delta", "--json"])), "restore --delta onto a standby"));
    let st = &delta["startup"];
    assert_eq!((st["starts_as"].as_str(), st["kept_target_settings"].as_bool()), (Some("standby"), Some(true)), "{delta}");
    assert!(second.join("standby.signal").exists() && !second.join("recovery.signal").exists());
    assert_eq!(std::fs::read_to_string(second.join("postgresql.conf")).unwrap(), before_conf, "the standby's own configuration stays");
    let auto = std::fs::read_to_string(second.join("postgresql.auto.conf")).unwrap();
    assert!(auto.contains(&format!("port={}", s1.port)) && auto.contains("application_name=second"), "its primary_conninfo stays: {auto}");
    drop(s2);
    let s2 = Cluster::over(&second, &base.join("sock-second"));
    assert_eq!(s2.sql("postgres", "SELECT pg_is_in_recovery()"), "t");
    wait_streaming(&s1, "second");
    wait_rows(&s2, 6, 75);
    assert_eq!(s2.sql("postgres", "SELECT timeline_id FROM pg_control_checkpoint()"), "1", "no new timeline: it never promoted");
}

#[test]
fn standbys_from_the_repository_stream_cascade_and_stay_standbys_through_a_delta() {
    let (base, repo, c) = setup();
    standbys(&TestRepo::existing(&repo), base.path(), &c);
}

#[test]
fn a_standby_from_an_object_store() {
    let base = server_tempdir("sheaf-standby-s3.");
    let repo = TestRepo::encrypted_bucket(base.path());
    let primary = repo.cluster();
    insert(&primary, 1, 1000);
    ok(run(repo.sheaf().args(["backup", &primary.url("postgres"), "--repo", &repo.arg])), "backup into the bucket");
    insert(&primary, 2, 500);
    archive_now(&primary);
    let dir = base.path().join("standby");
    let (s, report) = standby_from(&repo, &primary, &dir, "from_s3", &[]);
    assert_eq!(report["startup"]["starts_as"], "standby", "{report}");
    wait_rows(&s, 2, 500);
    insert(&primary, 3, 10);
    wait_rows(&s, 3, 10);
}

#[test]
fn what_a_standby_restore_refuses_before_writing() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup");
    let to = base.path().join("refused");
    let to_s = to.to_str().unwrap();
    let restore = |extra: &[&str]| run(sheaf().args(["restore", "--repo", r, "--to", to_s]).args(extra));
    let untouched = || assert!(std::fs::read_dir(&to).map_or(true, |mut d| d.next().is_none()), "{} written", to.display());
    assert_fails(&restore(&["--standby", "--primary-conninfo", "host=/tmp user=rep password=hunter2"]), 2, &[".pgpass", "--primary-conninfo"]);
    untouched();
    assert_fails(&restore(&["--standby", "--primary-conninfo", "host='/tmp"]), 2, &["--primary-conninfo"]);
    untouched();
    assert_fails(&restore(&["--standby", "--primary-conninfo", "hots=db1"]), 2, &["hots"]);
    untouched();
    assert_fails(&restore(&["--standby", "--target-name", "x"]), 2, &["never promotes", "--target-action pause"]);
    untouched();
    assert_fails(&restore(&["--recovery-option", "recovery_min_aply_delay=5min"]), 2, &["no such parameter", "recovery_min_apply_delay"]);
    untouched();
    assert_fails(&restore(&["--recovery-option", "primary_conninfo=host=x"]), 2, &["--primary-conninfo"]);
    untouched();
    // The primary refuses a role without REPLICATION: its SQLSTATE and words, nothing written.
    c.sql("postgres", "CREATE ROLE no_replication LOGIN");
    let info = format!("host={} port={} user=no_replication", c.sock.display(), c.port);
    let o = restore(&["--standby", "--primary-conninfo", &info, "--slot", "refused_slot", "--create-slot"]);
    let err = crate::integration::common::stderr(&o);
    assert!(!o.status.success() && err.contains("--create-slot") && err.contains("42501"), "{err}");
    untouched();
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0");
    // A recovery option the major knows is written, and what it wrote is in the report.
    let ok_out = json(ok(restore(&["--recovery-option", "recovery_min_apply_delay=1s", "--json"]), "restore with a recovery option"));
    assert!(ok_out["startup"]["settings"].as_array().unwrap().iter().any(|s| s["name"] == "recovery_min_apply_delay" && s["value"] == "1s"), "{ok_out}");
    // Restored now, the folder is refused again, as any restore's, without --force or --delta.
    assert_fails(&restore(&["--standby"]), 5, &["not empty"]);
}

#[test]
fn a_standby_from_stripes_streams_without_an_archive() {
    let (base, _repo, c) = setup();
    insert(&c, 1, 100);
    let stripe = base.path().join("stripes/pg_1.sheaf");
    pg_dir(stripe.parent().unwrap());
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--to", stripe.to_str().unwrap()])), "backup to a stripe");
    insert(&c, 2, 50);
    let dir = base.path().join("from-stripes");
    let info = conninfo(&c, "from_stripes");
    let o = run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", dir.to_str().unwrap(), "--standby", "--primary-conninfo", &info]));
    let said = ok(o, "restore --standby from stripes");
    assert!(said.contains("no restore_command") && said.contains("streams from its primary only"), "{said}");
    let auto = std::fs::read_to_string(dir.join("postgresql.auto.conf")).unwrap();
    assert!(!auto.contains("\nrestore_command") && auto.contains("primary_conninfo = "), "{auto}");
    let s = start_standby(&TestRepo::existing(&base.path().join("none")), &dir);
    wait_streaming(&c, "from_stripes");
    wait_rows(&s, 2, 50);
}

#[test]
fn recovery_stops_at_a_transaction_or_just_before_it() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    insert(&c, 1, 10);
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup");
    let xid = c.sql("app", "WITH ins AS (INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 20) g) SELECT pg_current_xact_id()");
    insert(&c, 3, 30);
    archive_now(&c);
    let count = |x: &Cluster| x.sql("app", "SELECT string_agg(batch || ':' || n, ',' ORDER BY batch) FROM (SELECT batch, count(*) n FROM t GROUP BY batch) b");
    let at = recover(&repo, &base.path().join("at"), &["--target-xid", &xid]);
    assert_eq!(count(&at), "1:10,2:20", "inclusive: the transaction, and nothing after it");
    let before = recover(&repo, &base.path().join("before"), &["--target-xid", &xid, "--target-exclusive"]);
    assert_eq!(count(&before), "1:10", "exclusive: just before the transaction");
    let auto = std::fs::read_to_string(base.path().join("before/postgresql.auto.conf")).unwrap();
    assert!(auto.contains(&format!("recovery_target_xid = '{xid}'")) && auto.contains("recovery_target_inclusive = 'off'"), "{auto}");
}

#[test]
fn pg_wal_goes_where_link_map_says() {
    let (base, repo) = super::repo::repo_dir();
    let wal = base.path().join("wal-elsewhere");
    let c = archiving_with(&repo, &["-X", wal.to_str().unwrap()], &[]);
    ok(run(sheaf().args(["init", "--repo", repo.to_str().unwrap(), &c.url("postgres")])), "init");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t (id int, batch int, at timestamptz DEFAULT clock_timestamp())");
    insert(&c, 1, 100);
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", repo.to_str().unwrap()])), "backup");
    archive_now(&c);

    // As a folder, said; as a link where --link-map says, used by the server.
    let plain = base.path().join("plain");
    let out = json(ok(run(sheaf().args(["restore", "--repo", repo.to_str().unwrap(), "--to", plain.to_str().unwrap(), "--json"])), "restore"));
    assert!(out["startup"]["links"][0].as_str().unwrap().contains("restored as a folder"), "{out}");
    assert!(std::fs::symlink_metadata(plain.join("pg_wal")).unwrap().is_dir());
    let moved = base.path().join("moved-wal");
    let linked = base.path().join("linked");
    let out = json(ok(
        run(sheaf().args(["restore", "--repo", repo.to_str().unwrap(), "--to", linked.to_str().unwrap(), "--link-map", &format!("pg_wal={}", moved.display()), "--json"])),
        "restore --link-map",
    ));
    assert!(out["startup"]["links"][0].as_str().unwrap().contains("is a link to"), "{out}");
    assert_eq!(std::fs::read_link(linked.join("pg_wal")).unwrap(), moved);
    let r = super::repo::start_restored(&linked, false);
    assert_eq!(r.sql("app", "SELECT count(*) FROM t"), "100");
    let current = r.sql("postgres", "SELECT pg_walfile_name(pg_current_wal_lsn())");
    assert!(moved.join(&current).exists(), "the server writes its WAL ({current}) through the link into {}", moved.display());
    // --original-paths points it where it was: the source's own, busy: refused.
    let busy = base.path().join("busy");
    let o = run(sheaf().args(["restore", "--repo", repo.to_str().unwrap(), "--to", busy.to_str().unwrap(), "--original-paths"]));
    assert_fails(&o, 5, &[wal.to_str().unwrap()]);
    assert!(std::fs::read_dir(&wal).unwrap().count() > 1, "the source's pg_wal untouched");
    // A name the backup does not hold as a link.
    let o = run(sheaf().args(["restore", "--repo", repo.to_str().unwrap(), "--to", busy.to_str().unwrap(), "--link-map", "pg_xact=/tmp/x"]));
    assert_fails(&o, 2, &["pg_xact", "no linked folder", "pg_wal"]);
}
