//! An online backup under write load restores to a cluster that starts consistent.

use std::process::Stdio;

use super::cluster::{pg_dir, Cluster};
use crate::integration::common::{has_bytes, run, sheaf, stderr, wait_while_running};

fn pgbench_invariant(c: &Cluster, db: &str) -> Vec<String> {
    c.sql(
        db,
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(bbalance) FROM pgbench_branches), \
                (SELECT sum(tbalance) FROM pgbench_tellers), (SELECT coalesce(sum(delta), 0) FROM pgbench_history)",
    )
    .split('|')
    .map(str::to_string)
    .collect()
}

fn fingerprint(c: &Cluster, db: &str, table: &str) -> String {
    c.sql(db, &format!("SELECT count(*) || ':' || md5(string_agg(t::text, ',' ORDER BY id)) FROM {table} t"))
}

#[test]
fn online_backup_under_pgbench_restores_relocated_and_starts_consistent() {
    let c = Cluster::new(&[], &["max_wal_size = 256MB"]);
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("postgres", "CREATE DATABASE bench");
    let ts_dir = c.base.path().join("ts1");
    pg_dir(&ts_dir);
    c.sql("postgres", &format!("CREATE TABLESPACE ts1 LOCATION '{}'", ts_dir.display()));
    c.sql(
        "app",
        "CREATE TABLE big AS SELECT g AS id, md5(g::text) AS h, repeat('x', 200) AS pad FROM generate_series(1, 300000) g;
         CREATE TABLE in_ts (id int, v text) TABLESPACE ts1;
         INSERT INTO in_ts SELECT g, md5(g::text) FROM generate_series(1, 50000) g;
         CREATE UNLOGGED TABLE scratch AS SELECT g AS id FROM generate_series(1, 10000) g;
         CHECKPOINT;",
    );
    let init = run(c.tool("pgbench").args(["-i", "-s", "2", "-q", "bench"]));
    assert!(init.status.success(), "pgbench -i: {}", stderr(&init));
    let (big, in_ts) = (fingerprint(&c, "app", "big"), fingerprint(&c, "app", "in_ts"));

    // Writes the whole time: start the load, back up while it runs, stop it after.
    let mut load = c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-T", "600", "bench"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = c.base.path().join("stripes");
    std::fs::create_dir_all(&out).unwrap();
    let backup = run(sheaf().args(["backup", &c.url("postgres"), "--to", out.join("pg_1.sheaf").to_str().unwrap(), "--to", out.join("pg_2.sheaf").to_str().unwrap(), "--json"]));
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(load.try_wait().unwrap().is_none(), "pgbench must still be writing when the backup ends");
    let _ = load.kill();
    let _ = load.wait();
    assert!(backup.status.success(), "backup: {}", stderr(&backup));
    let report: serde_json::Value = serde_json::from_slice(&backup.stdout).unwrap();
    let pg = &report["postgres"];
    assert!(pg["pages_verified"].as_u64().unwrap() > 5000, "{pg}");
    assert_eq!(pg["checksum_failures"].as_array().unwrap().len(), 0);
    assert_eq!(pg["tablespaces"].as_array().unwrap().len(), 1);
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0", "the slot is gone");
    let names: Vec<&str> = pg["databases"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    for db in ["postgres", "template0", "template1", "app", "bench"] {
        assert!(names.contains(&db), "the report names database {db}: {names:?}");
    }

    // The manifest maps databases and relations to their files, as the catalogs said.
    let set = sheaf_core::BackupSet::open(&[sheaf_core::Location::file(out.join("pg_1.sheaf"))], &sheaf_core::LocalOnly).unwrap();
    let facts = sheaf_pg::ClusterFacts::of(&set).unwrap().expect("a PostgreSQL backup");
    let dbs = facts.databases().unwrap();
    let app = dbs.iter().find(|d| d.name == "app").expect("app recorded");
    assert_eq!(app.oid.to_string(), c.sql("postgres", "SELECT oid FROM pg_database WHERE datname = 'app'"));
    // Packed, one string a database (what every reader of the head parses), not an object each.
    assert!(app.relations.is_empty() && !app.packed.is_empty());
    assert!(set.manifest.source["databases"].as_array().unwrap().iter().all(|d| d["relations"].as_array().is_some_and(Vec::is_empty)), "the old list still written, empty");
    let rels: Vec<sheaf_pg::connect::catalog::RelationInfo> = app.relations().collect::<sheaf_core::Result<_>>().unwrap();
    let rel = |name: &str| rels.iter().find(|r| r.schema == "public" && r.name == name).cloned().unwrap_or_else(|| panic!("{name} recorded"));
    let big_rel = rel("big");
    assert_eq!(big_rel.kind, "r");
    assert_eq!(big_rel.path, c.sql("app", "SELECT pg_relation_filepath('big')"));
    assert!(set.manifest.entries.iter().any(|e| e.path == big_rel.path), "its file is in the backup");
    assert!(rel("in_ts").path.starts_with("pg_tblspc/"), "a relation in a tablespace");
    let count: usize = c.sql("app", "SELECT count(*) FROM pg_class WHERE pg_relation_filepath(oid) IS NOT NULL").parse().unwrap();
    assert_eq!(rels.len(), count, "every relation with storage");
    let t0 = dbs.iter().find(|d| d.name == "template0").unwrap();
    assert!(!t0.connectable);

    // Restore elsewhere, tablespace moved too, and start it beside the source.
    let new_data = c.base.path().join("restored/data");
    let new_ts = c.base.path().join("restored/ts1");
    let restore = run(sheaf().args([
        "restore",
        out.join("pg_2.sheaf").to_str().unwrap(),
        "--to",
        new_data.to_str().unwrap(),
        "--tablespace",
        &format!("{}={}", ts_dir.display(), new_ts.display()),
    ]));
    assert!(restore.status.success(), "restore: {}", stderr(&restore));
    std::fs::set_permissions(c.base.path().join("restored"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let link = std::fs::read_link(new_data.join(format!("pg_tblspc/{}", pg["tablespaces"][0]["oid"]))).unwrap();
    assert_eq!(link, new_ts);
    let r = Cluster::over(&new_data, &c.sock);
    let log = std::fs::read_to_string(r.log()).unwrap();
    assert!(log.contains("consistent recovery state reached"), "{log}");

    let inv = pgbench_invariant(&r, "bench");
    assert!(inv.iter().all(|v| v == &inv[0]), "pgbench invariant broken after restore: {inv:?}");
    assert_ne!(r.sql("bench", "SELECT count(*) FROM pgbench_history"), "0", "the load wrote during the backup");
    assert_eq!(fingerprint(&r, "app", "big"), big);
    assert_eq!(fingerprint(&r, "app", "in_ts"), in_ts);
    assert_eq!(r.sql("app", "SELECT count(*) FROM scratch"), "0", "an unlogged table comes back empty");
    let amcheck = run(r.tool("pg_amcheck").args(["--all", "--install-missing"]));
    assert!(amcheck.status.success(), "pg_amcheck: {}{}", String::from_utf8_lossy(&amcheck.stdout), stderr(&amcheck));
}

#[test]
fn a_corrupted_page_is_caught_and_named() {
    let mut c = Cluster::new(&[], &[]);
    c.sql("postgres", "CREATE TABLE victim AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 20000) g; CHECKPOINT;");
    let rel = c.sql("postgres", "SELECT pg_relation_filepath('victim')");
    c.stop();
    let file = c.data.join(&rel);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[8192 * 3 + 5000] ^= 0xFF;
    std::fs::write(&file, bytes).unwrap();
    c.start();
    let out = c.base.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let target = out.join("c.sheaf");
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--to", target.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains(&format!("{rel} block 3")) && err.contains("page checksum"), "{err}");
    assert!(!target.exists(), "a failed backup leaves no stripe");
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0");

    // Kept on request, with the failure recorded.
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--to", target.to_str().unwrap(), "--ignore-checksum-failures", "--json"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["check_failures"][0].as_str().unwrap().contains(&format!("{rel} block 3")), "{v}");
}

#[test]
fn a_cluster_with_its_wal_elsewhere_restores_and_starts() {
    // initdb -X: pg_wal is a symlink to another directory.
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let waldir = base.path().join("wal");
    pg_dir(&waldir);
    let c = Cluster::new(&["-X", waldir.to_str().unwrap()], &[]);
    assert!(std::fs::symlink_metadata(c.data.join("pg_wal")).unwrap().file_type().is_symlink());
    c.sql("postgres", "CREATE TABLE w AS SELECT g FROM generate_series(1, 50000) g");
    let out = c.base.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let stripe = out.join("w.sheaf");
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--to", stripe.to_str().unwrap()]));
    assert!(o.status.success(), "{}", stderr(&o));
    let new_data = c.base.path().join("restored");
    let o = run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", new_data.to_str().unwrap()]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::symlink_metadata(new_data.join("pg_wal")).unwrap().is_dir(), "pg_wal comes back as a directory");
    assert!(new_data.join("pg_wal/archive_status").is_dir());
    let r = Cluster::over(&new_data, &c.sock);
    assert_eq!(r.sql("postgres", "SELECT count(*) FROM w"), "50000");
}

/// Issue 9: files that vanish or change under an online backup are normal for a running database.
/// A database dropped while the backup reads another one is summed up in one line, with the files
/// listed in --json, not one warning per file.
#[test]
fn a_database_dropped_mid_backup_is_summed_up_in_one_line() {
    let c = Cluster::new(&[], &[]);
    // Read first (base/16384 sorts before base/16385): slow to compress, so the drop lands while
    // the backup is still on it.
    c.sql("postgres", "CREATE DATABASE slow");
    c.sql("postgres", "CREATE DATABASE churn");
    c.sql("slow", "CREATE TABLE t AS SELECT g AS id, md5(g::text) || md5((g * 7)::text) AS h FROM generate_series(1, 1000000) g; CHECKPOINT;");
    // Tables of 64 KiB or more: smaller files are packed and read at once by their own readers,
    // before the drop could land.
    for i in 0..50 {
        c.sql("churn", &format!("CREATE TABLE t{i} AS SELECT g FROM generate_series(1, 3000) g"));
    }
    c.sql("churn", "CHECKPOINT");
    let oids = c.sql("postgres", "SELECT string_agg(oid::text, ',' ORDER BY oid) FROM pg_database WHERE datname IN ('slow', 'churn')");
    let (slow_oid, churn_oid) = oids.split_once(',').unwrap();
    assert!(slow_oid < churn_oid, "the slow database's files are listed first: {oids}");
    let out = c.base.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let child = sheaf()
        .args(["backup", &c.url("postgres"), "--to", out.join("d.sheaf").to_str().unwrap(), "-c", "zstd:15", "--threads", "1", "--buffer-count", "2", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the stripe holds bytes, pg_backup_start is done and the files are being read: the
    // drop falls inside the read.
    let mut child = child;
    wait_while_running(&mut child, "the backup reading the cluster's files", || has_bytes(&out, ".partial"));
    c.sql("postgres", "DROP DATABASE churn");
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The tree is walked as it is read: what of the dropped database was listed before the drop
    // vanishes when read and is summed up; what was not is never listed (one line at most says
    // its folder vanished while listed). Either way, no warning per file.
    let vanished = v["vanished_files"].as_array().unwrap();
    assert!(vanished.iter().all(|f| f.as_str().unwrap().starts_with(&format!("base/{churn_oid}/"))), "{vanished:?}");
    if !vanished.is_empty() {
        assert!(err.contains(&format!("and {} vanished while being read", vanished.len())) && err.contains("WAL replay"), "{err}");
    }
    let listed: Vec<String> = v["warnings"].as_array().unwrap().iter().map(|w| w.as_str().unwrap().to_string()).collect();
    assert!(listed.iter().all(|w| !w.contains(&format!("base/{slow_oid}"))), "{listed:?}");
    assert!(!err.contains("vanished before it was read"), "no warning per file: {err}");
    assert!(err.lines().filter(|l| l.contains("warning")).count() <= 2, "{err}");
}
