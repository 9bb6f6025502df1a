//! Round trips over every codec × transfer size × stripe count, on a tree with every file shape
//! (empty, 1 byte, chunk−1, chunk, chunk+1, many small files, a large file, zeros, sparse,
//! incompressible, symlinks, empty directories), compared byte for byte with modes and times.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sheaf_core::datagen::{compare_trees, make_shapes_tree};
use sheaf_core::{backup_directory, BackupOptions, BackupSet, CodecSpec, LocalOnly, Location, NoProgress, RestoreOptions};

fn open(stripes: &[PathBuf]) -> sheaf_core::Result<BackupSet> {
    BackupSet::open(&stripes.iter().map(Location::file).collect::<Vec<_>>(), &LocalOnly)
}

/// Restore from stripe files, the set opened lean (entries read a page at a time, the index
/// streamed: as `sheaf restore` opens it).
fn restore(stripes: &[PathBuf], o: &RestoreOptions, p: Arc<NoProgress>) -> sheaf_core::Result<sheaf_core::RestoreReport> {
    let locations: Vec<Location> = stripes.iter().map(Location::file).collect();
    sheaf_core::restore(&BackupSet::open_lean(&locations, &LocalOnly, None)?, o, p)
}

/// Verify stripe files, the set opened lean (entries and index streamed, as `sheaf verify` does)
/// and whole: both must say the same.
fn verify(stripes: &[PathBuf], threads: Option<usize>, p: Arc<NoProgress>) -> sheaf_core::Result<sheaf_core::VerifyReport> {
    let locations: Vec<Location> = stripes.iter().map(Location::file).collect();
    let lean = sheaf_core::verify(&BackupSet::open_lean(&locations, &LocalOnly, None)?, threads, p.clone(), &sheaf_core::stop::Stop::new())?;
    let whole = sheaf_core::verify(&open(stripes)?, threads, p, &sheaf_core::stop::Stop::new())?;
    assert_eq!((lean.frames, lean.bytes_raw, lean.files, lean.stripes), (whole.frames, whole.bytes_raw, whole.files, whole.stripes), "lean and whole verify agree");
    Ok(lean)
}

const TRANSFER_SIZES: [u64; 3] = [64 << 10, 1 << 20, 16 << 20];
const STRIPES: [usize; 3] = [1, 2, 7];

