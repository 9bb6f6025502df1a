//! A repository in object storage (S3 on MinIO, encrypted; Azure on Azurite; Google Cloud
//! Storage): archived into, backed up into, recovered from.

use super::super::cluster::Cluster;
use super::super::sheaf;
use super::*;
use crate::integration::common::{run, stderr, SHEAF};

/// Also encrypted: the passphrase file is named in the config, so archive_command, the backup,
/// the restore and the restored server's restore_command all read it; without it nothing opens.
#[test]
fn an_encrypted_repository_in_a_bucket_archives_backs_up_and_recovers() {
    let minio = sheaf_s3::testing::Minio::start();
    minio.create_bucket("pitr");
    let base = super::super::cluster::server_tempdir("sheaf-s3repo.");
    // Settings in one file, so that archive_command stays short; credentials from the environment.
    let config = base.path().join("sheaf.toml");
    let plain = format!("repo = \"s3://pitr/cluster-a\"\ns3-endpoint = \"{}\"\ns3-allow-http = true\n", minio.endpoint());
    // The server's user's own, which runs archive_command: 0600, as in real use.
    let pass = base.path().join("passphrase");
    std::fs::write(&pass, "archive and backups, one secret\n").unwrap();
    super::super::cluster::server_secret(&pass);
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

/// Issue 53: a repository on a backup host that offers only sshd (OpenSSH, its own SFTP with
/// fsync@openssh.com): archived into, backed up into, verified and recovered from, nothing mounted.
#[test]
fn a_repository_over_sftp_archives_backs_up_and_recovers() {
    let (base, _) = repo_dir();
    let repo = TestRepo::sftp(base.path());
    in_the_cloud(&base, &repo, "sftp://postgres@127.0.0.1:");
    // The folder on the "backup host" is the repository, written as the cluster's user.
    let on_disk = base.path().join("sftp-repo");
    assert!(on_disk.join("repo.json").is_file(), "{}", on_disk.display());
    let partial: Vec<String> = walk(&on_disk).into_iter().filter(|p| p.contains(".partial.")).collect();
    assert!(partial.is_empty(), "no temporary file left behind: {partial:?}");
}

/// Issue 53: a repository on a backup host, served by its agent (`--serve-repo db=FOLDER`) to
/// this database host over mutual TLS, nothing mounted: archived into by archive_command,
/// backed up into, listed, checked, verified, drilled and recovered from (restore_command fetching
/// through the agent). What the database host may not do there is refused by the agent and
/// logged with its name: expire (removing a backup), and a certificate the agent knows but has not
/// granted the repository.
#[test]
fn a_repository_on_a_backup_host_archives_backs_up_drills_and_recovers() {
    let (base, _) = repo_dir();
    let (repo, host) = TestRepo::served(base.path());
    let c = archived_and_backed_up(&repo, "sheaf://127.0.0.1:");
    // The repository is the backup host's folder, written by the agent, nothing left half-written.
    assert!(host.folder.join("repo.json").is_file());
    let partial: Vec<String> = walk(&host.folder).into_iter().filter(|p| p.contains(".partial")).collect();
    assert!(partial.is_empty(), "no temporary file left behind: {partial:?}");

    let check = json(ok(run(repo.sheaf().args(["check", "--repo", &repo.arg, &c.url("postgres"), "--json"])), "check"));
    let findings = check["findings"].as_array().unwrap();
    assert!(findings.iter().any(|f| f["check"] == "repository" && f["status"] == "ok"), "{check}");
    assert!(findings.iter().any(|f| f["check"] == "credentials" && f["message"].as_str().unwrap().contains("client certificate")), "{check}");
    let work = base.path().join("drill");
    let drill = json(ok(run(repo.sheaf().args(["drill", "--repo", &repo.arg, "--to", work.to_str().unwrap(), "--json"])), "drill"));
    assert_eq!(drill["passed"], true, "{drill}");

    // Management is the backup host's: with a second full, expire through the agent would remove
    // the first; the agent refuses, names why and logs who asked, and both backups stay.
    ok(run(repo.sheaf().args(["backup", &c.url("postgres"), "--repo", &repo.arg])), "second backup");
    let o = run(repo.sheaf().args(["expire", "--repo", &repo.arg, "--keep-full", "1"]));
    assert!(!o.status.success(), "expire through the agent: {}", stderr(&o));
    assert!(stderr(&o).contains("expire's") && stderr(&o).contains("manage=db"), "{}", stderr(&o));
    assert!(host.logged().lines().any(|l| l.contains("db-host (SHA-256 ") && l.contains("refused: db/")), "{}", host.logged());
    let info = json(ok(run(repo.sheaf().args(["info", "--repo", &repo.arg, "--json"])), "info"));
    assert_eq!(info["backups"].as_array().unwrap().len(), 2, "{info}");

    // A certificate of the same CA, on the allow-list, not granted the repository.
    let other = sheaf().args(["info", "--repo", &repo.arg, "--tls-dir"]).arg(&host.tls).output().unwrap();
    assert!(!other.status.success());
    assert!(stderr(&other).contains("not granted repository 'db'"), "{}", stderr(&other));
    assert!(host.logged().contains("not granted repository 'db'"), "{}", host.logged());

    let back = repo.recover(&base.path().join("back"), &[]);
    assert_eq!(batches(&back), "1:500,2:500");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

fn in_the_cloud(base: &tempfile::TempDir, repo: &TestRepo, prefix: &str) {
    let _c = archived_and_backed_up(repo, prefix);
    let back = repo.recover(&base.path().join("back"), &[]);
    assert_eq!(batches(&back), "1:500,2:500");
}

/// A cluster archiving into `repo`, a backup of two stripes into it (their places starting with
/// `prefix`) between two batches of rows, the WAL after it archived; `info` lists it and the WAL,
/// `verify` passes. The cluster, still running.
fn archived_and_backed_up(repo: &TestRepo, prefix: &str) -> Cluster {
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
    c
}

/// A `sheaf` with no key pair, no profile and no instance metadata service of the runner's: only
/// `vars` say where credentials come from.
fn keyless(vars: &[(&str, String)]) -> std::process::Command {
    let mut s = sheaf();
    for k in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"] {
        s.env_remove(k);
    }
    s.env("HOME", "/nonexistent").env("AWS_REGION", "us-east-1");
    s.env("AWS_EC2_METADATA_SERVICE_ENDPOINT", format!("http://127.0.0.1:{}", sheaf_s3::testing::free_port()));
    for (k, v) in vars {
        s.env(k, v);
    }
    s
}

/// Issue 53: each source of the AWS chain, none a key pair in the environment, gives a backup into
/// MinIO that restores to a server that starts with the data: a profile's role assumed with its
/// source profile's keys, a credential_process with --s3-role-arn on top, a web identity (IRSA),
/// container credentials (EKS Pod Identity), the instance's profile (IMDSv2).
#[test]
fn every_cloud_identity_backs_up_and_restores_without_a_key_pair() {
    use sheaf_s3::testing::{Identity, Minio, ACCESS_KEY, SECRET_KEY};
    let id = Identity::start();
    let m = Minio::start_with(&id.minio_env());
    m.create_bucket("ids");
    id.setup(&m.endpoint(), 900, "pod-identity-token");
    // The files sheaf reads, and the restores, where the cluster's user (which runs sheaf) can.
    let work = super::super::cluster::server_tempdir("sheaf-ids.");
    let dir = work.path();
    let c = Cluster::new(&[], &[]);
    c.sql("postgres", "CREATE TABLE w AS SELECT g, md5(g::text) AS h FROM generate_series(1, 50000) g");
    let sts = ("AWS_ENDPOINT_URL_STS", m.endpoint());
    let (creds, conf) = (dir.join("credentials"), dir.join("config"));
    std::fs::write(&creds, format!("[base]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")).unwrap();
    let process = format!(r#"printf '{{"Version":1,"AccessKeyId":"{ACCESS_KEY}","SecretAccessKey":"{SECRET_KEY}"}}'"#);
    std::fs::write(&conf, format!("[profile app]\nrole_arn = arn:aws:iam::123456789012:role/backup\nsource_profile = base\n\n[profile tool]\ncredential_process = {process}\n"))
        .unwrap();
    let files = || vec![("AWS_SHARED_CREDENTIALS_FILE", creds.display().to_string()), ("AWS_CONFIG_FILE", conf.display().to_string())];
    let token = dir.join("token");
    std::fs::write(&token, id.token(3600)).unwrap();
    let pod = dir.join("pod-token");
    std::fs::write(&pod, "pod-identity-token").unwrap();

    let mut profile_role = files();
    profile_role.extend([("AWS_PROFILE", "app".to_string()), sts.clone()]);
    let mut process_role = files();
    process_role.extend([("AWS_PROFILE", "tool".to_string()), sts.clone()]);
    // Each: a name, the variables that say where credentials come from, flags, the source's words.
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, Vec<&'a str>, &'a str);
    let cases: Vec<Case> = vec![
        ("profile-role", profile_role, vec![], "role arn:aws:iam::123456789012:role/backup assumed (profile 'app')"),
        ("process-role", process_role, vec!["--s3-role-arn", "arn:aws:iam::123456789012:role/on-top"], "assumed (--s3-role-arn) with credential_process"),
        ("web-identity", vec![("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()), ("AWS_ROLE_ARN", id.role_arn()), sts.clone()], vec![], "web identity"),
        (
            "container",
            vec![("AWS_CONTAINER_CREDENTIALS_FULL_URI", format!("{}/container/credentials", id.endpoint())), ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", pod.display().to_string())],
            vec![],
            "container credentials",
        ),
        ("instance", vec![("AWS_EC2_METADATA_SERVICE_ENDPOINT", id.endpoint())], vec![], "instance metadata"),
    ];
    let endpoint = m.endpoint();
    for (name, vars, flags, source) in &cases {
        let target = format!("s3://ids/{name}/w.sheaf");
        let s3 = ["--s3-endpoint", endpoint.as_str(), "--s3-allow-http"];
        let o = run(keyless(vars).args(["backup", &c.url("postgres"), "--to", &target, "--log-level", "debug"]).args(s3).args(flags));
        assert!(o.status.success(), "{name}: backup: {}", stderr(&o));
        assert!(stderr(&o).contains(&format!("S3 credentials fetched from {source}")) || stderr(&o).contains(source), "{name}: the log names the source: {}", stderr(&o));
        let to = dir.join(format!("restored-{name}"));
        let o = run(keyless(vars).args(["restore", &target, "--to", to.to_str().unwrap()]).args(s3).args(flags));
        assert!(o.status.success(), "{name}: restore: {}", stderr(&o));
        let r = Cluster::over(&to, &c.sock);
        assert_eq!(r.sql("postgres", "SELECT count(*) FROM w"), "50000", "{name}");
        drop(r);
        std::fs::remove_dir_all(&to).unwrap();
    }
    // check names the source in use and when its credentials expire.
    let imds = [("AWS_EC2_METADATA_SERVICE_ENDPOINT", id.endpoint())];
    let s3 = ["--s3-endpoint", endpoint.as_str(), "--s3-allow-http"];
    ok(run(keyless(&imds).args(["init", "--repo", "s3://ids/repo", &c.url("postgres")]).args(s3)), "init");
    let o = run(keyless(&imds).args(["check", "--repo", "s3://ids/repo", &c.url("postgres")]).args(s3));
    let out = crate::integration::common::stdout(&o);
    let line = out.lines().find(|l| l.contains("credentials")).unwrap_or_else(|| panic!("no credentials line: {out}"));
    assert!(line.contains(&format!("instance metadata at {}", id.endpoint())) && line.contains("expire at"), "{line}");
    let stats = id.stats();
    assert!(stats["imds_session"].as_u64() >= Some(2) && stats["container"].as_u64() >= Some(2), "both services were asked, by the backup and the restore: {stats}");
    assert_eq!(stats["imds_refused"], 0, "never read without a session token: {stats}");
}

/// Issue 53: credentials that last a minute (a web identity token renewed every 20 s, as the
/// kubelet renews a projected token) are fetched again during a backup of several minutes, which
/// succeeds and restores; the log shows each fetch.
#[test]
fn a_backup_outlives_credentials_that_expire_every_minute() {
    use sheaf_s3::testing::{Identity, Minio};
    let id = Identity::start();
    let m = Minio::start_with(&id.minio_env());
    m.create_bucket("ids");
    let work = super::super::cluster::server_tempdir("sheaf-ids.");
    let token = work.path().join("token");
    id.rotate(&token, 60, 20.0);
    let c = Cluster::new(&[], &[]);
    c.sql("postgres", "CREATE TABLE w AS SELECT g, md5(g::text) AS h FROM generate_series(1, 50000) g");
    let vars = vec![("AWS_WEB_IDENTITY_TOKEN_FILE", token.display().to_string()), ("AWS_ROLE_ARN", id.role_arn()), ("AWS_ENDPOINT_URL_STS", m.endpoint())];
    let endpoint = m.endpoint();
    let s3 = ["--s3-endpoint", endpoint.as_str(), "--s3-allow-http"];
    let log = work.path().join("backup.log");
    // Uncompressed and held to 160 KiB/s: the cluster's ~30 MB take over three minutes.
    let t0 = std::time::Instant::now();
    let o = run(keyless(&vars)
        .args(["backup", &c.url("postgres"), "--to", "s3://ids/slow/w.sheaf", "-c", "none", "--max-rate", "160KiB", "--s3-part-size", "5MiB", "--log-level", "debug", "--log-file"])
        .arg(&log)
        .args(s3));
    let took = t0.elapsed();
    assert!(o.status.success(), "backup: {}", stderr(&o));
    assert!(took > std::time::Duration::from_secs(150), "the backup took {took:?}: too short to outlive two expiries");
    let text = std::fs::read_to_string(&log).unwrap();
    let fetched = text.matches("S3 credentials fetched from web identity").count();
    let minutes = took.as_secs() / 60;
    assert!(fetched as u64 > minutes, "{fetched} fetches of one-minute credentials in {took:?}: {text}");
    let to = work.path().join("restored");
    let o = run(keyless(&vars).args(["restore", "s3://ids/slow/w.sheaf", "--to", to.to_str().unwrap()]).args(s3));
    assert!(o.status.success(), "restore: {}", stderr(&o));
    let r = Cluster::over(&to, &c.sock);
    assert_eq!(r.sql("postgres", "SELECT count(*) FROM w"), "50000");
}
