//! Issue 54, part 5: `sheaf copy`. A chain of backups (a full with a pin and annotations, an
//! incremental on it, a drill) copied from a folder into a bucket of MinIO and back into a new
//! folder: drilled from each copy; a second run copies nothing; `check --compare-repo` names what a
//! copy lacks until `--all` fills it; a damaged object is named and not copied; a copy stopped
//! midway leaves nothing that looks finished and the next run completes it; a target of another
//! cluster is refused.

use super::super::cluster::give_to_server;
use super::*;
use crate::integration::common::{assert_fails, names, stdout};

fn backup(repo: &Path, c: &Cluster, extra: &[&str]) -> String {
    let b = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", repo.to_str().unwrap(), "--json"]).args(extra)), "backup"));
    b["postgres"]["repository_id"].as_str().unwrap().to_string()
}

#[test]
fn backups_copied_to_a_bucket_and_back_drill_and_a_second_copy_copies_nothing() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 1 FROM generate_series(1, 2000) g");
    let full = backup(&repo, &c, &["--annotation", "why=before the copy"]);
    ok(run(sheaf().args(["keep", "--repo", r, "--set", &full])), "keep");
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 2 FROM generate_series(2001, 3000) g");
    let incr = backup(&repo, &c, &["--type", "incr"]);
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 3 FROM generate_series(3001, 3500) g");
    archive_now(&c);
    let sql = base.path().join("rows.sql");
    std::fs::write(&sql, "SELECT count(*) = 3500 FROM t;\n").unwrap();
    give_to_server(&sql);

    // Into a bucket (empty: made a repository of the same cluster), the chain with its WAL.
    let minio = sheaf_s3::testing::Minio::start();
    minio.create_bucket("copies");
    let env = minio.env();
    let s3 = "s3://copies/pg";
    let to_s3 = || {
        let mut c = sheaf();
        c.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        c
    };
    let v = json(ok(run(to_s3().args(["copy", "--repo", r, "--to-repo", s3, "--set", &incr, "--json"])), "copy"));
    assert_eq!(v["copied"], serde_json::json!([full, incr]), "the chain, bases first: {v}");
    assert_eq!(v["created"], true, "{v}");
    assert!(v["wal_files"].as_u64().unwrap() >= 2 && v["frames"].as_u64().unwrap() > v["objects"].as_u64().unwrap(), "{v}");
    // Again: nothing.
    let again = ok(run(to_s3().args(["copy", "--repo", r, "--to-repo", s3, "--set", &incr])), "copy again");
    assert!(again.contains("nothing to copy") && again.contains(&incr), "{again}");
    // The copy holds the pin and the annotations, and its backups drill.
    let info = json(ok(run(to_s3().args(["info", "--repo", s3, "--json"])), "info of the copy"));
    assert_eq!(info["pins"][0]["id"], full.as_str(), "{info}");
    assert_eq!(info["backups"][0]["annotations"]["why"], "before the copy", "{info}");
    let work = base.path().join("drill-s3");
    let d = json(ok(
        run(to_s3().args(["drill", "--repo", s3, "--set", &incr, "--to", work.to_str().unwrap(), "--check-sql", sql.to_str().unwrap(), "--check-db", "app", "--json"])),
        "drill of the copy",
    ));
    assert_eq!(d["passed"], true, "{d}");

    // What the copy lacks is named; --all fills it.
    let newest = backup(&repo, &c, &[]);
    archive_now(&c);
    let o = run(to_s3().args(["check", "--repo", r, &c.url("postgres"), "--compare-repo", s3]));
    assert_eq!(o.status.code(), Some(1), "a warning: {}", stdout(&o));
    assert!(stdout(&o).contains(&format!("lacks 1 backup(s) ({newest})")) && stdout(&o).contains("--all"), "{}", stdout(&o));
    let v = json(ok(run(to_s3().args(["copy", "--repo", r, "--to-repo", s3, "--all", "--json"])), "copy --all"));
    assert_eq!(v["copied"], serde_json::json!([newest]), "{v}");
    assert_eq!(v["already"], serde_json::json!([full, incr]), "{v}");
    let o = run(to_s3().args(["check", "--repo", r, &c.url("postgres"), "--compare-repo", s3]));
    assert!(o.status.success() && stdout(&o).contains("holds every backup and WAL file"), "{}", stdout(&o));

    // And back, from the bucket into a new folder: the newest backup, drilled there.
    let back = base.path().join("back");
    ok(run(to_s3().args(["copy", "--repo", s3, "--to-repo", back.to_str().unwrap(), "--latest"])), "copy back");
    let d = json(ok(run(sheaf().args(["drill", "--repo", back.to_str().unwrap(), "--to", base.path().join("drill-back").to_str().unwrap(), "--json"])), "drill of the copy back"));
    assert_eq!((d["passed"].as_bool(), d["backup"].as_str()), (Some(true), Some(newest.as_str())), "{d}");
    let v = json(ok(run(sheaf().args(["verify", "--repo", back.to_str().unwrap(), "--json"])), "verify the copy back"));
    assert_eq!(v["ok"], true, "{v}");

    // A damaged object in the source is named, and nothing of it is copied.
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 4 FROM generate_series(3501, 3600) g");
    let seg = archive_now(&c);
    let object = repo.join("wal/00000001").join(format!("{seg}.wal"));
    let mut bytes = std::fs::read(&object).unwrap();
    let mid = 64 + 40 + 10;
    bytes[mid] ^= 0x20;
    std::fs::write(&object, &bytes).unwrap();
    let o = run(to_s3().args(["copy", "--repo", r, "--to-repo", s3, "--all"]));
    assert_fails(&o, 3, &[&seg, "checksum mismatch"]);
    let o = run(to_s3().args(["check", "--repo", r, &c.url("postgres"), "--compare-repo", s3]));
    assert!(stdout(&o).contains(&format!("the first {seg}")), "the copy lacks it: {}", stdout(&o));
}

