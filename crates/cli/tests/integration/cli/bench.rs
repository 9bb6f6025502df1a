//! `sheaf bench` and `sheaf lab` on directories: plans and flags, what they refuse, where they
//! write, and a run that fails half-way.

use std::fs;

use super::{on_small_tmpfs, run, Fixture};
use crate::integration::common::{assert_fails, s, stderr, stdout};

#[test]
fn bench_of_a_directory_from_a_plan_with_flags_over_it() {
    let f = Fixture::new();
    let (target, out) = (f.path("bench_target"), f.path("bench_out"));
    fs::create_dir(&target).unwrap();
    let plan = f.path("plan.toml");
    fs::write(
        &plan,
        format!("source = {:?}\ncompression = [\"lz4\", \"zstd:high\"]\nstripes = [1, 2]\ntransfer-size = [\"64KiB\"]\nbuffer-count = [\"default\"]\ntarget = [\"nul\", {:?}]\nrepeat = 3\n", s(&f.src), s(&target)),
    )
    .unwrap();
    // --repeat and --peers on the command line win over the plan; pg_basebackup cannot back up a directory.
    let o = run(&["bench", "--plan", s(&plan), "--repeat", "2", "--peers", "pg_basebackup", "--out", s(&out)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning: peer pg_basebackup skipped: it backs up PostgreSQL servers"), "{}", stderr(&o));
    let table = stdout(&o);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("tool") && lines[0].contains("backup s") && lines[0].contains("restore CPU %"), "{table}");
    assert_eq!(lines.iter().filter(|l| l.starts_with("sheaf ")).count(), 8, "2 codecs x 2 stripe counts x 2 targets: {table}");
    let report: serde_json::Value = serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 8);
    assert!(rows.iter().all(|r| r["backup_seconds"]["n"] == 2), "--repeat 2 won over the plan's 3");
    let ratio = |codec: &str| {
        let r = rows.iter().find(|r| r["compression"] == codec).unwrap();
        r["bytes_read"].as_f64().unwrap() / r["size_bytes"]["median"].as_f64().unwrap()
    };
    assert!(ratio("zstd:high") > ratio("lz4"), "zstd:high compresses the fixture better than lz4");
    for r in rows {
        let disk = r["target"] != "nul";
        assert_eq!(r["restore_seconds"].is_object(), disk, "{r}");
        assert_eq!(r["verify_seconds"].is_object(), disk, "{r}");
        assert_eq!(r["transfer_size"], 65536);
    }
    for name in ["report.csv", "report.md", "samples.csv", "size_vs_backup_time.png", "cpu_per_codec.svg"] {
        assert!(fs::metadata(out.join(name)).map(|m| m.len()).unwrap_or(0) > 100, "{name}");
    }
    assert_eq!(fs::read_dir(&target).unwrap().count(), 0, "the bench leaves nothing in its target");
    assert!(fs::read_dir(&f.src).unwrap().count() > 0, "the source is untouched");

    // --from redraws the same table and files from report.json, running nothing.
    let again = f.path("bench_again");
    let o = run(&["bench", "--from", s(&out.join("report.json")), "--out", s(&again)]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), table, "the same table");
    assert_eq!(fs::read_to_string(again.join("report.csv")).unwrap(), fs::read_to_string(out.join("report.csv")).unwrap(), "figures survive report.json exactly");
    assert!(fs::metadata(again.join("throughput_vs_stripes.svg")).unwrap().len() > 1000);
    assert_fails(&run(&["bench", "--from", s(&out.join("report.csv"))]), 2, &["is not a sheaf bench report.json"]);
}

#[test]
fn bench_mistakes_are_named() {
    let f = Fixture::new();
    let plan = f.path("bad.toml");
    fs::write(&plan, "stripe = [1]\n").unwrap();
    assert_fails(&run(&["bench", s(&f.src), "--plan", s(&plan)]), 2, &["unknown field `stripe`"]);
    assert_fails(&run(&["bench"]), 2, &["nothing to back up", "--dataset tpch:SCALE"]);
    assert_fails(&run(&["bench", s(&f.src), "--stripes", "1,x"]), 2, &["--stripes: 'x' is not a stripe count"]);
    assert_fails(&run(&["bench", "--dataset", "tpch"]), 2, &["give tpch:SCALE"]);
    assert_fails(&run(&["bench", s(&f.src), "--peers", "barman"]), 2, &["unknown peer 'barman'"]);
    assert_fails(&run(&["bench", s(&f.path("missing")), "--repeat", "1", "--out", s(&f.path("o"))]), 7, &["is not a directory"]);
}

#[test]
fn bench_drops_caches_when_allowed_and_says_so_when_not() {
    let f = Fixture::new();
    let out = f.path("cold");
    let allowed = fs::OpenOptions::new().write(true).open("/proc/sys/vm/drop_caches").is_ok();
    let o = run(&["bench", s(&f.src), "-c", "lz4", "--repeat", "1", "--drop-caches", "--json", "--out", s(&out)]);
    if allowed {
        assert!(o.status.success(), "{}", stderr(&o));
        let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(r["info"]["cache"], "dropped before every operation");
    } else {
        assert_fails(&o, 2, &["--drop-caches: cannot write /proc/sys/vm/drop_caches"]);
    }
}

