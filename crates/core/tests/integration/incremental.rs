//! Incremental and differential sets of a directory: a full, then sets that hold only the pages
//! that changed (found here by comparing with the tree as the parent saw it, standing in for
//! PostgreSQL's page LSNs), each restored through its chain equal to the tree as it was taken.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sheaf_core::datagen::{compare_trees, write_file};
use sheaf_core::manifest::{BackupType, Root};
use sheaf_core::{restore_chain, Backup, BackupOptions, BackupSet, Changes, CodecSpec, FileChanges, Lineage, LocalOnly, Location, NoProgress, RestoreOptions, Tuning, UnitFilter};

const PAGE: usize = 8192;

/// The tree as the parent saw it: path to bytes.
type Snapshot = HashMap<String, Vec<u8>>;

fn snapshot(root: &Path) -> Snapshot {
    let mut out = Snapshot::new();
    for l in sheaf_core::source::list_tree(root, 0, &mut Vec::new()).unwrap() {
        if l.entry.kind == sheaf_core::manifest::EntryKind::File {
            out.insert(l.entry.path.clone(), std::fs::read(&l.abs).unwrap());
        }
    }
    out
}

/// Pages that differ from the parent's, and pages past its end.
struct Diff(Vec<u8>);
impl UnitFilter for Diff {
    fn unit(&self) -> usize {
        PAGE
    }
    fn changed(&self, n: u64, data: &[u8]) -> bool {
        let at = n as usize * PAGE;
        self.0.get(at..at + data.len()) != Some(data)
    }
}

/// Files the parent had are scanned page by page, except `same*`, which are named unchanged (the
/// way WAL summaries name a file nobody wrote); new files are whole.
struct Against(Snapshot);
impl Changes for Against {
    fn of(&self, _root: &str, rel: &str, _size: u64) -> FileChanges {
        match self.0.get(rel) {
            None => FileChanges::Whole,
            Some(_) if rel.starts_with("same") => FileChanges::Ranges(Vec::new()),
            Some(old) => FileChanges::Scan(Arc::new(Diff(old.clone()))),
        }
    }
}

/// Back up `src` into two stripes `dir/NAME_k.sheaf`, as an incremental when `on` is given, in
/// 64 KiB chunks.
fn take(src: &Path, dir: &Path, name: &str, on: Option<(Lineage, Snapshot)>) -> BackupSet {
    take_in(src, dir, name, on, 64 << 10)
}

/// [`take`] in chunks of `transfer` bytes.
fn take_in(src: &Path, dir: &Path, name: &str, on: Option<(Lineage, Snapshot)>, transfer: u64) -> BackupSet {
    let stripes: Vec<PathBuf> = (1..=2).map(|k| dir.join(format!("{name}_{k}.sheaf"))).collect();
    let mut opts = BackupOptions::new(stripes.iter().map(Location::file).collect());
    opts.codec = CodecSpec::parse("zstd:low").unwrap();
    opts.transfer_size = transfer;
    let tuning = Tuning::resolve(&opts, 1).unwrap();
    let mut b = Backup::start(&opts, tuning, Arc::new(NoProgress)).unwrap();
    if let Some((lineage, snap)) = on {
        b.incremental(lineage, Arc::new(Against(snap)));
    }
    let mut listed = sheaf_core::source::list_tree(src, 0, &mut Vec::new()).unwrap();
    // Files named `last*` are listed after all others, out of key order (as PostgreSQL's
    // pg_control and WAL are).
    listed.sort_by_key(|l| l.entry.path.starts_with("last"));
    b.add_tree(Root { name: String::new(), path: src.display().to_string() }, listed).unwrap();
    b.finish(serde_json::json!({})).unwrap();
    BackupSet::open(&stripes.iter().map(Location::file).collect::<Vec<_>>(), &LocalOnly).unwrap()
}

/// `s` opened again, lean ([`BackupSet::open_lean`]).
fn lean(s: &BackupSet) -> BackupSet {
    BackupSet::open_lean(&s.stripes.iter().map(|x| x.location.clone()).collect::<Vec<_>>(), &LocalOnly, None).unwrap()
}

fn overwrite(path: &Path, at: u64, bytes: &[u8]) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().write_all_at(bytes, at).unwrap();
}

