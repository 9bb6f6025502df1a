//! A repository on a real cluster: WAL archived by `sheaf wal-push`, backups into it, and
//! point-in-time recovery to a time, a restore point, an LSN and the end, each restored cluster
//! started and holding exactly the rows committed before its target.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{pg_dir, Cluster};
use super::sheaf;
use crate::integration::common::{assert_fails, run, stderr, SHEAF};
use sheaf_pg::repo::paths;

pub(crate) fn ok(o: Output, what: &str) -> String {
    assert!(o.status.success(), "{what}: {}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A cluster archiving into `repo` with `sheaf wal-push`.
pub(super) fn archiving(repo: &Path, extra: &[&str]) -> Cluster {
    archiving_with(repo, &[], extra)
}

/// [`archiving`] with arguments for initdb.
pub(super) fn archiving_with(repo: &Path, initdb: &[&str], extra: &[&str]) -> Cluster {
    let cmd = format!("archive_command = '{} wal-push %p --repo {}'", SHEAF, repo.display());
    let mut settings = vec!["archive_mode = on", cmd.as_str(), "archive_timeout = 0"];
    settings.extend_from_slice(extra);
    Cluster::new(initdb, &settings)
}

pub(super) fn repo_dir() -> (tempfile::TempDir, PathBuf) {
    let d = super::cluster::server_tempdir("sheaf-repo.");
    let repo = d.path().join("repo");
    pg_dir(&repo);
    (d, repo)
}

/// Switch to a new segment and wait until the archiver has pushed the one just finished. A WAL
/// record is written first: with nothing written since the last switch (a backup's stop has just
/// switched), pg_switch_wal does nothing and names a segment that never finishes (PostgreSQL 18
/// writes too little WAL in the background to hide that).
pub(super) fn archive_now(c: &Cluster) -> String {
    c.sql("postgres", "SELECT pg_logical_emit_message(false, 'sheaf-test', 'switch')");
    let seg = c.sql("postgres", "SELECT pg_walfile_name(pg_switch_wal())");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (last, failed) = {
            let r = c.sql("postgres", "SELECT coalesce(last_archived_wal, ''), coalesce(last_failed_wal, '') FROM pg_stat_archiver");
            let mut p = r.split('|').map(str::to_string);
            (p.next().unwrap_or_default(), p.next().unwrap_or_default())
        };
        if !last.is_empty() && last >= seg {
            return seg;
        }
        assert!(Instant::now() < deadline, "{seg} not archived in 60 s (last {last}, failed {failed}); server log: {}", std::fs::read_to_string(c.log()).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn utc_now(c: &Cluster) -> String {
    c.sql("postgres", "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS') || 'Z'")
}

/// Restore from the repository into `dir` with `args`, start it with archiving off (an inspection
/// copy), wait for recovery to end, and return it.
pub(super) fn recover(repo: &Path, dir: &Path, args: &[&str]) -> Cluster {
    recover_with(repo, dir, args, false)
}

/// As [`recover`]; with `archive`, the restored cluster keeps archiving into the repository (its
/// new timeline's history and WAL go there).
pub(super) fn recover_with(repo: &Path, dir: &Path, args: &[&str], archive: bool) -> Cluster {
    let mut cmd = sheaf();
    cmd.args(["restore", "--repo", repo.to_str().unwrap(), "--to", dir.to_str().unwrap()]).args(args);
    ok(run(&mut cmd), &format!("restore {args:?}"));
    start_restored(dir, archive)
}

/// Start the cluster restored into `dir` (archiving off unless `archive`) and wait until recovery
/// has ended; the restore must have written restore_command and recovery.signal.
pub(crate) fn start_restored(dir: &Path, archive: bool) -> Cluster {
    let auto = std::fs::read_to_string(dir.join("postgresql.auto.conf")).unwrap();
    assert!(auto.contains("restore_command = ") && auto.contains("wal-fetch %f %p"), "{auto}");
    assert!(dir.join("recovery.signal").exists());
    if !archive {
        std::fs::OpenOptions::new().append(true).open(dir.join("postgresql.auto.conf")).and_then(|mut f| std::io::Write::write_all(&mut f, b"archive_mode = off\n")).unwrap();
    }
    let sock = dir.parent().unwrap().join(format!("sock-{}", dir.file_name().unwrap().to_str().unwrap()));
    pg_dir(&sock);
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let r = Cluster::over(dir, &sock);
    let deadline = Instant::now() + Duration::from_secs(120);
    while r.query("postgres", "SELECT pg_is_in_recovery()").ok().as_deref() != Some("f") {
        assert!(Instant::now() < deadline, "recovery did not end: {}", std::fs::read_to_string(r.log()).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(200));
    }
    // wal-fetch prefetched (the default) and its background prefetcher met no error (in pg_wal
    // unless restore_command names another spool).
    let spools: Vec<PathBuf> = std::fs::read_dir(dir.join("pg_wal/.sheaf")).map(|d| d.map(|e| e.unwrap().path()).collect()).unwrap_or_default();
    assert!(!spools.is_empty() || auto.contains("--spool"), "no prefetch spool in {}", dir.display());
    for s in spools {
        let log = std::fs::read_to_string(s.join("prefetch.log")).unwrap_or_default();
        assert!(log.is_empty(), "prefetcher errors: {log}");
    }
    r
}

/// A directory repository, a cluster archiving into it, `init` done, and database `app` with table
/// `t (id, batch, at)`.
pub(super) fn setup() -> (tempfile::TempDir, PathBuf, Cluster) {
    let (base, repo) = repo_dir();
    let c = archiving(&repo, &[]);
    let said = ok(run(sheaf().args(["init", "--repo", repo.to_str().unwrap(), &c.url("postgres")])), "init");
    // The command it suggests pastes into a shell as it reads (the URL's `?` and `&` quoted).
    let next = said.lines().find_map(|l| l.split_once(" then ")).map(|(_, cmd)| cmd).unwrap_or_else(|| panic!("init suggests the next command: {said}"));
    assert_eq!(shlex::split(next).unwrap(), ["sheaf", "backup", &c.url("postgres"), "--repo", repo.to_str().unwrap()], "{next}");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t (id int, batch int, at timestamptz DEFAULT clock_timestamp())");
    (base, repo, c)
}

/// Where a test's repository lives: a folder, or a bucket in MinIO, encrypted, reached through a
/// config file (repository, endpoint, passphrase file) with the credentials in the environment, as
/// a user sets it up. Commands from [`TestRepo::sheaf`] and the server's archive and restore
/// commands find it either way.
pub(super) struct TestRepo {
    /// `--repo`'s value: a path or `s3://BUCKET/PREFIX`.
    pub(super) arg: String,
    /// Environment for sheaf and for the server's commands.
    env: Vec<(String, String)>,
    _server: Option<Box<dyn std::any::Any>>,
}

impl TestRepo {
    /// A folder `repo` in `base`.
    pub(super) fn folder(base: &Path) -> TestRepo {
        let repo = base.join("repo");
        pg_dir(&repo);
        TestRepo::existing(&repo)
    }

    /// The folder repository at `repo`, made already.
    pub(super) fn existing(repo: &Path) -> TestRepo {
        TestRepo { arg: repo.display().to_string(), env: Vec::new(), _server: None }
    }

    /// An encrypted repository in a bucket of a MinIO of its own; its config and passphrase files
    /// in `base`, readable by the server's user.
    pub(super) fn encrypted_bucket(base: &Path) -> TestRepo {
        use std::os::unix::fs::PermissionsExt;
        let minio = sheaf_s3::testing::Minio::start();
        minio.create_bucket("chains");
        let pass = base.join("passphrase");
        std::fs::write(&pass, "incrementals under churn\n").unwrap();
        let config = base.join("sheaf.toml");
        let text = format!("repo = \"s3://chains/cluster\"\ns3-endpoint = \"{}\"\ns3-allow-http = true\npassphrase-file = \"{}\"\n", minio.endpoint(), pass.display());
        std::fs::write(&config, text).unwrap();
        for f in [&pass, &config] {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let mut env: Vec<(String, String)> = minio.env().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        env.push(("SHEAF_CONFIG".into(), config.display().to_string()));
        TestRepo { arg: "s3://chains/cluster".into(), env, _server: Some(Box::new(minio)) }
    }

    /// A repository (not made yet) in bucket `locked` of a MinIO of its own, created with S3 Object
    /// Lock, and beside it bucket `plain`, created without; the credentials in the environment.
    pub(super) fn locked_bucket() -> TestRepo {
        let minio = sheaf_s3::testing::Minio::start();
        minio.create_locked_bucket("locked");
        minio.create_bucket("plain");
        let env = minio.env().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        TestRepo { arg: "s3://locked/cluster".into(), env, _server: Some(Box::new(minio)) }
    }

    /// A repository in bucket `backups` of a fake-gcs-server of its own, reached through a
    /// service account key file in `base` (readable by the server's user) naming the emulator.
    pub(super) fn gcs_bucket(base: &Path) -> TestRepo {
        use std::os::unix::fs::PermissionsExt;
        let gcs = sheaf_s3::testing::FakeGcs::start_with("backups", "elsewhere/seed", b"not the repository's");
        let mut env: Vec<(String, String)> = Vec::new();
        for (k, v) in gcs.env_for(&gcs.endpoint()) {
            let key = base.join("gcs-key.json");
            std::fs::copy(&v, &key).unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
            env.push((k.to_string(), key.display().to_string()));
        }
        TestRepo { arg: "gs://backups/cluster".into(), env, _server: Some(Box::new(gcs)) }
    }

    /// The environment sheaf and the server's commands get.
    pub(super) fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// A repository in a container of an Azurite of its own, reached through the standard
    /// AZURE_* variables.
    pub(super) fn azure_container() -> TestRepo {
        let az = sheaf_s3::testing::Azurite::start();
        az.create_container("backups");
        let env = az.env_for(&az.endpoint()).into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        TestRepo { arg: "az://backups/cluster".into(), env, _server: Some(Box::new(az)) }
    }

    /// `sheaf` with the repository's environment.
    pub(super) fn sheaf(&self) -> std::process::Command {
        let mut c = sheaf();
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// `env K=V ... ` for a command the server runs (empty for a folder).
    fn env_prefix(&self) -> String {
        if self.env.is_empty() {
            return String::new();
        }
        let vars: Vec<String> =
            self.env.iter().filter(|(k, _)| ["AWS_", "AZURE_", "GOOGLE_", "SHEAF_"].iter().any(|p| k.starts_with(p))).map(|(k, v)| format!("{k}={v}")).collect();
        format!("env {} ", vars.join(" "))
    }

    /// A cluster archiving into the repository with `sheaf wal-push`, `init` done, and database
    /// `app` with table `t (id, batch, at)`.
    pub(super) fn cluster(&self) -> Cluster {
        self.cluster_init(&[])
    }

    /// [`TestRepo::cluster`], `init` given `init` besides.
    pub(super) fn cluster_init(&self, init: &[&str]) -> Cluster {
        let cmd = format!("archive_command = '{}{} wal-push %p --repo {}'", self.env_prefix(), SHEAF, self.arg);
        let c = Cluster::new(&[], &["archive_mode = on", cmd.as_str(), "archive_timeout = 0"]);
        ok(run(self.sheaf().args(["init", "--repo", &self.arg, &c.url("postgres")]).args(init)), "init");
        c.sql("postgres", "CREATE DATABASE app");
        c.sql("app", "CREATE TABLE t (id int, batch int, at timestamptz DEFAULT clock_timestamp())");
        c
    }

    /// Start what a restore from this repository wrote into `dir` (see [`start_restored`]), its
    /// restore_command given the repository's environment, as the server's would carry it.
    pub(super) fn start(&self, dir: &Path) -> Cluster {
        let auto_path = dir.join("postgresql.auto.conf");
        let auto = std::fs::read_to_string(&auto_path).unwrap();
        std::fs::write(&auto_path, auto.replace("restore_command = '", &format!("restore_command = '{}", self.env_prefix()))).unwrap();
        start_restored(dir, false)
    }

    /// [`recover`] from this repository.
    pub(super) fn recover(&self, dir: &Path, args: &[&str]) -> Cluster {
        ok(run(self.sheaf().args(["restore", "--repo", &self.arg, "--to", dir.to_str().unwrap()]).args(args)), &format!("restore {args:?}"));
        self.start(dir)
    }
}

fn batches(c: &Cluster) -> String {
    c.sql("app", "SELECT string_agg(b || ':' || n, ',' ORDER BY b) FROM (SELECT batch b, count(*) n FROM t GROUP BY batch) x")
}

pub(super) fn pgbench_invariant(c: &Cluster) -> (String, String) {
    let r = c.sql("app", "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT coalesce(sum(delta), 0) FROM pgbench_history)");
    let mut p = r.split('|').map(str::to_string);
    (p.next().unwrap(), p.next().unwrap())
}

#[test]
fn point_in_time_recovery_to_a_time_a_name_an_lsn_and_the_end() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let again = run(sheaf().args(["init", "--repo", r, &c.url("postgres")]));
    assert_eq!(again.status.code(), Some(5), "a second init is refused: {}", stderr(&again));
    ok(run(c.tool("pgbench").args(["-i", "-s", "1", "-q", "app"])), "pgbench -i");
    // A write load the whole time from the backup on.
    let mut load = c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-T", "600", "app"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let backup = ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--stripes", "2", "--json"])), "backup --repo");
    let report: serde_json::Value = serde_json::from_str(&backup).unwrap();
    let id = report["postgres"]["repository_id"].as_str().unwrap().to_string();

    let insert = |b: i32| c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {b} FROM generate_series(1, 100) g"));
    insert(1);
    std::thread::sleep(Duration::from_millis(300));
    let t1 = utc_now(&c);
    std::thread::sleep(Duration::from_millis(300));
    insert(2);
    c.sql("app", "SELECT pg_create_restore_point('after_two')");
    insert(3);
    let lsn3 = c.sql("app", "SELECT pg_current_wal_insert_lsn()");
    insert(4);
    // runuser's child outlives a kill of runuser: end the load from the server's side.
    let _ = load.kill();
    let _ = load.wait();
    c.sql("postgres", "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'pgbench'");
    std::thread::sleep(Duration::from_millis(300));
    let invariant = pgbench_invariant(&c);
    let last = archive_now(&c);

    // The repository says what it holds.
    let info: serde_json::Value = serde_json::from_str(&ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info")).unwrap();
    assert_eq!(info["backups"].as_array().unwrap().len(), 1, "{info}");
    assert_eq!(info["backups"][0]["id"], id.as_str());
    assert_eq!(info["gaps"].as_array().unwrap().len(), 0, "{info}");
    assert_eq!(info["wal"][0]["last"], last.as_str(), "{info}");
    let text = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(text.contains(&id) && text.contains("WAL timeline 1:"), "{text}");
    ok(run(sheaf().args(["verify", "--repo", r])), "verify --repo");

    let at = |n: &str| base.path().join(n);
    let r1 = recover(&repo, &at("by_time"), &["--target-time", &t1]);
    assert_eq!(batches(&r1), "1:100", "to the time");
    drop(r1);
    let r2 = recover(&repo, &at("by_name"), &["--target-name", "after_two"]);
    assert_eq!(batches(&r2), "1:100,2:100", "to the restore point");
    drop(r2);
    let r3 = recover(&repo, &at("by_lsn"), &["--target-lsn", &lsn3, "--set", &id]);
    assert_eq!(batches(&r3), "1:100,2:100,3:100", "to the LSN");
    drop(r3);
    let r4 = recover(&repo, &at("to_end"), &[]);
    assert_eq!(batches(&r4), "1:100,2:100,3:100,4:100", "to the end");
    assert_eq!(pgbench_invariant(&r4), invariant, "the pgbench balances agree with the source's");
    assert_eq!(r4.sql("app", "SELECT sum(abalance) = (SELECT sum(delta) FROM pgbench_history) FROM pgbench_accounts"), "t");
    drop(r4);

    // Targets the archive cannot reach are refused before a byte is written.
    let before = run(sheaf().args(["restore", "--repo", r, "--to", at("early").to_str().unwrap(), "--target-time", "2000-01-01 00:00:00Z"]));
    assert_eq!(before.status.code(), Some(2), "{}", stderr(&before));
    assert!(stderr(&before).contains("no backup is consistent before the target"), "{}", stderr(&before));
    let after = run(sheaf().args(["restore", "--repo", r, "--to", at("late").to_str().unwrap(), "--target-time", "2099-01-01 00:00:00Z"]));
    assert_eq!(after.status.code(), Some(2), "{}", stderr(&after));
    assert!(stderr(&after).contains("past the end of the archive") && stderr(&after).contains("pg_switch_wal"), "{}", stderr(&after));
    assert!(!at("early").exists() && !at("late").exists(), "nothing written for a refused target");
}

#[test]
fn wal_push_is_idempotent_refuses_conflicts_and_other_clusters() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    c.sql("postgres", "CREATE TABLE x AS SELECT g FROM generate_series(1, 1000) g");
    let seg = archive_now(&c);
    let wal = c.data.join("pg_wal").join(&seg);
    let copy = base.path().join(&seg);
    std::fs::copy(&wal, &copy).unwrap();
    super::cluster::give_to_server(&copy);

    // The same segment again: success, said so.
    let again = run(sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r]));
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(stderr(&again).contains("archived already with the same content"), "{}", stderr(&again));

    // Different content under its name: refused, the archived one untouched.
    let mut bytes = std::fs::read(&copy).unwrap();
    bytes[100_000] ^= 0xFF;
    std::fs::write(&copy, &bytes).unwrap();
    let conflict = run(sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r]));
    assert_eq!(conflict.status.code(), Some(8), "{}", stderr(&conflict));
    assert!(stderr(&conflict).contains("already holds a different") && stderr(&conflict).contains("refusing to overwrite"), "{}", stderr(&conflict));
    let fetched = base.path().join("fetched");
    ok(run(sheaf().args(["wal-fetch", &seg, fetched.to_str().unwrap(), "--repo", r])), "wal-fetch");
    assert!(std::fs::read(&fetched).unwrap() == std::fs::read(&wal).unwrap(), "the archived segment is the original");

    // A damaged object stops recovery (exit 255) instead of looking like the archive's end.
    let object = repo.join(format!("wal/00000001/{seg}.wal"));
    let good = std::fs::read(&object).unwrap();
    let mut bad = good.clone();
    bad[200] ^= 0x55;
    std::fs::write(&object, &bad).unwrap();
    let damaged = run(sheaf().args(["wal-fetch", &seg, base.path().join("damaged").to_str().unwrap(), "--repo", r, "--parallel", "1"]));
    assert_eq!(damaged.status.code(), Some(255), "{}", stderr(&damaged));
    assert!(stderr(&damaged).contains("damaged") || stderr(&damaged).contains("checksum"), "{}", stderr(&damaged));
    assert!(!base.path().join("damaged").exists(), "nothing under %p");
    std::fs::write(&object, &good).unwrap();

    // Not in the archive: exit 1 without a word.
    let missing = run(sheaf().args(["wal-fetch", "0000000100000000000000FF", base.path().join("nope").to_str().unwrap(), "--repo", r]));
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).is_empty(), "quiet: {}", stderr(&missing));

    // Another cluster's segment, and a backup of another cluster: refused, naming both.
    let other = Cluster::new(&[], &[]);
    let theirs = other.sql("postgres", "SELECT pg_walfile_name(pg_current_wal_lsn())");
    let foreign = run(sheaf().args(["wal-push", other.data.join("pg_wal").join(&theirs).to_str().unwrap(), "--repo", r]));
    assert_eq!(foreign.status.code(), Some(2), "{}", stderr(&foreign));
    assert!(stderr(&foreign).contains("is of cluster") && stderr(&foreign).contains("repository of its own"), "{}", stderr(&foreign));
    let wrong = run(sheaf().args(["backup", &other.url("postgres"), "--repo", r]));
    assert_eq!(wrong.status.code(), Some(2), "{}", stderr(&wrong));
    assert!(stderr(&wrong).contains("the repository holds cluster"), "{}", stderr(&wrong));
    assert!(!repo.join("backups").exists() || std::fs::read_dir(repo.join("backups")).unwrap().next().is_none(), "nothing written for a foreign backup");

    // No repository there: named, with the fix.
    let none = run(sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", base.path().join("absent").to_str().unwrap()]));
    assert_eq!(none.status.code(), Some(2));
    assert!(stderr(&none).contains("there is no sheaf repository") && stderr(&none).contains("sheaf init"), "{}", stderr(&none));
}

