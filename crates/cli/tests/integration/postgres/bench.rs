//! `sheaf bench --dataset tpch:SCALE` on a small real cluster, with its peers: every permutation
//! and peer measured, the report files and plots written, the runs in the catalog, nothing left.

use std::os::unix::fs::PermissionsExt;

use super::cluster::assert_no_server_on;
use crate::integration::common::{run, sheaf};

/// A scratch folder with the bench's target, report and catalog paths; the target made, both
/// reachable by the server's user (pgBackRest runs as postgres and keeps its repository under the
/// target, as the bench's repository for incrementals is).
fn bench_dirs() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (target, out, catalog) = (dir.path().join("target"), dir.path().join("report"), dir.path().join("catalog.db"));
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, target, out, catalog)
}

#[test]
fn a_bench_on_a_small_tpch_cluster_measures_sheaf_and_its_peers() {
    let (_dir, target, out, catalog) = bench_dirs();
    let o = run(sheaf()
        .arg("--catalog")
        .arg(&catalog)
        .args(["bench", "--dataset", "tpch:0.01", "-c", "lz4,zstd:low", "--stripes", "1,2", "--repeat", "2", "--peers", "pg_basebackup,pgbackrest"])
        .arg("--target")
        .arg(format!("nul,{}", target.display()))
        .arg("--out")
        .arg(&out));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let cluster = stderr.lines().find_map(|l| l.strip_prefix("sheaf bench: cluster in ")).map(|l| std::path::PathBuf::from(l.split(" on port ").next().unwrap()));
    let cluster = cluster.unwrap_or_else(|| panic!("the bench names its cluster: {stderr}"));
    assert!(!cluster.exists(), "the throwaway cluster {} is removed", cluster.display());
    assert!(!stderr.contains("warning"), "every peer ran: {stderr}");
    assert!(stderr.contains("[1/28] sheaf lz4 x1 1 MiB buf=default -> nul (run 1 of 2)"), "progress names permutation and repeat: {stderr}");
    // A warm cache is made before the first timed run, not assumed.
    let warm = stderr.find("sheaf bench: cache warm: read ").unwrap_or_else(|| panic!("no warm-up: {stderr}"));
    assert!(warm < stderr.find("[1/28]").unwrap(), "the warm-up comes first: {stderr}");
    assert!(stderr[warm..].lines().next().unwrap().contains("MiB in "), "{stderr}");
    assert!(stderr.contains("[2/28, ") && stderr.contains("s left] sheaf lz4 x1 1 MiB buf=default -> nul (run 2 of 2)"), "progress gives an ETA: {stderr}");

    // 2 codecs x 2 stripe counts x 2 targets for sheaf; per codec pg_basebackup server- and
    // client-side and pgBackRest.
    let mut csv = csv::Reader::from_path(out.join("report.csv")).unwrap();
    let rows: Vec<std::collections::HashMap<String, String>> = csv.deserialize().collect::<Result<_, _>>().unwrap();
    assert_eq!(rows.len(), 8 + 6, "{rows:#?}");
    let f = |r: &std::collections::HashMap<String, String>, k: &str| r[k].parse::<f64>().unwrap_or_else(|_| panic!("{k} = '{}'", r[k]));
    let tools: Vec<&str> = rows.iter().map(|r| r["tool"].as_str()).collect();
    for t in ["sheaf", "pg_basebackup (server)", "pg_basebackup (client)", "pgbackrest"] {
        assert!(tools.contains(&t), "{t} in {tools:?}");
    }
    for r in &rows {
        assert!(f(r, "backup_s_median") > 0.0 && f(r, "size_bytes_median") > 1e6, "{r:?}");
        assert_eq!(f(r, "repeats"), 2.0);
        let to_disk = r["target"] != "nul";
        assert_eq!(!r["restore_s_median"].is_empty(), to_disk, "restores are timed for disk targets only: {r:?}");
        if r["tool"] == "sheaf" {
            assert!(f(r, "bytes_read") > 10e6, "{r:?}");
            assert_eq!(!r["verify_s_median"].is_empty(), to_disk, "{r:?}");
            assert!(f(r, "backup_peak_rss_bytes_median") > 1e6, "{r:?}");
        }
    }
    // The same data, the same codec: sizes agree across tools within reason.
    let size = |tool: &str, codec: &str| f(rows.iter().find(|r| r["tool"] == tool && r["compression"] == codec).unwrap(), "size_bytes_median");
    for codec in ["lz4", "zstd:low"] {
        let (s, b) = (size("sheaf", codec), size("pgbackrest", codec));
        assert!(s / b > 0.7 && s / b < 1.4, "{codec}: sheaf {s} vs pgBackRest {b}");
    }
    assert!(size("sheaf", "zstd:low") < size("sheaf", "lz4"), "zstd:low compresses better than lz4");

    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(json["samples"].as_array().unwrap().len(), 28);
    assert_eq!(json["rows"].as_array().unwrap().len(), 14);
    assert!(json["info"]["cache"].as_str().unwrap().starts_with("warm"));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| tool | type | compression | stripes |") && md.contains("![size vs backup time](size_vs_backup_time.svg)"), "{md}");
    // The disk's own rate, once per repeat, for the bytes a full restore writes; each full
    // restore's share of it in the report.
    let disk = json["disk"].as_array().expect("disk in report.json");
    assert_eq!(disk.len(), 2, "{disk:#?}");
    let full_read = rows.iter().filter(|r| r["tool"] == "sheaf").map(|r| f(r, "bytes_read")).fold(0.0, f64::max);
    for d in disk {
        let bytes = d["bytes"].as_f64().unwrap();
        assert!(bytes >= full_read && bytes < full_read + f64::from(1 << 20), "{d:#} against {full_read}");
        assert!(d["cost"]["seconds"].as_f64().unwrap() > 0.0, "{d:#}");
    }
    assert!(md.contains("The disk's limit: dd oflag=direct wrote") && md.contains("Full restores at that rate (dd's time over the restore's): lz4 ×1 "), "{md}");
    for plot in ["size_vs_backup_time", "throughput_vs_stripes", "throughput_vs_transfer_size", "throughput_vs_buffer_count", "cpu_per_codec"] {
        for ext in ["svg", "png"] {
            let len = std::fs::metadata(out.join(format!("{plot}.{ext}"))).map(|m| m.len()).unwrap_or(0);
            assert!(len > 2000, "{plot}.{ext}: {len} bytes");
        }
    }
    let svg = std::fs::read_to_string(out.join("size_vs_backup_time.svg")).unwrap();
    assert!(svg.contains("pgbackrest") && svg.contains("pg_basebackup (server)"), "peers are plotted");

    // Every sheaf operation is in the catalog, complete.
    let list = run(sheaf().arg("--catalog").arg(&catalog).args(["list", "--json", "--limit", "1000"]));
    let runs: Vec<serde_json::Value> = serde_json::from_slice(&list.stdout).unwrap();
    let count = |op: &str| runs.iter().filter(|r| r["operation"] == op && r["status"] == "complete").count();
    // 16 timed backups and the untimed warm-up, labelled as such.
    assert_eq!((count("backup"), count("verify"), count("restore")), (17, 8, 8), "{runs:#?}");
    assert_eq!(runs.len(), 33, "no failed runs");
    assert_eq!(runs.iter().filter(|r| r["label"].as_str().is_some_and(|l| l.contains("warm-up (untimed)"))).count(), 1, "{runs:#?}");
    // Stripes, restores and pgBackRest's repository are gone.
    let left: Vec<_> = std::fs::read_dir(&target).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "left in the target: {left:?}");
}