fn restored(sets: &[&BackupSet], to: &Path) -> sheaf_core::Result<sheaf_core::RestoreReport> {
    restore_chain(sets, &RestoreOptions::new(to), Arc::new(NoProgress))
}

/// A copy of the tree as it is now, modes and times kept, to compare a later restore with.
fn keep(src: &Path, to: &Path) {
    let ok = std::process::Command::new("cp").arg("-a").arg(src).arg(to).status().unwrap().success();
    assert!(ok);
}

#[test]
fn chains_of_incrementals_and_a_differential_restore_each_state_exactly() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("dir")).unwrap();
    for (name, size, seed) in
        [("big", 2 << 20, 1), ("grow", 100 << 10, 2), ("shrink", 300 << 10, 3), ("same", 200 << 10, 4), ("small", 20 << 10, 5), ("gone", 50 << 10, 6), ("dir/x", 3000, 7)]
    {
        write_file(&src.join(name), size, seed, 0.5).unwrap();
    }
    let full = take(&src, d.path(), "full", None);
    assert_eq!(full.manifest.backup_type, BackupType::Full);
    let t0 = snapshot(&src);

    // Pages changed here and there, a file grown, one cut short and changed, one gone, one new.
    overwrite(&src.join("big"), 3 * PAGE as u64, &[0xAA; 2 * PAGE]);
    overwrite(&src.join("big"), 70 * PAGE as u64 + 100, b"a few bytes");
    let grown = std::fs::read(src.join("grow")).unwrap();
    std::fs::write(src.join("grow"), [grown.as_slice(), &[0x55; 50 << 10]].concat()).unwrap();
    std::fs::OpenOptions::new().write(true).open(src.join("shrink")).unwrap().set_len(100 << 10).unwrap();
    overwrite(&src.join("shrink"), 5, b"changed");
    overwrite(&src.join("small"), PAGE as u64, &[1; 10]);
    std::fs::remove_file(src.join("gone")).unwrap();
    write_file(&src.join("new"), 70 << 10, 8, 0.5).unwrap();
    let incr1 = take(&src, d.path(), "incr1", Some((Lineage { backup_type: BackupType::Incr, chain: vec![full.manifest.backup_id.clone()] }, t0.clone())));
    let t1 = snapshot(&src);
    keep(&src, &d.path().join("at_incr1"));

    let m = &incr1.manifest;
    assert_eq!((m.backup_type, m.chain.clone()), (BackupType::Incr, vec![full.manifest.backup_id.clone()]));
    let delta = |name: &str| m.entries.iter().find(|e| e.path == name).unwrap().delta;
    assert_eq!(delta("big").unwrap().bytes, 3 * PAGE as u64, "two pages and one");
    assert_eq!(delta("grow").unwrap().bytes, (150 - 96) << 10, "only the growth, from the page the old end fell in");
    assert_eq!(delta("shrink").unwrap().bytes, PAGE as u64);
    assert_eq!(delta("same").unwrap().bytes, 0, "named, not held");
    assert_eq!(delta("new"), None, "a new file is whole");
    assert!(m.entries.iter().all(|e| e.path != "gone"));
    // The incremental holds a small part of what the full does.
    assert!(incr1.raw_bytes() * 10 < full.raw_bytes(), "{} of {}", incr1.raw_bytes(), full.raw_bytes());

    // A second incremental on the first.
    overwrite(&src.join("big"), 3 * PAGE as u64, &[0xBB; 100]);
    overwrite(&src.join("big"), 200 * PAGE as u64, &[0xCC; PAGE]);
    overwrite(&src.join("new"), 0, b"new, changed");
    let chain2 = vec![full.manifest.backup_id.clone(), incr1.manifest.backup_id.clone()];
    let incr2 = take(&src, d.path(), "incr2", Some((Lineage { backup_type: BackupType::Incr, chain: chain2 }, t1)));
    // And a differential on the full: everything changed since t0.
    let diff = take(&src, d.path(), "diff", Some((Lineage { backup_type: BackupType::Diff, chain: vec![full.manifest.backup_id.clone()] }, t0)));
    assert!(diff.raw_bytes() > incr2.raw_bytes());

    let out = |n: &str| d.path().join("out").join(n);
    let r = restored(&[&full, &incr1, &incr2], &out("incr2")).unwrap();
    compare_trees(&src, &out("incr2")).unwrap();
    assert_eq!(r.stripes, 6);
    // The chain opened lean (entries a page at a time, indexes sorted by file on disk) restores the
    // same tree, reading and writing the same bytes.
    let (lf, l1, l2) = (lean(&full), lean(&incr1), lean(&incr2));
    let lr = restored(&[&lf, &l1, &l2], &out("lean")).unwrap();
    compare_trees(&src, &out("lean")).unwrap();
    assert_eq!((lr.files, lr.entries, lr.bytes_written, lr.bytes_read), (r.files, r.entries, r.bytes_written, r.bytes_read));
    restored(&[&full, &diff], &out("diff")).unwrap();
    compare_trees(&src, &out("diff")).unwrap();
    restored(&[&full, &incr1], &out("incr1")).unwrap();
    compare_trees(&d.path().join("at_incr1"), &out("incr1")).unwrap();
    // Bytes read: the full's frames that still count, and the incrementals'.
    assert!(r.bytes_read < full.stored_bytes() + incr1.stored_bytes() + incr2.stored_bytes());

    // Delta: the tree as the full restored it, with junk added and a file turned into a folder,
    // made equal to the newest state while reading only what differs.
    let stale_delta = |name: &str, sets: &[&BackupSet]| {
        let stale = out(name);
        restored(&[&full], &stale).unwrap();
        std::fs::write(stale.join("junk"), b"not in the backup").unwrap();
        std::fs::write(stale.join("dir/junk"), b"nor in a folder it has").unwrap();
        std::fs::remove_file(stale.join("small")).unwrap();
        std::fs::create_dir_all(stale.join("small/inside")).unwrap();
        // A file whose bytes are right but whose mode and time are not: its metadata is set again.
        std::fs::set_permissions(stale.join("same"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        std::fs::File::options().write(true).open(stale.join("same")).unwrap().set_modified(std::time::UNIX_EPOCH).unwrap();
        let mut o = RestoreOptions::new(&stale);
        o.delta = true;
        let r = restore_chain(sets, &o, Arc::new(NoProgress)).unwrap();
        compare_trees(&src, &stale).unwrap();
        let mtime = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
        assert_eq!(mtime(&stale.join("same")), mtime(&src.join("same")), "the kept file's time is the backup's");
        (r, o)
    };
    let (r, mut o) = stale_delta("stale", &[&full, &incr1, &incr2]);
    let stale = out("stale");
    let dr = r.delta.unwrap();
    assert_eq!(dr.removed, 4, "gone, junk at the top and in a folder, and the folder where a file belongs: {dr:?}");
    assert!(dr.chunks_kept > 0 && dr.bytes_kept > full.raw_bytes() / 2, "most of the full's chunks were right: {dr:?}");
    // The same delta from the chain opened lean, onto the same stale tree: the same findings.
    let (lr, _) = stale_delta("stale2", &[&lf, &l1, &l2]);
    let ld = lr.delta.unwrap();
    assert_eq!((ld.removed, ld.chunks_kept, ld.bytes_kept, ld.bytes_compared, lr.bytes_read), (dr.removed, dr.chunks_kept, dr.bytes_kept, dr.bytes_compared, r.bytes_read));
    let fresh = restored(&[&full, &incr1, &incr2], &out("fresh")).unwrap();
    assert!(r.bytes_read < fresh.bytes_read, "read {} against a fresh restore's {}", r.bytes_read, fresh.bytes_read);
    // The full's chunks that the incrementals cut are on disk whole as the full had them: compared
    // and kept too, so about only the incrementals' frames are read.
    assert!(r.bytes_read <= incr1.stored_bytes() + incr2.stored_bytes() + (16 << 10), "read {}: {dr:?}", r.bytes_read);
    // Again onto a tree that is already right: nothing is removed, and only the older chunks that
    // newer sets cut are read (each is compared whole, and the disk has the newer pages in it).
    let again = restore_chain(&[&full, &incr1, &incr2], &o, Arc::new(NoProgress)).unwrap();
    compare_trees(&src, &stale).unwrap();
    let kept = again.delta.unwrap();
    assert_eq!(kept.removed, 0);
    assert!(again.bytes_read < fresh.bytes_read / 4, "{} against a fresh restore's {}", again.bytes_read, fresh.bytes_read);
    o.force = true;
    assert!(restore_chain(&[&full], &o, Arc::new(NoProgress)).unwrap_err().to_string().contains("does not combine"));

    // Consolidation: the chain written as one full set, without the source, restores alone to
    // the same tree; the small runs of pages are packed back into full chunks.
    let stripes: Vec<PathBuf> = (1..=2).map(|k| d.path().join(format!("merged_{k}.sheaf"))).collect();
    let mut opts = BackupOptions::new(stripes.iter().map(Location::file).collect());
    opts.codec = CodecSpec::parse("zstd:low").unwrap();
    opts.transfer_size = 64 << 10;
    let rep = sheaf_core::consolidate(&[&full, &incr1, &incr2], &opts, None, Arc::new(NoProgress)).unwrap();
    // The full's frames that no incremental cuts (and the incrementals' whole chunks) are copied
    // as stored, not compressed again; those cut, and the packed pieces, are made anew.
    assert!(rep.stored_chunks > rep.frames / 2 && rep.stored_chunks < rep.frames, "{} of {} frames copied", rep.stored_chunks, rep.frames);
    let merged = BackupSet::open(&stripes.iter().map(Location::file).collect::<Vec<_>>(), &LocalOnly).unwrap();
    assert_eq!((merged.manifest.backup_type, merged.manifest.chain.len()), (BackupType::Full, 0));
    assert!(merged.manifest.entries.iter().all(|e| e.delta.is_none()));
    assert_eq!(rep.bytes_held, merged.manifest.total_file_bytes());
    sheaf_core::restore(&merged, &RestoreOptions::new(out("merged")), Arc::new(NoProgress)).unwrap();
    compare_trees(&src, &out("merged")).unwrap();
    let frames = |s: &BackupSet| s.stripes.iter().map(|x| sheaf_core::set::frames_of(&x.index).count()).sum::<usize>();
    assert!(frames(&merged) <= frames(&full) + 4, "{} frames against the full's {}", frames(&merged), frames(&full));

    // An incremental alone, a chain with a set left out or out of order: refused, nothing made.
    for (sets, what) in [(vec![&incr2], "builds on"), (vec![&full, &incr2], "builds on"), (vec![&incr1, &full, &incr2], "builds on"), (vec![&full, &full], "full backup")] {
        let to = out("refused");
        let e = restored(&sets, &to).unwrap_err();
        assert!(e.to_string().contains(what), "{e}");
        assert!(!to.exists(), "nothing written for a refused chain");
    }
    let e = sheaf_core::restore(&incr1, &RestoreOptions::new(out("alone")), Arc::new(NoProgress)).unwrap_err();
    assert!(e.to_string().contains(&full.manifest.backup_id), "names what it builds on: {e}");
}

/// 1 MiB chunks of the full cut by scattered single pages of two incrementals: each chunk goes out
/// as its pieces (the large ones as direct writes in flight from one buffer, where the filesystem
/// takes direct I/O and the kernel offers io_uring; the single pages through the page cache), and
/// every byte lands where it belongs.
#[test]
fn chunks_cut_by_newer_sets_are_written_as_their_pieces() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    write_file(&src.join("table"), 8 << 20, 11, 0.5).unwrap();
    let t0 = snapshot(&src);
    let full = take_in(&src, d.path(), "full", None, 1 << 20);
    // Every 13th page, then every 29th from another phase: pieces of many lengths in each chunk.
    for n in (3..1024).step_by(13) {
        overwrite(&src.join("table"), (n * PAGE) as u64, &[0xA1; PAGE]);
    }
    let incr1 = take_in(&src, d.path(), "incr1", Some((Lineage { backup_type: BackupType::Incr, chain: vec![full.manifest.backup_id.clone()] }, t0)), 1 << 20);
    let t1 = snapshot(&src);
    for n in (7..1024).step_by(29) {
        overwrite(&src.join("table"), (n * PAGE) as u64, &[0xB2; PAGE]);
    }
    let chain = vec![full.manifest.backup_id.clone(), incr1.manifest.backup_id.clone()];
    let incr2 = take_in(&src, d.path(), "incr2", Some((Lineage { backup_type: BackupType::Incr, chain }, t1)), 1 << 20);
    let out = d.path().join("out");
    let r = restored(&[&full, &incr1, &incr2], &out).unwrap();
    compare_trees(&src, &out).unwrap();
    // Where direct I/O held, the pieces went out through the ring (when the kernel has one).
    if r.direct_io && io_uring_available() {
        assert!(r.io_uring, "{r:?}");
    }
}

