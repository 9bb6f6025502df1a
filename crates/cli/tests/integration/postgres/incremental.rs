//! Incremental and differential backups of a real cluster while DDL churns and pgbench writes:
//! each restores through its chain to a cluster that starts, whose dump equals that of the full
//! backup recovered to the same point, and whose heaps and indexes pg_amcheck finds whole.

use std::path::Path;
use std::process::Stdio;

use super::cluster::Cluster;
use super::repo::{archive_now, json, ok, recover, setup, TestRepo};
use super::sheaf;
use crate::integration::common::{run, stderr, wait_while_running};

/// Every database's dump, less what differs between two dumps of the same data (comments with
/// times and versions, pg_dump's per-run restrict key, the tablespace's location).
fn dump(c: &Cluster) -> String {
    let o = run(c.tool("pg_dumpall").arg("--no-role-passwords"));
    assert!(o.status.success(), "pg_dumpall: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with("--") && !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        // Where each restore put the tablespace.
        .filter(|l| !l.starts_with("CREATE TABLESPACE space "))
        .collect::<Vec<_>>()
        .join("\n")
}

fn amcheck(c: &Cluster) {
    let o = run(c.tool("pg_amcheck").args(["--all", "--heapallindexed", "--install-missing"]));
    assert!(o.status.success(), "pg_amcheck: {}{}", stderr(&o), String::from_utf8_lossy(&o.stdout));
}

/// A backup of `kind`; incrementals and differentials with `--check-changes`: the page scan
/// decides, and the backup fails if the WAL summaries missed a page it found.
fn backup(c: &Cluster, repo: &TestRepo, kind: &str) -> serde_json::Value {
    let mut cmd = repo.sheaf();
    cmd.args(["backup", &c.url("postgres"), "--repo", &repo.arg, "--type", kind, "--json"]);
    if kind != "full" {
        cmd.arg("--check-changes");
    }
    json(ok(run(&mut cmd), &format!("backup --type {kind}")))
}

/// DDL of every kind that changes files without touching their pages one by one, then writes.
fn churn(c: &Cluster, round: u32, tablespace: &str) {
    for sql in [
        format!("CREATE TABLE ctas{round} AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 20000) g"),
        format!("CREATE INDEX ON ctas{round} (h)"),
        format!("CREATE DATABASE copied{round} STRATEGY FILE_COPY"),
        format!("CREATE DATABASE logged{round} STRATEGY WAL_LOG"),
        "TRUNCATE t".into(),
        format!("INSERT INTO t (id, batch) SELECT g, {round} FROM generate_series(1, 3000) g"),
        "VACUUM FULL pgbench_branches".into(),
        "CLUSTER pgbench_tellers USING pgbench_tellers_pkey".into(),
        format!("CREATE UNLOGGED TABLE unl{round} AS SELECT g FROM generate_series(1, 5000) g"),
        format!("ALTER TABLE unl{round} SET LOGGED"),
        format!("ALTER TABLE ctas{round} SET TABLESPACE {tablespace}"),
        format!("DELETE FROM pgbench_accounts WHERE aid BETWEEN {round}000 AND {round}500"),
        "VACUUM pgbench_accounts".into(),
    ] {
        c.sql("app", &sql);
    }
    if round > 1 {
        c.sql("postgres", &format!("DROP DATABASE copied{}", round - 1));
        c.sql("app", &format!("DROP TABLE ctas{}", round - 1));
    }
    ok(run(c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-t", "300", "app"]).stdout(Stdio::null())), "pgbench");
}

#[test]
fn incrementals_and_a_differential_under_churn_restore_like_the_full_recovered_to_their_point() {
    let base = super::cluster::server_tempdir("sheaf-churn.");
    under_churn(&base, &TestRepo::folder(base.path()));
}

/// The same in an encrypted repository in a bucket: WAL, its summaries and every set sealed.
#[test]
fn incrementals_under_churn_in_an_encrypted_bucket_restore_like_the_full() {
    let base = super::cluster::server_tempdir("sheaf-churn-s3.");
    under_churn(&base, &TestRepo::encrypted_bucket(base.path()));
}

fn under_churn(base: &tempfile::TempDir, repo: &TestRepo) {
    let c = repo.cluster();
    let r = repo.arg.as_str();
    let sheaf = || repo.sheaf();
    let space = base.path().join("space");
    super::cluster::pg_dir(&space);
    c.sql("postgres", &format!("CREATE TABLESPACE space LOCATION '{}'", space.display()));
    ok(run(c.tool("pgbench").args(["-i", "-s", "4", "-q", "app"])), "pgbench -i");

    // Asked for an incremental with nothing to build on: a full, saying why.
    let full = backup(&c, repo, "incr");
    assert_eq!(full["postgres"]["backup_type"], "full", "{full}");
    assert!(full["postgres"]["full_because"].as_str().unwrap().contains("no backup to build"), "{full}");
    let full_id = full["postgres"]["repository_id"].as_str().unwrap().to_string();

    // Writes alone: the incremental holds about what they touched.
    ok(run(c.tool("pgbench").args(["-n", "-c", "2", "-j", "1", "-t", "200", "app"]).stdout(Stdio::null())), "pgbench");
    archive_now(&c);
    // Without --check-changes: from the WAL summaries alone.
    let small = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--type", "incr", "--json"])), "backup --type incr"));
    assert_eq!(small["postgres"]["backup_type"], "incr", "{small}");
    assert_eq!(small["postgres"]["chain"], serde_json::json!([full_id]));
    assert!(small["postgres"]["method"].as_str().unwrap().starts_with("WAL summaries"), "{small}");
    // It reads only what it keeps (no page is read to be judged), a third of the full's or less
    // on this small cluster, where the WAL segment it needs (16 MiB) and the maps it stores whole
    // weigh most.
    assert_eq!(small["bytes_read"], small["bytes_held"], "reads only the pages named: {small}");
    assert!(small["bytes_read"].as_u64().unwrap() * 3 < full["bytes_read"].as_u64().unwrap(), "{small}");
    let (full_bytes, incr_bytes) = (full["bytes_written"].as_u64().unwrap(), small["bytes_written"].as_u64().unwrap());
    assert!(incr_bytes * 4 < full_bytes, "the incremental writes the change: {incr_bytes} of the full's {full_bytes}");
    let small_id = small["postgres"]["repository_id"].as_str().unwrap().to_string();

    churn(&c, 1, "space");
    let incr1 = backup(&c, repo, "incr");
    assert_eq!(incr1["postgres"]["chain"], serde_json::json!([full_id, small_id]), "{incr1}");
    assert!(incr1["postgres"]["method"].as_str().unwrap().starts_with("page scan, checked against the WAL summaries"), "{incr1}");

    churn(&c, 2, "pg_default");
    let diff = backup(&c, repo, "diff");
    assert_eq!(diff["postgres"]["chain"], serde_json::json!([full_id]), "a diff builds on the full: {diff}");
    churn(&c, 3, "space");
    let incr2 = backup(&c, repo, "incr");
    let diff_id = diff["postgres"]["repository_id"].as_str().unwrap().to_string();
    assert_eq!(incr2["postgres"]["chain"], serde_json::json!([full_id, diff_id]), "{incr2}");
    archive_now(&c);

    // Each incremental and the differential, recovered only to where it is consistent, against the
    // full recovered to the same LSN.
    let out = base.path().join("out");
    super::cluster::pg_dir(&out);
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let tablespace = |name: &str| format!("{}={}", space.display(), out.join(format!("{name}-space")).display());
    let mut dumps = std::collections::HashMap::new();
    for (name, b) in [("incr1", &incr1), ("diff", &diff), ("incr2", &incr2)] {
        let id = b["postgres"]["repository_id"].as_str().unwrap();
        let stop = b["postgres"]["stop_lsn"].as_str().unwrap();
        let ts = tablespace(name);
        let chain = repo.recover(&out.join(name), &["--set", id, "--target", "immediate", "--tablespace", &ts]);
        let ts = tablespace(&format!("{name}-full"));
        let whole = repo.recover(&out.join(format!("{name}-full")), &["--set", &full_id, "--target-lsn", stop, "--tablespace", &ts]);
        let (a, b) = (dump(&chain), dump(&whole));
        if a != b {
            let at = std::env::temp_dir().join(format!("sheaf-dump-{name}"));
            std::fs::write(at.with_extension("chain"), &a).unwrap();
            std::fs::write(at.with_extension("full"), &b).unwrap();
            panic!("{name}: the chain's dump differs from the full's recovered to {stop}: diff {}.chain {}.full", at.display(), at.display());
        }
        amcheck(&chain);
        dumps.insert(name, a);
    }

    // Delta: the directory incr1 was recovered into (and promoted there), stopped, made equal to
    // incr2 while rewriting only what differs.
    let incr2_id = incr2["postgres"]["repository_id"].as_str().unwrap();
    let ts = tablespace("incr1");
    let delta = json(ok(
        run(sheaf().args([
            "restore",
            "--repo",
            r,
            "--to",
            out.join("incr1").to_str().unwrap(),
            "--delta",
            "--set",
            incr2_id,
            "--target",
            "immediate",
            "--tablespace",
            &ts,
            "--json",
        ])),
        "restore --delta",
    ));
    let kept = &delta["delta"];
    assert!(kept["files_kept"].as_u64().unwrap() > 0 && kept["removed"].as_u64().unwrap() > 0, "{delta}");
    // Stopped with an immediate shutdown, its pages may hold any change of its WAL: hashed,
    // saying why (postgres::delta shows the WAL's way).
    assert_eq!(kept["method"], "hash", "{delta}");
    assert!(kept["how"].as_str().unwrap().contains("not shut down cleanly"), "{delta}");
    let updated = repo.start(&out.join("incr1"));
    assert!(dump(&updated) == dumps["incr2"], "a delta restore recovers to what a fresh one does");
    amcheck(&updated);
    drop(updated);
    // Refused: onto a running server, and onto another cluster's data directory.
    let busy = run(sheaf().args(["restore", "--repo", r, "--to", c.data.to_str().unwrap(), "--delta", "--tablespace", &ts]));
    assert!(!busy.status.success() && stderr(&busy).contains("is running"), "{}", stderr(&busy));
    let mut other = Cluster::new(&[], &[]);
    other.stop();
    let foreign = run(sheaf().args(["restore", "--repo", r, "--to", other.data.to_str().unwrap(), "--delta", "--tablespace", &ts]));
    assert!(!foreign.status.success() && stderr(&foreign).contains("a delta restore only updates a copy of the same cluster"), "{}", stderr(&foreign));
    // The repository's newest backup and all the WAL: the source as it is now.
    let ts = tablespace("end");
    let end = repo.recover(&out.join("end"), &["--tablespace", &ts]);
    assert!(dump(&end) == dump(&c), "restored to the end, the chain equals the source");

    // Consolidated, without the database: one full backup that recovers to what incr2 does.
    let merged = json(ok(run(sheaf().args(["consolidate", "--repo", r, "--set", incr2_id, "--json"])), "consolidate"));
    let merged_id = merged["record"]["id"].as_str().unwrap().to_string();
    assert_eq!(merged_id, format!("{incr2_id}-full"));
    assert_eq!(merged["record"]["backup_type"], "full");
    let ts = tablespace("merged");
    let from_merged = repo.recover(&out.join("merged"), &["--set", &merged_id, "--target", "immediate", "--tablespace", &ts]);
    assert!(dump(&from_merged) == dumps["incr2"], "the consolidated backup recovers to what its chain does");
    drop(from_merged);

    // A relation and one page out of the chain, as out of the consolidated full; and --db-include.
    for (set, to) in [(incr2_id, "x-chain"), (merged_id.as_str(), "x-merged")] {
        for block in [None, Some("3")] {
            let mut cmd = sheaf();
            cmd.args(["extract", "--repo", r, "--set", set, "--relation", "pgbench_accounts", "--database", "app", "--to"]).arg(out.join(to).join(block.unwrap_or("all")));
            if let Some(b) = block {
                cmd.args(["--block", b]);
            }
            ok(run(&mut cmd), "extract");
        }
    }
    let listing = |d: &Path| {
        let mut v: Vec<(String, Vec<u8>)> =
            std::fs::read_dir(d).unwrap().map(|e| e.unwrap()).map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())).collect();
        v.sort();
        v
    };
    for sub in ["all", "3"] {
        let (a, b) = (listing(&out.join("x-chain").join(sub)), listing(&out.join("x-merged").join(sub)));
        assert!(!a.is_empty() && a == b, "extract {sub}: the chain gives what its consolidation does");
    }
    let ts = tablespace("only-app");
    let only_app = repo.recover(&out.join("only-app"), &["--set", incr2_id, "--target", "immediate", "--db-include", "app", "--tablespace", &ts]);
    assert_eq!(only_app.sql("app", "SELECT count(*) FROM pgbench_accounts"), c.sql("app", "SELECT count(*) FROM pgbench_accounts"));
    drop(only_app);

    // The repository knows its chains, checks them whole, and expires a chain only as a whole.
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    let types: Vec<(&str, usize)> = info["backups"].as_array().unwrap().iter().map(|b| (b["backup_type"].as_str().unwrap(), b["chain"].as_array().map_or(0, Vec::len))).collect();
    assert_eq!(types, [("full", 0), ("incr", 1), ("incr", 2), ("diff", 1), ("incr", 2), ("full", 0)], "{info}");
    let text = ok(run(sheaf().args(["info", "--repo", r])), "info");
    let line = text.lines().find(|l| l.trim_start().starts_with(&small_id) && l.contains(" held: ")).unwrap_or_else(|| panic!("how {small_id} found its changes: {text}"));
    assert!(line.contains(&format!("incr on {full_id}")) && line.contains("WAL summaries:") && line.contains("blocks named"), "{line}");
    ok(run(sheaf().args(["verify", "--repo", r])), "verify --repo");
    let again = backup(&c, repo, "full");
    let expired = json(ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--json"])), "expire"));
    assert_eq!(expired["kept"], serde_json::json!([again["postgres"]["repository_id"]]), "{expired}");
    assert_eq!(expired["removed"].as_array().unwrap().len(), 6, "the old full goes with everything built on it: {expired}");
}

/// What goes wrong around incrementals, each named before anything is written or leaving nothing
/// that looks complete: a damaged parent, another cluster, an incremental killed mid-way; and a
/// timeline change between parent and child (restored, promoted, archiving on), whose
/// incremental restores to the promoted cluster.
#[test]
fn damaged_parents_other_clusters_kills_and_timeline_changes() {
    use super::repo::recover_with;
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let test_repo = TestRepo::existing(&repo);
    ok(run(c.tool("pgbench").args(["-i", "-s", "2", "-q", "app"])), "pgbench -i");
    let full = backup(&c, &test_repo, "full");
    let full_id = full["postgres"]["repository_id"].as_str().unwrap().to_string();
    let listing = || {
        let mut v: Vec<String> = std::fs::read_dir(repo.join("backups")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    };
    let before = listing();

    // The parent's stripe damaged: named, and nothing written.
    let stripe = repo.join("backups").join(&full_id).join(format!("{full_id}_1.sheaf"));
    let good = std::fs::read(&stripe).unwrap();
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 200] ^= 0x55;
    std::fs::write(&stripe, &bad).unwrap();
    let o = run(sheaf().args(["backup", &c.url("postgres"), "--repo", r, "--type", "incr"]));
    assert!(!o.status.success() && stderr(&o).contains(&format!("parent backup {full_id}")), "{}", stderr(&o));
    assert_eq!(listing(), before, "nothing written");
    std::fs::write(&stripe, &good).unwrap();

    // Another cluster's incremental into this repository: refused, nothing written.
    let other = Cluster::new(&[], &[]);
    let o = run(sheaf().args(["backup", &other.url("postgres"), "--repo", r, "--type", "incr"]));
    assert!(!o.status.success() && stderr(&o).contains("holds cluster"), "{}", stderr(&o));
    assert_eq!(listing(), before);
    drop(other);

    // Killed mid-way: no record; the next incremental builds on the full, and expire clears it.
    ok(run(c.tool("pgbench").args(["-n", "-t", "300", "app"]).stdout(Stdio::null())), "pgbench");
    let mut child = sheaf()
        .args(["backup", &c.url("postgres"), "--repo", r, "--type", "incr", "--check-changes", "--max-rate", "16KiB"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once it writes its stripe (a .partial under backups/ID/).
    let writing = || {
        std::fs::read_dir(repo.join("backups"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .any(|d| std::fs::read_dir(d.path()).unwrap().flatten().any(|f| f.file_name().to_string_lossy().ends_with(".partial")))
    };
    wait_while_running(&mut child, "the incremental writing its stripe", writing);
    child.kill().unwrap();
    child.wait().unwrap();
    let info = json(ok(run(sheaf().args(["info", "--repo", r, "--json"])), "info"));
    let states: Vec<&str> = info["backups"].as_array().unwrap().iter().map(|b| b["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["complete", "unfinished"], "{info}");
    c.sql(
        "postgres",
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND query ILIKE '%pg_backup%'",
    );
    let incr = backup(&c, &test_repo, "incr");
    assert_eq!(incr["postgres"]["chain"], serde_json::json!([full_id]), "{incr}");
    let expired = json(ok(run(sheaf().args(["expire", "--repo", r, "--keep-full", "1", "--json"])), "expire"));
    assert_eq!(expired["unfinished"].as_array().unwrap().len(), 1, "{expired}");
    assert!(expired["removed"].as_array().unwrap().is_empty(), "nothing finished goes: {expired}");
    archive_now(&c);

    // Restored to the end and promoted on timeline 2, archiving into the same repository: an
    // incremental there builds on the chain from timeline 1 and restores to what it holds.
    let out = base.path().join("out");
    super::cluster::pg_dir(&out);
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let promoted = recover_with(&repo, &out.join("promoted"), &[], true);
    assert_eq!(promoted.sql("postgres", "SELECT timeline_id FROM pg_control_checkpoint()"), "2");
    ok(run(promoted.tool("pgbench").args(["-n", "-t", "200", "app"]).stdout(Stdio::null())), "pgbench on timeline 2");
    promoted.sql("app", "CREATE TABLE after_promotion AS SELECT g FROM generate_series(1, 1000) g");
    // Summaries are followed across the branch: timeline 1 up to the segment it was left in, then
    // timeline 2 (whose first segment holds timeline 1's WAL up to the branch), checked against
    // the page scan. Timeline 1 goes on on the old cluster meanwhile, archiving into the same
    // repository: none of that is in timeline 2's history.
    c.sql("app", "CREATE TABLE only_on_one AS SELECT g FROM generate_series(1, 1000) g");
    archive_now(&c);
    let on_two = json(ok(run(sheaf().args(["backup", &promoted.url("postgres"), "--repo", r, "--type", "incr", "--check-changes", "--json"])), "backup on timeline 2"));
    assert_eq!(on_two["postgres"]["backup_type"], "incr", "{on_two}");
    assert!(on_two["postgres"]["method"].as_str().unwrap().contains("checked against the WAL summaries"), "{on_two}");
    assert_eq!(on_two["postgres"]["timeline"], 2);
    archive_now(&promoted);
    let id = on_two["postgres"]["repository_id"].as_str().unwrap();
    let back = recover(&repo, &out.join("back"), &["--set", id, "--target-timeline", "2"]);
    assert!(dump(&back) == dump(&promoted), "the incremental across the timeline change restores to the promoted cluster");
    amcheck(&back);
}
