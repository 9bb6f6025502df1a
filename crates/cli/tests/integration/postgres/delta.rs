//! `restore --delta` from what the WAL says changed, on real clusters: a copy restored from the
//! previous backup and never started, a standby stopped behind by a few percent of changes, and a
//! former primary that wrote on after a promotion elsewhere (with page checksums, and with them
//! switched off, where pg_rewind's rule sends it back to hashing). Each is compared with a fresh
//! restore of the same backup: its relation files byte for byte, then, started, `pg_dumpall`
//! and `pg_amcheck --heapallindexed`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::cluster::Cluster;
use super::repo::{archive_now, json, ok, setup, start_restored};
use super::sheaf;
use crate::integration::common::{run, stderr};

/// Relation files (names that start with a digit) under base/, global/ and pg_tblspc/, by path
/// relative to the data directory.
fn relation_files(data: &Path) -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, PathBuf>) {
        for item in std::fs::read_dir(dir).unwrap().flatten() {
            let name = item.file_name().to_string_lossy().into_owned();
            let path = item.path();
            let rel = if rel.is_empty() { name.clone() } else { format!("{rel}/{name}") };
            let m = std::fs::metadata(&path).unwrap();
            if m.is_dir() {
                walk(&path, &rel, out);
            } else if name.starts_with(|c: char| c.is_ascii_digit()) {
                out.insert(rel, path);
            }
        }
    }
    let mut out = BTreeMap::new();
    for top in ["base", "global", "pg_tblspc"] {
        if data.join(top).exists() {
            walk(&data.join(top), top, &mut out);
        }
    }
    out
}

/// The relation files of `target` are those of `fresh`, byte for byte.
fn same_relation_files(fresh: &Path, target: &Path, what: &str) {
    let (a, b) = (relation_files(fresh), relation_files(target));
    assert!(a.len() > 100, "{what}: a cluster has relation files ({})", a.len());
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "{what}: the same relation files");
    for (rel, p) in &a {
        let (x, y) = (std::fs::read(p).unwrap(), std::fs::read(&b[rel]).unwrap());
        if x != y {
            let block = x.chunks(8192).zip(y.chunks(8192)).position(|(u, v)| u != v).map_or_else(|| "its length".to_string(), |n| format!("block {n}"));
            panic!("{what}: {rel} differs from a fresh restore's at {block} ({} and {} bytes)", x.len(), y.len());
        }
    }
}

/// `restore --delta` of backup `set` into `to` (`extra` may spell `--delta=HOW`), its JSON report.
fn delta(repo: &Path, to: &Path, set: &str, extra: &[&str]) -> serde_json::Value {
    let mut cmd = sheaf();
    cmd.args(["restore", "--repo", repo.to_str().unwrap(), "--to", to.to_str().unwrap(), "--set", set, "--json"]).args(extra);
    if !extra.iter().any(|a| a.starts_with("--delta")) {
        cmd.arg("--delta");
    }
    let o = run(&mut cmd);
    json(ok(o, &format!("restore --delta into {}", to.display())))
}

/// `restore` of backup `set` into the new folder `to`, not started.
fn fresh(repo: &Path, to: &Path, set: &str) -> serde_json::Value {
    json(ok(run(sheaf().args(["restore", "--repo", repo.to_str().unwrap(), "--to", to.to_str().unwrap(), "--set", set, "--json"])), "restore"))
}

fn dump(c: &Cluster) -> String {
    let o = run(c.tool("pg_dumpall").arg("--no-role-passwords"));
    assert!(o.status.success(), "pg_dumpall: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).lines().filter(|l| !l.starts_with("--") && !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict")).collect::<Vec<_>>().join("\n")
}