/// Consolidation copies the frames newer sets cut into as they are stored, the replaced pages kept
/// in them unused (superseded): exactly those pages, no more. The set restores alone to the
/// chain's tree, verifies, reads a file in parts, and is copied again by the next consolidation;
/// told to keep nothing superseded, it compresses the cut frames again.
#[test]
fn consolidation_copies_cut_frames_keeping_the_replaced_pages_unused() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    write_file(&src.join("table"), 8 << 20, 11, 0.5).unwrap();
    write_file(&src.join("small"), 20 << 10, 12, 0.5).unwrap();
    let t0 = snapshot(&src);
    let full = take_in(&src, d.path(), "full", None, 1 << 20);
    let (a, b): (Vec<usize>, Vec<usize>) = ((3..1024).step_by(13).collect(), (7..1024).step_by(29).collect());
    for &n in &a {
        overwrite(&src.join("table"), (n * PAGE) as u64, &[0xA1; PAGE]);
    }
    let incr1 = take_in(&src, d.path(), "incr1", Some((Lineage { backup_type: BackupType::Incr, chain: vec![full.manifest.backup_id.clone()] }, t0)), 1 << 20);
    let t1 = snapshot(&src);
    for &n in &b {
        overwrite(&src.join("table"), (n * PAGE) as u64, &[0xB2; PAGE]);
    }
    let chain = vec![full.manifest.backup_id.clone(), incr1.manifest.backup_id.clone()];
    let incr2 = take_in(&src, d.path(), "incr2", Some((Lineage { backup_type: BackupType::Incr, chain }, t1)), 1 << 20);
    let t2 = snapshot(&src);
    let consolidated = |name: &str, sets: &[&BackupSet], keep: u8| {
        let stripes: Vec<Location> = (1..=2).map(|k| Location::file(d.path().join(format!("{name}_{k}.sheaf")))).collect();
        let mut opts = BackupOptions::new(stripes.clone());
        opts.codec = CodecSpec::parse("zstd:low").unwrap();
        opts.transfer_size = 1 << 20;
        opts.keep_superseded_pct = keep;
        let rep = sheaf_core::consolidate(sets, &opts, None, Arc::new(NoProgress)).unwrap();
        let set = BackupSet::open(&stripes, &LocalOnly).unwrap();
        let to = d.path().join(format!("out_{name}"));
        sheaf_core::restore(&set, &RestoreOptions::new(&to), Arc::new(NoProgress)).unwrap();
        compare_trees(&src, &to).unwrap();
        sheaf_core::verify(&set, None, Arc::new(NoProgress), &sheaf_core::stop::Stop::new()).unwrap();
        (rep, set)
    };
    let (rep, merged) = consolidated("merged", &[&full, &incr1, &incr2], sheaf_core::backup::DEFAULT_KEEP_SUPERSEDED_PCT);
    // Every frame copied: the full's eight, cut by both incrementals; incr1's, whose pages incr2
    // rewrote in part; incr2's and the small file's. What is superseded is every page the
    // incrementals replaced in the full, and incr1's pages that incr2 replaced: |A| + |B| pages.
    assert_eq!(rep.stored_chunks, rep.frames, "{rep:?}");
    assert_eq!(rep.superseded_bytes, ((a.len() + b.len()) * PAGE) as u64, "{rep:?}");
    assert_eq!(rep.bytes_held, merged.manifest.total_file_bytes());
    // A file read in parts from the copied frames (what extracting a page does).
    let id = merged.manifest.entries.iter().position(|e| e.path == "table").unwrap() as u32;
    let mut f = merged.file(id).unwrap();
    let mut page = vec![0u8; PAGE];
    for n in [b[0], a[0], 0] {
        f.read_at((n * PAGE) as u64, &mut page).unwrap();
        assert_eq!(page[..], t2["table"][n * PAGE..(n + 1) * PAGE], "page {n}");
    }
    // Told to keep nothing superseded: the cut frames are compressed again, none kept.
    let (tight, _) = consolidated("tight", &[&full, &incr1, &incr2], 0);
    assert_eq!(tight.superseded_bytes, 0, "{tight:?}");
    assert!(tight.stored_chunks < tight.frames, "{tight:?}");

    // The next consolidation copies the consolidated set's frames as they are, the superseded
    // bytes among them, and adds only what a new incremental replaced.
    for n in (5..1024).step_by(97) {
        overwrite(&src.join("table"), (n * PAGE) as u64, &[0xC3; PAGE]);
    }
    let incr3 = take_in(&src, d.path(), "incr3", Some((Lineage { backup_type: BackupType::Incr, chain: vec![merged.manifest.backup_id.clone()] }, t2)), 1 << 20);
    let (again, _) = consolidated("again", &[&merged, &incr3], sheaf_core::backup::DEFAULT_KEEP_SUPERSEDED_PCT);
    assert_eq!(again.stored_chunks, again.frames, "{again:?}");
    // Each page incr3 wrote replaces one page the consolidated set used.
    let c = (5..1024).step_by(97).count();
    assert_eq!(again.superseded_bytes, ((a.len() + b.len() + c) * PAGE) as u64, "{again:?}");
}

