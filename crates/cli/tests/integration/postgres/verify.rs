//! `verify --repo`'s ledger: after a chain was verified, one more incremental costs only its own
//! stripes and the new WAL; an object written again (same name and size) is read again; what rots
//! in place without a trace is caught by `--full` and `--recheck-after`, not by the ledger.

use std::os::unix::fs::FileExt;

use super::repo::{archive_now, json, ok, setup};
use super::sheaf;
use crate::integration::common::run;

fn verify(r: &str, extra: &[&str]) -> serde_json::Value {
    let mut cmd = sheaf();
    cmd.args(["verify", "--repo", r, "--json"]).args(extra);
    json(ok(run(&mut cmd), "verify --repo"))
}

/// The backups verify read now, and those it took from the ledger.
fn split(v: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    let (read, kept): (Vec<_>, Vec<_>) = v["backups"].as_array().unwrap().iter().partition(|b| b["read"] == true);
    let ids = |l: Vec<&serde_json::Value>| l.iter().map(|b| b["id"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    (ids(read), ids(kept))
}

#[test]
fn verify_reads_only_what_is_new_or_changed() {
    let (_base, repo, c) = setup();
    let r = repo.to_str().unwrap();
    let url = c.url("postgres");
    let mut ids = Vec::new();
    for (round, kind) in ["full", "incr", "incr"].iter().enumerate() {
        c.sql("app", &format!("INSERT INTO t (id, batch) SELECT g, {round} FROM generate_series(1, 20000) g"));
        let b = json(ok(run(sheaf().args(["backup", &url, "--repo", r, "--type", kind, "--json"])), "backup"));
        ids.push(b["postgres"]["repository_id"].as_str().unwrap().to_string());
    }
    archive_now(&c);
    let first = verify(r, &[]);
    assert_eq!(split(&first), (ids.clone(), vec![]), "the first verify reads every backup: {first}");
    assert_eq!(first["wal_files_read"], first["wal_files"], "{first}");
    assert!(first["chains_checked"].as_u64().unwrap() == 2, "both incrementals' chains: {first}");
    let all_bytes = first["bytes_read"].as_u64().unwrap();

    // Nothing new: nothing read but the listing.
    let again = verify(r, &[]);
    assert_eq!(split(&again), (vec![], ids.clone()), "{again}");
    assert_eq!((again["wal_files_read"].as_u64(), again["bytes_read"].as_u64(), again["chains_checked"].as_u64()), (Some(0), Some(0), Some(0)), "{again}");
    assert_eq!(again["wal_files"], first["wal_files"]);

    // One more incremental: its stripes, its chain and the WAL archived since, nothing else.
    c.sql("app", "INSERT INTO t (id, batch) SELECT g, 9 FROM generate_series(1, 1000) g");
    let b = json(ok(run(sheaf().args(["backup", &url, "--repo", r, "--type", "incr", "--json"])), "backup"));
    let newest = b["postgres"]["repository_id"].as_str().unwrap().to_string();
    archive_now(&c);
    let third = verify(r, &[]);
    assert_eq!(split(&third), (vec![newest.clone()], ids.clone()), "{third}");
    assert_eq!(third["chains_checked"], 1, "only the new incremental's chain: {third}");
    let new_wal = third["wal_files_read"].as_u64().unwrap();
    assert!(new_wal >= 1 && new_wal < third["wal_files"].as_u64().unwrap(), "{third}");
    assert!(third["bytes_read"].as_u64().unwrap() < all_bytes, "{third}");

    // A stripe of the full written again in place, same size: its tag changed, so it is read
    // again and found damaged.
    let stripe = repo.join("backups").join(&ids[0]).join(format!("{}_1.sheaf", ids[0]));
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&stripe).unwrap();
    let len = f.metadata().unwrap().len();
    let mut byte = [0u8; 1];
    f.read_exact_at(&mut byte, len / 2).unwrap();
    f.write_all_at(&[byte[0] ^ 0x5a], len / 2).unwrap();
    f.sync_all().unwrap();
    let o = run(sheaf().args(["verify", "--repo", r]));
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(said.contains(&format!("backup {}:", ids[0])), "{said}");
    // Failures stay out of the ledger: read again and found again.
    let o = run(sheaf().args(["verify", "--repo", r]));
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));

    // Put back, then rotted in place with its date kept (as a disk's decay would): the ledger
    // cannot see that, --full and --recheck-after read it.
    f.write_all_at(&byte, len / 2).unwrap();
    f.sync_all().unwrap();
    let modified = f.metadata().unwrap().modified().unwrap();
    let mended = verify(r, &[]);
    assert!(split(&mended).0.contains(&ids[0]), "{mended}");
    f.write_all_at(&[byte[0] ^ 0x5a], len / 2).unwrap();
    f.set_modified(modified).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let blind = verify(r, &[]);
    assert!(split(&blind).1.contains(&ids[0]), "unchanged to the ledger: {blind}");
    std::thread::sleep(std::time::Duration::from_millis(2100));
    for extra in [&["--full"][..], &["--recheck-after", "1s"]] {
        let o = run(sheaf().args(["verify", "--repo", r]).args(extra));
        assert_eq!(o.status.code(), Some(3), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
    }
}
