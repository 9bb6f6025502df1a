//! A full backup stopped halfway is resumed: the files an earlier attempt holds whole and that
//! have not changed since are taken, not read; every other file is read again; the set restores
//! to exactly the source as it is at the second attempt, encrypted or not, and a change of codec
//! or chunk size starts afresh.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sheaf_core::crypto::{Encryption, Keys};
use sheaf_core::{
    backup_directory, BackupOptions, BackupSet, CodecSpec, ErrorKind, Journal, Journaled, LocalOnly, Location, NoProgress, Progress, RestoreOptions, Result, Resumable, Resume,
};

/// A journal in a folder.
#[derive(Debug)]
struct FolderJournal(PathBuf, Mutex<()>);

impl Journal for FolderJournal {
    fn put(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let _g = self.1.lock().unwrap();
        let p = self.0.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
        Ok(())
    }
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(std::fs::read(self.0.join(name)).ok())
    }
    fn list(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for d in std::fs::read_dir(&self.0).unwrap() {
            let d = d.unwrap();
            for f in std::fs::read_dir(d.path()).unwrap() {
                out.push(format!("{}/{}", d.file_name().to_string_lossy(), f.unwrap().file_name().to_string_lossy()));
            }
        }
        Ok(out)
    }
}

/// Asks the backup to stop once it has read `after` bytes (taken ones count too).
struct StopAt {
    stop: sheaf_core::stop::Stop,
    after: u64,
    seen: AtomicU64,
}

impl Progress for StopAt {
    fn advance(&self, bytes: u64) {
        if self.seen.fetch_add(bytes, Ordering::Relaxed) + bytes >= self.after {
            self.stop.ask();
        }
    }
}

fn old(path: &Path) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
}

/// 24 files of 320 KiB (5 chunks each) and 40 small ones (packed), all an hour old.
fn source(dir: &Path) -> u64 {
    std::fs::create_dir_all(dir.join("small")).unwrap();
    let mut bytes = 0;
    for i in 0..24 {
        let p = dir.join(format!("big{i:02}"));
        sheaf_core::datagen::write_file(&p, 320 << 10, i, 0.6).unwrap();
        old(&p);
        bytes += 320 << 10;
    }
    for i in 0..40 {
        let p = dir.join(format!("small/s{i:02}"));
        std::fs::write(&p, format!("small file {i} ").repeat(40 + i as usize)).unwrap();
        old(&p);
        bytes += std::fs::metadata(&p).unwrap().len();
    }
    bytes
}