/// What changed, as a caller that knows it (PostgreSQL's WAL summaries) tells a delta restore:
/// per file, the byte ranges that may differ; everything past the target file's length too.
struct Told(HashMap<String, Vec<std::ops::Range<u64>>>);

impl Changes for Told {
    fn of(&self, _root: &str, rel: &str, size: u64) -> FileChanges {
        let mut r = self.0.get(rel).cloned().unwrap_or_default();
        r.retain(|x| x.start < size);
        r.push(size..u64::MAX);
        FileChanges::Ranges(r)
    }
}

/// A delta restore told what changed writes only that, reading nothing of the target; told less
/// than the truth, it trusts what it is told (the page it was not told of stays stale), and with
/// `check` it hashes as without, writes every difference, and names the page it was not told of.
#[test]
fn a_delta_told_what_changed_writes_only_that_and_a_check_finds_what_it_was_not_told() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("dir")).unwrap();
    for (name, size, seed) in [("big", 2 << 20, 1), ("shrink", 300 << 10, 3), ("same", 200 << 10, 4), ("dir/x", 3000, 7)] {
        write_file(&src.join(name), size, seed, 0.5).unwrap();
    }
    let old = take(&src, d.path(), "old", None);
    overwrite(&src.join("big"), 3 * PAGE as u64, &[0xAA; 2 * PAGE]);
    overwrite(&src.join("big"), 100 * PAGE as u64, &[0xAB; PAGE]);
    std::fs::OpenOptions::new().write(true).open(src.join("shrink")).unwrap().set_len(100 << 10).unwrap();
    write_file(&src.join("new"), 70 << 10, 8, 0.5).unwrap();
    let new = take(&src, d.path(), "new", None);
    let p = PAGE as u64;
    let truth = || Told(HashMap::from([("big".to_string(), vec![3 * p..5 * p, 100 * p..101 * p])]));
    let stale = |name: &str| {
        let to = d.path().join(name);
        restored(&[&old], &to).unwrap();
        std::fs::write(to.join("junk"), b"not in the backup").unwrap();
        to
    };
    let delta = |to: &Path, told: Told, check: bool| {
        let mut o = RestoreOptions::new(to);
        o.delta = true;
        o.delta_source = sheaf_core::restore::DeltaSource { changes: Some(Arc::new(told)), how: "told".into(), check };
        restore_chain(&[&new], &o, Arc::new(NoProgress)).unwrap()
    };

    // Told the truth: the tree is the new state; three pages written into big, the rest kept.
    let to = stale("told");
    let r = delta(&to, truth(), false);
    compare_trees(&src, &to).unwrap();
    let dr = r.delta.clone().unwrap();
    assert_eq!((dr.method, dr.how.as_str(), dr.bytes_compared, dr.chunks_kept), ("wal", "told", 0, 0), "{dr:?}");
    assert_eq!((dr.files_rewritten, dr.bytes_rewritten), (1, 3 * p), "big's three pages: {dr:?}");
    assert_eq!((dr.files_created, dr.bytes_created), (1, 70 << 10), "new: {dr:?}");
    assert_eq!(dr.files_kept, 3, "shrink (only cut), same, dir/x: {dr:?}");
    assert_eq!(dr.bytes_kept, (2 << 20) - 3 * p + (100 << 10) + (200 << 10) + 3000, "{dr:?}");
    assert_eq!((dr.removed, dr.bytes_removed), (1, 17), "junk: {dr:?}");
    assert_eq!(r.bytes_written, 3 * p + (70 << 10), "only what was written is counted written");
    assert!(r.bytes_read < new.stored_bytes() / 2, "read {} of {}", r.bytes_read, new.stored_bytes());

    // Told less than the truth (big's page 100 left out): that page stays as it was.
    let to = stale("untold");
    let less = || Told(HashMap::from([("big".to_string(), std::iter::once(3 * p..5 * p).collect())]));
    delta(&to, less(), false);
    let at = |path: &Path| {
        let mut b = vec![0u8; PAGE];
        std::fs::File::open(path.join("big")).unwrap().read_exact_at(&mut b, 100 * p).unwrap();
        b
    };
    assert_ne!(at(&to), vec![0xAB; PAGE], "the page it was not told of is not written");
    assert_eq!(at(&src), vec![0xAB; PAGE]);

    // Checked: hashed as without being told, so the tree is whole, and the page is named.
    let to = stale("checked");
    let r = delta(&to, less(), true);
    compare_trees(&src, &to).unwrap();
    let dr = r.delta.unwrap();
    assert_eq!((dr.method, dr.missed), ("hash", 1), "{dr:?}");
    assert_eq!(dr.misses, vec![format!("{} bytes {}..{}", to.join("big").display(), 100 * p, 101 * p)]);
    // Told the truth, the check finds nothing.
    let to = stale("checked-truth");
    let dr = delta(&to, truth(), true).delta.unwrap();
    compare_trees(&src, &to).unwrap();
    assert_eq!((dr.missed, dr.misses.len()), (0, 0), "{dr:?}");
}

