//! Encrypted sets: they round trip with their secret only, show nothing of the files in the
//! clear, refuse a missing or wrong secret before writing a byte, and name every altered region
//! even when the altered bytes' checksums were made good again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sheaf_core::crypto::{Encryption, Keys};
use sheaf_core::datagen::{compare_trees, make_shapes_tree};
use sheaf_core::format::{FrameHeader, Trailer, FRAME_HEADER_LEN, TRAILER_LEN};
use sheaf_core::{backup_directory, BackupOptions, BackupSet, ErrorKind, LocalOnly, Location, NoProgress, RestoreOptions};

const MARK: &[u8] = b"sheaf-plaintext-marker-7f3a";

fn keys(pass: &str) -> Arc<Keys> {
    // A low Argon2id cost keeps the test quick; readers take the cost from the key block.
    Arc::new(Keys::from_passphrase(pass.as_bytes().to_vec()).unwrap().with_argon2(256, 1, 1).unwrap())
}

fn open(stripes: &[PathBuf], keys: Option<&Keys>) -> sheaf_core::Result<BackupSet> {
    BackupSet::open_with(&stripes.iter().map(Location::file).collect::<Vec<_>>(), &LocalOnly, keys)
}

/// A shapes tree plus files whose names and bytes carry a marker, backed up encrypted in 2 stripes.
fn encrypted_set(dir: &Path, codec: &str) -> (PathBuf, Vec<PathBuf>) {
    let src = dir.join("src");
    make_shapes_tree(&src, 64 << 10, 3).unwrap();
    let marked = src.join("marked");
    std::fs::create_dir_all(&marked).unwrap();
    for i in 0..40 {
        let text: Vec<u8> = MARK.iter().chain(b" row ").cycle().take(300 + i * 50).copied().collect();
        std::fs::write(marked.join(format!("{}-{i}", String::from_utf8_lossy(MARK))), text).unwrap();
    }
    let stripes: Vec<PathBuf> = (0..2).map(|k| dir.join(format!("e_{k}.sheaf"))).collect();
    let mut opts = BackupOptions::new(stripes.iter().map(Location::file).collect());
    opts.codec = sheaf_core::CodecSpec::parse(codec).unwrap();
    opts.transfer_size = 64 << 10;
    let k = keys("correct horse battery");
    opts.encryption = Some(Encryption { kdf: k.fresh_kdf().unwrap(), keys: k });
    let r = backup_directory(&src, &opts, Arc::new(NoProgress)).unwrap();
    assert_eq!(r.encryption, "aes-256-gcm");
    (src, stripes)
}

