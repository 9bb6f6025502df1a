//! `sheaf wal-receive` as the synchronous standby of a real server that also archives through
//! wal-push: the server is killed mid-transaction, and a restore to the end of the repository's
//! WAL brings back every transaction the server acknowledged, and none it did not. Without the
//! receiver's copy of the last segment, the same restore loses the commits made since the last
//! segment switch: the test shows both.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{pg_dir, Cluster};
use super::repo::{archive_now, json, ok, recover, setup};
use super::sheaf;
use crate::integration::common::{assert_fails, run, wait_for};

/// The receiver, stopped (SIGTERM) on drop if still running.
struct Receiver(Option<Child>);

impl Receiver {
    fn start(url: &str, repo: &str, spool: &Path) -> Receiver {
        Receiver::start_into(url, &[repo], spool)
    }

    /// One receiver storing into every repository of `repos`.
    fn start_into(url: &str, repos: &[&str], spool: &Path) -> Receiver {
        let child = sheaf()
            .args(["wal-receive", url, "--spool", spool.to_str().unwrap(), "--partial-every", "1", "--retry-every", "1", "--json"])
            .args(repos.iter().flat_map(|r| ["--repo", r]))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Receiver(Some(child))
    }

    /// Stop it as a service manager would, and its output.
    fn stop(&mut self) -> std::process::Output {
        let child = self.0.take().expect("running");
        let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        child.wait_with_output().unwrap()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Kill the server and its processes at once, as a power cut would.
pub(crate) fn kill_server(c: &Cluster) {
    let pid = std::fs::read_to_string(c.data.join("postmaster.pid")).unwrap().lines().next().unwrap().trim().to_string();
    let signal = |sig: &str, pids: &[String]| {
        let _ = std::process::Command::new("kill").arg(sig).args(pids).stderr(Stdio::null()).status();
    };
    // Stopped first, the postmaster cannot start new children (it would, seeing one die: crash
    // recovery) while its children are killed; then it goes too, and all of them are waited for,
    // so that none still holds the shared memory when the server is started again.
    signal("-STOP", std::slice::from_ref(&pid));
    let out = std::process::Command::new("pgrep").args(["-P", &pid]).output().unwrap();
    let mut all: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_string).collect();
    signal("-KILL", &all);
    signal("-KILL", std::slice::from_ref(&pid));
    all.push(pid);
    let deadline = Instant::now() + Duration::from_secs(30);
    // Until reaped: PostgreSQL takes a dead postmaster's zombie for a live one.
    while all.iter().any(|p| std::path::Path::new(&format!("/proc/{p}")).exists()) {
        assert!(Instant::now() < deadline, "the server outlived SIGKILL");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn count(c: &Cluster, batch: u32) -> u64 {
    c.sql("app", &format!("SELECT count(*) FROM t WHERE batch = {batch}")).parse().unwrap()
}

#[test]
fn a_synchronous_receiver_keeps_every_acknowledged_commit_through_a_crash() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let spool = base.path().join("spool");
    pg_dir(&spool);
    let url = format!("{}&application_name=sheaf_rx", c.url("postgres"));

    // Refused before anything runs: no spool, and a repository of another cluster.
    let o = run(sheaf().args(["wal-receive", &url, "--repo", r]));
    assert_fails(&o, 2, &["--spool DIR"]);
    let other = Cluster::new(&[], &[]);
    let o = run(sheaf().args(["wal-receive", &other.url("postgres"), "--repo", r, "--spool", spool.to_str().unwrap()]));
    assert_fails(&o, 2, &["is of cluster", "holds cluster"]);
    drop(other);

    let mut rx = Receiver::start(&url, r, &spool);
    c.sql("postgres", "ALTER SYSTEM SET synchronous_standby_names = 'sheaf_rx'");
    c.sql("postgres", "SELECT pg_reload_conf()");
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.sql("postgres", "SELECT coalesce(string_agg(sync_state, ','), '') FROM pg_stat_replication WHERE application_name = 'sheaf_rx'") != "sync" {
        assert!(Instant::now() < deadline, "the receiver is not the synchronous standby: {}", std::fs::read_to_string(c.log()).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(200));
    }
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup");

    // Commits, each acknowledged only once the receiver has it on disk; a segment switch between
    // the two batches (that segment goes to the repository twice: wal-push and the receiver).
    let statements = |batch: u32| (1..=100).map(|i| format!("INSERT INTO t (id, batch) VALUES ({i}, {batch});\n")).collect::<String>();
    let script = base.path().join("commits.sql");
    for batch in [1, 2] {
        std::fs::write(&script, statements(batch)).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        ok(run(c.tool("psql").args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", "app", "-f", script.to_str().unwrap()])), "commits");
        if batch == 1 {
            archive_now(&c);
        }
    }
    assert_eq!(c.sql("postgres", "SELECT failed_count FROM pg_stat_archiver"), "0");
    // A transaction in flight when the server dies: never acknowledged, never restored.
    let mut open = c
        .tool("psql")
        .args(["-X", "-q", "-d", "app", "-c", "BEGIN; INSERT INTO t (id, batch) SELECT g, 3 FROM generate_series(1, 1000) g; SELECT pg_sleep(600); COMMIT;"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.sql("postgres", "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'BEGIN; INSERT%' AND wait_event = 'PgSleep'") != "1" {
        assert!(Instant::now() < deadline, "the open transaction did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The open transaction's WAL reached the receiver before the crash.
    wait_received(&c);
    kill_server(&c);
    let _ = open.kill();
    let _ = open.wait();

    let report = json(ok(rx.stop(), "wal-receive"));
    assert!(!report["segments"].as_array().unwrap().is_empty(), "{report}");
    assert!(report["partial_uploads"].as_u64().unwrap() >= 1, "{report}");
    assert!(report["bytes"].as_u64().unwrap() > 0, "{report}");

    // The receiver's copy of the last segment set aside: the commits since the switch are lost.
    let streamed: Vec<_> = walk(&repo.join("wal")).into_iter().filter(|p| p.to_string_lossy().ends_with(".streaming")).collect();
    assert_eq!(streamed.len(), 1, "one segment being received when the server died: {streamed:?}");
    let aside = base.path().join("aside");
    std::fs::rename(&streamed[0], &aside).unwrap();
    let without = recover(&repo, &base.path().join("without"), &[]);
    assert_eq!((count(&without, 1), count(&without, 2)), (100, 0), "without the streamed segment");
    drop(without);
    std::fs::rename(&aside, &streamed[0]).unwrap();

    // With it: every acknowledged commit, and nothing of the open transaction.
    let with = recover(&repo, &base.path().join("with"), &[]);
    assert_eq!((count(&with, 1), count(&with, 2), count(&with, 3)), (100, 100, 0), "with the streamed segment");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path());
        }
    }
    out
}

/// The objects under the repository's `wal/` whose name ends with `suffix`, by file name.
fn wal_objects(repo: &Path, suffix: &str) -> Vec<String> {
    walk(&repo.join("wal")).into_iter().filter_map(|p| p.file_name()?.to_str().map(str::to_string)).filter(|n| n.ends_with(suffix)).collect()
}

/// Wait until the receiver has flushed the WAL written so far.
fn wait_received(c: &Cluster) {
    let lsn = c.sql("postgres", "SELECT pg_current_wal_insert_lsn()");
    let flushed = format!("SELECT coalesce(bool_or(flush_lsn >= '{lsn}'), false) FROM pg_stat_replication WHERE application_name = 'sheaf_rx'");
    wait_for("the receiver to flush the WAL written", Duration::from_secs(60), || c.sql("postgres", &flushed) == "t");
}

fn wait_streaming(c: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.sql("postgres", "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'sheaf_rx' AND state = 'streaming'") != "1" {
        assert!(Instant::now() < deadline, "the receiver is not streaming");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_receiver_connects_again_and_completes_the_segment_it_left() {
    let (base, repo, mut c) = setup();
    let r = repo.to_str().unwrap();
    let spool = base.path().join("spool");
    pg_dir(&spool);
    let url = format!("{}&application_name=sheaf_rx", c.url("postgres"));
    let mut rx = Receiver::start(&url, r, &spool);
    wait_streaming(&c);
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 1000) g");
    // The server restarts under it: the receiver connects again by itself.
    c.stop();
    c.start();
    wait_streaming(&c);
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 1000) g");
    let segment = c.sql("postgres", "SELECT pg_walfile_name(pg_current_wal_insert_lsn())");
    wait_received(&c);
    let streamed = format!("{segment}.streaming");
    wait_for("the segment being received to reach the repository", Duration::from_secs(60), || wal_objects(&repo, ".streaming") == [streamed.clone()]);
    let first = json(ok(rx.stop(), "wal-receive"));
    assert!(first["connections"].as_u64().unwrap() >= 2, "{first}");
    assert_eq!(wal_objects(&repo, ".streaming"), vec![format!("{segment}.streaming")], "the segment being received is in the repository");
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    assert_eq!(info["streaming"], serde_json::json!([segment]), "{info}");
    assert_eq!(c.sql("postgres", "SELECT active FROM pg_replication_slots WHERE slot_name = 'sheaf'"), "f");

    // Started again, it receives that segment again from its start; once the segment is
    // complete (the switch below) it is stored once, whoever comes first, and its streamed copy goes.
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 3 FROM generate_series(1, 1000) g");
    let mut again = Receiver::start(&url, r, &spool);
    wait_streaming(&c);
    assert_eq!(archive_now(&c), segment);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !wal_objects(&repo, ".streaming").iter().all(|n| !n.starts_with(&segment)) {
        assert!(Instant::now() < deadline, "{segment}'s streamed copy is still there: {:?}", wal_objects(&repo, ".streaming"));
        std::thread::sleep(Duration::from_millis(200));
    }
    let second = json(ok(again.stop(), "wal-receive"));
    assert!(second["segments"].as_array().unwrap().iter().any(|s| s == &serde_json::json!(segment)), "{second}");
    assert!(wal_objects(&repo, ".wal").contains(&format!("{segment}.wal")));
    assert_eq!(c.sql("postgres", "SELECT failed_count FROM pg_stat_archiver"), "0", "wal-push met no different content");
    drop(rx);
}

#[test]
fn a_receiver_follows_its_server_onto_a_new_timeline() {
    let (base, repo, mut c) = setup();
    let r = repo.to_str().unwrap();
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup");
    let standby = Cluster::standby_of(&c, &[]);
    let spool = base.path().join("spool");
    pg_dir(&spool);
    // Streaming from the standby (cascading), which is then promoted.
    let mut rx = Receiver::start(&format!("{}&application_name=sheaf_rx", standby.url("postgres")), r, &spool);
    wait_streaming(&standby);
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 1000) g");
    standby.catch_up(&c);
    c.stop();
    standby.promote().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while standby.sql("postgres", "SELECT pg_is_in_recovery()") != "f" {
        assert!(Instant::now() < deadline, "the standby was not promoted");
        std::thread::sleep(Duration::from_millis(100));
    }
    standby.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 1000) g");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !wal_objects(&repo, ".streaming").iter().any(|n| n.starts_with("00000002")) {
        assert!(Instant::now() < deadline, "nothing streamed on timeline 2: {:?}", wal_objects(&repo, ""));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Batch 2 received, so that the restore below finds it.
    wait_received(&standby);
    let report = json(ok(rx.stop(), "wal-receive"));
    assert_eq!(report["timeline"], 2, "{report}");
    assert_eq!(report["histories"], serde_json::json!(["00000002.history"]), "{report}");

    // A restore to the end follows timeline 2, up to what was received of it.
    let back = recover(&repo, &base.path().join("back"), &[]);
    assert_eq!((count(&back, 1), count(&back, 2)), (1000, 1000));
}

/// Two repositories: every segment the receiver completes goes into each. The second is away
/// from the start: the first gets the WAL (streamed copies too) while the completed segment waits
/// in the spool; back again, the second catches up, its streamed copy goes, and the spool empties.
#[test]
fn a_receiver_stores_into_every_repository_and_catches_up_one_that_was_away() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let second = base.path().join("repo2");
    pg_dir(&second);
    let r2 = second.to_str().unwrap();
    ok(run(sheaf().args(["init", "--repo", r2, &c.url("postgres")])), "init the second");
    let away = base.path().join("away");
    std::fs::rename(&second, &away).unwrap();
    let spool = base.path().join("spool");
    pg_dir(&spool);
    let url = format!("{}&application_name=sheaf_rx", c.url("postgres"));
    let mut rx = Receiver::start_into(&url, &[r, r2], &spool);
    wait_streaming(&c);
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 1000) g");
    let segment = archive_now(&c);
    // The first has it (from wal-push or the receiver); the receiver keeps it until the second does.
    let waiting = |name: &str| walk(&spool).iter().any(|p| p.file_name().is_some_and(|f| f == name));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !waiting(&segment) {
        assert!(Instant::now() < deadline, "{segment} is not in the spool: {:?}", walk(&spool));
        std::thread::sleep(Duration::from_millis(200));
    }
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 1000) g");
    let deadline = Instant::now() + Duration::from_secs(60);
    while wal_objects(&repo, ".streaming").is_empty() {
        assert!(Instant::now() < deadline, "the first does not get the segment being received: {:?}", wal_objects(&repo, ""));
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(2500));
    assert!(waiting(&segment), "{segment} left the spool while the second repository was away");
    assert!(wal_objects(&repo, ".wal").contains(&format!("{segment}.wal")));