/// One shapes tree per transfer size, built once for the whole binary under cargo's target
/// folder, in a folder of this process's own; the folders of runs that ended are removed first
/// (a temporary folder held in a static is never removed: each run left 150 MB in TMPDIR).
fn tree(ts: u64) -> PathBuf {
    static BUILT: OnceLock<Mutex<Vec<u64>>> = OnceLock::new();
    let all = Path::new(env!("CARGO_TARGET_TMPDIR")).join("roundtrip-shapes");
    let mut built = BUILT
        .get_or_init(|| {
            for e in std::fs::read_dir(&all).into_iter().flatten().flatten() {
                let ended = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()).is_none_or(|pid| !sheaf_core::host::process_alive(pid));
                if ended {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
            Mutex::default()
        })
        .lock()
        .unwrap();
    let root = all.join(std::process::id().to_string()).join(format!("src_{ts}"));
    if !built.contains(&ts) {
        make_shapes_tree(&root, ts, 42).expect("build shapes tree");
        built.push(ts);
    }
    root
}

fn round_trip(codec: &str) {
    let spec = CodecSpec::parse(codec).unwrap();
    for ts in TRANSFER_SIZES {
        let src = tree(ts);
        for stripes in STRIPES {
            let work = tempfile::tempdir().unwrap();
            let targets: Vec<Location> = (0..stripes).map(|k| Location::file(work.path().join(format!("b_{k}.sheaf")))).collect();
            let mut opts = BackupOptions::new(targets);
            opts.codec = spec;
            opts.transfer_size = ts;
            let what = format!("{codec} ts={ts} stripes={stripes}");
            let report = backup_directory(&src, &opts, Arc::new(NoProgress)).unwrap_or_else(|e| panic!("{what}: backup: {e}"));
            assert_eq!(report.stripes, stripes, "{what}");
            assert!(report.zero_chunks >= 2, "{what}: the zeros and sparse files give zero frames");
            let first = work.path().join("b_0.sheaf");
            let v = verify(std::slice::from_ref(&first), None, Arc::new(NoProgress)).unwrap_or_else(|e| panic!("{what}: verify: {e}"));
            assert_eq!(v.bytes_raw, report.bytes_read, "{what}");
            let out = work.path().join("restored");
            // Any one stripe finds the others; use the last one.
            let last = work.path().join(format!("b_{}.sheaf", stripes - 1));
            restore(&[last], &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap_or_else(|e| panic!("{what}: restore: {e}"));
            compare_trees(&src, &out).unwrap_or_else(|e| panic!("{what}: restored tree differs: {e}"));
        }
    }
}

#[test]
fn codec_none() {
    round_trip("none");
}
#[test]
fn codec_lz4() {
    round_trip("lz4");
}
#[test]
fn codec_deflate_isal_level_1() {
    round_trip("deflate:1");
}
#[test]
fn codec_deflate_isal_level_3() {
    round_trip("deflate:3");
}
#[test]
fn codec_deflate_libdeflate_level_6() {
    round_trip("deflate:6");
}
#[test]
fn codec_zstd_negative_level() {
    round_trip("zstd:-5");
}
#[test]
fn codec_zstd_low() {
    round_trip("zstd:low");
}
#[test]
fn codec_zstd_high() {
    round_trip("zstd:high");
}

#[test]
fn relocation_moves_a_subtree_and_nothing_else() {
    let src = tree(64 << 10);
    let work = tempfile::tempdir().unwrap();
    let stripe = work.path().join("r.sheaf");
    backup_directory(&src, &BackupOptions::new(vec![Location::file(stripe.clone())]), Arc::new(NoProgress)).unwrap();
    let out = work.path().join("main");
    let moved = work.path().join("elsewhere/large");
    let mut o = RestoreOptions::new(&out);
    o.relocate = vec![("large".into(), moved.clone())];
    restore(std::slice::from_ref(&stripe), &o, Arc::new(NoProgress)).unwrap();
    assert!(!out.join("large").exists(), "relocated subtree must not also land in the target");
    compare_trees(&src.join("large"), &moved).unwrap();
    compare_trees(&src.join("many"), &out.join("many")).unwrap();

    // The original absolute path works as OLD too.
    let out2 = work.path().join("main2");
    let moved2 = work.path().join("elsewhere2");
    let mut o = RestoreOptions::new(&out2);
    o.relocate = vec![(format!("{}/many/d03", src.display()), moved2.clone())];
    restore(std::slice::from_ref(&stripe), &o, Arc::new(NoProgress)).unwrap();
    compare_trees(&src.join("many/d03"), &moved2).unwrap();

    // A relocation that matches nothing is refused before anything is written.
    let out3 = work.path().join("main3");
    let mut o = RestoreOptions::new(&out3);
    o.relocate = vec![("no/such/dir".into(), work.path().join("x"))];
    let e = restore(&[stripe], &o, Arc::new(NoProgress)).unwrap_err();
    assert_eq!(e.kind(), sheaf_core::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("no/such/dir"), "{e}");
    assert!(!out3.exists());
}

#[test]
fn null_target_counts_but_writes_nothing() {
    let src = tree(64 << 10);
    let mut opts = BackupOptions::new(vec![Location::null(), Location::null()]);
    opts.codec = CodecSpec::parse("lz4").unwrap();
    opts.transfer_size = 64 << 10;
    let r = backup_directory(&src, &opts, Arc::new(NoProgress)).unwrap();
    assert!(r.bytes_read > 0 && r.bytes_written > 0 && r.bytes_written < r.bytes_read);
    assert_eq!(r.stripes, 2);
}

#[test]
fn restore_refuses_non_empty_target_unless_forced() {
    let src = tree(64 << 10);
    let work = tempfile::tempdir().unwrap();
    let stripe = work.path().join("f.sheaf");
    backup_directory(&src, &BackupOptions::new(vec![Location::file(stripe.clone())]), Arc::new(NoProgress)).unwrap();
    let out = work.path().join("busy");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("precious"), b"keep me").unwrap();
    std::fs::write(out.join("chunk"), b"in the way").unwrap();
    let e = restore(std::slice::from_ref(&stripe), &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap_err();
    assert_eq!(e.kind(), sheaf_core::ErrorKind::TargetNotEmpty);
    assert_eq!(std::fs::read(out.join("precious")).unwrap(), b"keep me", "a refused restore touches nothing");
    let mut o = RestoreOptions::new(&out);
    o.force = true;
    restore(&[stripe], &o, Arc::new(NoProgress)).unwrap();
    // WITH REPLACE: the result is exactly the backup, nothing stale survives.
    compare_trees(&src, &out).unwrap();
    assert!(!out.join("precious").exists());
    assert!(!out.join(sheaf_core::restore::INCOMPLETE_MARKER).exists());
}

#[test]
fn zero_chunks_restore_as_holes_and_data_is_allocated() {
    use std::os::unix::fs::MetadataExt;
    let src = tree(64 << 10);
    let work = tempfile::tempdir().unwrap();
    let stripe = work.path().join("z.sheaf");
    let mut o = BackupOptions::new(vec![Location::file(stripe.clone())]);
    o.transfer_size = 64 << 10;
    backup_directory(&src, &o, Arc::new(NoProgress)).unwrap();
    let out = work.path().join("out");
    restore(&[stripe], &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap();
    let sparse = std::fs::metadata(out.join("sparse")).unwrap();
    assert!(sparse.blocks() * 512 < sparse.len() / 2, "holes stay holes: {} blocks for {} bytes", sparse.blocks(), sparse.len());
    for name in ["sparse_head", "sparse_tail"] {
        let m = std::fs::metadata(out.join(name)).unwrap();
        assert!(m.blocks() * 512 < m.len() / 2, "{name}: holes stay holes: {} blocks for {} bytes", m.blocks(), m.len());
    }
    let zeros = std::fs::metadata(out.join("zeros")).unwrap();
    assert!(zeros.blocks() * 512 < zeros.len() / 2, "an all-zero file restores sparse");
    let large = std::fs::metadata(out.join("large/large.dat")).unwrap();
    assert!(large.blocks() * 512 >= large.len(), "data ranges are allocated");
}

#[test]
fn the_most_specific_relocation_wins_and_overlaps_are_refused() {
    let src = tree(64 << 10);
    let work = tempfile::tempdir().unwrap();
    let stripe = work.path().join("r.sheaf");
    backup_directory(&src, &BackupOptions::new(vec![Location::file(stripe.clone())]), Arc::new(NoProgress)).unwrap();
    // An absolute OLD for the parent, a relative OLD for the child: the child is more specific.
    let (a, b) = (work.path().join("A"), work.path().join("B"));
    let mut o = RestoreOptions::new(work.path().join("main"));
    o.relocate = vec![(format!("{}/many", src.display()), a.clone()), ("many/d03".into(), b.clone())];
    restore(std::slice::from_ref(&stripe), &o, Arc::new(NoProgress)).unwrap();
    compare_trees(&src.join("many/d03"), &b).unwrap();
    assert!(a.join("d04").exists() && !a.join("d03").exists());

    let mut o = RestoreOptions::new(work.path().join("main2"));
    let same = work.path().join("same");
    o.relocate = vec![("large".into(), same.clone()), ("many".into(), same)];
    let e = restore(std::slice::from_ref(&stripe), &o, Arc::new(NoProgress)).unwrap_err();
    assert_eq!(e.kind(), sheaf_core::ErrorKind::InvalidInput);
    assert!(e.to_string().contains("two entries"), "{e}");

    // A relocation into the target's own tree: onto a folder the tree also has, refused, naming
    // it; beside what the tree has, restored.
    let main3 = work.path().join("main3");
    let mut o = RestoreOptions::new(&main3);
    o.relocate = vec![("many/d03".into(), main3.join("many/d04"))];
    let e = restore(std::slice::from_ref(&stripe), &o, Arc::new(NoProgress)).unwrap_err();
    assert!(e.to_string().contains("two entries") && e.to_string().contains("many/d04"), "{e}");
    let main4 = work.path().join("main4");
    let mut o = RestoreOptions::new(&main4);
    o.relocate = vec![("many/d03".into(), main4.join("extra"))];
    restore(&[stripe], &o, Arc::new(NoProgress)).unwrap();
    compare_trees(&src.join("many/d03"), &main4.join("extra")).unwrap();
    assert!(main4.join("many/d04").exists() && !main4.join("many/d03").exists());
}

#[test]
fn a_manifest_path_that_escapes_the_target_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let stripe = work.path().join("evil.sheaf");
    let opts = BackupOptions::new(vec![Location::file(stripe.clone())]);
    let tuning = sheaf_core::Tuning::resolve(&opts, 1).unwrap();
    let mut b = sheaf_core::Backup::start(&opts, tuning, Arc::new(NoProgress)).unwrap();
    let mut warnings = vec![];
    let empty = work.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let listed = sheaf_core::source::list_tree(&empty, 0, &mut warnings).unwrap();
    b.add_tree(sheaf_core::manifest::Root { name: String::new(), path: empty.display().to_string() }, listed).unwrap();
    b.add_bytes(0, "../escaped", b"should never be written", 0o644).unwrap();
    b.finish(serde_json::json!({})).unwrap();
    let out = work.path().join("deep/out");
    let e = restore(&[stripe], &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap_err();
    assert_eq!(e.kind(), sheaf_core::ErrorKind::Corrupt);
    assert!(e.to_string().contains("not a plain relative path"), "{e}");
    assert!(!work.path().join("deep/escaped").exists());
}

/// A set made elsewhere whose second root names a folder on this machine (here a "victim" folder
/// with a precious file): restore writes only under --to unless that root is mapped or
/// --original-paths is given, and --force empties only the folders it was told of.
#[test]
fn a_root_outside_the_target_is_written_only_when_mapped_or_allowed() {
    let work = tempfile::tempdir().unwrap();
    let victim = work.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("precious"), b"keep me").unwrap();
    let stripe = work.path().join("crafted.sheaf");
    let opts = BackupOptions::new(vec![Location::file(stripe.clone())]);
    let tuning = sheaf_core::Tuning::resolve(&opts, 1).unwrap();
    let mut b = sheaf_core::Backup::start(&opts, tuning, Arc::new(NoProgress)).unwrap();
    let (main, other) = (work.path().join("main"), work.path().join("other"));
    std::fs::create_dir(&main).unwrap();
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("planted"), b"from the crafted set").unwrap();
    let mut w = vec![];
    let listed = sheaf_core::source::list_tree(&main, 0, &mut w).unwrap();
    b.add_tree(sheaf_core::manifest::Root { name: String::new(), path: main.display().to_string() }, listed).unwrap();
    // The second root claims to have been at the victim's path.
    let listed = sheaf_core::source::list_tree(&other, 0, &mut w).unwrap();
    b.add_tree(sheaf_core::manifest::Root { name: "ts".into(), path: victim.display().to_string() }, listed).unwrap();
    b.finish(serde_json::json!({})).unwrap();

    let out = work.path().join("out");
    for force in [false, true] {
        let mut o = RestoreOptions::new(&out);
        o.force = force;
        let e = restore(std::slice::from_ref(&stripe), &o, Arc::new(NoProgress)).unwrap_err();
        assert_eq!(e.kind(), sheaf_core::ErrorKind::InvalidInput, "force={force}: {e}");
        let text = e.to_string();
        assert!(text.contains(&format!("--relocate {}=NEW_DIR", victim.display())) && text.contains("--original-paths"), "{text}");
        assert_eq!(std::fs::read(victim.join("precious")).unwrap(), b"keep me", "force={force}: the victim is untouched");
        assert!(!victim.join("planted").exists());
        assert!(!out.exists(), "nothing is written anywhere before the plan is accepted");
    }

    // Mapped: it goes where it was told, and the victim is untouched.
    let moved = work.path().join("moved");
    let mut o = RestoreOptions::new(&out);
    o.relocate = vec![(victim.display().to_string(), moved.clone())];
    restore(std::slice::from_ref(&stripe), &o, Arc::new(NoProgress)).unwrap();
    assert_eq!(std::fs::read(moved.join("planted")).unwrap(), b"from the crafted set");
    assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);

    // Explicitly allowed: the original path, and --force empties it as asked.
    let mut o = RestoreOptions::new(work.path().join("out2"));
    o.original_paths = true;
    let e = restore(std::slice::from_ref(&stripe), &o, Arc::new(NoProgress)).unwrap_err();
    assert_eq!(e.kind(), sheaf_core::ErrorKind::TargetNotEmpty, "{e}");
    o.force = true;
    restore(&[stripe], &o, Arc::new(NoProgress)).unwrap();
    assert!(!victim.join("precious").exists() && victim.join("planted").exists());
}

