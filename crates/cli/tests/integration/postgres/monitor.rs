//! Monitoring a real cluster's backups: `sheaf check` judges them (exit 0, 1, 2) as it finds them
//! — no backup, a fresh one, one too old, one left by a crash, archive_command pointed elsewhere,
//! a server of another cluster — and `sheaf info --format prometheus` says the same as metrics.

use std::process::Stdio;
use std::time::Duration;

use super::cluster::Cluster;
use super::repo::{ok, setup};
use super::sheaf;
use crate::integration::common::{has_bytes, names, run, stderr, wait_while_running, SHEAF};

/// The value of the sample whose line starts with `prefix` (name and labels).
pub(super) fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

#[test]
fn check_judges_the_backups_and_info_speaks_prometheus() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let url = c.url("postgres");
    let check = |extra: &[&str]| run(sheaf().args(["check", &url, "--repo", r]).args(extra));
    let findings = |o: &std::process::Output| -> serde_json::Value {
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", String::from_utf8_lossy(&o.stdout), stderr(o)))
    };
    let status_of = |j: &serde_json::Value, check: &str| j["findings"].as_array().unwrap().iter().find(|f| f["check"] == check).map(|f| f["status"].as_str().unwrap().to_string());

    // No backup yet: critical, though archiving works end to end.
    let o = check(&["--json"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let j = findings(&o);
    assert_eq!(j["status"], "critical");
    assert_eq!(status_of(&j, "repository").as_deref(), Some("ok"), "{j}");
    assert_eq!(status_of(&j, "archive").as_deref(), Some("ok"), "{j}");
    assert!(j.to_string().contains("holds no backup"), "{j}");

    // A fresh backup: all ok, the verdict first as monitoring plugins print it.
    ok(run(sheaf().args(["backup", &url, "--repo", r])), "backup");
    let o = check(&[]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(0), "{text}{}", stderr(&o));
    assert!(text.starts_with("SHEAF OK - "), "{text}");
    for what in ["repository", "archive", "backup", "wal"] {
        assert!(text.lines().any(|l| l.starts_with("OK") && l.contains(what)), "{what}: {text}");
    }
    // Every finding names the repository it is about.
    for l in text.lines().skip(1) {
        assert!(l.contains(r), "{l}");
    }
    // Too old for --max-age.
    std::thread::sleep(Duration::from_millis(2100));
    let o = check(&["--max-age", "1s"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with(&format!("SHEAF CRITICAL - {r}: the newest backup")), "{}", String::from_utf8_lossy(&o.stdout));
    let o = run(sheaf().args(["check", &url, "--repo", r, "--max-age", "3y"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--max-age") && stderr(&o).contains("units"), "{}", stderr(&o));
    // One duration parser for every duration flag: 26h and 8s as well as seconds.
    assert_eq!(check(&["--max-age", "26h", "--archive-timeout", "8s"]).status.code(), Some(0));

    // The same state as Prometheus metrics, with the server's lag and this host's runs.
    let prom = ok(run(sheaf().args(["info", "--repo", r, "--format", "prometheus", &url])), "info --format prometheus");
    for line in prom.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap();
        assert!(name.starts_with("sheaf_") && name.chars().all(|ch| ch.is_ascii_lowercase() || ch == '_'), "{line}");
        assert!(prom.contains(&format!("# TYPE {name} ")), "{name} has no TYPE line");
        assert_eq!(name.ends_with("_total"), prom.contains(&format!("# TYPE {name} counter")), "{name}: _total on counters only");
    }
    let repo_label = format!("repo=\"{r}\"");
    let full = |name: &str| sample(&prom, &format!("{name}{{{repo_label},type=\"full\"}}"));
    assert_eq!(full("sheaf_backups"), Some(1.0), "{prom}");
    assert!(full("sheaf_backup_last_age_seconds").is_some_and(|a| (2.0..600.0).contains(&a)), "{prom}");
    assert!(full("sheaf_backup_last_size_bytes").is_some_and(|b| b > 0.0), "{prom}");
    assert!(full("sheaf_backup_last_source_bytes").is_some_and(|b| b > 1e6), "{prom}");
    assert_eq!(sample(&prom, &format!("sheaf_backups{{{repo_label},type=\"incr\"}}")), Some(0.0));
    assert_eq!(sample(&prom, &format!("sheaf_server_up{{{repo_label}}}")), Some(1.0));
    assert!(sample(&prom, &format!("sheaf_wal_archive_lag_bytes{{{repo_label}}}")).is_some_and(|b| b < (16 << 20) as f64), "{prom}");
    assert!(sample(&prom, &format!("sheaf_wal_archive_lag_seconds{{{repo_label}}}")).is_some_and(|s| s < 600.0), "{prom}");
    assert_eq!(sample(&prom, &format!("sheaf_wal_gaps{{{repo_label}}}")), Some(0.0));
    assert!(sample(&prom, &format!("sheaf_runs_total{{{repo_label},operation=\"backup\",status=\"complete\"}}")).is_some_and(|n| n >= 1.0), "{prom}");
    // Only this repository's runs, though the catalog holds every test's: another cluster's
    // failed backup is not this one's alert.
    assert!(prom.lines().filter(|l| l.starts_with("sheaf_run")).all(|l| l.contains(&repo_label)), "{prom}");
    let file = base.path().join("sheaf.prom");
    ok(run(sheaf().args(["info", "--repo", r, "--prometheus", file.to_str().unwrap()])), "info --prometheus");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("# TYPE sheaf_backup_last_end_timestamp_seconds gauge") && !written.contains("sheaf_server_up"), "{written}");

    // A backup killed mid-way leaves an unfinished one: a warning.
    let mut crash = sheaf().args(["backup", &url, "--repo", r, "--max-rate", "1MiB", "-c", "none"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    // A stripe being written, not the lock (written as .lock.partial first): killed before its
    // lock is published, the backup leaves nothing a check could call unfinished.
    wait_while_running(&mut crash, "the backup writing its stripes", || has_bytes(&repo.join("backups"), ".sheaf.partial"));
    let _ = std::process::Command::new("kill").args(["-KILL", &crash.id().to_string()]).status();
    let ended = crash.wait().unwrap();
    // Killed, not ended on its own (a backup that failed cleans up, and nothing is unfinished).
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&ended), Some(9), "the backup ended before the kill: {ended:?}");
    let o = check(&[]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let left = names(&repo.join("backups"));
    assert_eq!(o.status.code(), Some(1), "{text}; backups/ holds {left:?}");
    assert!(text.starts_with(&format!("SHEAF WARNING - {r}: unfinished backup(s) left by a crash")), "{text}");
    ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "5"])), "expire");

    // archive_command pointed at another repository: critical, naming it.
    let elsewhere = base.path().join("elsewhere");
    super::cluster::pg_dir(&elsewhere);
    ok(run(sheaf().args(["init", "--repo", elsewhere.to_str().unwrap(), &url])), "init elsewhere");
    c.sql("postgres", &format!("ALTER SYSTEM SET archive_command = '{SHEAF} wal-push %p --repo {}'", elsewhere.display()));
    c.sql("postgres", "SELECT pg_reload_conf()");
    let o = check(&["--archive-timeout", "5"]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(2), "{text}{}", stderr(&o));
    assert!(text.contains(&format!("did not reach {r} within 5 s")) && text.contains(elsewhere.to_str().unwrap()), "{text}");

    // An archive_command that fails: the message names pg_stat_archiver's last failure, as it is
    // once the wait is over (the switched segment's failures come after the first look).
    c.sql("postgres", "ALTER SYSTEM SET archive_command = 'false'");
    c.sql("postgres", "SELECT pg_reload_conf()");
    let o = check(&["--archive-timeout", "5s"]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    assert_eq!(o.status.code(), Some(2), "{text}{}", stderr(&o));
    let failed = c.sql("postgres", "SELECT last_failed_wal FROM pg_stat_archiver");
    assert!(!failed.is_empty() && text.contains("pg_stat_archiver: ") && text.contains(&format!("the last on {failed}")), "{failed}: {text}");
    c.sql("postgres", "ALTER SYSTEM RESET archive_command");
    c.sql("postgres", "SELECT pg_reload_conf()");

    // A server of another cluster.
    let other = Cluster::new(&[], &[]);
    let o = run(sheaf().args(["check", &other.url("postgres"), "--repo", r]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("the repository at {r} holds cluster")), "{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
}