#[test]
fn encrypted_sets_round_trip_with_their_secret_only_and_show_nothing() {
    for codec in ["zstd:low", "lz4", "none"] {
        let d = tempfile::tempdir().unwrap();
        let (src, stripes) = encrypted_set(d.path(), codec);
        for s in &stripes {
            let bytes = std::fs::read(s).unwrap();
            assert!(!bytes.windows(MARK.len()).any(|w| w == MARK), "{codec}: a file's name or bytes in the clear in {}", s.display());
            assert!(!bytes.windows(7).any(|w| w == b"marked/"), "{codec}: the manifest's names in the clear");
        }

        let none = open(&stripes, None).err().expect("no secret");
        assert_eq!(none.kind(), ErrorKind::Key, "{none}");
        assert!(none.to_string().contains("passphrase"), "{none}");
        let wrong = open(&stripes, Some(&keys("correct horse batterY"))).err().expect("wrong secret");
        assert_eq!(wrong.kind(), ErrorKind::Key, "{wrong}");
        assert!(wrong.to_string().contains("wrong passphrase"), "{wrong}");

        let right = keys("correct horse battery");
        let set = open(&stripes[..1], Some(&right)).unwrap();
        assert!(set.encrypted());
        let whole = sheaf_core::verify(&set, Some(2), Arc::new(NoProgress), &sheaf_core::stop::Stop::new()).unwrap();
        // Opened lean, the index sealed in pieces is streamed too: the same verdict.
        let lean_set = BackupSet::open_lean(&[Location::file(&stripes[0])], &LocalOnly, Some(&right)).unwrap();
        assert!(lean_set.stripes.iter().all(|s| s.index.is_empty()) && lean_set.manifest.entries.is_empty(), "{codec}: nothing per file held");
        let lean = sheaf_core::verify(&lean_set, Some(2), Arc::new(NoProgress), &sheaf_core::stop::Stop::new()).unwrap();
        assert_eq!((lean.frames, lean.bytes_raw, lean.files), (whole.frames, whole.bytes_raw, whole.files), "{codec}");
        let out = d.path().join("out");
        sheaf_core::restore(&set, &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap();
        compare_trees(&src, &out).unwrap_or_else(|e| panic!("{codec}: {e}"));
    }
}

/// Offsets of the frames of a stripe that carry a payload, from its frame headers.
fn payload_frames(bytes: &[u8], start: usize, end: usize) -> Vec<usize> {
    let mut at = start;
    let mut found = Vec::new();
    while at < end {
        let h = FrameHeader::decode(&bytes[at..at + FRAME_HEADER_LEN]).unwrap();
        if h.stored_len > 0 {
            found.push(at);
        }
        at += FRAME_HEADER_LEN + h.stored_len as usize;
    }
    found
}

#[test]
fn altered_regions_are_named_even_with_their_checksums_made_good() {
    let d = tempfile::tempdir().unwrap();
    let (_, stripes) = encrypted_set(d.path(), "zstd:low");
    let header_len = 64 + sheaf_core::crypto::KEY_BLOCK_LEN;
    // The writers share one queue of frames, so which stripe takes how many depends on timing:
    // damage the one that took the most.
    let (target, good, frames) = stripes
        .iter()
        .map(|p| {
            let good = std::fs::read(p).unwrap();
            let t = Trailer::decode(&good[good.len() - TRAILER_LEN..]).unwrap();
            let frames = payload_frames(&good, header_len, t.index_offset as usize);
            (p.clone(), good, frames)
        })
        .max_by_key(|(_, _, frames)| frames.len())
        .unwrap();
    assert!(frames.len() > 3, "{} payload frames in the fuller stripe", frames.len());

    let k = keys("correct horse battery");
    let check = |bytes: Vec<u8>, expect: &str| {
        std::fs::write(&target, &bytes).unwrap();
        let r = open(&stripes, Some(&k)).and_then(|set| sheaf_core::verify(&set, Some(1), Arc::new(NoProgress), &sheaf_core::stop::Stop::new()));
        let e = r.err().unwrap_or_else(|| panic!("{expect}: not caught"));
        assert_eq!(e.kind(), ErrorKind::Corrupt, "{expect}: {e}");
        assert!(e.to_string().contains(expect), "wanted '{expect}' in: {e}");
        assert!(e.to_string().contains("authentication failed"), "{expect}: {e}");
    };
    // A frame's sealed bytes, its stored checksum and header checksum recomputed.
    for &f in &frames[..3] {
        let mut bad = good.clone();
        let mut h = FrameHeader::decode(&bad[f..f + FRAME_HEADER_LEN]).unwrap();
        let p = f + FRAME_HEADER_LEN;
        bad[p + 20] ^= 0x01;
        h.stored_crc = crc32c::crc32c(&bad[p..p + h.stored_len as usize]);
        bad[f..f + FRAME_HEADER_LEN].copy_from_slice(&h.encode());
        check(bad, "frame");
    }
    // A frame header moved to another offset of its file (the seal covers the header).
    let mut bad = good.clone();
    let f = frames[1];
    let mut h = FrameHeader::decode(&bad[f..f + FRAME_HEADER_LEN]).unwrap();
    h.offset ^= 1 << 40;
    bad[f..f + FRAME_HEADER_LEN].copy_from_slice(&h.encode());
    std::fs::write(&target, &bad).unwrap();
    assert!(open(&stripes, Some(&k)).and_then(|s| sheaf_core::verify(&s, Some(1), Arc::new(NoProgress), &sheaf_core::stop::Stop::new())).is_err(), "a moved frame header");
    std::fs::write(&target, &good).unwrap();
    // The index and the manifest, resealed, in every stripe: damage to a later stripe's
    // manifest is named as such, not as a mere difference from the first stripe's.
    for p in &stripes {
        let good = std::fs::read(p).unwrap();
        let t = Trailer::decode(&good[good.len() - TRAILER_LEN..]).unwrap();
        // In the manifest, a byte of its head: a page's checksum is inside the sealed page index,
        // which only the key could make good again.
        let end = (t.manifest_offset + t.manifest_len) as usize;
        let head = t.manifest_offset as usize + u64::from_le_bytes(good[end - 48..end - 40].try_into().unwrap()) as usize;
        for (region, at) in [("index", t.index_offset as usize + 5), ("manifest", head + 7)] {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            sheaf_core::format::reseal(&mut bad);
            std::fs::write(p, &bad).unwrap();
            let e = open(&stripes, Some(&k))
                .and_then(|set| sheaf_core::verify(&set, Some(1), Arc::new(NoProgress), &sheaf_core::stop::Stop::new()))
                .err()
                .unwrap_or_else(|| panic!("{region}: not caught"));
            assert_eq!(e.kind(), ErrorKind::Corrupt, "{region}: {e}");
            for want in [region, "authentication failed", &p.display().to_string()] {
                assert!(e.to_string().contains(want), "wanted '{want}' in: {e}");
            }
        }
        std::fs::write(p, &good).unwrap();
    }
    sheaf_core::verify(&open(&stripes, Some(&k)).unwrap(), Some(1), Arc::new(NoProgress), &sheaf_core::stop::Stop::new()).unwrap();
}

#[test]
fn a_wrong_secret_writes_nothing() {
    let d = tempfile::tempdir().unwrap();
    let (_, stripes) = encrypted_set(d.path(), "lz4");
    let e = open(&stripes, Some(&keys("nope"))).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Key);
    // The set is refused at open: restore never starts, so its target is never made.
    assert!(!d.path().join("out").exists());
    // A key file where a passphrase was used: named as such.
    let kf = d.path().join("k");
    std::fs::write(&kf, [1u8; 32]).unwrap();
    let e = open(&stripes, Some(&Keys::from_key_file(&kf).unwrap())).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Key);
    assert!(e.to_string().contains("passphrase"), "{e}");
}

