//! `sheaf key` on a repository a cluster archives into: keys added (one from a key command, as
//! Vault or a KMS would print it), rotated and removed while it archives; the removed key opens
//! nothing; any current key restores every backup and WAL file, whichever generation wrote them;
//! and no secret used shows in anything sheaf printed, wrote or logged.

use std::path::Path;
use std::process::Output;

use super::cluster::Cluster;
use super::repo::{archive_now, ok, repo_dir, start_restored};
use super::sheaf;
use crate::integration::common::{run, stderr, SHEAF};

const PASSPHRASE: &str = "the DBA's own passphrase, 2026";

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Every file under `dir`, read whole (small test trees).
fn files(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p, b));
        }
    }
    out
}

#[test]
fn keys_are_added_rotated_and_removed_while_archiving_and_any_key_restores() {
    let (base, repo) = repo_dir();
    let r = repo.to_str().unwrap();
    let pass = base.path().join("dba.pass");
    std::fs::write(&pass, format!("{PASSPHRASE}\n")).unwrap();
    // The key as a KMS hands it out: 64 hex digits, printed by a command.
    let key: Vec<u8> = (0u8..32).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
    let key_hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let vault = base.path().join("vault.key");
    std::fs::write(&vault, format!("{key_hex}\n")).unwrap();
    for f in [&pass, &vault] {
        super::cluster::server_secret(f);
    }
    let key_command = format!("cat {}", vault.display());
    let pass_flag = ["--passphrase-file", pass.to_str().unwrap()];

    let archive = format!("archive_command = '{SHEAF} wal-push %p --repo {r} --passphrase-file {}'", pass.display());
    let c = Cluster::new(&[], &["archive_mode = on", archive.as_str(), "archive_timeout = 0"]);
    let mut outputs: Vec<(String, Output)> = Vec::new();
    let mut step = |what: &str, args: &[&str]| -> String {
        let o = run(sheaf().args(args));
        let text = ok(o.clone(), what);
        outputs.push((what.to_string(), o));
        text
    };
    let said = step("init", &[&["init", "--repo", r], &pass_flag[..], &[&c.url("postgres")]].concat());
    // The archive_command init suggests works as printed: it names the passphrase's file.
    let suggested = said.split("archive_command = '").nth(1).and_then(|t| t.split("' and archive_mode").next()).unwrap_or_else(|| panic!("{said}"));
    assert!(suggested.starts_with("sheaf wal-push %p") && suggested.contains(&format!("--passphrase-file {}", pass.display())), "{suggested}");
    c.sql("postgres", &format!("ALTER SYSTEM SET archive_command = '{}'", suggested.replacen("sheaf", SHEAF, 1)));
    c.sql("postgres", "SELECT pg_reload_conf()");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t (id int, batch int)");
    c.sql("app", "INSERT INTO t SELECT g, 0 FROM generate_series(1, 1000) g");
    step("backup under generation 1", &[&["backup", &c.url("postgres"), "--repo", r], &pass_flag[..]].concat());
    archive_now(&c);

    // Listed without a key; the key given is marked.
    let l = json(&step("list", &["key", "list", "--repo", r, "--json"]));
    assert_eq!((l["scheme"].as_str(), l["generation"].as_u64(), l["keys"].as_array().unwrap().len()), (Some("ring"), Some(1), 1), "{l}");
    let pass_id = l["keys"][0]["id"].as_str().unwrap().to_string();
    let added = step("add the key command's key", &[&["key", "add", "--repo", r], &pass_flag[..], &["--new-key-command", &key_command]].concat());
    assert!(added.contains("added key") && added.contains("(key)"), "{added}");
    let l = json(&step("list with the new key", &["key", "list", "--repo", r, "--key-command", &key_command, "--json"]));
    let this: Vec<_> = l["keys"].as_array().unwrap().iter().filter(|k| k["this"] == true).collect();
    assert_eq!((l["keys"].as_array().unwrap().len(), this.len(), this[0]["kind"].as_str()), (2, 1, Some("key")), "{l}");

    c.sql("app", "INSERT INTO t SELECT g, 1 FROM generate_series(1, 1000) g");
    archive_now(&c);
    let rotated = json(&step("rotate with the new key", &["key", "rotate", "--repo", r, "--key-command", &key_command, "--json"]));
    assert_eq!((rotated["generation"].as_u64(), rotated["records"].as_u64()), (Some(2), Some(2)), "{rotated}");
    step("backup under generation 2", &["backup", &c.url("postgres"), "--repo", r, "--key-command", &key_command]);
    c.sql("app", "INSERT INTO t SELECT g, 2 FROM generate_series(1, 1000) g");
    archive_now(&c);

    // The passphrase is removed with the other key; from then on it opens nothing, and the
    // archiver is given the key command.
    let o = run(sheaf().args([&["key", "remove", "--repo", r, "--key", &pass_id], &pass_flag[..]].concat()));
    assert!(!o.status.success() && stderr(&o).contains("give another"), "not with itself: {}", stderr(&o));
    let o = run(sheaf().args(["key", "remove", "--repo", r, "--key", &pass_id, "--key-command", "exit 3"]));
    assert_eq!(o.status.code(), Some(9), "a key command that fails: {}", stderr(&o));
    assert!(stderr(&o).contains("key command (--key-command) failed"), "{}", stderr(&o));
    // The archiver still gives the passphrase: removing it would break archiving, so it is
    // refused until archive_command gives another key (or --force).
    let o = run(sheaf().args(["key", "remove", "--repo", r, "--key", &pass_id, "--key-command", &key_command]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("for wal-push on") && stderr(&o).contains("archive_command") && stderr(&o).contains("--force"), "{}", stderr(&o));
    c.sql("postgres", &format!("ALTER SYSTEM SET archive_command = $$ {SHEAF} wal-push %p --repo {r} --key-command 'cat {}' $$", vault.display()));
    c.sql("postgres", "SELECT pg_reload_conf()");
    c.sql("app", "INSERT INTO t SELECT g, 5 FROM generate_series(1, 10) g");
    archive_now(&c);
    let removed = step("remove the passphrase", &["key", "remove", "--repo", r, "--key", &pass_id, "--key-command", &key_command]);
    assert!(removed.contains("no longer opens") && removed.contains("sheaf key rotate"), "{removed}");
    let o = run(sheaf().args([&["info", "--repo", r], &pass_flag[..]].concat()));
    assert_eq!(o.status.code(), Some(9), "the removed passphrase opens nothing: {}", stderr(&o));
    assert!(stderr(&o).contains("none of its 1 keys is a passphrase"), "{}", stderr(&o));
    let o = run(sheaf().args([
        "key",
        "remove",
        "--repo",
        r,
        "--key",
        l["keys"].as_array().unwrap().iter().find(|k| k["this"] == true).unwrap()["id"].as_str().unwrap(),
        "--key-command",
        &key_command,
    ]));
    assert!(!o.status.success() && stderr(&o).contains("last key"), "{}", stderr(&o));
    c.sql("postgres", &format!("ALTER SYSTEM SET archive_command = $$ {SHEAF} wal-push %p --repo {r} --key-command 'cat {}' $$", vault.display()));
    c.sql("postgres", "SELECT pg_reload_conf()");
    c.sql("app", "INSERT INTO t SELECT g, 3 FROM generate_series(1, 1000) g");
    archive_now(&c);
    step("verify with the key", &["verify", "--repo", r, "--key-command", &key_command]);

    // The first backup (generation 1) and the WAL since it (generations 1 and 2), restored with
    // the key added after it was written.
    let backups = json(&step("info", &["info", "--repo", r, "--key-command", &key_command, "--json"]));
    let first = backups["backups"][0]["id"].as_str().unwrap().to_string();
    let dir = base.path().join("restored");
    step("restore the first backup", &["restore", "--repo", r, "--set", &first, "--to", dir.to_str().unwrap(), "--key-command", &key_command]);
    let auto = std::fs::read_to_string(dir.join("postgresql.auto.conf")).unwrap();
    assert!(auto.contains("--key-command"), "restore_command carries the key command: {auto}");
    let restored = start_restored(&dir, false);
    assert_eq!(
        restored.sql("app", "SELECT string_agg(batch || ':' || n, ',' ORDER BY batch) FROM (SELECT batch, count(*) n FROM t GROUP BY batch) x"),
        "0:1000,1:1000,2:1000,3:1000,5:10"
    );

    // No secret in anything printed, written into the repository, the catalog, the settings or
    // the logs.
    let secrets: [(&str, &[u8]); 3] = [("the passphrase", PASSPHRASE.as_bytes()), ("the key in hex", key_hex.as_bytes()), ("the key's bytes", &key)];
    let mut places: Vec<(String, Vec<u8>)> = outputs.iter().flat_map(|(w, o)| [(format!("{w}: stdout"), o.stdout.clone()), (format!("{w}: stderr"), o.stderr.clone())]).collect();
    for d in [&repo, &dir.join("pg_wal/.sheaf")] {
        places.extend(files(d).into_iter().map(|(p, b)| (p.display().to_string(), b)));
    }
    for p in [c.log(), restored.log(), dir.join("postgresql.auto.conf"), crate::integration::common::server_catalog().to_path_buf()] {
        places.push((p.display().to_string(), std::fs::read(&p).unwrap_or_default()));
    }
    assert!(places.len() > 30, "{}", places.len());
    for (what, secret) in secrets {
        for (place, bytes) in &places {
            assert!(!bytes.windows(secret.len()).any(|w| w == secret), "{what} is in {place}");
        }
    }
}