/// Direct I/O (the default, through io_uring, and synchronous), buffered writes, tmpfs (/dev/shm, where there is one: kernels before
/// 6.6 refuse O_DIRECT there, and the restore falls back by itself) and a transfer size that is not
/// a multiple of the block (which writes buffered) all restore the same tree.
#[test]
fn direct_buffered_and_tmpfs_restores_agree() {
    for ts in [1 << 20, 100_000] {
        let src = tree(ts);
        let work = tempfile::tempdir().unwrap();
        let stripe = work.path().join("b_0.sheaf");
        let mut opts = BackupOptions::new(vec![Location::file(&stripe), Location::file(work.path().join("b_1.sheaf"))]);
        opts.codec = CodecSpec::parse("zstd:low").unwrap();
        opts.transfer_size = ts;
        backup_directory(&src, &opts, Arc::new(NoProgress)).unwrap();
        // (folder, buffered, synchronous writes instead of io_uring)
        let mut places = vec![(work.path().join("direct"), false, false), (work.path().join("buffered"), true, false), (work.path().join("sync"), false, true)];
        let shm = tempfile::Builder::new().prefix("sheaf-tmpfs.").tempdir_in("/dev/shm").ok();
        if let Some(d) = &shm {
            places.push((d.path().join("restored"), false, false));
        }
        for (out, buffered, sync_writes) in places {
            let mut o = RestoreOptions::new(&out);
            o.buffered = buffered;
            o.sync_writes = sync_writes;
            let what = format!("ts={ts} into {} (buffered: {buffered}, synchronous writes: {sync_writes})", out.display());
            let r = restore(std::slice::from_ref(&stripe), &o, Arc::new(NoProgress)).unwrap_or_else(|e| panic!("{what}: {e}"));
            compare_trees(&src, &out).unwrap_or_else(|e| panic!("{what}: restored tree differs: {e}"));
            // Direct exactly where it can be: asked for, a block-multiple transfer size, and a
            // filesystem that takes O_DIRECT.
            let can = !buffered && ts % 4096 == 0 && takes_direct_io(out.parent().unwrap());
            assert_eq!(r.direct_io, can, "{what}");
            // io_uring carried the direct writes unless told not to (or the kernel has none).
            if !can || sync_writes {
                assert!(!r.io_uring, "{what}");
            } else if uring_available() {
                assert!(r.io_uring, "{what}");
            }
        }
    }
}

