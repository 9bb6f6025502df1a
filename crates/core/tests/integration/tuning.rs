//! Throughput knobs: defaults, ranges, and the memory budget they imply.

use sheaf_core::{BackupOptions, CodecSpec, ErrorKind, Location, Tuning};

fn opts(stripes: usize) -> BackupOptions {
    BackupOptions::new((0..stripes).map(|_| Location::null()).collect())
}

#[test]
fn default_buffer_count_follows_the_rule_of_thumb() {
    let cores = sheaf_core::host::available_cores();
    let t = Tuning::resolve(&opts(4), 1).unwrap();
    // I/O buffers: stripes × 4 + 2 × readers = 18, at least 2 × threads; plus a spare per thread.
    assert_eq!(t.buffer_count, 18usize.max(2 * cores) + cores);
    assert_eq!(t.threads, cores);
    assert_eq!(t.memory_budget_bytes, t.buffer_count as u64 * (1 << 20));
    let t = Tuning::resolve(&opts(1), 3).unwrap();
    assert_eq!(t.readers, 3, "one reader per device by default");
}

#[test]
fn lz4_budget_counts_its_worst_case_buffers() {
    let mut o = opts(1);
    o.codec = CodecSpec::parse("lz4").unwrap();
    o.buffer_count = Some(8);
    let t = Tuning::resolve(&o, 1).unwrap();
    assert!(t.buffer_len > t.transfer_size);
    assert_eq!(t.memory_budget_bytes, 8 * t.buffer_len as u64);
}

#[test]
fn out_of_range_knobs_are_refused_with_advice() {
    let mut o = opts(1);
    o.transfer_size = 32 << 10;
    assert!(Tuning::resolve(&o, 1).unwrap_err().to_string().contains("64KiB .. 16MiB"));
    o.transfer_size = 32 << 20;
    assert_eq!(Tuning::resolve(&o, 1).unwrap_err().kind(), ErrorKind::InvalidInput);
    let mut o = opts(1);
    o.buffer_count = Some(2);
    o.threads = Some(2);
    let e = Tuning::resolve(&o, 1).unwrap_err();
    assert!(e.to_string().contains("--buffer-count 3"), "{e}");
    o.threads = None;
    assert_eq!(Tuning::resolve(&o, 1).unwrap().threads, 1, "threads shrink to fit the buffers when not given");
    assert!(Tuning::resolve(&opts(65), 1).unwrap_err().to_string().contains("64 stripes"));
    assert!(Tuning::resolve(&opts(0), 1).is_err());
}

#[test]
fn smallest_pipeline_still_completes() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    sheaf_core::datagen::make_shapes_tree(&src, 64 << 10, 5).unwrap();
    let mut o = BackupOptions::new(vec![Location::file(d.path().join("a")), Location::file(d.path().join("b"))]);
    o.transfer_size = 64 << 10;
    o.buffer_count = Some(2);
    o.threads = Some(1);
    let r = sheaf_core::backup_directory(&src, &o, std::sync::Arc::new(sheaf_core::NoProgress)).unwrap();
    assert_eq!(r.buffer_count, 2);
    let out = d.path().join("out");
    sheaf_core::restore(
        &sheaf_core::BackupSet::open(&[Location::file(d.path().join("a"))], &sheaf_core::LocalOnly).unwrap(),
        &sheaf_core::RestoreOptions::new(&out),
        std::sync::Arc::new(sheaf_core::NoProgress),
    )
    .unwrap();
    sheaf_core::datagen::compare_trees(&src, &out).unwrap();
}

/// A file listed small (to be packed) that has grown past the packing limit when it is read is
/// read on its own, whole, even with a pool of one buffer: the reader hands on the pack it holds
/// before it takes a buffer for the grown file (holding one while waiting for another would hang).
#[test]
fn a_small_file_grown_since_listing_is_read_whole_with_a_pool_of_one() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), vec![b'a'; 3000]).unwrap();
    std::fs::write(src.join("b"), vec![b'b'; 2000]).unwrap();
    let listed = sheaf_core::source::list_tree(&src, 0, &mut Vec::new()).unwrap();
    let grown: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("b"), &grown).unwrap();
    let stripe = d.path().join("s.sheaf");
    let mut o = BackupOptions::new(vec![Location::file(&stripe)]);
    o.transfer_size = 64 << 10;
    o.buffer_count = Some(2);
    o.threads = Some(1);
    o.readers = Some(1);
    let (tx, rx) = std::sync::mpsc::channel();
    let root = sheaf_core::manifest::Root { name: String::new(), path: src.display().to_string() };
    std::thread::spawn(move || {
        let r = (|| {
            let mut b = sheaf_core::Backup::start(&o, Tuning::resolve(&o, 1)?, std::sync::Arc::new(sheaf_core::NoProgress))?;
            b.add_tree(root, listed)?;
            b.finish(serde_json::json!({}))
        })();
        let _ = tx.send(r);
    });
    let r = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the backup hung: a reader held the only buffer while waiting for another").unwrap();
    assert_eq!(r.bytes_read, 3000 + 300_000);
    let out = d.path().join("out");
    let set = sheaf_core::BackupSet::open(&[Location::file(&stripe)], &sheaf_core::LocalOnly).unwrap();
    sheaf_core::restore(&set, &sheaf_core::RestoreOptions::new(&out), std::sync::Arc::new(sheaf_core::NoProgress)).unwrap();
    assert_eq!(std::fs::read(out.join("b")).unwrap(), grown);
    assert_eq!(std::fs::read(out.join("a")).unwrap(), vec![b'a'; 3000]);
}

#[test]
fn a_set_records_the_readers_that_read_not_those_asked_for() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    // One file past the pack limit: one reader of the four asked for has anything to read.
    std::fs::write(src.join("big"), vec![7u8; 300_000]).unwrap();
    let stripe = d.path().join("s.sheaf");
    let mut o = BackupOptions::new(vec![Location::file(&stripe)]);
    o.readers = Some(4);
    let r = sheaf_core::backup_directory(&src, &o, std::sync::Arc::new(sheaf_core::NoProgress)).unwrap();
    assert_eq!(r.readers, 1, "one file, one reader");
    let set = sheaf_core::BackupSet::open(&[Location::file(&stripe)], &sheaf_core::LocalOnly).unwrap();
    assert_eq!(set.manifest.options.readers, 1);
}
