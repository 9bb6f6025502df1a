//! Bad input and faults: each ends with a clear message and the server as it was.

use super::cluster::Cluster;
use crate::integration::common::{run, sheaf, stderr};

fn backup(url: &str, dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut c = sheaf();
    c.args(["backup", url, "--to", dir.join("f.sheaf").to_str().unwrap()]).args(extra);
    run(&mut c)
}

fn clean(c: &Cluster) {
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'sheaf%'"), "0", "no sheaf slot left");
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sheaf'"), "0", "no sheaf session left");
}

#[test]
fn connection_and_permission_problems_are_named() {
    let c = Cluster::new(&[], &[]);
    let out = c.base.path().join("out");
    std::fs::create_dir_all(&out).unwrap();

    let o = backup("postgres://[nope", &out, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // The real cause, in libpq's words (it was "not a PostgreSQL URL: invalid connection string").
    assert!(stderr(&o).contains("missing \"]\" in IPv6 host address"), "{}", stderr(&o));

    let wrong_port = format!("postgres://postgres@localhost:{}/postgres?host={}", c.port + 1, c.sock.display());
    let o = backup(&wrong_port, &out, &[]);
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot connect") && stderr(&o).contains("check that the server runs"), "{}", stderr(&o));

    c.sql("postgres", "CREATE ROLE weak LOGIN; CREATE ROLE pw LOGIN SUPERUSER PASSWORD 'right'");
    let weak = format!("postgres://weak@localhost:{}/postgres?host={}", c.port, c.sock.display());
    let o = backup(&weak, &out, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("role weak may not take a backup") && stderr(&o).contains("REPLICATION"), "{}", stderr(&o));

    // Password authentication over TCP.
    let hba = c.data.join("pg_hba.conf");
    let text = std::fs::read_to_string(&hba)
        .unwrap()
        .replace("host    all             all             127.0.0.1/32            trust", "host    all             all             127.0.0.1/32            scram-sha-256");
    std::fs::write(&hba, text).unwrap();
    c.sql("postgres", "SELECT pg_reload_conf()");
    // A login refused is permanent: exit 10 (denied), never "transient".
    let o = backup(&format!("postgres://pw:wrong@127.0.0.1:{}/postgres", c.port), &out, &[]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    assert!(!stderr(&o).contains("transient"), "{}", stderr(&o));
    assert!(stderr(&o).contains(sheaf_pg::connect::session::Refusal::Login.hint()) && !stderr(&o).contains("wrong@"), "names the cause, hides the password: {}", stderr(&o));

    c.sql("postgres", "SELECT pg_create_physical_replication_slot('sheaf_taken')");
    let o = backup(&c.url("postgres"), &out, &["--slot", "sheaf_taken"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("replication slot sheaf_taken already exists"), "{}", stderr(&o));
    c.sql("postgres", "SELECT pg_drop_replication_slot('sheaf_taken')");
    assert!(std::fs::read_dir(&out).unwrap().next().is_none(), "no stripe from a refused backup");
    clean(&c);
}

#[test]
fn wal_level_minimal_is_refused_with_the_fix() {
    let c = Cluster::new(&[], &["wal_level = minimal", "max_wal_senders = 0"]);
    let out = c.base.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let o = backup(&c.url("postgres"), &out, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("wal_level = minimal") && stderr(&o).contains("wal_level = replica"), "{}", stderr(&o));
}

#[test]
fn restore_refuses_a_running_cluster_and_an_unmapped_busy_tablespace() {
    let c = Cluster::new(&[], &[]);
    let ts_dir = c.base.path().join("ts");
    super::cluster::pg_dir(&ts_dir);
    c.sql("postgres", &format!("CREATE TABLESPACE ts LOCATION '{}'", ts_dir.display()));
    c.sql("postgres", "CREATE TABLE t TABLESPACE ts AS SELECT 1 AS x");
    let out = c.base.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let o = backup(&c.url("postgres"), &out, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stripe = out.join("f.sheaf");

    // Onto the running source: refused even with --force.
    let o = run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", c.data.to_str().unwrap(), "--force"]));
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("is running on") && stderr(&o).contains("pg_ctl stop"), "{}", stderr(&o));
    assert_eq!(c.sql("postgres", "SELECT x FROM t"), "1", "the running cluster is untouched");

    // An unmapped tablespace is written nowhere unless the user says where: name both ways.
    let new = c.base.path().join("new");
    let o = run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", new.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("--tablespace {}=NEW_DIR", ts_dir.display())), "{}", stderr(&o));
    assert!(stderr(&o).contains("--original-paths"), "{}", stderr(&o));
    assert!(!new.exists() || std::fs::read_dir(&new).unwrap().next().is_none());

    // Asked for its original place, which the source still uses: say how to map it.
    let o = run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", new.to_str().unwrap(), "--original-paths"]));
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("--tablespace {}=NEW_DIR", ts_dir.display())), "{}", stderr(&o));
    assert!(!new.exists() || std::fs::read_dir(&new).unwrap().next().is_none());

    // --force empties restore targets, but never a tablespace the source may be using.
    std::fs::create_dir_all(&new).unwrap();
    std::fs::write(new.join("old"), b"x").unwrap();
    let before = std::fs::read_dir(&ts_dir).unwrap().count();
    let o = run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", new.to_str().unwrap(), "--force", "--original-paths"]));
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&ts_dir).unwrap().count(), before, "the source's tablespace is untouched");
    assert_eq!(c.sql("postgres", "SELECT x FROM t"), "1");
    std::fs::remove_dir_all(&new).unwrap();

    // A mapping that names no tablespace lists the ones there are.
    let o = run(sheaf().args(["restore", stripe.to_str().unwrap(), "--to", new.to_str().unwrap(), "--tablespace", "/nowhere=/x"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no such tablespace") && stderr(&o).contains("ts (oid"), "{}", stderr(&o));
}

#[test]
fn a_server_stopping_mid_backup_fails_it_and_leaves_nothing() {
    let mut c = Cluster::new(&[], &[]);
    c.sql("postgres", "CREATE TABLE big AS SELECT g, md5(g::text) || repeat('y', 300) AS h FROM generate_series(1, 150000) g");
    let out = c.base.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let target = out.join("s.sheaf");
    let mut child = sheaf()
        .args(["backup", &c.url("postgres"), "--to", target.to_str().unwrap(), "-c", "zstd:19", "--threads", "1", "--buffer-count", "2", "--transfer-size", "64KiB"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let partial = out.join("s.sheaf.partial");
    let t0 = std::time::Instant::now();
    while std::fs::metadata(&partial).map(|m| m.len() < 100_000).unwrap_or(true) {
        assert!(t0.elapsed().as_secs() < 60, "backup never got going");
        assert!(child.try_wait().unwrap().is_none(), "backup ended before the server could be stopped");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    c.stop();
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success(), "the backup must fail");
    assert!(!target.exists() && !partial.exists(), "nothing left that looks like a backup");
    c.start();
    clean(&c);
}