fn amcheck(c: &Cluster) {
    let o = run(c.tool("pg_amcheck").args(["--all", "--heapallindexed", "--install-missing"]));
    assert!(o.status.success(), "pg_amcheck: {}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
}

fn backup(c: &Cluster, repo: &Path, kind: &str) -> String {
    let b = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", repo.to_str().unwrap(), "--type", kind, "--json"])), "backup"));
    b["postgres"]["repository_id"].as_str().unwrap().to_string()
}

fn pgbench(c: &Cluster, transactions: &str) {
    ok(run(c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-t", transactions, "app"]).stdout(Stdio::null())), "pgbench");
}

fn said<'a>(d: &'a serde_json::Value, field: &str) -> &'a str {
    d["delta"][field].as_str().unwrap_or_else(|| panic!("no delta.{field}: {d}"))
}

fn count(d: &serde_json::Value, field: &str) -> u64 {
    d["delta"][field].as_u64().unwrap_or_else(|| panic!("no delta.{field}: {d}"))
}

#[test]
fn delta_restores_write_what_the_wal_says_changed() {
    let (base, repo, mut c) = setup();
    let out = base.path().join("out");
    super::cluster::pg_dir(&out);
    ok(run(c.tool("pgbench").args(["-i", "-s", "4", "-q", "app"])), "pgbench -i");
    // A table nothing writes to after the full (frozen, so not even hint bits move).
    c.sql("app", "CREATE TABLE untouched AS SELECT g AS id FROM generate_series(1, 10000) g");
    c.sql("app", "VACUUM FREEZE untouched");
    let untouched = c.sql("app", "SELECT pg_relation_filepath('untouched')");
    let full = backup(&c, &repo, "full");
    // A copy restored from that backup and never started, and a standby stopped behind.
    let copy = out.join("copy");
    fresh(&repo, &copy, &full);
    let mut standby = Cluster::standby_of(&c, &[]);
    standby.catch_up(&c);
    standby.stop();

    // A few percent of the pages changed, and files made, dropped and cut.
    pgbench(&c, "300");
    for sql in [
        "CREATE TABLE made AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 20000) g",
        "TRUNCATE t",
        "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(1, 500) g",
    ] {
        c.sql("app", sql);
    }
    c.sql("postgres", "CREATE DATABASE later");
    let second = backup(&c, &repo, "incr");
    archive_now(&c);
    let reference = out.join("fresh");
    let whole = fresh(&repo, &reference, &second);

    // The copy: its backup_label places it; only what the WAL names is written, nothing read.
    let d = delta(&repo, &copy, &second, &[]);
    assert_eq!(said(&d, "method"), "wal", "{d}");
    assert!(said(&d, "how").contains(&format!("a restore of backup {full} never started")), "{d}");
    assert_eq!(count(&d, "bytes_compared"), 0, "nothing of the target is read: {d}");
    assert!(count(&d, "files_kept") > 100 && count(&d, "files_rewritten") > 0 && count(&d, "files_created") > 0, "{d}");
    assert!(count(&d, "bytes_kept") > count(&d, "bytes_rewritten"), "most of the pages kept: {d}");
    let written = d["bytes_written"].as_u64().unwrap();
    assert_eq!(written, count(&d, "bytes_rewritten") + count(&d, "bytes_created"), "{d}");
    assert!(written < whole["bytes_written"].as_u64().unwrap() / 2, "writes a part of a fresh restore's bytes: {d}");
    same_relation_files(&reference, &copy, "the copy restored from the previous backup");

    // The standby: placed by its pg_control; what the backup lacks removed, and it stays a
    // standby (its standby.signal and settings kept) until --promote says otherwise.
    let d = delta(&repo, &standby.data, &second, &[]);
    assert_eq!(said(&d, "method"), "wal", "{d}");
    assert!(said(&d, "how").contains("a standby shut down in recovery"), "{d}");
    assert!(count(&d, "removed") > 0 && standby.data.join("standby.signal").exists(), "{d}");
    assert_eq!((d["startup"]["starts_as"].as_str(), d["startup"]["kept_target_settings"].as_bool()), (Some("standby"), Some(true)), "{d}");
    same_relation_files(&reference, &standby.data, "the standby");
    let d = delta(&repo, &standby.data, &second, &["--promote"]);
    assert_eq!(d["startup"]["starts_as"], "primary", "{d}");
    assert!(!standby.data.join("standby.signal").exists() && standby.data.join("recovery.signal").exists(), "--promote: {d}");

    // --check-changes: hashed, and nothing the WAL left out differed.
    let checked = out.join("checked");
    fresh(&repo, &checked, &full);
    let d = delta(&repo, &checked, &second, &["--check-changes"]);
    assert_eq!((said(&d, "method"), count(&d, "missed")), ("hash", 0), "{d}");
    assert!(count(&d, "bytes_compared") > 0, "{d}");
    // A block changed behind the WAL's back (the copy's own damage): the check names it and
    // fails; the restore, hashed, has put it right all the same.
    let damaged = checked.join(&untouched);
    std::fs::OpenOptions::new().write(true).open(&damaged).and_then(|f| std::os::unix::fs::FileExt::write_all_at(&f, &[0xAB; 8192], 8192)).unwrap();
    let o = run(sheaf().args(["restore", "--repo", repo.to_str().unwrap(), "--to", checked.to_str().unwrap(), "--set", &second, "--delta", "--check-changes"]));
    assert!(!o.status.success(), "a block the WAL did not name fails --check-changes");
    let e = stderr(&o);
    assert!(e.contains("did not name") && e.contains(&format!("{} bytes 8192..16384", damaged.display())), "{e}");
    same_relation_files(&reference, &checked, "the copy checked and put right");
    // --delta=hash: hashed, saying so.
    let d = delta(&repo, &checked, &second, &["--delta=hash"]);
    assert!(said(&d, "how").contains("--delta=hash"), "{d}");

    // Each starts and holds what the fresh restore does.
    let f = start_restored(&reference, false);
    let want = dump(&f);
    amcheck(&f);
    drop(f);
    for dir in [&copy, &standby.data.clone(), &checked] {
        let s = start_restored(dir, false);
        assert!(dump(&s) == want, "{} recovers to what a fresh restore does", dir.display());
        amcheck(&s);
    }

    // A former primary: a new standby promoted (timeline 2, archiving into the repository), the
    // old primary writing on, on timeline 1, before it is stopped cleanly.
    let promoted = Cluster::standby_of(&c, &[]);
    promoted.catch_up(&c);
    promoted.promote().unwrap();
    pgbench(&c, "200");
    c.sql("app", "CREATE TABLE only_on_the_old_timeline AS SELECT g FROM generate_series(1, 5000) g");
    archive_now(&c);
    c.stop();
    pgbench(&promoted, "200");
    let third = backup(&promoted, &repo, "full");
    archive_now(&promoted);
    let reference = out.join("fresh3");
    fresh(&repo, &reference, &third);
    // A copy of the old primary with its checksums switched off, where pg_checksums exists.
    let unsummed = out.join("unsummed");
    let copied = std::process::Command::new("cp").arg("-a").arg(&c.data).arg(&unsummed).status().unwrap().success();
    assert!(copied);
    let checksums = c.bin.join("pg_checksums");
    let can_disable = checksums.exists();
    if can_disable {
        let o = run(sheaf_pg::drill::scratch::as_server_user(&checksums).args(["--disable", "-D"]).arg(&unsummed));
        assert!(o.status.success(), "pg_checksums --disable: {}", stderr(&o));
    }

    let d = delta(&repo, &c.data, &third, &[]);
    assert_eq!(said(&d, "method"), "wal", "{d}");
    assert!(said(&d, "how").contains("a primary shut down cleanly") && said(&d, "how").contains("timeline 2"), "{d}");
    same_relation_files(&reference, &c.data, "the former primary");
    if can_disable {
        let d = delta(&repo, &unsummed, &third, &[]);
        assert_eq!(said(&d, "method"), "hash", "{d}");
        assert!(said(&d, "how").contains("pg_rewind's rule"), "{d}");
        same_relation_files(&reference, &unsummed, "the former primary without checksums");
    }
    let f = start_restored(&reference, false);
    let want = dump(&f);
    assert!(!want.contains("only_on_the_old_timeline"));
    drop(f);
    let s = start_restored(&c.data.clone(), false);
    assert!(dump(&s) == want, "the former primary recovers to what a fresh restore does");
    amcheck(&s);
}