/// Format 5 seals an encrypted stripe's index in pieces of 4096 entries, the last one bound as
/// the last: a stripe whose index lost its last piece (lengths, count and checksum made to agree)
/// does not open, lean or whole; a byte flipped in a piece is a checksum mismatch.
#[test]
fn an_encrypted_index_in_pieces_cannot_be_cut_short() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..5000 {
        std::fs::write(src.join(format!("f{i:04}")), format!("{i}")).unwrap();
    }
    let stripe = d.path().join("p.sheaf");
    let mut opts = BackupOptions::new(vec![Location::file(&stripe)]);
    let k = keys("pieces");
    opts.encryption = Some(Encryption { kdf: k.fresh_kdf().unwrap(), keys: k.clone() });
    backup_directory(&src, &opts, Arc::new(NoProgress)).unwrap();
    let at = [Location::file(&stripe)];
    let set = BackupSet::open_lean(&at, &LocalOnly, Some(&k)).unwrap();
    assert_eq!(set.stripes[0].trailer.frame_count, 5000, "one index entry per small file: two pieces");
    assert_eq!(sheaf_core::verify(&set, None, Arc::new(NoProgress), &sheaf_core::stop::Stop::new()).unwrap().files, 5000);

    let pristine = std::fs::read(&stripe).unwrap();
    let t = Trailer::decode(&pristine[pristine.len() - TRAILER_LEN..]).unwrap();
    let expect = |bytes: &[u8], needle: &str| {
        std::fs::write(&stripe, bytes).unwrap();
        for lean in [true, false] {
            let e = if lean { BackupSet::open_lean(&at, &LocalOnly, Some(&k)) } else { BackupSet::open_with(&at, &LocalOnly, Some(&k)) };
            let e = e.err().expect("refused");
            assert!(e.to_string().contains(needle), "lean {lean}: {e}");
        }
    };
    // A byte flipped in the second piece.
    let mut b = pristine.clone();
    b[(t.index_offset + t.index_len - 40) as usize] ^= 1;
    expect(&b, "index: checksum mismatch");
    // The last piece (904 entries) cut away, the trailer made to agree.
    let last = 904 * sheaf_core::format::INDEX_ENTRY_LEN as u64 + 16;
    let mut b = pristine.clone();
    let from = (t.index_offset + t.index_len - last) as usize;
    b.drain(from..from + last as usize);
    let mut cut = t.clone();
    cut.index_len -= last;
    cut.manifest_offset -= last;
    cut.frame_count -= 904;
    cut.index_crc = crc32c::crc32c(&b[t.index_offset as usize..cut.manifest_offset as usize]);
    let n = b.len();
    b[n - TRAILER_LEN..].copy_from_slice(&cut.encode());
    expect(&b, "index: authentication failed");
}