/// A new file's mode and owner are trusted only where they are certain (umask known, no set-ID
/// bits, our own ids): every other file gets chown and chmod. Modes the umask strips (0666),
/// set-ID and sticky bits, a mode without owner write (the restore must still fill the file), and
/// as root other owners, and a set-group-ID target (files under it take its group, not ours): each
/// comes back exactly, small (packed) or large (direct I/O), or empty.
#[test]
fn modes_and_owners_come_back_exactly() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let root = sheaf_core::host::is_root();
    let modes = [0o644, 0o600, 0o666, 0o400, 0o000, 0o4755, 0o2750, 0o1644, 0o640];
    let mut n = 0;
    for (k, mode) in modes.into_iter().enumerate() {
        for (kind, len) in [("small", 3000), ("large", 300_000), ("empty", 0)] {
            for dir in ["", "sub/"] {
                let p = src.join(format!("{dir}{kind}_{mode:o}"));
                std::fs::write(&p, vec![k as u8 + 1; len]).unwrap();
                if root && n % 2 == 1 {
                    std::os::unix::fs::chown(&p, Some(1000 + n), Some(2000 + n)).unwrap();
                }
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
                n += 1;
            }
        }
    }
    let stripe = work.path().join("s.sheaf");
    let mut opts = BackupOptions::new(vec![Location::file(&stripe)]);
    opts.transfer_size = 64 << 10;
    backup_directory(&src, &opts, Arc::new(NoProgress)).unwrap();
    let plain = work.path().join("plain");
    restore(std::slice::from_ref(&stripe), &RestoreOptions::new(&plain), Arc::new(NoProgress)).unwrap();
    compare_trees(&src, &plain).unwrap_or_else(|e| panic!("into a new folder: {e}"));
    // A set-group-ID target of another group: what lands in it directly would take that group.
    let sgid = work.path().join("sgid");
    std::fs::create_dir(&sgid).unwrap();
    if root {
        std::os::unix::fs::chown(&sgid, None, Some(4321)).unwrap();
    }
    std::fs::set_permissions(&sgid, std::fs::Permissions::from_mode(0o2775)).unwrap();
    if std::fs::metadata(&sgid).unwrap().mode() & 0o2000 == 0 {
        return sheaf_core::testing::missing("this filesystem does not keep the set-group-ID bit");
    }
    restore(&[stripe], &RestoreOptions::new(&sgid), Arc::new(NoProgress)).unwrap();
    // The target's own mode is the backup's root's (the restore sets it); compare the contents.
    for (a, b) in [(src.clone(), sgid.clone()), (src.join("sub"), sgid.join("sub"))] {
        for item in std::fs::read_dir(&a).unwrap() {
            let name = item.unwrap().file_name();
            let (ma, mb) = (std::fs::symlink_metadata(a.join(&name)).unwrap(), std::fs::symlink_metadata(b.join(&name)).unwrap());
            assert_eq!(ma.mode(), mb.mode(), "{name:?} under a set-group-ID target: mode");
            if root {
                assert_eq!((ma.uid(), ma.gid()), (mb.uid(), mb.gid()), "{name:?} under a set-group-ID target: owner");
            }
        }
    }
}

