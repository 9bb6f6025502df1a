//! PostgreSQL's errors are read by their SQLSTATE, never by their words. A primary and its standby
//! whose `lc_messages` is German (Debian's postgres-15.mo and the de_DE.UTF-8 locale that `make
//! deps` generates) are refused and advised exactly as in English: a standby that replayed WAL
//! written with full_page_writes off, a standby promoted mid-backup, a role that may not back up;
//! and a backup through an agent restores to a cluster that starts.

use std::process::Stdio;

use super::agent::{certificates, on_backup_host, tcp_url, AgentProc};
use super::cluster::Cluster;
use super::repo::{archiving, json, ok, recover, repo_dir};
use super::sheaf;
use crate::integration::common::{assert_fails, has_bytes, run, wait_while_running};

const GERMAN: &str = "lc_messages = 'de_DE.UTF-8'";

#[test]
fn a_server_that_speaks_german_is_read_as_one_that_speaks_english() {
    let (base, repo) = repo_dir();
    let r = repo.to_str().unwrap();
    let c = archiving(&repo, &[GERMAN]);
    ok(run(sheaf().args(["init", "--repo", r, &c.url("postgres")])), "init");
    c.sql("postgres", "CREATE DATABASE app");
    // The server does speak German, else this test proves nothing.
    let e = c.query("postgres", "SELECT 1/0").unwrap_err().to_string();
    assert!(e.contains("Division durch Null"), "the server answers in German: {e}");
    ok(run(c.tool("pgbench").args(["-i", "-s", "2", "-q", "app"])), "pgbench -i");

    // Through an agent: backed up, restored, started.
    let (tls, host) = certificates(base.path(), &[]);
    let agent = AgentProc::start(&c.data, &tls, base.path().join("agent.log"));
    let mut cmd = on_backup_host(&c.data);
    cmd.args(["backup", &tcp_url(&c), "--repo", r, "--agent", &agent.addr, "--tls-dir", host.to_str().unwrap(), "--json"]);
    let through = json(ok(run(&mut cmd), "backup through the agent"));
    let id = through["postgres"]["repository_id"].as_str().unwrap().to_string();
    let back = recover(&repo, &base.path().join("through-agent"), &["--set", &id, "--target", "immediate"]);
    assert_eq!(back.sql("app", "SELECT count(*) FROM pgbench_accounts"), "200000");
    drop(back);
    drop(agent);

    // A role that may not back up.
    c.sql("postgres", "CREATE ROLE weak LOGIN");
    let weak = c.url("postgres").replacen("postgres://postgres@", "postgres://weak@", 1);
    assert_fails(&run(sheaf().args(["backup", &weak, "--repo", r])), 2, &["role weak may not take a backup", "REPLICATION"]);

    // A standby that replayed WAL written with full_page_writes off: refused at the backup's
    // start, with the fix, as in English (SQLSTATE 55000 and the server's state, not the words).
    let sb = Cluster::standby_of(&c, &[GERMAN]);
    let s = sb.url("postgres");
    ok(run(sheaf().args(["backup", &s, "--repo", r])), "backup on the standby");
    c.sql("postgres", "ALTER SYSTEM SET full_page_writes = off");
    c.sql("postgres", "SELECT pg_reload_conf()");
    c.sql("app", "CREATE TABLE torn AS SELECT g FROM generate_series(1, 1000) g");
    c.sql("postgres", "CHECKPOINT");
    sb.catch_up(&c);
    let o = run(sheaf().args(["backup", &s, "--repo", r]));
    assert_fails(&o, 7, &["full_page_writes = off", "pg_backup_start", "not kept"]);
    c.sql("postgres", "ALTER SYSTEM SET full_page_writes = on");
    c.sql("postgres", "SELECT pg_reload_conf()");
    c.sql("postgres", "CHECKPOINT");
    sb.catch_up(&c);
    sb.sql("postgres", "CHECKPOINT");

    // Promoted mid-backup: refused, as in English.
    let slow = ["--repo", r, "--compression", "none", "--max-rate", "8MiB"];
    let mut backup = sheaf().arg("backup").arg(&s).args(slow).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    wait_while_running(&mut backup, "the backup reading the standby's files", || has_bytes(&repo.join("backups"), ".partial"));
    sb.promote().unwrap();
    let o = backup.wait_with_output().unwrap();
    assert_fails(&o, 7, &["was promoted while the backup ran", "take the backup again"]);
}
