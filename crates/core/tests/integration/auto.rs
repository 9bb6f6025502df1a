//! `--compression auto`: it climbs while the writers hold the pipeline up, stays at zstd:low
//! while the compressors do, reports the levels it chose, and its sets restore like any other.

use std::sync::Arc;

use sheaf_core::datagen::{compare_trees, write_file};
use sheaf_core::storage::{MemoryStore, RateLimit};
use sheaf_core::{backup_directory, BackupOptions, BackupSet, CodecSpec, LocalOnly, Location, NoProgress, RestoreOptions};

fn source(dir: &std::path::Path) -> std::path::PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..4 {
        write_file(&src.join(format!("f{i}")), 12 << 20, 7 + i, 0.7).unwrap();
    }
    src
}

fn opts(targets: Vec<Location>) -> BackupOptions {
    let mut o = BackupOptions::new(targets);
    o.codec = CodecSpec::parse("auto").unwrap();
    o.transfer_size = 256 << 10;
    o
}

#[test]
fn auto_climbs_behind_a_slow_writer_and_its_sets_restore() {
    let d = tempfile::tempdir().unwrap();
    let src = source(d.path());
    // 48 MiB that compress about 3:1, written at 12 MiB/s: the writer is the bottleneck for a
    // second or more, the compressors idle.
    let store = Arc::new(MemoryStore::new());
    let slow = Location::new(store.clone(), "slow.sheaf").throttled(&RateLimit::new(12 << 20).unwrap());
    let r = backup_directory(&src, &opts(vec![slow]), Arc::new(NoProgress)).unwrap();
    assert_eq!(r.compression, "auto");
    let levels = r.auto_levels.clone().expect("auto reports its levels");
    let counted: u64 = levels.values().sum();
    assert!(counted > 0 && counted <= r.frames, "each chunk counted once: {levels:?} for {} frames", r.frames);
    assert!(levels.keys().any(|&l| l >= 2), "a slow writer raises the level: {levels:?}");
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["auto_levels"].is_object(), "{json}");

    let set = BackupSet::open(&[Location::new(store, "slow.sheaf")], &LocalOnly).unwrap();
    let out = d.path().join("out");
    sheaf_core::restore(&set, &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap();
    compare_trees(&src, &out).unwrap();
}

#[test]
fn auto_stays_low_when_nothing_waits_for_the_writer() {
    let d = tempfile::tempdir().unwrap();
    let src = source(d.path());
    // nul takes every frame at once: the compressors (or the reader) are the bottleneck.
    // Busy compressors bring it back down at once; a loaded test machine may starve the writer
    // thread for a moment, so "most", not "all", and in one of three runs: a suite running beside
    // a release build once starved it for most of a run. An `auto` that climbs without a waiting
    // writer climbs in all three.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = backup_directory(&src, &opts(vec![Location::parse("nul", &LocalOnly).unwrap()]), Arc::new(NoProgress)).unwrap();
        let levels = r.auto_levels.expect("auto reports its levels");
        let total: u64 = levels.values().sum();
        if levels.get(&1).copied().unwrap_or(0) * 2 > total {
            seen.clear();
            break;
        }
        seen.push(levels);
    }
    assert!(seen.is_empty(), "level 1 held for less than half the frames in every run: {seen:?}");
    // A fixed level reports none.
    let mut fixed = opts(vec![Location::parse("nul", &LocalOnly).unwrap()]);
    fixed.codec = CodecSpec::default();
    assert!(backup_directory(&src, &fixed, Arc::new(NoProgress)).unwrap().auto_levels.is_none());
}