/// Whether this kernel lets us set up an io_uring (it may be disabled, or refused by a sandbox).
fn uring_available() -> bool {
    // struct io_uring_params is 120 bytes; zeroed asks for nothing special.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup writes at most the params struct it is given.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd >= 0 {
        // SAFETY: the descriptor was just returned to us.
        unsafe { libc::close(fd as i32) };
    }
    fd >= 0
}

/// Whether the filesystem of `dir` accepts O_DIRECT writes of an aligned block.
fn takes_direct_io(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let p = dir.join(".direct-probe");
    let ok = std::fs::OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_DIRECT).open(&p).is_ok_and(|f| {
        let block = sheaf_core::aligned::AlignedBuf::new(4096);
        f.write_all_at(&block, 0).is_ok()
    });
    let _ = std::fs::remove_file(&p);
    ok
}

#[test]
fn a_sparse_gigabyte_is_read_by_its_extents_and_restored_sparse() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    // 1 GiB + 1 byte with one byte of data in the middle: a hole at the start and at the end.
    let f = std::fs::File::create(src.join("huge")).unwrap();
    f.set_len((1 << 30) + 1).unwrap();
    f.write_all_at(b"x", 600 << 20).unwrap();
    drop(f);
    if std::fs::metadata(src.join("huge")).unwrap().blocks() * 512 > 1 << 20 {
        return sheaf_core::testing::missing("this filesystem does not keep holes");
    }
    let stripe = work.path().join("s.sheaf");
    let r = backup_directory(&src, &BackupOptions::new(vec![Location::file(stripe.clone())]), Arc::new(NoProgress)).unwrap();
    assert_eq!(r.bytes_read, (1 << 30) + 1, "holes count as read");
    // Not 1,025 chunks of zeros: a zero frame per hole (each up to 1 GiB) and one frame of data.
    assert!(r.frames <= 4, "{} frames for one byte of data", r.frames);
    let out = work.path().join("out");
    restore(&[stripe], &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap();
    let m = std::fs::metadata(out.join("huge")).unwrap();
    assert_eq!(m.len(), (1 << 30) + 1);
    assert!(m.blocks() * 512 <= 2 << 20, "restored sparse: {} blocks", m.blocks());
    let mut b = [0u8; 3];
    std::fs::File::open(out.join("huge")).unwrap().read_exact_at(&mut b, (600 << 20) - 1).unwrap();
    assert_eq!(&b, b"\0x\0");
}