#[test]
fn a_bench_of_incrementals_restores_each_chain_beside_the_peers() {
    let (_dir, target, out, catalog) = bench_dirs();
    let o = run(sheaf()
        .arg("--catalog")
        .arg(&catalog)
        .args(["bench", "--dataset", "tpch:0.01", "-c", "none", "--type", "full,incr,incr,rewind", "--change", "5%", "--repeat", "1", "--peers", "pg_basebackup,pgbackrest"])
        .arg("--target")
        .arg(&target)
        .arg("--out")
        .arg(&out));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(stderr.contains("changing about 5 % of the pages (round 1, untimed)"), "{stderr}");
    let mut csv = csv::Reader::from_path(out.join("report.csv")).unwrap();
    let rows: Vec<std::collections::HashMap<String, String>> = csv.deserialize().collect::<Result<_, _>>().unwrap();
    let f = |r: &std::collections::HashMap<String, String>, k: &str| r[k].parse::<f64>().unwrap_or_else(|_| panic!("{k} = '{}'", r[k]));
    let row = |tool: &str, t: &str| rows.iter().find(|r| r["tool"] == tool && r["backup_type"] == t);
    let full = row("sheaf", "full").expect("sheaf's full");
    // Each incremental holds its change, not the cluster; each was restored (through its chain:
    // the second builds on the first) and timed.
    for t in ["incr", "incr 2"] {
        let incr = row("sheaf", t).unwrap_or_else(|| panic!("sheaf's {t}: {rows:#?}"));
        assert!(f(incr, "size_bytes_median") * 4.0 < f(full, "size_bytes_median"), "{incr:?} against {full:?}");
        assert!(f(incr, "bytes_read") < f(full, "bytes_read"), "{incr:?}");
        assert!(f(incr, "restore_s_median") > 0.0 && f(incr, "backup_s_median") > 0.0, "{incr:?}");
        // And restored by --delta onto a restore of the backup before it, timed.
        assert!(f(incr, "delta_restore_s_median") > 0.0, "{incr:?}");
    }
    assert_eq!(full["delta_restore_s_median"], "", "a full has no backup before it: {full:?}");
    // The cycle's last backup, and only it, consolidated into a full backup, timed.
    assert!(f(row("sheaf", "incr 2").unwrap(), "consolidate_s_median") > 0.0, "{rows:#?}");
    assert_eq!(row("sheaf", "incr").unwrap()["consolidate_s_median"], "", "{rows:#?}");
    assert!(f(full, "restore_s_median") > 0.0, "{full:?}");
    // Each peer measured where it can run: pgBackRest 2.45 up to PostgreSQL 17 (its block
    // incremental and its file-level one, each a tool of the report, each with its delta
    // restores), pg_basebackup --incremental from 17 on; otherwise a warning says why.
    let mut peers = 0;
    for (tool, skipped) in
        [("pgbackrest block", "peer pgbackrest skipped"), ("pgbackrest file", "peer pgbackrest skipped"), ("pg_basebackup -Fp", "pg_basebackup --incremental skipped")]
    {
        match (row(tool, "full"), row(tool, "incr"), row(tool, "incr 2")) {
            (Some(pf), Some(pi), Some(pi2)) => {
                peers += 1;
                for i in [pi, pi2] {
                    assert!(f(i, "size_bytes_median") < f(pf, "size_bytes_median"), "{tool}: {i:?} against {pf:?}");
                    assert!(f(i, "restore_s_median") > 0.0, "{i:?}");
                    if tool.starts_with("pgbackrest") {
                        assert!(f(i, "delta_restore_s_median") > 0.0, "{i:?}");
                    }
                }
            }
            _ => assert!(stderr.contains(skipped), "{tool} measured or skipped with a reason: {stderr}"),
        }
    }
    // At least one peer on every version, unless neither can run there and each says why (the
    // npm servers of 16 and 17: pgBackRest 2.45 refuses them, and they have no pg_combinebackup).
    let both_said = stderr.contains("peer pgbackrest skipped") && stderr.contains("pg_basebackup --incremental skipped");
    assert!(peers >= 1 || both_said, "at least one peer: {stderr}");
    assert_eq!(rows.len(), 3 + 3 * peers, "{rows:#?}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| sheaf | incr 2 | none |"), "{md}");
    // A former primary put back: pg_rewind against the running new primary, and sheaf's delta
    // from the repository, which found what differs in the WAL summaries, not by reading it.
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let rewinds = report["rewinds"].as_array().expect("rewinds in report.json");
    assert_eq!(rewinds.len(), 1, "{rewinds:#?}");
    let w = &rewinds[0];
    assert!(w["pg_rewind"]["seconds"].as_f64().unwrap() > 0.0, "{w:#}");
    assert!(w["sheaf_delta"]["seconds"].as_f64().unwrap() > 0.0 && w["sheaf_restore"]["seconds"].as_f64().unwrap() > 0.0, "{w:#}");
    assert_eq!(w["delta_method"], "wal", "{w:#}");
    assert!(w["delta_how"].as_str().unwrap().contains("a primary shut down cleanly"), "{w:#}");
    assert!(w["delta_bytes_written"].as_u64().unwrap() > 0 && w["delta_bytes_kept"].as_u64().unwrap() > w["delta_bytes_written"].as_u64().unwrap(), "{w:#}");
    assert!(md.contains("## A former primary put back") && md.contains("| pg_rewind against the running new primary | "), "{md}");
    assert_eq!(report["disk"].as_array().map(Vec::len), Some(1), "the disk's rate beside the full's restore: {report:#}");
    // The repository, the peers' backups and the restores are gone.
    let left: Vec<_> = std::fs::read_dir(&target).unwrap().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "left in the target: {left:?}");
}

