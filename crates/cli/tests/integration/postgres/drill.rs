//! `sheaf drill` on a real repository: a backup restored, started, recovered and checked on a
//! scratch server, recorded, and seen by info, check and the metrics; and each kind of damage a
//! drill must find: a failing --check-sql, a missing WAL segment, and an index page corrupted in
//! a cluster without page checksums (which no checksum of sheaf's can see).

use std::path::Path;

use super::cluster::Cluster;
use super::monitor::sample;
use super::repo::{archive_now, archiving_with, json, ok, repo_dir, setup};
use super::sheaf;
use crate::integration::common::{run, stderr, stdout};

/// Every file under `repo`, relative to it.
fn listing(repo: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![repo.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().map(Result::unwrap) {
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else {
                out.push(e.path().strip_prefix(repo).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_drill_proves_a_backup_and_records_it() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let url = c.url("postgres");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 100) g");
    c.sql("app", "CREATE INDEX t_id ON t (id)");
    let b = json(ok(run(sheaf().args(["backup", &url, "--repo", r, "--json"])), "backup"));
    let id = b["postgres"]["repository_id"].as_str().unwrap().to_string();
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(101, 200) g");
    archive_now(&c);

    // The drill replays past the backup to the end of the archive and checks it all.
    let sql = base.path().join("canary.sql");
    std::fs::write(&sql, "SELECT count(*) = 200 FROM t;\nSET search_path = public;\nSELECT max(batch) = 2 FROM t;\n").unwrap();
    super::cluster::give_to_server(&sql);
    let work = base.path().join("drill");
    let before = listing(&repo);
    let o = run(sheaf().args(["drill", "--repo", r, "--to", work.to_str().unwrap(), "--check-sql", sql.to_str().unwrap(), "--check-db", "app", "--json"]));
    // Recorded in the catalog as well, without a word (a catalog that refused drills warned).
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    let d = json(ok(o, "drill"));
    assert_eq!(d["passed"], true, "{d}");
    assert_eq!(d["backup"], id.as_str());
    assert_eq!(d["target"], "end of archive");
    let checks: Vec<&str> = d["checks"].as_array().unwrap().iter().map(|c| c["check"].as_str().unwrap()).collect();
    // Numbered by statement: the SET between the two queries is the second.
    for want in ["connect app", "connect postgres", "pg_amcheck", "check-sql 1", "check-sql 3"] {
        assert!(checks.contains(&want), "{want} not among {checks:?}");
    }
    assert!(d["wal_bytes_replayed"].as_u64().unwrap() > 0, "{d}");
    let p = &d["phases"];
    let sum = p["restore_seconds"].as_f64().unwrap() + p["recovery_seconds"].as_f64().unwrap() + p["checks_seconds"].as_f64().unwrap();
    assert!(p["restore_seconds"].as_f64().unwrap() > 0.0 && (p["total_seconds"].as_f64().unwrap() - sum).abs() < 1e-6, "{p}");
    assert!(!work.exists(), "the drill's folder is removed");
    // It wrote its record into the repository and nothing else (no WAL of the new timeline).
    let added: Vec<String> = listing(&repo).into_iter().filter(|n| !before.contains(n)).collect();
    assert_eq!(added.len(), 1, "{added:?}");
    assert!(added[0].starts_with("drills/") && added[0].ends_with(&format!("_{id}.json")), "{added:?}");

    // info, check and the metrics see it.
    let info = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(info.lines().any(|l| l.starts_with(&id) && l.contains("[drill passed")), "{info}");
    let check = || {
        let o = run(sheaf().args(["check", &url, "--repo", r, "--max-drill-age", "7d", "--json"]));
        (o.status.code(), json(stdout(&o)))
    };
    let (code, findings) = check();
    assert_eq!(code, Some(0), "{findings}");
    let drill_status = |j: &serde_json::Value| j["findings"].as_array().unwrap().iter().find(|f| f["check"] == "drill").map(|f| f["status"].as_str().unwrap().to_string());
    assert_eq!(drill_status(&findings).as_deref(), Some("ok"), "{findings}");
    let prom = || ok(run(sheaf().args(["info", "--repo", r, "--format", "prometheus"])), "metrics");
    let label = format!("{{repo=\"{r}\"}}");
    assert_eq!(sample(&prom(), &format!("sheaf_drill_last_result{label}")), Some(1.0));
    assert!(sample(&prom(), &format!("sheaf_drill_last_success_timestamp_seconds{label}")).is_some());
    assert!(prom().contains("sheaf_drill_last_phase_seconds{") && prom().contains("phase=\"total\""), "{}", prom());

    // A business invariant that does not hold fails the drill (exit 3) and is recorded.
    let bad = base.path().join("bad.sql");
    std::fs::write(&bad, "SELECT count(*) = 999 FROM t;\n").unwrap();
    super::cluster::give_to_server(&bad);
    let o = run(sheaf().args(["drill", "--repo", r, "--check-sql", bad.to_str().unwrap(), "--check-db", "app"]));
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("FAILED") && stdout(&o).contains("check-sql 1: returned f: SELECT count(*) = 999 FROM t"),
        "the failing query named by what it says: {}",
        stdout(&o)
    );
    let (code, findings) = check();
    assert_eq!(code, Some(2), "{findings}");
    assert_eq!(drill_status(&findings).as_deref(), Some("critical"), "{findings}");
    assert_eq!(sample(&prom(), &format!("sheaf_drill_last_result{label}")), Some(0.0));
    let info = ok(run(sheaf().args(["info", "--repo", r])), "info");
    assert!(info.contains("[drill FAILED"), "{info}");

    // A segment missing between the backup and the end of the archive: exit 4, recorded.
    archive_now(&c);
    let gone = archive_now(&c);
    archive_now(&c);
    std::fs::remove_file(repo.join("wal").join(&gone[..8]).join(format!("{gone}.wal"))).unwrap();
    let o = run(sheaf().args(["drill", "--repo", r, "--json"]));
    assert_eq!(o.status.code(), Some(4), "{}{}", stdout(&o), stderr(&o));
    let d = json(stdout(&o));
    assert_eq!(d["passed"], false);
    assert!(d["failure"].as_str().unwrap().contains(&gone), "{d}");
}

/// Overwrite the key of the middle item of B-tree leaf block 1 of `file` with the largest int4:
/// the keys are out of order, which amcheck sees and no page checksum can (there is none).
fn corrupt_btree_leaf(file: &Path) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(file).unwrap();
    let mut page = vec![0u8; 8192];
    f.seek(SeekFrom::Start(8192)).unwrap();
    f.read_exact(&mut page).unwrap();
    let lower = u16::from_le_bytes([page[12], page[13]]) as usize;
    let items = (lower - 24) / 4;
    assert!(items > 10, "block 1 holds {items} items");
    let at = 24 + 4 * (items / 2);
    let lp = u32::from_le_bytes(page[at..at + 4].try_into().unwrap());
    let off = (lp & 0x7fff) as usize;
    page[off + 8..off + 12].copy_from_slice(&i32::MAX.to_le_bytes());
    f.seek(SeekFrom::Start(8192)).unwrap();
    f.write_all(&page).unwrap();
    f.sync_all().unwrap();
}

#[test]
fn a_drill_finds_an_index_corrupted_where_no_checksum_can_see() {
    let (base, repo) = repo_dir();
    let r = repo.to_str().unwrap();
    // Page checksums off, as many clusters still run.
    let mut c: Cluster = archiving_with(&repo, &["--no-data-checksums"], &[]);
    assert_eq!(c.sql("postgres", "SHOW data_checksums"), "off");
    ok(run(sheaf().args(["init", "--repo", r, &c.url("postgres")])), "init");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t (id int); INSERT INTO t SELECT g FROM generate_series(1, 2000) g; CREATE INDEX t_id ON t (id); CHECKPOINT");
    let file = c.data.join(c.sql("app", "SELECT pg_relation_filepath('t_id')"));
    c.stop();
    corrupt_btree_leaf(&file);
    c.start();
    // The backup reads the page as it is: nothing tells it the page is wrong.
    ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r])), "backup of the damaged cluster");
    archive_now(&c);
    let o = run(sheaf().args(["drill", "--repo", r]));
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    let said = stdout(&o);
    assert!(said.contains("FAIL pg_amcheck") && said.contains("t_id"), "{said}");

    // Where the server has no pg_amcheck: the amcheck extension's functions, database by
    // database, find it too, and pass the databases that are whole.
    let bin = base.path().join("bin-without-pg_amcheck");
    std::fs::create_dir(&bin).unwrap();
    for e in std::fs::read_dir(&c.bin).unwrap().flatten() {
        if e.file_name() != "pg_amcheck" {
            std::os::unix::fs::symlink(e.path(), bin.join(e.file_name())).unwrap();
        }
    }
    let o = run(sheaf().args(["drill", "--repo", r, "--pg-bin", bin.to_str().unwrap(), "--json"]));
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    let d: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let check = |name: &str| d["checks"].as_array().unwrap().iter().find(|c| c["check"] == name).cloned().unwrap_or_else(|| panic!("no {name} in {d}"));
    let (app, postgres) = (check("amcheck app"), check("amcheck postgres"));
    assert_eq!(app["ok"], false, "{d}");
    assert!(app["detail"].as_str().unwrap().contains("t_id"), "{app}");
    assert_eq!(postgres["ok"], true, "{postgres}");
}
