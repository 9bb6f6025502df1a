//! Workload 4: `wal-receive` as the synchronous standby, its spool, the repository and the
//! catalog on the power-loss file system. Commits return only once the receiver reported them
//! flushed; the power is cut at a random moment (the server and the receiver die with it, and the
//! server is then taken as lost); the receiver is started again with no server to reach, and a
//! restore from the repository to its end must hold every commit that returned.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sheaf_crashfs::CutReport;

use super::{points_or, Report, Rig, Rng};
use crate::integration::common::{run, s, wait_for, SHEAF};
use crate::integration::postgres::cluster::{pg_dir, server_tempdir, Cluster};
use crate::integration::postgres::receive::kill_server;
use crate::integration::postgres::repo::{ok, start_restored};

/// Where the repository, the spool and the catalog are, and how sheaf reaches them.
struct Place {
    repo: String,
    spool: PathBuf,
    catalog: PathBuf,
    env: Vec<(String, String)>,
}

impl Place {
    /// `sheaf` as the cluster's user, with the place's catalog and environment.
    fn sheaf(&self) -> std::process::Command {
        let mut c = crate::integration::postgres::sheaf();
        c.env("SHEAF_CATALOG", &self.catalog).envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// `env K=V ... ` for the commands the server runs.
    fn env_prefix(&self) -> String {
        self.env.iter().map(|(k, v)| format!("{k}={v} ")).collect()
    }

    fn receiver(&self, url: &str) -> Child {
        self.receiver_with(url, Stdio::null())
    }

    fn receiver_with(&self, url: &str, stderr: impl Into<Stdio>) -> Child {
        self.sheaf()
            .args(["wal-receive", url, "--repo", &self.repo, "--spool", s(&self.spool), "--partial-every", "1", "--retry-every", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap()
    }
}

fn wait_sync(c: &Cluster) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.query("postgres", "SELECT coalesce(string_agg(sync_state, ','), '') FROM pg_stat_replication WHERE application_name = 'sheaf_rx'").ok().as_deref() != Some("sync") {
        assert!(Instant::now() < deadline, "the receiver is not the synchronous standby: {}", std::fs::read_to_string(c.log()).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn every_commit_that_returned_survives_a_power_cut() {
    let Some(mut rig) = Rig::new() else { return };
    let root = rig.root().to_path_buf();
    let (repo, spool, cat) = (root.join("repo"), root.join("spool"), root.join("catalog"));
    for d in [&repo, &spool, &cat] {
        pg_dir(d);
    }
    std::fs::File::open(&root).unwrap().sync_all().unwrap();
    let place = Place { repo: s(&repo).to_string(), spool, catalog: cat.join("catalog.db"), env: Vec::new() };
    let rig = std::cell::RefCell::new(&mut rig);
    workload(&place, &mut Report::new("wal-receive (synchronous standby)"), &mut |rng| rig.borrow_mut().power_off(rng), &mut || rig.borrow_mut().power_on());
}

/// The repository in a bucket of a local MinIO (durable itself), the spool and the catalog on
/// this host's disk: the server and the receiver are SIGKILLed together instead.
#[test]
fn every_commit_that_returned_survives_kills_on_minio() {
    let dir = server_tempdir("sheaf-crash-rx-minio");
    let (_minio, env) = super::minio(dir.path());
    let spool = dir.path().join("spool");
    pg_dir(&spool);
    let place = Place { repo: "s3://crash/cluster".into(), spool, catalog: dir.path().join("catalog.db"), env };
    workload(&place, &mut Report::new("wal-receive (synchronous standby) on MinIO, killed"), &mut |_| CutReport::default(), &mut || {});
}

/// Rounds of commits ended by `off` (the power, or nothing) with the server and the receiver
/// killed, `on` after; then the checks.
fn workload(place: &Place, report: &mut Report, off: &mut dyn FnMut(&mut Rng) -> CutReport, on: &mut dyn FnMut()) {
    let mut rng = Rng::new(&report.workload);
    let catalog = &place.catalog;
    let archive = format!("archive_command = 'env {}SHEAF_CATALOG={} {SHEAF} wal-push %p --repo {}'", place.env_prefix(), catalog.display(), place.repo);
    let mut c = Cluster::new(&["--wal-segsize=1"], &["archive_mode = on", archive.as_str(), "archive_timeout = 0"]);
    ok(run(place.sheaf().args(["init", "--repo", &place.repo, &c.url("postgres")])), "init");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t (id int PRIMARY KEY)");
    ok(run(place.sheaf().args(["backup", &c.url("postgres"), "--repo", &place.repo])), "backup");
    let url = format!("{}&application_name=sheaf_rx", c.url("postgres"));
    let gone = "postgres://127.0.0.1:1/postgres?application_name=sheaf_rx&connect_timeout=1";
    let returned = Arc::new(Mutex::new(BTreeSet::new()));
    let mut next_id = 0u64;
    let restores = server_tempdir("sheaf-crash-rx");
    for point in 0..points_or(4) {
        let mut rx = place.receiver(&url);
        if point == 0 {
            c.sql("postgres", "ALTER SYSTEM SET synchronous_standby_names = 'sheaf_rx'");
            c.sql("postgres", "SELECT pg_reload_conf()");
        }
        wait_sync(&c);
        // Commits, one row each, from another thread until the power goes.
        let ids = Arc::clone(&returned);
        let cluster = &c;
        let first = next_id;
        let cut = std::thread::scope(|sc| {
            let committer = sc.spawn(move || {
                let mut id = first;
                while cluster.query("app", &format!("INSERT INTO t VALUES ({id})")).is_ok() {
                    ids.lock().unwrap().insert(id);
                    id += 1;
                }
                id
            });
            std::thread::sleep(Duration::from_millis(200 + rng.below(1500)));
            let r = off(&mut rng);
            kill_server(cluster);
            let _ = rx.kill();
            let _ = rx.wait();
            on();
            next_id = committer.join().unwrap() + 1;
            r
        });
        report.cut(cut, true);
        // The server is lost. Every other round the receiver is started again, with only its
        // spool, and hands it over; in the others it is not, and the restore's wal-fetch, on the
        // receiver's host with its spool setting, finds the segment there.
        let via_fetch = point % 2 == 1;
        if !via_fetch {
            // It hands its spool over before it first connects, and says so when that connection
            // fails ("connecting again").
            let log = restores.path().join(format!("rx{point}.log"));
            let mut again = place.receiver_with(gone, std::fs::File::create(&log).unwrap());
            wait_for("the receiver to hand its spool over", Duration::from_secs(60), || std::fs::read_to_string(&log).unwrap_or_default().contains("connecting again"));
            let _ = std::process::Command::new("kill").args(["-TERM", &again.id().to_string()]).status();
            let _ = again.wait();
        }
        // A restore from the repository to its end holds every commit that returned.
        let dir = restores.path().join(format!("r{point}"));
        let o = run(place.sheaf().args(["restore", "--repo", &place.repo, "--to", s(&dir)]));
        if !o.status.success() {
            report.repairs.push(format!("point {point}: restore failed: {}", String::from_utf8_lossy(&o.stderr).trim()));
            break;
        }
        // The server's restore_command reaches the store with the same settings, and in the
        // rounds that read the receiver's spool, names it.
        let auto = dir.join("postgresql.auto.conf");
        let mut text = std::fs::read_to_string(&auto).unwrap();
        assert!(text.contains("wal-fetch %f %p"), "{text}");
        if via_fetch {
            text = text.replace("wal-fetch %f %p", &format!("wal-fetch %f %p --spool {}", place.spool.display()));
        }
        std::fs::write(&auto, text.replace("restore_command = '", &format!("restore_command = 'env {}", place.env_prefix()))).unwrap();
        let r = start_restored(&dir, false);
        if via_fetch {
            let log = std::fs::read_to_string(r.log()).unwrap_or_default();
            assert!(log.contains("from the receiver's spool"), "wal-fetch did not read the receiver's spool: {log}");
        }
        let have: BTreeSet<u64> = r.sql("app", "SELECT coalesce(string_agg(id::text, ','), '') FROM t").split(',').filter(|v| !v.is_empty()).map(|v| v.parse().unwrap()).collect();
        drop(r);
        let _ = std::fs::remove_dir_all(&dir);
        let want = returned.lock().unwrap().clone();
        report.acknowledged = want.len();
        let missing: Vec<u64> = want.difference(&have).copied().collect();
        if !missing.is_empty() {
            report.lost.push(format!("point {point}: {} of {} returned commits missing after restore (ids {:?}...)", missing.len(), want.len(), &missing[..missing.len().min(5)]));
            break;
        }
        // The server comes back for the next round (crash recovery from its own disk).
        c.start();
    }
    report.finish();
}