    // Back again: the second gets the segment, and the spool lets it go.
    std::fs::rename(&away, &second).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while waiting(&segment) || !wal_objects(&second, ".wal").contains(&format!("{segment}.wal")) {
        assert!(Instant::now() < deadline, "{segment} did not reach the second repository: {:?}", wal_objects(&second, ""));
        std::thread::sleep(Duration::from_millis(200));
    }
    let report = json(ok(rx.stop(), "wal-receive"));
    assert!(report["segments"].as_array().unwrap().iter().any(|s| s == &serde_json::json!(segment)), "{report}");
    assert_eq!(wal_objects(&second, ".streaming").len(), 1, "the segment being received is in the second too when the receiver stops");
    // The second alone recovers what the receiver stored, as fetched by wal-fetch.
    let o = run(sheaf().args(["wal-fetch", &segment, base.path().join("fetched").to_str().unwrap(), "--repo", r2]));
    ok(o, "wal-fetch from the second");

    // A repository of another cluster beside them is refused, naming it.
    let other = Cluster::new(&[], &[]);
    let foreign = base.path().join("foreign");
    pg_dir(&foreign);
    let f = foreign.to_str().unwrap();
    ok(run(sheaf().args(["init", "--repo", f, &other.url("postgres")])), "init another cluster's");
    let o = run(sheaf().args(["wal-receive", &url, "--repo", r, "--repo", f, "--spool", base.path().join("spool2").to_str().unwrap()]));
    assert_fails(&o, 2, &["holds cluster", f]);
}
