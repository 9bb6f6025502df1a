//! `--via base-backup`: a real cluster read over the replication protocol, with nothing of
//! sheaf's on its host, by a role that must use SCRAM-SHA-256 and, where the server has TLS, TLS
//! for both its connections (`sslmode=require`; the server's pg_hba.conf rejects it otherwise), while pgbench writes and with a tablespace: into a
//! repository, restored alone and replayed to the end, started, pgbench's balances agreeing and
//! pg_amcheck clean. A role pg_hba.conf does not let replicate is refused with the fix.

use std::process::Stdio;

use super::cluster::pg_dir;
use super::repo::{archive_now, json, ok, recover, setup};
use super::sheaf;
use crate::integration::common::{assert_fails, run, stderr};

#[test]
fn a_backup_over_the_replication_protocol_restores() {
    let (base, repo, mut c) = setup();
    let r = repo.to_str().unwrap();
    // TLS with a certificate of our own making, where the server is built with it (PyPI's 18 is
    // not): the role `rep` replicates only over TLS then, and always with SCRAM.
    let with_tls = !c.sql("postgres", "SHOW ssl_library").is_empty();
    // Both of sheaf's connections, SQL and replication, must then come over TLS.
    let replication_line = if with_tls {
        "hostssl replication rep 127.0.0.1/32 scram-sha-256\nhostssl all rep 127.0.0.1/32 scram-sha-256\nhost replication rep 127.0.0.1/32 reject\nhost all rep 127.0.0.1/32 reject"
    } else {
        "host replication rep 127.0.0.1/32 scram-sha-256"
    };
    let tls = base.path().join("tls");
    ok(run(sheaf().args(["agent", "--init-certs", tls.to_str().unwrap()])), "certificates");
    for f in ["server.pem", "server.key"] {
        std::fs::copy(tls.join(f), c.data.join(f)).unwrap();
        let (uid, gid) = sheaf_pg::drill::scratch::server_owner().unwrap();
        std::os::unix::fs::chown(c.data.join(f), Some(uid), Some(gid)).unwrap();
    }
    let hba = std::fs::read_to_string(c.data.join("pg_hba.conf")).unwrap();
    std::fs::write(
        c.data.join("pg_hba.conf"),
        format!(
            "{replication_line}\nhost all rep 127.0.0.1/32 scram-sha-256\n\
             host replication nohba 127.0.0.1/32 reject\nhost all nohba 127.0.0.1/32 scram-sha-256\n{hba}"
        ),
    )
    .unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(c.data.join("postgresql.conf"))
        .and_then(|mut f| {
            let ssl: &[u8] = if with_tls { b"ssl = on\nssl_cert_file = 'server.pem'\nssl_key_file = 'server.key'\n" } else { b"" };
            std::io::Write::write_all(&mut f, ssl)?;
            std::io::Write::write_all(&mut f, b"password_encryption = 'scram-sha-256'\n")
        })
        .unwrap();
    c.stop();
    c.start();
    c.sql("postgres", "CREATE ROLE rep LOGIN REPLICATION PASSWORD 'secret words'");
    c.sql("postgres", "CREATE ROLE nohba LOGIN REPLICATION PASSWORD 'other words'");
    let ts = base.path().join("ts");
    pg_dir(&ts);
    c.sql("postgres", &format!("CREATE TABLESPACE space LOCATION '{}'", ts.display()));
    ok(run(c.tool("pgbench").args(["-i", "-s", "2", "-q", "--tablespace", "space", "app"])), "pgbench -i");
    let url = format!("postgres://rep:secret%20words@127.0.0.1:{}/postgres?sslmode={}", c.port, if with_tls { "require" } else { "prefer" });

    let mut load = c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-T", "600", "app"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let out = json(ok(run(sheaf().args(["backup", &url, "--via", "base-backup", "--repo", r, "--json"])), "backup --via base-backup"));
    assert_eq!(out["postgres"]["method"], "BASE_BACKUP over the replication protocol", "{out}");
    assert!(out["postgres"]["wal_files"].as_u64().unwrap() >= 1, "{out}");
    let id = out["postgres"]["repository_id"].as_str().unwrap().to_string();
    let _ = load.kill();
    let _ = load.wait();
    // Waits for each to exit (pg_terminate_backend's timeout): no commit is in flight after it.
    c.sql("postgres", "SELECT count(pg_terminate_backend(pid, 60000)) FROM pg_stat_activity WHERE application_name = 'pgbench'");
    let balances = c.sql("app", "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(tbalance) FROM pgbench_tellers)");
    archive_now(&c);

    let moved = base.path().join("moved-ts");
    let ts_map = format!("{}={}", ts.display(), moved.display());
    let alone = recover(&repo, &base.path().join("alone"), &["--set", &id, "--target", "immediate", "--tablespace", &ts_map]);
    assert_eq!(alone.sql("app", "SELECT (SELECT sum(abalance) FROM pgbench_accounts) = (SELECT sum(tbalance) FROM pgbench_tellers)"), "t");
    assert_eq!(alone.sql("app", "SELECT count(*) FROM pgbench_accounts"), "200000");
    let o = run(alone.tool("pg_amcheck").args(["--all", "--heapallindexed", "--install-missing"]));
    assert!(o.status.success(), "pg_amcheck: {}{}", String::from_utf8_lossy(&o.stderr), String::from_utf8_lossy(&o.stdout));
    drop(alone);
    let moved2 = base.path().join("moved-ts-2");
    let end = recover(&repo, &base.path().join("end"), &["--tablespace", &format!("{}={}", ts.display(), moved2.display())]);
    assert_eq!(end.sql("app", "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ' ' || (SELECT sum(tbalance) FROM pgbench_tellers)"), balances);
    drop(end);

    // pg_hba.conf without a replication line for the role: refused (a login refused: exit 10,
    // never "transient"), naming the fix.
    let nohba = format!("postgres://nohba:other%20words@127.0.0.1:{}/postgres?sslmode=prefer", c.port);
    let o = run(sheaf().args(["backup", &nohba, "--via", "base-backup", "--repo", r]));
    assert_fails(&o, 10, &["refused the replication connection", "pg_hba.conf"]);
    assert!(!stderr(&o).contains("transient"), "{}", stderr(&o));
    // An incremental cannot come over BASE_BACKUP.
    let o = run(sheaf().args(["backup", &url, "--via", "base-backup", "--repo", r, "--type", "incr"]));
    assert_fails(&o, 2, &["--via base-backup reads every file whole"]);
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    assert_eq!(info["backups"].as_array().unwrap().len(), 1, "only the backup that succeeded is recorded: {info}");
}
