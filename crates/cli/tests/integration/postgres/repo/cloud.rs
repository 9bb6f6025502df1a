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