#[test]
fn an_interrupted_bench_stops_its_server_and_removes_its_folders() {
    use std::io::{BufRead, BufReader};
    for (signal, code) in super::interrupt::SIGNALS {
        let dir = tempfile::tempdir().unwrap();
        let mut child = sheaf()
            .args(["bench", "--dataset", "tpch:0.01", "-c", "lz4", "--repeat", "50", "--target"])
            .arg(dir.path())
            .arg("--out")
            .arg(dir.path().join("report"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut data = None;
        // Interrupt in the middle of the sweep, with a backup or restore running.
        loop {
            let line = lines.next().expect("the bench ended before its runs").unwrap();
            if let Some(rest) = line.strip_prefix("sheaf bench: cluster in ") {
                data = Some(std::path::PathBuf::from(rest.split(" on port ").next().unwrap()));
            }
            if line.contains("[3/50") {
                break;
            }
        }
        let data = data.expect("the bench names its cluster");
        rustix::process::kill_process(rustix::process::Pid::from_child(&child), signal).unwrap();
        let said: Vec<String> = lines.map_while(Result::ok).collect();
        assert_eq!(child.wait().unwrap().code(), Some(code), "exit status after {signal:?}: {said:?}");
        assert!(!data.exists(), "the cluster directory is removed after {signal:?}");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "no stripes, restores or report left after {signal:?}: {left:?}");
        assert_no_server_on(&data);
    }
}
