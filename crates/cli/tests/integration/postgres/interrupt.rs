//! One interrupt policy for every command (issue 50): each long-running command, sent SIGINT and
//! SIGTERM by this test (a parent that does not ignore them) at a moment it holds something,
//! stops what it started, removes what it wrote half, and exits 128 + the signal. Backup, restore,
//! drill and consolidate here; the demo and the bench in `demo.rs` and `bench.rs`.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::cluster::assert_no_server_on;
use super::repo::{json, ok, setup};
use super::sheaf;
use crate::integration::common::{names, run};

/// Each signal and the status it leaves.
pub(crate) const SIGNALS: [(Signal, i32); 2] = [(Signal::INT, 130), (Signal::TERM, 143)];

/// Send `signal` to `child` once `holds` says it holds something (within two minutes, while it
/// still runs), and wait for its status.
pub(crate) fn interrupt_when(mut child: Child, signal: Signal, what: &str, holds: impl Fn() -> bool) -> i32 {
    let t0 = Instant::now();
    while !holds() {
        assert!(child.try_wait().unwrap().is_none(), "{what} ended before it could be interrupted: make it slower");
        assert!(t0.elapsed() < Duration::from_secs(120), "{what} never got to hold anything");
        std::thread::sleep(Duration::from_millis(10));
    }
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), signal).unwrap();
    let status = child.wait().unwrap();
    status.code().unwrap_or_else(|| panic!("{what} was killed by the signal instead of handling it: {status:?}"))
}

/// Whether any file under `dir` holds bytes.
fn holds_bytes(dir: &Path) -> bool {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => todo.push(e.path()),
                Ok(m) if m.len() > 0 => return true,
                _ => {}
            }
        }
    }
    false
}

fn spawn(args: &[&str]) -> Child {
    sheaf().args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// What the repository holds besides WAL (backups, locks, drills): what an interrupted command
/// must leave as it found it.
fn repo_state(repo: &Path) -> Vec<String> {
    names(repo).into_iter().filter(|n| !n.starts_with("wal")).collect()
}

#[test]
fn backup_restore_drill_and_consolidate_interrupted_leave_nothing_behind() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let url = c.url("postgres");
    // Enough pages that a throttled read or a strong codec takes seconds.
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 800000) g");
    let full = json(ok(run(sheaf().args(["backup", &url, "--repo", r, "--json"])), "full backup"))["postgres"]["repository_id"].as_str().unwrap().to_string();
    c.sql("app", "UPDATE t SET batch = 2 WHERE id % 50 = 0");
    let incr = json(ok(run(sheaf().args(["backup", &url, "--repo", r, "--type", "incr", "--json"])), "incremental"))["postgres"]["repository_id"].as_str().unwrap().to_string();
    let before = repo_state(&repo);
    assert!(before.iter().any(|n| n.contains(&full)) && before.iter().any(|n| n.contains(&incr)), "{before:?}");
    // A check that holds the drill's server for a minute.
    let slow = base.path().join("slow.sql");
    std::fs::write(&slow, "SELECT true FROM pg_sleep(60);\n").unwrap();
    super::cluster::give_to_server(&slow);

    for (signal, code) in SIGNALS {
        // backup: interrupted while its stripe is being written and the server holds its slot.
        // (Without --no-resume, what it stored stays for the next to go on from: resume.rs.)
        let child = spawn(&["backup", &url, "--repo", r, "--max-rate", "2MiB", "--no-resume"]);
        let status = interrupt_when(child, signal, "backup", || {
            let partial = names(&repo.join("backups")).into_iter().any(|n| n.ends_with(".partial"));
            partial && c.sql("postgres", "SELECT count(*) FROM pg_replication_slots") == "1"
        });
        assert_eq!(status, code, "backup after {signal:?}");
        assert_eq!(repo_state(&repo), before, "backup after {signal:?}: no stripe, lock or record left");
        assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0", "its slot is gone");
        // The server's backup ended with the session: a new one starts at once.
        let again = json(ok(run(sheaf().args(["backup", &url, "--to", "nul", "--json"])), "a backup after the interrupted one"));
        assert!(again["bytes_read"].as_u64().unwrap() > 0, "{again}");

        // restore: interrupted while it writes the data directory.
        let target = base.path().join(format!("restored-{code}"));
        let t = target.to_str().unwrap();
        let child = spawn(&["restore", "--repo", r, "--set", &full, "--to", t, "--max-rate", "2MiB"]);
        let status = interrupt_when(child, signal, "restore", || holds_bytes(&target));
        assert_eq!(status, code, "restore after {signal:?}");
        assert_eq!(names(&target), Vec::<String>::new(), "restore after {signal:?}: what it wrote is removed");

        // drill: interrupted while its server runs a check.
        let work = base.path().join(format!("drill-{code}"));
        let w = work.to_str().unwrap();
        let child = spawn(&["drill", "--repo", r, "--set", &full, "--to", w, "--check-sql", slow.to_str().unwrap()]);
        let data: PathBuf = work.join("data");
        let status = interrupt_when(child, signal, "drill", || data.join("postmaster.pid").exists() && names(&work).iter().any(|n| n.ends_with("pg_hba.conf")));
        assert_eq!(status, code, "drill after {signal:?}");
        assert!(
            !work.exists(),
            "drill after {signal:?}: its folder is removed, yet it holds {} entries: {:?}",
            names(&work).len(),
            names(&work).iter().take(5).collect::<Vec<_>>()
        );
        assert_no_server_on(&data);
        assert_eq!(repo_state(&repo), before, "drill after {signal:?}: an interrupted drill is not recorded, neither passed nor failed");

        // consolidate: interrupted while it writes the new full backup (a strong codec, slow).
        let child = spawn(&["consolidate", "--repo", r, "--set", &incr, "-c", "zstd:19"]);
        let status = interrupt_when(child, signal, "consolidate", || names(&repo.join("backups")).iter().any(|n| n.ends_with("-full.lock")));
        assert_eq!(status, code, "consolidate after {signal:?}");
        assert_eq!(repo_state(&repo), before, "consolidate after {signal:?}: no stripe, lock or record left");
    }
    // Whatever was interrupted, the repository still restores, and a drill passes.
    let d = json(ok(run(sheaf().args(["drill", "--repo", r, "--json"])), "drill"));
    assert_eq!(d["passed"], true, "{d}");
}