/// A repository belongs to the user who made it (here the cluster's, as archive_command runs):
/// root writing into it is refused before anything is written or the server is touched, naming
/// both users and the fix, and reading it as root still works.
#[test]
fn another_user_is_refused_writing_into_the_repository() {
    if !sheaf_core::host::is_root() {
        sheaf_core::testing::missing("root, to write as another user than the repository's");
        return;
    }
    let (_base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup as the repository's owner");
    let backups = || tree(&repo.join("backups"));
    let before = backups();
    let as_root = |args: &[&str]| run(crate::integration::common::sheaf().args(args));
    let o = as_root(&["backup", &c.url("postgres"), "--repo", r]);
    assert_fails(&o, 10, &[&format!("the repository {r} belongs to postgres"), "sheaf runs as root (uid 0)", "sudo -u postgres sheaf", "chown -R root"]);
    assert_eq!(c.sql("postgres", "SELECT count(*) FROM pg_replication_slots"), "0", "the server was not touched");
    for args in [&["expire", "--repo", r, "--keep-full", "1"][..], &["wal-summarize", "--repo", r]] {
        assert_fails(&as_root(args), 10, &["belongs to postgres"]);
    }
    // (The archiver, the repository's owner, may still be storing the backup's history file.)
    assert_eq!(backups(), before, "no backup written, none removed");
    assert!(tree(&repo).iter().all(|(_, uid)| *uid != 0), "nothing of root's in the repository: {:?}", tree(&repo));
    // Reading is no hazard: info and verify as root.
    ok(as_root(&["info", "--repo", r]), "info as root");
    ok(as_root(&["verify", "--repo", r]), "verify as root");
}

/// Every file under `dir` with its owner, sorted.
fn tree(dir: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                todo.push(p.clone());
            }
            out.push((p, m.uid()));
        }
    }
    out.sort();
    out
}