fn restored_equals(set: &BackupSet, src: &Path, out: &Path) {
    sheaf_core::restore(set, &RestoreOptions::new(out), Arc::new(NoProgress)).unwrap();
    let mut files = 0;
    for e in walk(src) {
        let rel = e.strip_prefix(src).unwrap();
        assert_eq!(std::fs::read(&e).unwrap(), std::fs::read(out.join(rel)).unwrap(), "{}", rel.display());
        files += 1;
    }
    assert_eq!(files, 64);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(dir).unwrap() {
        let p = d.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn a_backup_stopped_halfway_goes_on_from_what_it_stored_and_restores_exactly() {
    for encrypted in [false, true] {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        let total = source(&src);
        let stripes: Vec<Location> = (0..2).map(|k| Location::file(d.path().join(format!("s{k}.sheaf")))).collect();
        let journal = Arc::new(FolderJournal(d.path().join("journal"), Mutex::new(())));
        let keys = Arc::new(Keys::from_key([9; 32]));
        let mut opts = BackupOptions::new(stripes.clone());
        opts.transfer_size = 64 << 10;
        opts.threads = Some(2);
        opts.encryption = encrypted.then(|| Encryption { kdf: keys.fresh_kdf().unwrap(), keys: keys.clone() });
        opts.journal = Some(Journaled { journal: journal.clone(), facts: serde_json::json!({"system_identifier": 7}) });

        // Attempt 0, stopped about halfway: its stripes stay unfinished, nothing looks complete.
        let stop = sheaf_core::stop::Stop::new();
        let mut first = opts.clone();
        first.stop = stop.clone();
        let e = backup_directory(&src, &first, Arc::new(StopAt { stop, after: total / 2, seen: AtomicU64::new(0) })).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
        for s in &stripes {
            assert!(!Path::new(s.name()).exists(), "no stripe is published");
            assert!(Path::new(&format!("{}.partial", s.name())).exists(), "the unfinished stripe is kept");
        }

        // Between the attempts: one file rewritten (read again), one grown, one removed.
        sheaf_core::datagen::write_file(&src.join("big00"), 320 << 10, 100, 0.6).unwrap();
        std::fs::write(src.join("small/s00"), b"changed since").unwrap();
        std::fs::remove_file(src.join("big01")).unwrap();
        sheaf_core::datagen::write_file(&src.join("big01"), 200 << 10, 101, 0.6).unwrap();

        // Other settings start afresh, and say why.
        let mut other = opts.clone();
        other.codec = CodecSpec::parse("lz4").unwrap();
        match Resume::prepare(journal.as_ref(), &other.settings(), &[]).unwrap() {
            Resumable::Afresh(why) => assert!(why.contains("--compression"), "{why}"),
            Resumable::Ready(_) => panic!("another codec resumed"),
        }
        let mut other = opts.clone();
        other.transfer_size = 128 << 10;
        assert!(matches!(Resume::prepare(journal.as_ref(), &other.settings(), &[]).unwrap(), Resumable::Afresh(w) if w.contains("chunks")));

        let r = match Resume::prepare(journal.as_ref(), &opts.settings(), &[]).unwrap() {
            Resumable::Ready(r) => r,
            Resumable::Afresh(why) => panic!("not resumed: {why}"),
        };
        assert_eq!(r.attempt(), 1);
        assert_eq!(r.facts()["system_identifier"], 7);
        assert!(r.files_held() > 5, "{} files held", r.files_held());
        let mut second = opts.clone();
        second.resume = Some(Arc::from(r));
        let report = backup_directory(&src, &second, Arc::new(NoProgress)).unwrap();
        let resumed = report.resumed.clone().expect("the report says it resumed");
        assert_eq!(resumed.attempt, 1);
        assert!(resumed.files > 5 && resumed.bytes > 5 * (320 << 10) / 2, "{resumed:?}");
        let now: u64 = walk(&src).iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
        assert_eq!(report.bytes_read + resumed.bytes, now, "taken and read make the source");
        assert!(report.bytes_read < total, "files taken were not read again");

        let set = BackupSet::open_with(&stripes, &LocalOnly, Some(&keys)).unwrap();
        assert_eq!(set.manifest.resumed.as_ref().map(|r| r.files), Some(resumed.files));
        let v = sheaf_core::verify(&set, None, Arc::new(NoProgress), &sheaf_core::stop::Stop::new()).unwrap();
        assert!(v.frames > 0);
        restored_equals(&set, &src, &d.path().join("out"));
        assert!(!Path::new(&format!("{}.partial", stripes[0].name())).exists());
    }
}

/// A backup of `src` into one stripe in `dir`, with a journal, stopped once `after` bytes were read:
/// its stripe, its options and its journal.
fn stopped_at(dir: &Path, src: &Path, after: u64) -> (Vec<Location>, BackupOptions, Arc<FolderJournal>) {
    let stripes = vec![Location::file(dir.join("s0.sheaf"))];
    let journal = Arc::new(FolderJournal(dir.join("journal"), Mutex::new(())));
    let mut opts = BackupOptions::new(stripes.clone());
    opts.transfer_size = 64 << 10;
    opts.threads = Some(2);
    opts.journal = Some(Journaled { journal: journal.clone(), facts: serde_json::json!({}) });
    let stop = sheaf_core::stop::Stop::new();
    let mut first = opts.clone();
    first.stop = stop.clone();
    backup_directory(src, &first, Arc::new(StopAt { stop, after, seen: AtomicU64::new(0) })).unwrap_err();
    (stripes, opts, journal)
}

/// A power cut loses what the page cache held: bytes in the middle of an unfinished stripe come back
/// as zeros. The next attempt keeps the stripe up to the first damaged frame only, reads every file
/// that frame or a later one held, and still restores exactly.
#[test]
fn damage_in_an_unfinished_stripe_keeps_it_only_up_to_the_first_bad_frame() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let total = source(&src);
    let (stripes, opts, journal) = stopped_at(d.path(), &src, total * 3 / 4);
    let partial = d.path().join("s0.sheaf.partial");
    let len = std::fs::metadata(&partial).unwrap().len();
    // Zeros over 4 KiB at 40 % of what it holds.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::options().write(true).open(&partial).unwrap();
        f.write_all_at(&[0u8; 4096], len * 2 / 5).unwrap();
    }
    let r = match Resume::prepare(journal.as_ref(), &opts.settings(), &[]).unwrap() {
        Resumable::Ready(r) => r,
        Resumable::Afresh(why) => panic!("not resumed: {why}"),
    };
    let mut second = opts.clone();
    second.resume = Some(Arc::from(r));
    let report = backup_directory(&src, &second, Arc::new(NoProgress)).unwrap();
    let resumed = report.resumed.clone().unwrap();
    assert!(resumed.kept_stored_bytes <= len * 2 / 5, "kept only up to the damage: {} of {len}", resumed.kept_stored_bytes);
    assert!(resumed.files > 0, "{resumed:?}");
    let set = BackupSet::open(&stripes, &LocalOnly).unwrap();
    restored_equals(&set, &src, &d.path().join("out"));
}