#[test]
fn a_copy_stopped_midway_leaves_nothing_finished_and_the_next_run_completes_it() {
    let (base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    c.sql("app", "CREATE TABLE big AS SELECT g, md5(g::text) AS h FROM generate_series(1, 200000) g");
    let id = backup(&repo, &c, &["--compression", "none"]);
    archive_now(&c);
    // Held to 2 MiB/s, the copy takes seconds: stopped once its first objects are there.
    let target = base.path().join("copy");
    let child = sheaf().args(["copy", "--repo", r, "--to-repo", target.to_str().unwrap(), "--latest", "--max-rate", "2MiB"]).spawn().unwrap();
    // Stopped while its stripe is being written.
    let holds = || names(&target).iter().any(|n| n.starts_with(&format!("backups/{id}/")) && !n.ends_with(&format!("backups/{id}/")));
    let code = super::super::interrupt::interrupt_when(child, rustix::process::Signal::TERM, "copy", holds);
    assert_eq!(code, 143, "stopped by SIGTERM, as every command is");
    assert!(!target.join(format!("backups/{id}.json")).exists(), "no record: nothing looks finished");
    let info = json(ok(run(sheaf().args(["info", "--repo", target.to_str().unwrap(), "--json"])), "info of the stopped copy"));
    let found = info["backups"].as_array().unwrap();
    assert!(found.iter().any(|b| b["id"] == id.as_str() && b["state"] == "unfinished") && found.iter().all(|b| b["state"] != "complete"), "{info}");
    // The next run completes it.
    let v = json(ok(run(sheaf().args(["copy", "--repo", r, "--to-repo", target.to_str().unwrap(), "--latest", "--json"])), "copy again"));
    assert_eq!(v["copied"], serde_json::json!([id]), "{v}");
    let v = json(ok(run(sheaf().args(["verify", "--repo", target.to_str().unwrap(), "--json"])), "verify"));
    assert_eq!(v["ok"], true, "{v}");

    // Archived WAL is never replaced: a different file under a segment's name in the target (of
    // another size) is named, and stays as it was.
    let wal = |dir: &Path| {
        let mut v: Vec<PathBuf> = names(dir).into_iter().filter(|n| n.starts_with("wal/") && n.ends_with(".wal")).map(|n| dir.join(n)).collect();
        v.sort();
        v
    };
    let segs = wal(&target);
    let size = |p: &PathBuf| std::fs::metadata(p).unwrap().len();
    let (a, b) = segs.iter().flat_map(|a| segs.iter().map(move |b| (a, b))).find(|(a, b)| size(a) != size(b)).expect("two archived segments of different sizes");
    std::fs::copy(b, a).unwrap();
    let planted = std::fs::read(a).unwrap();
    let name = a.file_name().unwrap().to_str().unwrap().trim_end_matches(".wal").to_string();
    let o = run(sheaf().args(["copy", "--repo", r, "--to-repo", target.to_str().unwrap(), "--latest"]));
    assert_fails(&o, 8, &["holds a different", &name, "never overwritten"]);
    assert_eq!(std::fs::read(a).unwrap(), planted, "left as it was");

    // Into a repository of another cluster: refused, naming both.
    let (_b2, other_repo, other) = setup();
    let o = run(sheaf().args(["copy", "--repo", r, "--to-repo", other_repo.to_str().unwrap(), "--latest"]));
    let theirs = other.sql("postgres", "SELECT system_identifier FROM pg_control_system()");
    assert_fails(&o, 2, &["a copy goes only into a repository of the same cluster", &theirs]);
}

/// Into encrypted repositories: from one that is not, every frame is sealed on the way (nothing
/// decompressed); between two, each object's data key is sealed again for the target. Each copy
/// opens with its own secret only (fail closed), restores to a server with the source's rows, and
/// a second run copies nothing; a copy out of an encrypted repository into one that is not, or
/// into an empty place, is refused before anything is written.
#[test]
fn backups_copied_into_encrypted_repositories_open_with_the_targets_secret_only() {
    let base = super::super::cluster::server_tempdir("sheaf-copy-enc.");
    let secret = |name: &str, text: &str| {
        let p = base.path().join(name);
        std::fs::write(&p, format!("{text}\n")).unwrap();
        super::super::cluster::server_secret(&p);
        p.display().to_string()
    };
    let (pb, pc) = (secret("b.pass", "the first copy's passphrase"), secret("c.pass", "the bucket's own passphrase"));
    let folder = |name: &str| {
        let p = base.path().join(name);
        pg_dir(&p);
        p.display().to_string()
    };
    let (a, b, plain) = (folder("a"), folder("b"), folder("plain"));
    let c = archiving(Path::new(&a), &[]);
    ok(run(sheaf().args(["init", "--repo", &a, &c.url("postgres")])), "init the source, not encrypted");
    ok(run(sheaf().args(["init", "--repo", &b, "--passphrase-file", &pb, &c.url("postgres")])), "init an encrypted copy");
    ok(run(sheaf().args(["init", "--repo", &plain, &c.url("postgres")])), "init another that is not encrypted");
    c.sql("postgres", "CREATE DATABASE app");
    c.sql("app", "CREATE TABLE t AS SELECT g AS id, md5(g::text) AS h FROM generate_series(1, 20000) g");
    let full = json(ok(run(sheaf().args(["backup", &c.url("postgres"), "--repo", &a, "--annotation", "why=sealed on the way", "--json"])), "backup"));
    let full = full["postgres"]["repository_id"].as_str().unwrap().to_string();
    c.sql("app", "INSERT INTO t SELECT g, md5(g::text) FROM generate_series(20001, 25000) g");
    archive_now(&c);
    let rows = c.sql("app", "SELECT count(*) || ' ' || md5(string_agg(h, '' ORDER BY id)) FROM t");

    // Sealed on the way into b; without b's secret nothing opens there, and that is named.
    let into_b = |extra: &[&str]| run(sheaf().args(["copy", "--repo", &a, "--to-repo", &b]).args(extra));
    assert_fails(&into_b(&["--latest"]), 9, &["--to-passphrase-file"]);
    let v = json(ok(into_b(&["--to-passphrase-file", &pb, "--latest", "--json"]), "copy into the encrypted repository"));
    assert_eq!(v["copied"], serde_json::json!([full]), "{v}");
    assert!(v["wal_files"].as_u64().unwrap() >= 1 && v["frames"].as_u64().unwrap() > 0, "{v}");
    let stripe = format!("backups/{full}/{full}_1.sheaf");
    let (sa, sb) = (std::fs::read(Path::new(&a).join(&stripe)).unwrap(), std::fs::read(Path::new(&b).join(&stripe)).unwrap());
    assert!(sb.len() > sa.len() + 96, "every frame sealed: {} against {}", sb.len(), sa.len());
    let again = ok(into_b(&["--to-passphrase-file", &pb, "--latest"]), "copy again");
    assert!(again.contains("nothing to copy"), "{again}");
    let o = run(sheaf().args(["check", "--repo", &a, &c.url("postgres"), "--compare-repo", &b, "--compare-passphrase-file", &pb]));
    assert!(o.status.success() && stdout(&o).contains("holds every backup and WAL file"), "{}{}", stdout(&o), stderr(&o));

    // Fail closed: without a secret, or with another, nothing in b opens; with b's it verifies,
    // shows the annotation, and restores to the rows archived before the copy.
    assert_fails(&run(sheaf().args(["verify", "--repo", &b])), 9, &[]);
    assert_fails(&run(sheaf().args(["verify", "--repo", &b, "--passphrase-file", &pc])), 9, &[]);
    let v = json(ok(run(sheaf().args(["verify", "--repo", &b, "--passphrase-file", &pb, "--json"])), "verify the copy with its own passphrase"));
    assert_eq!(v["ok"], true, "{v}");
    let info = json(ok(run(sheaf().args(["info", "--repo", &b, "--passphrase-file", &pb, "--json"])), "info of the copy"));
    assert_eq!(info["backups"][0]["annotations"]["why"], "sealed on the way", "{info}");
    let back = recover(Path::new(&b), &base.path().join("back"), &["--passphrase-file", &pb]);
    assert_eq!(back.sql("app", "SELECT count(*) || ' ' || md5(string_agg(h, '' ORDER BY id)) FROM t"), rows, "the rows archived before the copy");

    // On from b into a bucket with a passphrase of its own: only each key block changes.
    let minio = sheaf_s3::testing::Minio::start();
    minio.create_bucket("encrypted");
    let env = minio.env();
    let s3 = |args: &[&str]| {
        let mut cmd = sheaf();
        cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str()))).args(args);
        run(&mut cmd)
    };
    let bucket = "s3://encrypted/pg";
    ok(s3(&["init", "--repo", bucket, "--passphrase-file", &pc, &c.url("postgres")]), "init the bucket");
    let v = json(ok(s3(&["copy", "--repo", &b, "--passphrase-file", &pb, "--to-repo", bucket, "--to-passphrase-file", &pc, "--all", "--json"]), "copy into the bucket"));
    assert_eq!(v["copied"], serde_json::json!([full]), "{v}");
    let v = json(ok(s3(&["verify", "--repo", bucket, "--passphrase-file", &pc, "--json"]), "verify the bucket with its passphrase"));
    assert_eq!(v["ok"], true, "{v}");
    assert_fails(&s3(&["verify", "--repo", bucket, "--passphrase-file", &pb]), 9, &[]);

    // Refused, each before anything is written: out of an encrypted repository into the clear,
    // and into nothing.
    assert_fails(&run(sheaf().args(["copy", "--repo", &b, "--passphrase-file", &pb, "--to-repo", &plain, "--latest"])), 2, &["is encrypted and", "in the clear"]);
    let empty = base.path().join("empty");
    assert_fails(&run(sheaf().args(["copy", "--repo", &b, "--passphrase-file", &pb, "--to-repo", empty.to_str().unwrap(), "--latest"])), 2, &["holds no repository", "sheaf init"]);
    assert!(names(&Path::new(&plain).join("backups")).is_empty() && !empty.join("repo.json").exists(), "nothing was written");
}
