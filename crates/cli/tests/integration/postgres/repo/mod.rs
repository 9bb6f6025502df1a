//! A repository on a real cluster, by concept: point-in-time recovery ([`pitr`]), archiving
//! ([`archive`]), object storage ([`cloud`]), several repositories ([`several`]); here, what they
//! and the other suites share: a cluster archiving into a repository, recovering from it, the
//! repository in a folder or a bucket.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use super::cluster::{pg_dir, Cluster};
use super::sheaf;
use crate::integration::common::{run, stderr, SHEAF};

mod archive;
mod cloud;
mod copy;
mod life;
mod pitr;
mod resume;
mod several;
mod upgrade;

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

pub(crate) fn repo_dir() -> (tempfile::TempDir, PathBuf) {
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
    /// The MinIO it lives in, if it does.
    pub(super) fn minio(&self) -> Option<&sheaf_s3::testing::Minio> {
        self._server.as_ref().and_then(|s| s.downcast_ref())
    }
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
        std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
        super::cluster::server_secret(&pass);
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

    /// A repository over SFTP on an sshd of its own, logged in to as the cluster's user with a key
    /// file, the server's key checked against a known_hosts file; both named in `SHEAF_SFTP_*`
    /// (the settings' variables), so that the server's archive and restore commands carry them.
    pub(super) fn sftp(base: &Path) -> TestRepo {
        let d = sheaf_sftp::testing::Sshd::start();
        let arg = format!("sftp://postgres@127.0.0.1:{}{}/sftp-repo", d.port, base.display());
        let env = vec![("SHEAF_SFTP_KNOWN_HOSTS".to_string(), d.known_hosts().display().to_string()), ("SHEAF_SFTP_KEY_FILE".to_string(), d.client_key().display().to_string())];
        TestRepo { arg, env, _server: Some(Box::new(d)) }
    }

    /// A repository on a "backup host": `sheaf agent --serve-repo db=FOLDER` started here as a
    /// process of its own on loopback, reached as `sheaf://127.0.0.1:PORT/db` with the certificate
    /// `--init-certs --add-client db-host --grant db` issued (in SHEAF_TLS_DIR). Both hosts' sheaf
    /// run as the cluster's user here (one machine); the database host's commands use the
    /// repository only through the agent.
    pub(super) fn served(base: &Path) -> (TestRepo, std::sync::Arc<BackupHost>) {
        let host = std::sync::Arc::new(BackupHost::start(base));
        let arg = format!("sheaf://127.0.0.1:{}/db", host.port);
        let env = vec![("SHEAF_TLS_DIR".to_string(), host.client.display().to_string())];
        (TestRepo { arg, env, _server: Some(Box::new(host.clone())) }, host)
    }

    /// `sheaf` with the repository's environment.
    pub(super) fn sheaf(&self) -> std::process::Command {
        let mut c = sheaf();
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// `env K=V ... ` for a command the server runs (empty for a folder).
    pub(super) fn env_prefix(&self) -> String {
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

pub(crate) fn json(out: String) -> serde_json::Value {
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
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

/// A backup host's agent serving repository `db` from `folder`, stopped when dropped.
pub(super) struct BackupHost {
    child: std::sync::Mutex<Option<std::process::Child>>,
    pub(super) port: u16,
    /// The agent's certificates' folder (its CA, its certificate, allowed-clients).
    pub(super) tls: PathBuf,
    /// The database host's --tls-dir.
    pub(super) client: PathBuf,
    /// The repository's folder on the backup host.
    pub(super) folder: PathBuf,
    /// The agent's log.
    pub(super) log: PathBuf,
}

impl BackupHost {
    fn start(base: &Path) -> BackupHost {
        let tls = base.join("backup-host-tls");
        ok(run(sheaf().args(["agent", "--init-certs"]).arg(&tls)), "agent --init-certs");
        ok(run(sheaf().args(["agent", "--init-certs"]).arg(&tls).args(["--add-client", "db-host", "--grant", "db"])), "agent --add-client");
        let client = tls.join("clients/db-host");
        let folder = base.join("backup-host-repo");
        pg_dir(&folder);
        let log = base.join("backup-host-agent.log");
        let mut child = None;
        let mut port = 0;
        for _ in 0..3 {
            port = sheaf_core::testing::free_port();
            let mut cmd = sheaf();
            cmd.args(["agent", "--listen", &format!("127.0.0.1:{port}"), "--serve-repo"]).arg(format!("db={}", folder.display())).arg("--tls-dir").arg(&tls);
            cmd.stdout(std::process::Stdio::null()).stderr(std::fs::File::create(&log).unwrap());
            child = sheaf_core::testing::start_until(cmd, "sheaf agent --serve-repo", || sheaf_core::testing::listening(port));
            if child.is_some() {
                break;
            }
        }
        let child = child.unwrap_or_else(|| panic!("sheaf agent did not start: {}", std::fs::read_to_string(&log).unwrap_or_default()));
        BackupHost { child: std::sync::Mutex::new(Some(child)), port, tls, client, folder, log }
    }

    /// What the agent logged so far.
    pub(super) fn logged(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for BackupHost {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.lock().unwrap().take() {
            let _ = std::process::Command::new("kill").arg(c.id().to_string()).status();
            let _ = c.wait();
        }
    }
}