/// A large file half stored when the backup stopped is taken in part: the chunks stored stay, only
/// the rest of the file is read, and it restores exactly.
#[test]
fn a_file_half_stored_is_taken_in_part_and_only_the_rest_is_read() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let big = src.join("segment");
    sheaf_core::datagen::write_file(&big, 4 << 20, 7, 0.6).unwrap();
    old(&big);
    let (stripes, opts, journal) = stopped_at(d.path(), &src, 2 << 20);
    let r = match Resume::prepare(journal.as_ref(), &opts.settings(), &[]).unwrap() {
        Resumable::Ready(r) => r,
        Resumable::Afresh(why) => panic!("not resumed: {why}"),
    };
    let mut second = opts.clone();
    second.resume = Some(Arc::from(r));
    let report = backup_directory(&src, &second, Arc::new(NoProgress)).unwrap();
    let resumed = report.resumed.clone().unwrap();
    assert_eq!(resumed.files, 0, "not held whole: {resumed:?}");
    assert!(resumed.bytes >= 1 << 20, "its stored part is taken: {resumed:?}");
    assert_eq!(report.bytes_read + resumed.bytes, 4 << 20, "only the rest is read");
    let set = BackupSet::open(&stripes, &LocalOnly).unwrap();
    let out = d.path().join("out");
    sheaf_core::restore(&set, &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap();
    assert_eq!(std::fs::read(out.join("segment")).unwrap(), std::fs::read(&big).unwrap());
}

/// A folder whose unfinished stripes cannot be read back past byte `at`: a link that fails midway
/// (`Io`), or a stripe that ends there (`Incomplete`).
#[derive(Debug)]
struct Flaky {
    at: u64,
    kind: ErrorKind,
}

struct FlakySource {
    file: sheaf_core::storage::LocalSource,
    at: u64,
    kind: ErrorKind,
}

impl sheaf_core::storage::StripeSource for FlakySource {
    fn len(&self) -> u64 {
        self.file.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        if offset + buf.len() as u64 > self.at {
            return Err(sheaf_core::Error::new(self.kind, "the link failed"));
        }
        self.file.read_exact_at(buf, offset)
    }
    fn location(&self) -> &str {
        self.file.location()
    }
}