#[test]
fn bench_restores_inside_a_folder_of_its_own_in_restore_dir() {
    let f = Fixture::new();
    let (target, elsewhere) = (f.path("t"), f.path("elsewhere"));
    fs::create_dir_all(&target).unwrap();
    // A user's folders named like the bench's scratch: never touched.
    for sentinel in ["restore/keep.txt", "restore.ts/keep.txt"] {
        let p = elsewhere.join(sentinel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, "mine").unwrap();
    }
    let o = run(&["bench", s(&f.src), "-c", "lz4", "--repeat", "1", "--target", s(&target), "--restore-dir", s(&elsewhere), "--out", s(&f.path("o"))]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_slice(&fs::read(f.path("o/report.json")).unwrap()).unwrap();
    assert!(report["rows"][0]["restore_seconds"]["median"].as_f64().unwrap() > 0.0);
    for sentinel in ["restore/keep.txt", "restore.ts/keep.txt"] {
        assert_eq!(fs::read_to_string(elsewhere.join(sentinel)).unwrap(), "mine");
    }
    let mut left: Vec<String> = fs::read_dir(&elsewhere).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["restore", "restore.ts"], "the bench's own folder is gone");
}

#[test]
fn bench_refuses_targets_it_should_not_use() {
    let f = Fixture::new();
    let inside = f.src.join("bench_out");
    fs::create_dir_all(&inside).unwrap();
    assert_fails(&run(&["bench", s(&f.src), "--target", s(&inside), "--repeat", "1"]), 2, &["is inside the source", "choose a folder outside it"]);
    fs::remove_dir(&inside).unwrap();
    let missing = f.path("no/such/dir");
    assert_fails(&run(&["bench", s(&f.src), "--target", &format!("nul,{}", s(&missing)), "--repeat", "1"]), 8, &["is not a directory: create it"]);
    assert!(!missing.exists(), "a mistyped target is not created");
    assert_fails(&run(&["bench", s(&f.src), "--transfer-size", "1MiB,32MiB"]), 2, &["'32MiB' is out of range"]);
}

#[test]
fn a_bench_that_fails_mid_way_writes_what_it_measured_and_exits_with_the_failure() {
    let f = Fixture::new();
    sheaf_core::datagen::write_file(&f.src.join("big.dat"), 4 << 20, 9, 0.0).unwrap();
    let (mnt, out) = (f.path("small_fs"), f.path("partial"));
    fs::create_dir_all(&mnt).unwrap();
    // nul runs first and succeeds; the 1 MiB tmpfs then fills up.
    let o = on_small_tmpfs(&mnt, &format!("bench {} -c none --repeat 1 --target nul,{} --out {}", s(&f.src), s(&mnt), s(&out)));
    assert_fails(&o, 6, &["the device or quota is full"]);
    assert_eq!(stdout(&o).lines().filter(|l| l.starts_with("sheaf ")).count(), 1, "the nul row is printed: {}", stdout(&o));
    assert!(!stdout(&o).contains("sheaf-bench-"), "the work folder is not left on the full filesystem: {}", stdout(&o));
    let report: serde_json::Value = serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["rows"].as_array().unwrap().len(), 1);
    assert!(report["info"]["warnings"][0].as_str().unwrap().contains("the sweep stopped early"), "{}", report["info"]);
    assert!(fs::read_to_string(out.join("report.md")).unwrap().contains("the sweep stopped early"));
}

/// `sheaf lab` on a file of pages: the seed's table, CSV and JSON, and mistakes named.
#[test]
fn lab_measures_codecs_on_a_file_of_pages() {
    let f = Fixture::new();
    let pages = f.path("rel");
    let mut bytes = Vec::new();
    for i in 0..64u32 {
        let mut p = vec![0u8; 8192];
        for (j, b) in p.iter_mut().enumerate().skip(24) {
            *b = b"row 42, shipped by rail; "[(j + i as usize) % 25];
        }
        bytes.extend_from_slice(&p);
    }
    fs::write(&pages, &bytes).unwrap();
    let out = f.path("lab");
    let o = run(&["lab", "--file", s(&pages), "-c", "lz4,zstd:low", "--unit", "8KiB,64KiB", "--repeat", "1", "--accesses", "50", "--out", s(&out), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5, "none, then 2 codecs x 2 units: {v}");
    assert!(rows.iter().skip(1).all(|r| r["ratio"].as_f64().unwrap() > 2.0), "{v}");
    assert_eq!(v["sample_bytes"], 64 * 8192);
    let csv = fs::read_to_string(out.join("lab.csv")).unwrap();
    assert_eq!(csv.lines().count(), 6);
    assert!(out.join("lab.json").exists());
    for plot in ["lab-cost.svg", "lab-cost.png", "lab-fetch.svg", "lab-fetch.png"] {
        assert!(fs::metadata(out.join(plot)).unwrap().len() > 1000, "{plot}");
    }
    let svg = fs::read_to_string(out.join("lab-fetch.svg")).unwrap();
    assert!(svg.contains("zstd:low") && svg.contains("64 KiB"), "the legend and the unit labels");
    let table = run(&["lab", "--file", s(&pages), "-c", "lz4", "--unit", "8KiB", "--repeat", "1", "--accesses", "20"]);
    assert!(stdout(&table).contains("fetch p50") && stdout(&table).contains("lz4"), "{}", stdout(&table));
    assert_fails(&run(&["lab", "--file", s(&pages), "--unit", "10000"]), 2, &["multiple of 8 KiB"]);
    assert_fails(&run(&["lab"]), 2, &["--file PATH"]);
}
