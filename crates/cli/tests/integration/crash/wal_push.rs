//! Workload 1: `wal-push` of a stream of segments, as PostgreSQL's archiver calls it (one call at
//! a time, `.ready` files for the segments behind), plain, with look-ahead (`--parallel 4`),
//! encrypted by a key file and by a passphrase, cut at random: on the power-loss file system (the
//! power cut), into a MinIO bucket (sheaf SIGKILLed), and into a repository a backup host's agent
//! serves from the power-loss file system (the backup host's power cut: the agent SIGKILLed and
//! started again). Every segment whose push exited 0 before a cut must come back from `wal-fetch`
//! byte for byte; the push a cut interrupted must succeed when the archiver retries.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sheaf_crashfs::CutReport;

use super::{points, wait_until, CutNow, Report, Rig, Rng};
use crate::integration::common::{run, s, sheaf_with_catalog, stderr};
use crate::integration::postgres::cluster::{server_tempdir, Cluster};

/// Segments in one stream (1 MiB each).
const SEGMENTS: usize = 24;

/// Real WAL: a cluster with 1 MiB segments, written to and switched, archived by `cp`.
fn segments(stage: &Path) -> (Cluster, Vec<String>) {
    // Copied under another name and renamed: a segment's name appears only once it is whole (the
    // loop below once took a segment cp had created but not yet written, and pushed 0 bytes).
    let cmd = format!("archive_command = 'cp %p {0}/%f.part && mv {0}/%f.part {0}/%f'", stage.display());
    let c = Cluster::new(&["--wal-segsize=1"], &["archive_mode = on", cmd.as_str(), "archive_timeout = 0"]);
    c.sql("postgres", "CREATE TABLE t (id int, pad text)");
    for i in 0..SEGMENTS {
        c.sql("postgres", &format!("INSERT INTO t SELECT g, md5(g::text) FROM generate_series({}, {}) g; SELECT pg_switch_wal()", i * 6000, i * 6000 + 5999));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut names: Vec<String> = std::fs::read_dir(stage).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.len() == 24).collect();
        names.sort();
        if names.len() >= SEGMENTS {
            names.truncate(SEGMENTS);
            return (c, names);
        }
        assert!(Instant::now() < deadline, "the archiver copied {} of {SEGMENTS} segments", names.len());
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Stream {
    pg_wal: PathBuf,
    names: Vec<String>,
    /// `--repo`'s value and the spool, fresh for each stream.
    repo: String,
    spool: PathBuf,
    catalog: PathBuf,
    key: PathBuf,
    /// The store's settings (a bucket's endpoint and credentials).
    env: Vec<(String, String)>,
}

impl Stream {
    fn sheaf(&self) -> Command {
        let mut c = sheaf_with_catalog(&self.catalog);
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// The archiver's view: every segment not yet archived is `.ready`.
    fn mark(&self, done: usize) {
        let status = self.pg_wal.join("archive_status");
        let _ = std::fs::remove_dir_all(&status);
        std::fs::create_dir(&status).unwrap();
        for (i, n) in self.names.iter().enumerate() {
            std::fs::write(status.join(format!("{n}.{}", if i < done { "done" } else { "ready" })), b"").unwrap();
        }
    }

    fn push(&self, i: usize, args: &[&str]) -> std::process::Child {
        let seg = self.pg_wal.join(&self.names[i]);
        self.sheaf()
            .args(["wal-push", s(&seg), "--repo", &self.repo, "--spool", s(&self.spool)])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Whether the repository gives back segment `i` as it was: None when it does, else why not.
    fn fetch(&self, i: usize, args: &[&str], scratch: &Path) -> Option<String> {
        let dest = scratch.join("fetched");
        let _ = std::fs::remove_file(&dest);
        let o = run(self.sheaf().args(["wal-fetch", &self.names[i], s(&dest), "--repo", &self.repo]).args(args));
        if !o.status.success() {
            return Some(format!("{}: wal-fetch exited {:?}: {}", self.names[i], o.status.code(), stderr(&o).trim()));
        }
        let (got, want) = (std::fs::read(&dest).unwrap(), std::fs::read(self.pg_wal.join(&self.names[i])).unwrap());
        (got != want).then(|| format!("{}: wal-fetch gave {} bytes that differ from the {} pushed", self.names[i], got.len(), want.len()))
    }
}

/// The repository, the spool and the catalog on the power-loss file system.
#[test]
fn acknowledged_segments_survive_power_cuts() {
    let Some(mut rig) = Rig::new() else { return };
    let root = rig.root().to_path_buf();
    let scratch = rig.dir.path().to_path_buf();
    let (repo, spool, catalog) = (root.join("repo"), root.join("spool"), root.join("catalog.db"));
    let rig = std::cell::RefCell::new(&mut rig);
    workload(
        &mut Report::new("wal-push"),
        300,
        &scratch,
        catalog,
        Vec::new(),
        &mut |_| {
            rig.borrow_mut().wipe();
            (s(&repo).to_string(), spool.clone())
        },
        &mut |rng, child| rig.borrow_mut().cut(rng, child),
    );
}

/// A bucket of a local MinIO, durable itself: wal-push is killed (SIGKILL) at random points.
#[test]
fn acknowledged_segments_survive_kills_on_minio() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().to_path_buf();
    let (_minio, env) = super::minio(&scratch);
    workload(
        &mut Report::new("wal-push on MinIO, killed"),
        1500,
        &scratch,
        scratch.join("catalog.db"),
        env,
        &mut |cycle| (format!("s3://crash/stream{cycle}"), scratch.join(format!("spool{cycle}"))),
        &mut |_, child| {
            let status = child.map(|mut c| {
                let _ = c.kill();
                c.wait().unwrap()
            });
            (CutReport::default(), status)
        },
    );
}

/// A backup host's repository (issue 53): `sheaf agent --serve-repo crash=FOLDER` with FOLDER on
/// the power-loss file system; each cut takes the power and the agent (SIGKILL), which is started
/// again on the same port. wal-push runs on the "database host" (its spool and catalog on a disk
/// that keeps power) and reaches the repository as `sheaf://127.0.0.1:PORT/crash`: a segment is
/// acknowledged only once the agent answered its publish, after syncing it.
#[test]
fn acknowledged_segments_survive_the_backup_host_losing_power() {
    let Some(mut rig) = Rig::new() else { return };
    let folder = rig.root().join("repo");
    let scratch = rig.dir.path().to_path_buf();
    let catalog = scratch.join("catalog.db");
    let tls = scratch.join("tls");
    let ok = |o: std::process::Output, what: &str| assert!(o.status.success(), "{what}: {}", stderr(&o));
    ok(run(sheaf_with_catalog(&catalog).args(["agent", "--init-certs", s(&tls)])), "--init-certs");
    ok(run(sheaf_with_catalog(&catalog).args(["agent", "--init-certs", s(&tls), "--add-client", "db-host", "--grant", "crash"])), "--add-client");
    // The backup host's repository folder, made durably (by its administrator, long before).
    let make = |folder: &Path| {
        std::fs::create_dir(folder).unwrap();
        std::fs::File::open(folder.parent().unwrap()).unwrap().sync_all().unwrap();
    };
    make(&folder);
    let mut agent =
        Agent { child: None, port: sheaf_core::testing::free_port(), folder: folder.clone(), tls: tls.clone(), log: scratch.join("agent.log"), catalog: catalog.clone() };
    agent.start();
    let repo = format!("sheaf://127.0.0.1:{}/crash", agent.port);
    let env = vec![("SHEAF_TLS_DIR".to_string(), s(&tls.join("clients/db-host")).to_string())];
    let (rig, agent) = (std::cell::RefCell::new(&mut rig), std::cell::RefCell::new(agent));
    workload(
        &mut Report::new("wal-push to a backup host's agent, its power cut"),
        400,
        &scratch,
        catalog.clone(),
        env,
        &mut |cycle| {
            rig.borrow_mut().wipe();
            make(&folder);
            (repo.clone(), scratch.join(format!("spool{cycle}")))
        },
        &mut |rng, child| {
            let mut rig = rig.borrow_mut();
            let r = rig.power_off(rng);
            agent.borrow_mut().kill();
            let status = child.map(|mut c| {
                let _ = c.kill();
                c.wait().unwrap()
            });
            rig.power_on();
            agent.borrow_mut().start();
            (r, status)
        },
    );
}

/// The backup host's agent, started (again) on one port.
struct Agent {
    child: Option<std::process::Child>,
    port: u16,
    folder: PathBuf,
    tls: PathBuf,
    log: PathBuf,
    catalog: PathBuf,
}

impl Agent {
    fn start(&mut self) {
        for _ in 0..50 {
            let mut cmd = sheaf_with_catalog(&self.catalog);
            cmd.args(["agent", "--listen", &format!("127.0.0.1:{}", self.port), "--serve-repo", &format!("crash={}", s(&self.folder)), "--tls-dir", s(&self.tls)]);
            let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
            cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log);
            if let Some(c) = sheaf_core::testing::start_until(cmd, "sheaf agent --serve-repo", || sheaf_core::testing::listening(self.port)) {
                self.child = Some(c);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the agent did not start again on port {}: {}", self.port, std::fs::read_to_string(&self.log).unwrap_or_default());
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fresh repository and spool for stream `cycle`.
type Fresh<'a> = dyn FnMut(usize) -> (String, PathBuf) + 'a;

/// Streams of segments pushed and cut (`cut_now`), checked after each cut.
/// A cut comes up to `span_ms` after a round starts (a push to a bucket takes longer than one to
/// a folder).
fn workload(report: &mut Report, span_ms: u64, scratch: &Path, catalog: PathBuf, env: Vec<(String, String)>, fresh: &mut Fresh, cut_now: &mut CutNow) {
    let mut rng = Rng::new(&report.workload);
    let stage = server_tempdir("sheaf-crash-wal");
    let (c, names) = segments(stage.path());
    let pg_wal = scratch.join("pg_wal");
    std::fs::create_dir(&pg_wal).unwrap();
    for n in &names {
        std::fs::copy(stage.path().join(n), pg_wal.join(n)).unwrap();
    }
    let key = scratch.join("key");
    std::fs::write(&key, [0x5au8; 32]).unwrap();
    let mut st = Stream { pg_wal, names, repo: String::new(), spool: PathBuf::new(), catalog, key, env };
    let key_path = st.key.clone();
    let key_args = ["--encryption-key-file", s(&key_path)];
    // A passphrase goes through Argon2id in every push: a slower push, the same promise.
    let pass_path = scratch.join("passphrase");
    std::fs::write(&pass_path, "crash test passphrase\n").unwrap();
    let pass_args = ["--passphrase-file", s(&pass_path)];
    let variants: [(&str, Vec<&str>, &[&str]); 4] = [
        ("plain", vec!["--parallel", "1"], &[]),
        ("look-ahead", vec!["--parallel", "4"], &[]),
        ("encrypted", vec!["--parallel", "4", key_args[0], key_args[1]], &key_args),
        ("passphrase", vec!["--parallel", "4", pass_args[0], pass_args[1]], &pass_args),
    ];
    let total = points();
    let mut cycle = 0;
    while report.points < total {
        let (variant, push_args, key) = &variants[cycle % variants.len()];
        (st.repo, st.spool) = fresh(cycle);
        cycle += 1;
        let init = run(st.sheaf().args(["init", "--repo", &st.repo, &c.url("postgres")]).args(*key));
        assert!(init.status.success(), "init: {}", stderr(&init));
        st.mark(0);
        let mut next = 0;
        let mut checked = 0;
        while next < SEGMENTS && report.points < total {
            // One round: pushes one after another until the power is cut.
            let deadline = Instant::now() + Duration::from_millis(rng.below(span_ms));
            let mut mid = false;
            let mut cut = None;
            while next < SEGMENTS && Instant::now() < deadline {
                match wait_until(st.push(next, push_args), deadline) {
                    Ok((status, _)) if status.success() => {
                        report.acknowledged += 1;
                        next += 1;
                        st.mark(next);
                    }
                    Ok((status, err)) => {
                        report.repairs.push(format!("{variant}: wal-push of {} exited {:?} with no cut: {}", st.names[next], status.code(), err.trim()));
                        break;
                    }
                    Err(child) => {
                        let (r, status) = cut_now(&mut rng, Some(child));
                        if status.is_some_and(|s| s.success()) {
                            report.acknowledged += 1;
                            next += 1;
                            st.mark(next);
                        }
                        (mid, cut) = (true, Some(r));
                    }
                }
            }
            if !report.repairs.is_empty() {
                break;
            }
            let r = cut.unwrap_or_else(|| cut_now(&mut rng, None).0);
            report.cut(r, mid);
            // What was acknowledged since the last check must be there, byte for byte.
            for i in checked..next {
                if let Some(why) = st.fetch(i, key, scratch) {
                    report.lost.push(format!("{variant}: {why}"));
                }
            }
            checked = next;
        }
        if !report.repairs.is_empty() || !report.lost.is_empty() {
            break;
        }
        // The whole stream at the end of a cycle, and the repository verifies.
        for i in 0..next {
            if let Some(why) = st.fetch(i, key, scratch) {
                report.lost.push(format!("{variant} (end of stream): {why}"));
            }
        }
        let v = run(st.sheaf().args(["verify", "--repo", &st.repo, "--full"]).args(*key));
        if !v.status.success() {
            report.repairs.push(format!("{variant}: verify --repo exited {:?}: {}", v.status.code(), stderr(&v).trim()));
        }
    }
    report.finish();
}
