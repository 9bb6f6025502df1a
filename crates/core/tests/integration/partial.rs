//! Reading parts of one file from a set: every byte equal to the source, only the frames that
//! hold them read, every frame checked, encrypted or not.

use std::path::Path;
use std::sync::Arc;

use sheaf_core::crypto::{Encryption, Keys};
use sheaf_core::datagen::make_shapes_tree;
use sheaf_core::manifest::EntryKind;
use sheaf_core::{backup_directory, BackupOptions, BackupSet, ErrorKind, LocalOnly, Location, NoProgress, RestoreOptions};

fn set_of(src: &Path, dir: &Path, keys: Option<Arc<Keys>>) -> BackupSet {
    let stripes: Vec<Location> = (0..2).map(|k| Location::file(dir.join(format!("p_{k}.sheaf")))).collect();
    let mut o = BackupOptions::new(stripes.clone());
    o.transfer_size = 64 << 10;
    o.encryption = keys.clone().map(|k| Encryption { kdf: k.fresh_kdf().unwrap(), keys: k });
    backup_directory(src, &o, Arc::new(NoProgress)).unwrap();
    BackupSet::open_with(&stripes, &LocalOnly, keys.as_deref()).unwrap()
}

#[test]
fn parts_of_files_read_back_exactly_from_only_their_frames() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    make_shapes_tree(&src, 64 << 10, 5).unwrap();
    let key = Arc::new(Keys::from_key([7; 32]));
    for keys in [None, Some(key)] {
        let dir = d.path().join(if keys.is_some() { "enc" } else { "plain" });
        std::fs::create_dir_all(&dir).unwrap();
        let set = set_of(&src, &dir, keys);
        let mut checked = 0;
        for (id, e) in set.manifest.entries.iter().enumerate() {
            if e.kind != EntryKind::File {
                continue;
            }
            use std::os::unix::ffi::OsStrExt;
            let want = std::fs::read(src.join(std::ffi::OsStr::from_bytes(e.path_bytes()))).unwrap();
            let mut f = set.file(id as u32).unwrap();
            assert_eq!(f.size(), want.len() as u64);
            // In odd pieces that straddle chunk boundaries, then a few single bytes.
            let mut got = vec![0u8; want.len()];
            for (i, piece) in got.chunks_mut(10_007).enumerate() {
                f.read_at((i * 10_007) as u64, piece).unwrap();
            }
            assert!(got == want, "{}", e.path);
            for at in [0, want.len() / 2, want.len().saturating_sub(1)] {
                if at < want.len() {
                    let mut b = [0u8; 1];
                    f.read_at(at as u64, &mut b).unwrap();
                    assert_eq!(b[0], want[at], "{} byte {at}", e.path);
                }
            }
            let past = f.read_at(want.len() as u64, &mut [0u8; 1]).unwrap_err();
            assert_eq!(past.kind(), ErrorKind::InvalidInput);
            checked += 1;
        }
        assert!(checked > 10);

        // One small file costs a frame or two, not the set.
        let small = set.manifest.entries.iter().position(|e| e.kind == EntryKind::File && e.size > 0 && e.size < 100).unwrap();
        let mut f = set.file(small as u32).unwrap();
        let mut b = vec![0u8; f.size() as usize];
        f.read_at(0, &mut b).unwrap();
        let frame = set.stripes.iter().flat_map(|s| s.index.iter()).find(|e| e.file_id == small as u32).unwrap();
        assert_eq!(f.bytes_read, 40 + u64::from(frame.stored_len), "its one (packed) frame, header and payload");
        assert!(f.bytes_read * 5 < set.stored_bytes(), "{} of {}", f.bytes_read, set.stored_bytes());
    }
}

#[test]
fn a_damaged_frame_is_named_when_read_in_part() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    sheaf_core::datagen::write_file(&src.join("f"), 1 << 20, 3, 0.5).unwrap();
    let set = set_of(&src, d.path(), None);
    let id = set.manifest.entries.iter().position(|e| e.path == "f").unwrap() as u32;
    let (k, e) = set.stripes.iter().enumerate().find_map(|(k, s)| s.index.iter().find(|e| e.file_id == id && e.stored_len > 100).map(|e| (k, *e))).unwrap();
    let path = d.path().join(format!("p_{k}.sheaf"));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(e.frame_pos + 40 + 50) as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let mut f = set.file(id).unwrap();
    let err = f.read_at(e.offset, &mut [0u8; 16]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Corrupt);
    assert!(err.to_string().contains("checksum") && err.to_string().contains(&format!("frame at byte {}", e.frame_pos)), "{err}");
}

#[test]
fn only_restores_the_matching_files_reading_only_their_frames() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    for (dir, n) in [("a", 6), ("b", 6), ("b/deep", 3)] {
        std::fs::create_dir_all(src.join(dir)).unwrap();
        for i in 0..n {
            sheaf_core::datagen::write_file(&src.join(format!("{dir}/f{i}.dat")), 300_000 + i * 1000, i, 0.5).unwrap();
        }
    }
    std::fs::write(src.join("b/small.txt"), b"small").unwrap();
    for keys in [None, Some(Arc::new(Keys::from_key([3; 32])))] {
        let dir = d.path().join(if keys.is_some() { "enc" } else { "plain" });
        std::fs::create_dir_all(&dir).unwrap();
        let set = set_of(&src, &dir, keys);
        let out = dir.join("out");
        let mut o = RestoreOptions::new(&out);
        o.only = vec!["a/f1.dat".into(), "b/deep".into(), "b/*.txt".into()];
        let r = sheaf_core::restore(&set, &o, Arc::new(NoProgress)).unwrap();
        let mut got: Vec<String> = walk(&out);
        got.sort();
        assert_eq!(got, ["a", "a/f1.dat", "b", "b/deep", "b/deep/f0.dat", "b/deep/f1.dat", "b/deep/f2.dat", "b/small.txt"]);
        for f in ["a/f1.dat", "b/deep/f2.dat", "b/small.txt"] {
            assert!(std::fs::read(out.join(f)).unwrap() == std::fs::read(src.join(f)).unwrap(), "{f}");
        }
        assert_eq!(r.files, 5);
        assert!(r.bytes_read * 2 < r.set_bytes, "read {} of {}", r.bytes_read, r.set_bytes);

        let mut bad = RestoreOptions::new(dir.join("out2"));
        bad.only = vec!["c/*".into()];
        let e = sheaf_core::restore(&set, &bad, Arc::new(NoProgress)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.to_string().contains("--only 'c/*' matches nothing"), "{e}");
        assert!(!dir.join("out2").exists(), "a refused restore makes nothing");
    }
}

fn walk(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            if p.is_dir() {
                stack.push(p);
            }
        }
    }
    out
}