/// A hard link must name a regular file listed before it; a set that says otherwise (damaged, or
/// made to mislead) is refused before anything is written.
#[test]
fn a_hard_link_to_nothing_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"data").unwrap();
    for (what, link) in [("forward", Some(9)), ("to a directory", Some(0)), ("missing", None)] {
        let stripe = work.path().join(format!("{}.sheaf", what.replace(' ', "_")));
        let opts = BackupOptions::new(vec![Location::file(stripe.clone())]);
        let mut b = sheaf_core::Backup::start(&opts, sheaf_core::Tuning::resolve(&opts, 1).unwrap(), Arc::new(NoProgress)).unwrap();
        let mut listed = sheaf_core::source::list_tree(&src, 0, &mut vec![]).unwrap();
        let mut bad = listed[1].clone();
        bad.entry.path = "g".into();
        bad.entry.kind = sheaf_core::manifest::EntryKind::Hardlink;
        bad.entry.link = link;
        bad.entry.size = 0;
        listed.push(bad);
        b.add_tree(sheaf_core::manifest::Root { name: String::new(), path: src.display().to_string() }, listed).unwrap();
        b.finish(serde_json::json!({})).unwrap();
        let out = work.path().join(format!("out-{what}"));
        let e = restore(&[stripe], &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap_err();
        assert_eq!(e.kind(), sheaf_core::ErrorKind::Corrupt, "{what}");
        assert!(e.to_string().contains("hard link 'g' names no regular file before it"), "{what}: {e}");
        assert!(!out.join("f").exists(), "{what}: nothing written");
    }
}