fn io_uring_available() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").map_or(true, |v| v.trim() == "0")
}

/// Files listed out of key order (PostgreSQL lists pg_control and WAL last) in the full, the
/// incremental or both, and a file out of order in one set but not the other: the chain, opened
/// lean, restores each of them from the right sets, also as a delta.
#[test]
fn files_listed_out_of_key_order_are_matched_across_the_chain() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    for (name, size, seed) in [("a/one", 200 << 10, 1), ("last_ctl", 30 << 10, 2), ("m", 100 << 10, 3), ("z", 50 << 10, 4), ("lastwal", 120 << 10, 5)] {
        write_file(&src.join(name), size, seed, 0.5).unwrap();
    }
    // Apart and without chunks: its id comes after every other file's.
    std::fs::write(src.join("last_empty"), b"").unwrap();
    let t0 = snapshot(&src);
    let full = lean(&take(&src, d.path(), "full", None));
    // The incremental changes a page of each file and adds one more listed apart.
    for name in ["a/one", "last_ctl", "m", "z", "lastwal"] {
        overwrite(&src.join(name), PAGE as u64, &[0x5A; 100]);
    }
    write_file(&src.join("last_new"), 40 << 10, 6, 0.5).unwrap();
    let incr = lean(&take(&src, d.path(), "incr", Some((Lineage { backup_type: BackupType::Incr, chain: vec![full.manifest.backup_id.clone()] }, t0))));
    let mut order = Vec::new();
    incr.each_entry(|_, e| {
        order.push(e.path.clone());
        Ok(())
    })
    .unwrap();
    assert!(order.iter().position(|p| p == "lastwal") > order.iter().position(|p| p == "z"), "listed apart, after z: {order:?}");
    let out = d.path().join("out");
    let r = restored(&[&full, &incr], &out).unwrap();
    compare_trees(&src, &out).unwrap();
    assert_eq!(r.files, 7);
    // As a delta onto the full's state: the pages changed are all that is read.
    let stale = d.path().join("stale");
    restored(&[&full], &stale).unwrap();
    let mut o = RestoreOptions::new(&stale);
    o.delta = true;
    let r = restore_chain(&[&full, &incr], &o, Arc::new(NoProgress)).unwrap();
    compare_trees(&src, &stale).unwrap();
    assert!(r.delta.unwrap().chunks_kept > 0);
}