struct FlakyUnfinished {
    inner: Box<dyn sheaf_core::storage::UnfinishedStripe>,
    src: FlakySource,
}

impl sheaf_core::storage::UnfinishedStripe for FlakyUnfinished {
    fn holds(&self) -> sheaf_core::storage::Holding<'_> {
        sheaf_core::storage::Holding::Bytes(&self.src)
    }
    fn go_on(self: Box<Self>, keep: u64) -> Result<Box<dyn sheaf_core::storage::StripeSink>> {
        self.inner.go_on(keep)
    }
    fn abandon(self: Box<Self>) {
        self.inner.abandon()
    }
}

impl sheaf_core::Store for Flaky {
    fn capabilities(&self) -> sheaf_core::storage::Capabilities {
        sheaf_core::storage::LocalStore.capabilities()
    }
    fn describe(&self, name: &str) -> String {
        sheaf_core::storage::LocalStore.describe(name)
    }
    fn create(&self, name: &str, opts: &sheaf_core::storage::WriteOptions) -> Result<Box<dyn sheaf_core::storage::StripeSink>> {
        sheaf_core::storage::LocalStore.create(name, opts)
    }
    fn open(&self, name: &str) -> Result<Box<dyn sheaf_core::storage::StripeSource>> {
        sheaf_core::storage::LocalStore.open(name)
    }
    fn resume(&self, name: &str, opts: &sheaf_core::storage::WriteOptions) -> Result<Option<Box<dyn sheaf_core::storage::UnfinishedStripe>>> {
        let Some(inner) = sheaf_core::storage::LocalStore.resume(name, opts)? else { return Ok(None) };
        let file = sheaf_core::storage::LocalSource::open(Path::new(&format!("{name}.partial")))?;
        Ok(Some(Box::new(FlakyUnfinished { inner, src: FlakySource { file, at: self.at, kind: self.kind } })))
    }
    fn can_resume(&self) -> bool {
        true
    }
    fn exists(&self, name: &str) -> Result<bool> {
        sheaf_core::storage::LocalStore.exists(name)
    }
    fn list(&self, prefix: &str) -> Result<Vec<sheaf_core::storage::Stored>> {
        sheaf_core::storage::LocalStore.list(prefix)
    }
    fn delete(&self, name: &str) -> Result<()> {
        sheaf_core::storage::LocalStore.delete(name)
    }
}

/// What a stopped backup stored that cannot be read back now (the link to the repository failing
/// midway) is not judged on the part that was read: preparing fails, and the stripe is left as it
/// was, whole, for a later try. A stripe that ends early is kept up to there, as before.
#[test]
fn a_stripe_that_cannot_be_read_back_is_left_as_it_is_not_cut() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let total = source(&src);
    let (_, opts, journal) = stopped_at(d.path(), &src, total * 3 / 4);
    let partial = d.path().join("s0.sheaf.partial");
    let len = std::fs::metadata(&partial).unwrap().len();
    let name = d.path().join("s0.sheaf").display().to_string();
    let flaky = |kind| {
        let mut o = opts.clone();
        o.targets = vec![Location::new(Arc::new(Flaky { at: len / 2, kind }), name.clone())];
        o
    };
    let o = flaky(ErrorKind::Io);
    let e = match Resume::prepare(journal.as_ref(), &o.settings(), &[]) {
        Err(e) => e,
        Ok(Resumable::Ready(_)) => panic!("resumed from what could not be read"),
        Ok(Resumable::Afresh(why)) => panic!("given up on what could not be read: {why}"),
    };
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert_eq!(std::fs::metadata(&partial).unwrap().len(), len, "the stripe is left whole");

    // Ending early is another matter: kept up to there.
    let o = flaky(ErrorKind::Incomplete);
    match Resume::prepare(journal.as_ref(), &o.settings(), &[]).unwrap() {
        Resumable::Ready(r) => drop(r),
        Resumable::Afresh(why) => panic!("not resumed: {why}"),
    }
}