#[test]
fn timelines_retention_and_gaps() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let insert = |c: &Cluster, b: i32| c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {b} FROM generate_series(1, 100) g"));
    let id_of = |out: String| -> String {
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["postgres"]["repository_id"].as_str().unwrap().to_string()
    };
    let first = id_of(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--json"])), "backup 1"));
    insert(&c, 1);
    archive_now(&c);
    let second = id_of(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--json"])), "backup 2"));
    assert_ne!(first, second);
    insert(&c, 2);
    std::thread::sleep(Duration::from_millis(300));
    let mid = utc_now(&c);
    std::thread::sleep(Duration::from_millis(300));
    insert(&c, 3);
    archive_now(&c);

    // Back to the middle, promoted onto timeline 2, which archives into the same repository.
    let p = recover_with(&repo, &base.path().join("branch"), &["--target-time", &mid], true);
    assert_eq!(batches(&p), "1:100,2:100");
    assert_eq!(p.sql("postgres", "SELECT timeline_id FROM pg_control_checkpoint()"), "2");
    insert(&p, 5);
    archive_now(&p);
    assert!(repo.join("wal/00000002/00000002.history.wal").exists(), "the new timeline's history is archived");
    drop(p);

    // The latest timeline by default: from backup 2 on timeline 1, across the switch, to timeline 2's end.
    let q = recover(&repo, &base.path().join("on_two"), &[]);
    assert_eq!(batches(&q), "1:100,2:100,5:100", "timeline 2");
    drop(q);
    let one = recover(&repo, &base.path().join("on_one"), &["--target-timeline", "1"]);
    assert_eq!(batches(&one), "1:100,2:100,3:100", "timeline 1 to its end");
    drop(one);

    // Retention: a dry run removes nothing; then the older backup and the WAL before the newer go.
    let dry: serde_json::Value = serde_json::from_str(&ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--dry-run", "--json"])), "dry run")).unwrap();
    assert_eq!(dry["removed"], serde_json::json!([first.clone()]), "{dry}");
    assert!(dry["wal_removed"].as_u64().unwrap() >= 1, "{dry}");
    assert!(repo.join(format!("backups/{first}.json")).exists(), "a dry run removes nothing");
    let done: serde_json::Value = serde_json::from_str(&ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--json"])), "expire")).unwrap();
    assert_eq!(done["kept"], serde_json::json!([second.clone()]));
    assert!(!repo.join(format!("backups/{first}.json")).exists() && !repo.join(format!("backups/{first}")).exists());
    assert!(repo.join("wal/00000002/00000002.history.wal").exists(), "history files stay");
    let kept_from = done["wal_kept_from"].as_str().unwrap().to_string();
    let oldest_left = std::fs::read_dir(repo.join("wal/00000001")).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).min().unwrap();
    assert!(oldest_left.starts_with(&kept_from), "WAL from the kept backup's start on: {oldest_left} vs {kept_from}");
    // What is kept still recovers to the end of the archive.
    let after = recover(&repo, &base.path().join("after_expire"), &[]);
    assert_eq!(batches(&after), "1:100,2:100,5:100");
    drop(after);
    let never = run(sheaf().args(["expire", "--repo", r, "--keep-full", "0"]));
    assert_eq!(never.status.code(), Some(2), "{}", stderr(&never));

    // A gap in the archive: named by info, verify and restore, which writes nothing.
    insert(&c, 6);
    archive_now(&c);
    insert(&c, 7);
    archive_now(&c);
    let mut segs: Vec<PathBuf> = std::fs::read_dir(repo.join("wal/00000001"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().len() == "000000010000000000000001.wal".len() && p.extension().is_some_and(|e| e == "wal"))
        .collect();
    segs.sort();
    assert!(segs.len() >= 3, "{segs:?}");
    let hole = segs[1].clone();
    std::fs::remove_file(&hole).unwrap();
    let info = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(info.contains("WAL GAP on timeline 1"), "{info}");
    let verify = run(sheaf().args(["verify", "--repo", r]));
    assert_eq!(verify.status.code(), Some(4), "{}", stderr(&verify));
    assert!(stderr(&verify).contains("missing"), "{}", stderr(&verify));
    let gap = run(sheaf().args(["restore", "--repo", r, "--to", base.path().join("gap").to_str().unwrap(), "--target-timeline", "1"]));
    assert_eq!(gap.status.code(), Some(4), "{}", stderr(&gap));
    assert!(stderr(&gap).contains("the archive has a gap"), "{}", stderr(&gap));
    assert!(!base.path().join("gap").exists());
}

#[test]
fn archiving_survives_an_unreachable_repository_and_a_killed_push() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup");
    // Nothing in flight when the repository goes: a push of the backup's own WAL that had already
    // opened it would fail for another reason (its folder gone) than the one this test is about.
    archive_now(&c);

    // The repository goes away: archiving fails, PostgreSQL keeps the segments and retries.
    let away = base.path().join("away");
    std::fs::rename(&repo, &away).unwrap();
    for b in 1..=3 {
        c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {b} FROM generate_series(1, 100) g"));
        c.sql("postgres", "SELECT pg_switch_wal()");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.sql("postgres", "SELECT failed_count FROM pg_stat_archiver") == "0" {
        assert!(Instant::now() < deadline, "archiving never failed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(c.log()).unwrap();
    assert!(log.contains("there is no sheaf repository"), "the server log says why: {log}");
    let pending = std::fs::read_dir(c.data.join("pg_wal/archive_status")).unwrap().filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".ready")).count();
    assert!(pending >= 3, "segments wait in pg_wal: {pending}");
    // Back: everything is archived and recovers.
    std::fs::rename(&away, &repo).unwrap();
    archive_now(&c);
    let back = recover(&repo, &base.path().join("after_outage"), &[]);
    assert_eq!(batches(&back), "1:100,2:100,3:100", "nothing written during the outage is lost");
    drop(back);

    // Not writable by the server's user: the push fails naming who and the fix; once fixed, the
    // waiting segment is archived.
    let timeline = repo.join("wal/00000001");
    std::fs::set_permissions(&timeline, std::os::unix::fs::PermissionsExt::from_mode(0o555)).unwrap();
    let failed = |c: &Cluster| c.sql("postgres", "SELECT failed_count FROM pg_stat_archiver").parse::<u64>().unwrap();
    let before = failed(&c);
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 4 FROM generate_series(1, 100) g");
    let waiting = c.sql("postgres", "SELECT pg_walfile_name(pg_switch_wal())");
    let deadline = Instant::now() + Duration::from_secs(60);
    while failed(&c) == before {
        assert!(Instant::now() < deadline, "archiving into a read-only repository never failed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(c.log()).unwrap();
    assert!(log.contains("is not writable by this user") && log.contains("the user PostgreSQL runs as"), "{log}");
    assert!(log.contains(&format!("{} is postgres's", timeline.display())), "the file and its owner are named: {log}");
    std::fs::set_permissions(&timeline, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    archive_now(&c);
    assert!(timeline.join(format!("{waiting}.wal")).exists());

    // A push killed mid-write leaves nothing that looks archived; the retry succeeds.
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 9 FROM generate_series(1, 200000) g");
    let seg = c.sql("postgres", "SELECT pg_walfile_name(pg_current_wal_lsn())");
    c.sql("postgres", "CHECKPOINT");
    let copy = base.path().join(&seg);
    std::fs::copy(c.data.join("pg_wal").join(&seg), &copy).unwrap();
    super::cluster::give_to_server(&copy);
    let object = repo.join(format!("wal/00000001/{seg}.wal"));
    let partial = repo.join(format!("wal/00000001/{seg}.wal.partial"));
    let mut child = sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r, "-c", "zstd:19"]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    while std::fs::metadata(&partial).map(|m| m.len() == 0).unwrap_or(true) {
        assert!(t0.elapsed() < Duration::from_secs(60), "the push never started writing");
        assert!(child.try_wait().unwrap().is_none(), "the push ended before it could be killed");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!object.exists(), "no object under the final name");
    let missing = run(sheaf().args(["wal-fetch", &seg, base.path().join("f1").to_str().unwrap(), "--repo", r]));
    assert_eq!(missing.status.code(), Some(1), "a killed push is not archived");
    // The retry, and a second archiver pushing the same segment while the retry writes it (as
    // wal-receive and archive_command may): the second waits for the first, finds the same
    // content, and both succeed.
    // The killed push's .partial is still there: the retry has taken it over once it writes.
    let stale = std::fs::metadata(&partial).and_then(|m| m.modified()).ok();
    let retry = sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r, "-c", "zstd:19"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let t0 = Instant::now();
    let writing = || std::fs::metadata(&partial).is_ok_and(|m| m.len() > 0 && m.modified().ok() != stale);
    while !writing() && !object.exists() {
        assert!(t0.elapsed() < Duration::from_secs(60), "the retry never started writing");
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = run(sheaf().args(["wal-push", copy.to_str().unwrap(), "--repo", r]));
    assert!(second.status.success(), "a second archiver of the same segment: {}", stderr(&second));
    assert!(stderr(&second).contains("archived already with the same content"), "{}", stderr(&second));
    let retry = retry.wait_with_output().unwrap();
    assert!(retry.status.success(), "the retry: {}", stderr(&retry));
    assert!(!partial.exists());
    ok(run(sheaf().args(["wal-fetch", &seg, base.path().join("f2").to_str().unwrap(), "--repo", r])), "fetch");
    assert!(std::fs::read(base.path().join("f2")).unwrap() == std::fs::read(&copy).unwrap());
}

/// Also encrypted: the passphrase file is named in the config, so archive_command, the backup,
/// the restore and the restored server's restore_command all read it; without it nothing opens.
#[test]
fn an_encrypted_repository_in_a_bucket_archives_backs_up_and_recovers() {
    let minio = sheaf_s3::testing::Minio::start();
    minio.create_bucket("pitr");
    let base = super::cluster::server_tempdir("sheaf-s3repo.");
    // Settings in one file, so that archive_command stays short; credentials from the environment.
    let config = base.path().join("sheaf.toml");
    let plain = format!("repo = \"s3://pitr/cluster-a\"\ns3-endpoint = \"{}\"\ns3-allow-http = true\n", minio.endpoint());
    // Readable by the server's user, which runs archive_command (0600 and owned by it in real use).
    let pass = base.path().join("passphrase");
    std::fs::write(&pass, "archive and backups, one secret\n").unwrap();
    std::fs::set_permissions(&pass, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::write(&config, format!("{plain}passphrase-file = \"{}\"\n", pass.display())).unwrap();
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let keyless = base.path().join("keyless.toml");
    std::fs::write(&keyless, &plain).unwrap();
    let creds: String =
        minio.env().iter().filter(|(k, _)| k.starts_with("AWS_ACCESS") || k.starts_with("AWS_SECRET") || *k == "AWS_REGION").map(|(k, v)| format!("{k}={v} ")).collect();
    let archive = format!("archive_command = 'env {creds}SHEAF_CONFIG={} {} wal-push %p'", config.display(), SHEAF);
    let c = Cluster::new(&[], &["archive_mode = on", archive.as_str()]);
    let cli = || {
        let mut s = sheaf();
        s.env("SHEAF_CONFIG", &config);
        for (k, v) in minio.env() {
            s.env(k, v);
        }
        s
    };
    let shown = ok(run(cli().args(["config"])), "config");
    assert!(shown.contains("s3://pitr/cluster-a") && shown.contains(config.to_str().unwrap()), "{shown}");
    assert!(!shown.contains(sheaf_s3::testing::SECRET_KEY), "no secret shown: {shown}");
    ok(run(cli().args(["init", &c.url("postgres")])), "init");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t (id int, batch int, at timestamptz DEFAULT clock_timestamp())");
    ok(run(cli().args(["backup", &c.url("postgres"), "--stripes", "2"])), "backup into the bucket");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    c.sql("app", "CREATE TABLE churn AS SELECT g, md5(g::text) FROM generate_series(1, 20000) g");
    c.sql("postgres", "CREATE DATABASE copied STRATEGY FILE_COPY");
    archive_now(&c);
    // An incremental in the encrypted bucket, from its encrypted WAL summaries (checked against
    // the page scan); everything after reads it through its chain.
    let incr: serde_json::Value =
        serde_json::from_str(&ok(run(cli().args(["backup", &c.url("postgres"), "--type", "incr", "--check-changes", "--json"])), "incremental into the bucket")).unwrap();
    assert_eq!(incr["postgres"]["backup_type"], "incr", "{incr}");
    assert!(incr["postgres"]["method"].as_str().unwrap().contains("checked against the WAL summaries"), "{incr}");
    c.sql("app", "DROP TABLE churn");
    let last = archive_now(&c);
    let objects = minio.objects("pitr");
    assert!(objects.iter().any(|o| o.ends_with(&format!("wal/00000001/{last}.wal"))), "{objects:?}");
    assert!(objects.iter().any(|o| o.ends_with(".sum")), "summaries beside the WAL: {objects:?}");
    assert_eq!(objects.iter().filter(|o| o.ends_with(".sheaf")).count(), 3, "two stripes and the incremental's: {objects:?}");
    let info: serde_json::Value = serde_json::from_str(&ok(run(cli().args(["info", "--json"])), "info")).unwrap();
    assert_eq!(info["backups"].as_array().unwrap().len(), 2);
    ok(run(cli().args(["verify"])), "verify the repository");
    // Without the passphrase, or with another, the repository does not open: exit 9.
    let o = run(cli().env("SHEAF_CONFIG", &keyless).args(["info"]));
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    assert!(stderr(&o).contains("encrypted"), "{}", stderr(&o));
    let o = run(cli().env("SHEAF_CONFIG", &keyless).env("SHEAF_PASSPHRASE", "guess").args(["backup", &c.url("postgres")]));
    assert_eq!(o.status.code(), Some(9), "a wrong passphrase writes nothing: {}", stderr(&o));
    assert_eq!(minio.objects("pitr").iter().filter(|o| o.ends_with(".sheaf")).count(), 3, "no stripe of the refused backup");

    // Less than everything, from the encrypted bucket: one relation, and its files by glob.
    let out = base.path().join("extracted");
    let e: serde_json::Value =
        serde_json::from_str(&ok(run(cli().args(["extract", "--relation", "t", "--database", "app", "--to", out.to_str().unwrap(), "--json"])), "extract from the bucket"))
            .unwrap();
    assert_eq!(e["relation"], "public.t", "{e}");
    let path = e["path"].as_str().unwrap().to_string();
    let only = base.path().join("only");
    ok(run(cli().args(["restore", "--only", &format!("{path}*"), "--to", only.to_str().unwrap()])), "restore --only from the bucket");
    assert!(only.join(&path).exists(), "{path}");

    let dir = base.path().join("restored");
    ok(run(cli().args(["restore", "--to", dir.to_str().unwrap()])), "restore from the bucket");
    let auto_path = dir.join("postgresql.auto.conf");
    let auto = std::fs::read_to_string(&auto_path).unwrap();
    assert!(auto.contains("--repo s3://pitr/cluster-a") && auto.contains("--config") && auto.contains("--passphrase-file"), "{auto}");
    assert!(!auto.contains("one secret"), "the passphrase itself is never written: {auto}");
    assert!(!auto.contains(sheaf_s3::testing::SECRET_KEY), "no secret written: {auto}");
    // The server's environment carries the credentials, as it would with a profile or IAM role.
    std::fs::write(&auto_path, auto.replace("restore_command = '", &format!("restore_command = 'env {creds}"))).unwrap();
    let r = start_restored(&dir, false);
    assert_eq!(batches(&r), "1:100");
    assert!(r.query("app", "SELECT 1 FROM churn").is_err(), "recovered past the drop");
    assert_eq!(r.sql("copied", "SELECT 1"), "1", "the database the incremental holds whole");
    for log in [c.log(), r.log()] {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!text.contains("one secret"), "the passphrase in the server log {}", log.display());
    }
}

/// `.ready` files waiting in the cluster's pg_wal.
fn ready(c: &Cluster) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(c.data.join("pg_wal/archive_status"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_string_lossy().strip_suffix(".ready").map(str::to_string))
        .collect();
    v.sort();
    v
}

/// `sheaf ARGS` as the server's user in its data directory, as archive_command runs it.
fn as_archiver(c: &Cluster, args: &[&str]) -> Output {
    let mut cmd = sheaf_pg::drill::scratch::as_server_user(SHEAF);
    run(cmd.current_dir(&c.data).args(args))
}

pub(crate) fn json(out: String) -> serde_json::Value {
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn wal_push_looks_ahead_and_wal_fetch_prefetches() {
    let (base, repo) = repo_dir();
    let r = repo.to_str().unwrap();
    // The archiver fails on purpose, so finished segments wait as .ready.
    let mut c = Cluster::new(&[], &["archive_mode = on", "archive_command = 'false'", "archive_timeout = 0"]);
    ok(run(sheaf().args(["init", "--repo", r, &c.url("postgres")])), "init");
    let mut segs = Vec::new();
    for i in 0..5 {
        c.sql("postgres", &format!("CREATE TABLE t{i} AS SELECT g FROM generate_series(1, 1000) g"));
        segs.push(c.sql("postgres", "SELECT pg_walfile_name(pg_switch_wal())"));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !segs.iter().all(|s| ready(&c).contains(s)) {
        assert!(Instant::now() < deadline, "segments never became .ready: {:?}", ready(&c));
        std::thread::sleep(Duration::from_millis(50));
    }
    let archived = |s: &str| repo.join(format!("wal/00000001/{s}.wal")).exists();
    let push = |seg: &str| json(ok(as_archiver(&c, &["wal-push", &format!("pg_wal/{seg}"), "--repo", r, "--parallel", "3", "--json"]), "wal-push"));

    // One call pushes the asked-for segment and the next two .ready ones.
    let first = push(&segs[0]);
    let names: Vec<&str> = first["pushed"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, [&segs[0], &segs[1], &segs[2]], "{first}");
    assert_eq!(first["from_spool"], false);
    assert!(archived(&segs[2]) && !archived(&segs[3]));
    // The archiver's next call returns at once: the segment is known pushed.
    let second = push(&segs[1]);
    assert_eq!(second["from_spool"], true, "{second}");
    assert!(second["pushed"].as_array().unwrap().is_empty());
    // A marker vouches only for the file as it was pushed: touched since, it is checked again
    // (same content: already archived), and the look-ahead goes on.
    ok(run(std::process::Command::new("touch").arg(c.data.join("pg_wal").join(&segs[2]))), "touch");
    let third = push(&segs[2]);
    assert_eq!(third["from_spool"], false, "{third}");
    assert_eq!(third["pushed"][0]["already"], true, "{third}");
    assert!(archived(&segs[3]) && archived(&segs[4]), "{third}");

    // PostgreSQL's own archiver takes over and catches up.
    c.sql("postgres", &format!("ALTER SYSTEM SET archive_command = '{} wal-push %p --repo {r}'", SHEAF));
    c.sql("postgres", "SELECT pg_reload_conf()");
    let last = archive_now(&c);
    assert!(ready(&c).is_empty(), "{:?}", ready(&c));
    assert!(archived(&last));
    c.stop();

    // Prefetch: serving one segment starts a prefetcher that fetches the next ones, checked.
    let dest = base.path().join("recovering");
    pg_dir(&dest);
    let fetch = |seg: &str, n: &str| run(sheaf().args(["wal-fetch", seg, dest.join("RECOVERYXLOG").to_str().unwrap(), "--repo", r, "--parallel", n, "--json"]));
    let got = json(ok(fetch(&segs[0], "3"), "wal-fetch"));
    assert_eq!(got["from_spool"], false, "{got}");
    let spool = std::fs::read_dir(dest.join(".sheaf")).unwrap().next().unwrap().unwrap().path().join("in");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !segs[1..4].iter().all(|s| spool.join(s).exists()) {
        let log = std::fs::read_to_string(spool.parent().unwrap().join("prefetch.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "the prefetcher did not fetch {:?}: {log}", &segs[1..4]);
        std::thread::sleep(Duration::from_millis(20));
    }
    let served = json(ok(fetch(&segs[1], "3"), "wal-fetch from the spool"));
    assert_eq!(served["from_spool"], true, "{served}");
    let from_spool = std::fs::read(dest.join("RECOVERYXLOG")).unwrap();
    let direct = base.path().join("direct");
    ok(run(sheaf().args(["wal-fetch", &segs[1], direct.to_str().unwrap(), "--repo", r, "--parallel", "1"])), "wal-fetch without prefetch");
    assert!(from_spool == std::fs::read(&direct).unwrap(), "the spooled segment is the archived one");
    assert!(!spool.join(&segs[1]).exists(), "served segments leave the spool");
    // Past the archive's end: a quiet miss, with or without prefetch.
    let miss = fetch("0000000100000000000000FF", "3");
    assert_eq!(miss.status.code(), Some(1), "{}", stderr(&miss));
    assert!(stderr(&miss).is_empty(), "{}", stderr(&miss));
}

#[test]
fn queue_max_drops_wal_while_the_repository_is_away_and_says_so() {
    let (base, repo) = repo_dir();
    let r = repo.to_str().unwrap();
    // 16 MB segments: at most two may wait.
    let cmd = format!("archive_command = '{} wal-push %p --repo {r} --queue-max 40MB'", SHEAF);
    let c = Cluster::new(&[], &["archive_mode = on", cmd.as_str(), "archive_timeout = 0"]);
    ok(run(sheaf().args(["init", "--repo", r, &c.url("postgres")])), "init");
    c.sql("postgres", "CREATE TABLE t (id int, batch int)");
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup");
    archive_now(&c);

    let away = base.path().join("away");
    std::fs::rename(&repo, &away).unwrap();
    for b in 1..=6 {
        c.sql("postgres", &format!("INSERT INTO t SELECT g, {b} FROM generate_series(1, 100) g"));
        c.sql("postgres", "SELECT pg_switch_wal()");
        std::thread::sleep(Duration::from_millis(200));
    }
    // The archiver drops the oldest until no more than the bound waits; the rest wait.
    let deadline = Instant::now() + Duration::from_secs(120);
    while ready(&c).len() > 2 {
        assert!(Instant::now() < deadline, "pg_wal kept {:?}; log: {}", ready(&c), std::fs::read_to_string(c.log()).unwrap_or_default());
        std::thread::sleep(Duration::from_millis(200));
    }
    let log = std::fs::read_to_string(c.log()).unwrap();
    assert!(log.contains("DROPPED from the archive") && log.contains("over queue-max") && log.contains("take a new backup"), "{log}");
    assert!(log.contains("there is no sheaf repository"), "the cause is named: {log}");

    // Back: what waited is archived, the drops are recorded in the repository and named by info,
    // and recovery refuses to cross the gap.
    std::fs::rename(&away, &repo).unwrap();
    archive_now(&c);
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    let dropped = info["dropped"].as_array().unwrap();
    assert!(dropped.len() >= 3, "{info}");
    assert!(dropped.iter().all(|d| d["queue_max"] == 40_000_000 && !repo.join(format!("wal/00000001/{}.wal", d["name"].as_str().unwrap())).exists()), "{info}");
    assert!(!info["gaps"].as_array().unwrap().is_empty(), "{info}");
    let text = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(text.contains("WAL DROPPED") && text.contains("WAL GAP"), "{text}");
    let gap = run(sheaf().args(["restore", "--repo", r, "--to", base.path().join("gap").to_str().unwrap()]));
    assert_eq!(gap.status.code(), Some(4), "{}", stderr(&gap));
    assert!(stderr(&gap).contains("the archive has a gap"), "{}", stderr(&gap));
}

/// A repository in Azure Blob Storage (Azurite): archived, backed up, and recovered to its end,
/// the server's archive and restore commands reaching it through the AZURE_* variables.
#[test]
fn a_repository_in_azure_blob_storage_archives_backs_up_and_recovers() {
    let (base, _) = repo_dir();
    in_the_cloud(&base, &TestRepo::azure_container(), "az://backups/cluster/");
}

/// The same in Google Cloud Storage (fake-gcs-server), through a service account key file.
#[test]
fn a_repository_in_google_cloud_storage_archives_backs_up_and_recovers() {
    let (base, _) = repo_dir();
    in_the_cloud(&base, &TestRepo::gcs_bucket(base.path()), "gs://backups/cluster/");
}

fn in_the_cloud(base: &tempfile::TempDir, repo: &TestRepo, prefix: &str) {
    let c = repo.cluster();
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 500) g");
    let full = json(ok(run(repo.sheaf().args(["backup", &c.url("postgres"), "--repo", &repo.arg, "--stripes", "2", "--json"])), "backup"));
    assert!(full["targets"].as_array().unwrap().iter().all(|t| t.as_str().unwrap().starts_with(prefix)), "{full}");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 500) g");
    archive_now(&c);
    let info = json(ok(run(repo.sheaf().args(["info", "--repo", &repo.arg, "--json"])), "info"));
    assert_eq!(info["backups"].as_array().unwrap().len(), 1, "{info}");
    assert!(info["wal_files"].as_u64().unwrap() >= 2, "{info}");
    ok(run(repo.sheaf().args(["verify", "--repo", &repo.arg])), "verify");
    let back = repo.recover(&base.path().join("back"), &[]);
    assert_eq!(batches(&back), "1:500,2:500");
}

/// Two repositories: init, wal-push and a backup into each; with the first away, archiving keeps
/// filling the second (and fails for the first, so the archiver retries), and a restore from the
/// pair falls back to the second and recovers to its end; back again, the first catches up.
#[test]
fn two_repositories_each_get_the_wal_and_restore_falls_back_when_one_is_away() {
    let (base, r1) = repo_dir();
    let r2 = base.path().join("repo2");
    pg_dir(&r2);
    let (s1, s2) = (r1.to_str().unwrap(), r2.to_str().unwrap());
    let cmd = format!("archive_command = '{SHEAF} wal-push %p --repo {s1} --repo {s2}'");
    let c = Cluster::new(&[], &["archive_mode = on", cmd.as_str(), "archive_timeout = 0"]);
    let both = ["--repo", s1, "--repo", s2];
    ok(run(sheaf().arg("init").args(both).arg(c.url("postgres"))), "init both");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t (id int, batch int, at timestamptz DEFAULT clock_timestamp())");
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--repo-target", "3"]).args(both));
    assert_fails(&o, 2, &["--repo-target 3", "1 to 2"]);
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo-target", "all"]).args(both)), "backup into each");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    let seg = archive_now(&c);
    for r in [&r1, &r2] {
        assert!(r.join(paths::wal_object(&seg)).exists(), "{seg} in {}", r.display());
    }
    let info = json(ok(run(sheaf().args(["info", "--json"]).args(both)), "info"));
    let repos = info["repositories"].as_array().unwrap();
    assert_eq!(repos.len(), 2);
    assert!(repos.iter().all(|r| r["backups"].as_array().unwrap().len() == 1), "{info}");
    // A pin goes into every repository that holds the backup.
    let ids: Vec<&str> = repos.iter().map(|r| r["backups"][0]["id"].as_str().unwrap()).collect();
    let said = ok(run(sheaf().args(["keep", "--set", ids[0]]).args(both)), "keep in both");
    let pinned = json(ok(run(sheaf().args(["keep", "--json"]).args(both)), "keep --json"));
    let held: Vec<usize> = pinned["repositories"].as_array().unwrap().iter().map(|r| r["pins"].as_array().unwrap().len()).collect();
    assert_eq!(held, if ids[0] == ids[1] { vec![1, 1] } else { vec![1, 0] }, "{said}{pinned}");
    ok(run(sheaf().args(["keep", "--set", ids[0], "--release"]).args(both)), "release in both");
    assert_fails(&run(sheaf().args(["keep", "--set", "20000101-000000Z"]).args(both)), 2, &["no backup 20000101-000000Z in any repository"]);

    // wal-summarize fills in each repository; an incremental into the second alone is
    // consolidated where it is, and the first says it has nothing to do.
    let sums = json(ok(run(sheaf().args(["wal-summarize", "--json"]).args(both)), "wal-summarize in both"));
    let per: Vec<&str> = sums["repositories"].as_array().unwrap().iter().map(|r| r["repo"].as_str().unwrap()).collect();
    assert_eq!(per.len(), 2, "{sums}");
    assert!(per[1].ends_with("repo2"), "{sums}");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 0 FROM generate_series(1, 10) g");
    c.sql("app", "DELETE FROM t WHERE batch = 0");
    let incr = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--type", "incr", "--repo-target", "2", "--json"]).args(both)), "incremental into the second"));
    let incr_id = incr["postgres"]["repository_id"].as_str().unwrap().to_string();
    let o = run(sheaf().args(["consolidate", "--set", &incr_id]).args(both));
    let said = ok(o, "consolidate in the pair");
    assert!(said.contains(&format!("{incr_id} is not in {s1}")) && said.contains(&format!("consolidated into full backup {incr_id}-full in {s2}")), "{said}");
    assert!(r2.join(paths::record(&format!("{incr_id}-full"))).exists() && !r1.join(paths::record(&format!("{incr_id}-full"))).exists());
    assert_fails(&run(sheaf().args(["consolidate", "--set", "20000101-000000Z"]).args(both)), 2, &["no backup 20000101-000000Z in any repository"]);
    assert_fails(&run(sheaf().args(["consolidate", "--set", &incr_id, "--repo-target", "1"]).args(both)), 2, &[&format!("no backup {incr_id} in the repository")]);

    // The first goes away.
    let away = base.path().join("away");
    std::fs::rename(&r1, &away).unwrap();
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 100) g");
    c.sql("postgres", "SELECT pg_logical_emit_message(false, 'sheaf-test', 'switch')");
    let seg2 = c.sql("postgres", "SELECT pg_walfile_name(pg_switch_wal())");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !r2.join(paths::wal_object(&seg2)).exists() || c.sql("postgres", "SELECT failed_count > 0 FROM pg_stat_archiver") != "t" {
        assert!(Instant::now() < deadline, "{seg2} not in the second repository, or no failure for the first");
        std::thread::sleep(Duration::from_millis(200));
    }
    let o = run(sheaf().args(["check", &c.url("postgres"), "--archive-timeout", "3"]).args(both));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("cannot read the repository at {s1}")), "{}", String::from_utf8_lossy(&o.stdout));

    // A restore from the pair falls back to the second, and recovers to its end.
    let dir = base.path().join("back");
    ok(run(sheaf().args(["restore", "--to", dir.to_str().unwrap()]).args(both)), "restore from the pair");
    let back = start_restored(&dir, false);
    assert_eq!(batches(&back), "1:100,2:100");
    drop(back);
    // So do an extract and a restore of files from the pair, each saying which it passed over.
    let ext = base.path().join("extracted");
    let o = run(sheaf().args(["extract", "--relation", "t", "--database", "app", "--to", ext.to_str().unwrap()]).args(both));
    let said = ok(o.clone(), "extract from the pair");
    assert!(String::from_utf8_lossy(&o.stderr).contains("repository 1"), "{}", String::from_utf8_lossy(&o.stderr));
    // Its file as the backup read it (empty here: the rows were still in shared buffers).
    let rel = c.sql("app", "SELECT pg_relation_filepath('t')");
    assert!(said.contains(&format!("extracted public.t (database app, {rel})")), "{said}");
    assert!(ext.join(rel.rsplit('/').next().unwrap()).is_file(), "{rel} extracted");
    let only = base.path().join("only");
    let o = run(sheaf().args(["restore", "--only", "global/pg_control", "--to", only.to_str().unwrap()]).args(both));
    assert!(String::from_utf8_lossy(&o.stderr).contains("repository 1"), "{}", String::from_utf8_lossy(&o.stderr));
    ok(o, "files from the pair");
    assert!(only.join("global/pg_control").is_file());

    // Back again: the archiver's retries fill the first.
    std::fs::rename(&away, &r1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !r1.join(paths::wal_object(&seg2)).exists() {
        assert!(Instant::now() < deadline, "{seg2} never reached the first repository");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Another cluster's repository as the second: wal-push and backup refuse it, naming both.
    let other = Cluster::new(&[], &[]);
    let foreign = base.path().join("foreign");
    pg_dir(&foreign);
    let f = foreign.to_str().unwrap();
    ok(run(sheaf().args(["init", "--repo", f, &other.url("postgres")])), "init another cluster's");
    let pair = ["--repo", s1, "--repo", f];
    let wal = std::fs::read_dir(c.data.join("pg_wal")).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).find(|p| p.file_name().unwrap().len() == 24).unwrap();
    let o = run(sheaf().arg("wal-push").arg(&wal).args(pair));
    assert!(!o.status.success() && stderr(&o).contains("holds cluster") && stderr(&o).contains(f), "{}", stderr(&o));
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--repo-target", "all"]).args(pair));
    assert!(!o.status.success() && stderr(&o).contains("holds cluster"), "{}", stderr(&o));
}

/// A second repository with a passphrase of its own (repo2-passphrase-file in the config file):
/// each repository is sealed with its own secret, and opens with it only.
#[test]
fn a_second_repository_may_have_its_own_passphrase() {
    use std::os::unix::fs::PermissionsExt;
    let (base, r1) = repo_dir();
    let r2 = base.path().join("repo2");
    pg_dir(&r2);
    let (p1, p2, config) = (base.path().join("one"), base.path().join("two"), base.path().join("sheaf.toml"));
    std::fs::write(&p1, "the first secret\n").unwrap();
    std::fs::write(&p2, "the second secret\n").unwrap();
    let text = format!("repo = \"{}\"\nrepo2 = \"{}\"\npassphrase-file = \"{}\"\nrepo2-passphrase-file = \"{}\"\n", r1.display(), r2.display(), p1.display(), p2.display());
    std::fs::write(&config, text).unwrap();
    for f in [&p1, &p2, &config] {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let cfg = config.to_str().unwrap();
    let cmd = format!("archive_command = 'env SHEAF_CONFIG={cfg} {SHEAF} wal-push %p'");
    let c = Cluster::new(&[], &["archive_mode = on", cmd.as_str(), "archive_timeout = 0"]);
    let sheaf_cfg = || {
        let mut s = sheaf();
        s.env("SHEAF_CONFIG", cfg);
        s
    };
    ok(run(sheaf_cfg().args(["init", &c.url("postgres")])), "init both");
    c.sql("postgres", "CREATE DATABASE app");
    ok(run(sheaf_cfg().args(["backup", &c.url("postgres"), "--repo-target", "all"])), "backup into each");
    let seg = archive_now(&c);
    for r in [&r1, &r2] {
        assert!(r.join(paths::wal_object(&seg)).exists(), "{seg} in {}", r.display());
    }
    let info = json(ok(run(sheaf_cfg().args(["info", "--json"])), "info"));
    assert_eq!(info["repositories"].as_array().unwrap().len(), 2, "{info}");
    for (repo, right, wrong) in [(&r1, &p1, &p2), (&r2, &p2, &p1)] {
        let o = run(sheaf().args(["info", "--repo", repo.to_str().unwrap(), "--passphrase-file", wrong.to_str().unwrap()]));
        assert!(!o.status.success() && stderr(&o).contains("wrong passphrase"), "{}: {}", repo.display(), stderr(&o));
        ok(run(sheaf().args(["info", "--repo", repo.to_str().unwrap(), "--passphrase-file", right.to_str().unwrap()])), "info with its own secret");
    }
}