/// `--preallocate`: each stripe reserves the source's size over the stripes, and is trimmed to what
/// was written before it is published: same set, same restore, no reserved room left behind.
#[test]
fn preallocated_stripes_are_trimmed_and_restore_the_same() {
    use std::os::unix::fs::MetadataExt;
    let src = tree(1 << 20);
    let work = tempfile::tempdir().unwrap();
    let stripes: Vec<PathBuf> = (0..2).map(|k| work.path().join(format!("p_{k}.sheaf"))).collect();
    let mut opts = BackupOptions::new(stripes.iter().map(Location::file).collect());
    opts.codec = CodecSpec::parse("zstd:low").unwrap();
    opts.preallocate = true;
    let r = backup_directory(&src, &opts, Arc::new(NoProgress)).unwrap();
    let on_disk: u64 = stripes.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(on_disk, r.bytes_written, "stripes hold what was written, no reserved tail");
    for p in &stripes {
        let m = std::fs::metadata(p).unwrap();
        assert!(m.blocks() * 512 <= m.len().next_multiple_of(1 << 20) + (1 << 20), "{}: {} bytes allocated for {}", p.display(), m.blocks() * 512, m.len());
    }
    assert!(r.bytes_read > 2 * on_disk, "the reservation (source over stripes) was larger than the stripes: the trim did something");
    let out = work.path().join("out");
    restore(&stripes[..1], &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap();
    compare_trees(&src, &out).unwrap();
}

/// A set of many pages opened lean holds no entries and no index, and still finds each entry,
/// counts what the whole one counts, and refuses an index that lost a chunk, as the whole one does.
#[test]
fn a_set_opened_lean_holds_no_entries_and_agrees_with_the_whole() {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    for d in 0..5 {
        std::fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for i in 0..1000 {
            std::fs::write(src.join(format!("d{d}/f{i}")), format!("{d}/{i}").repeat(i % 7)).unwrap();
        }
    }
    let stripes: Vec<PathBuf> = (0..2).map(|k| work.path().join(format!("m_{k}.sheaf"))).collect();
    let mut opts = BackupOptions::new(stripes.iter().map(Location::file).collect());
    opts.transfer_size = 64 << 10;
    backup_directory(&src, &opts, Arc::new(NoProgress)).unwrap();
    let locations: Vec<Location> = stripes.iter().map(Location::file).collect();
    let lean = BackupSet::open_lean(&locations, &LocalOnly, None).unwrap();
    let whole = open(&stripes).unwrap();
    assert!(lean.manifest.entries.is_empty() && lean.stripes.iter().all(|s| s.index.is_empty()), "nothing per file held");
    assert_eq!(whole.manifest.entries.len(), 5006);
    assert_eq!((lean.file_count(), lean.raw_bytes()), (whole.manifest.file_count(), whole.raw_bytes()));
    for id in [0, 1, 2047, 2048, 4095, 5005] {
        assert_eq!(lean.entry(id).unwrap(), whole.manifest.entries[id as usize], "entry {id}");
    }
    assert!(lean.entry(5006).is_err());
    let v = verify(&stripes, None, Arc::new(NoProgress)).unwrap();
    assert_eq!(v.files, 5000);
    // Restores of both, whole and with --only, agree: the same counts and the same files.
    for only in [vec![], vec!["d3/f1*".to_string()]] {
        let mut reports = Vec::new();
        for (how, set) in [("whole", &whole), ("lean", &lean)] {
            let out = work.path().join(format!("out_{how}_{}", only.len()));
            let mut o = RestoreOptions::new(&out);
            o.only = only.clone();
            let r = sheaf_core::restore(set, &o, Arc::new(NoProgress)).unwrap_or_else(|e| panic!("{how} {only:?}: {e}"));
            reports.push((r.files, r.entries, r.bytes_written));
            if only.is_empty() {
                compare_trees(&src, &out).unwrap_or_else(|e| panic!("{how}: {e}"));
            } else {
                assert!(out.join("d3/f1").exists() && out.join("d3/f150").exists() && !out.join("d3/f2").exists() && !out.join("d2").exists(), "{how}");
            }
        }
        assert_eq!(reports[0], reports[1], "{only:?}");
        assert_eq!(reports[0].0, if only.is_empty() { 5000 } else { 111 }, "{only:?}");
    }

    // An index entry removed (the trailer's count and checksum made to agree): both refuse it,
    // naming the file whose chunks no longer cover it.
    use sheaf_core::format::{index_entry_len, Trailer, TRAILER_LEN};
    let k = (0..2).find(|&k| whole.stripes[k].index.iter().any(|e| e.raw_len > 0)).unwrap();
    let mut b = std::fs::read(&stripes[k]).unwrap();
    let mut t = Trailer::decode(&b[b.len() - TRAILER_LEN..]).unwrap();
    let len = index_entry_len(whole.stripes[k].header.version) as u64;
    let victim = whole.stripes[k].index.iter().position(|e| e.raw_len > 0).unwrap() as u64;
    let at = (t.index_offset + victim * len) as usize;
    b.drain(at..at + len as usize);
    t.index_len -= len;
    t.manifest_offset -= len;
    t.frame_count -= 1;
    let (index, manifest) = (t.index_offset as usize, t.manifest_offset as usize);
    t.index_crc = crc32c::crc32c(&b[index..manifest]);
    let n = b.len();
    b[n - TRAILER_LEN..].copy_from_slice(&t.encode());
    std::fs::write(&stripes[k], &b).unwrap();
    let lean = BackupSet::open_lean(&locations, &LocalOnly, None).err().expect("lean refuses");
    let whole = open(&stripes).err().expect("whole refuses");
    assert_eq!(lean.to_string(), whole.to_string());
    assert!(lean.to_string().contains("chunks cover"), "{lean}");
}
