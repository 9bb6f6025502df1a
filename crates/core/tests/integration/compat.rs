//! Sets written in format versions 1 (no packed frames, 32-byte index entries) and 2 (36-byte
//! entries, no hash, no backup type) still verify and restore. The stripe is built here byte by
//! byte from the layout in docs/format.md, as a sheaf of that version wrote it.

use std::path::Path;
use std::sync::Arc;

use sheaf_core::format::{index_entry_len, BackupId, FrameHeader, IndexEntry, StripeHeader, Trailer, FRAME_HEADER_LEN, HEADER_LEN};
use sheaf_core::manifest::{Entry, EntryKind, Manifest, OptionsUsed, Root, StripeRef};
use sheaf_core::{BackupSet, CodecKind, LocalOnly, Location, NoProgress, RestoreOptions};

/// Write a one-stripe set of format `version` (1 or 2) holding `files` (name, bytes) in chunks of
/// `ts`, raw frames.
fn write_old_set(path: &Path, files: &[(&str, Vec<u8>)], ts: usize, version: u16) {
    let entry_len = index_entry_len(version);
    let id = BackupId([9; 16]);
    let header =
        StripeHeader { version, stripe_index: 0, stripe_count: 1, backup_id: id, codec: CodecKind::None, level: 0, transfer_size: ts as u32, created_unix_ms: 1, key_block: None };
    let mut out = header.encode().to_vec();
    let mut index = Vec::new();
    let mut entries = vec![Entry { kind: EntryKind::Dir, mode: 0o755, ..Default::default() }];
    for (name, data) in files {
        let file_id = entries.len() as u32;
        for (k, chunk) in data.chunks(ts).enumerate() {
            let crc = crc32c::crc32c(chunk);
            let h =
                FrameHeader { file_id, offset: (k * ts) as u64, raw_len: chunk.len() as u32, stored_len: chunk.len() as u32, codec: 0, flags: 0, raw_crc: crc, stored_crc: crc };
            let e = IndexEntry { file_id, offset: h.offset, frame_pos: out.len() as u64, raw_len: h.raw_len, stored_len: h.stored_len, raw_crc: crc, frame_off: 0, hash: 0 };
            let mut enc = Vec::new();
            e.encode_into(&mut enc);
            index.extend_from_slice(&enc[..entry_len]);
            out.extend_from_slice(&h.encode());
            out.extend_from_slice(chunk);
        }
        entries.push(Entry {
            path: name.to_string(),
            mode: 0o640,
            mtime_ns: 1_500_000_000_000_000_000,
            size: data.len() as u64,
            crc32c: Some(crc32c::crc32c(data)),
            ..Default::default()
        });
    }
    let manifest = Manifest {
        format_version: version,
        backup_id: id.to_hex(),
        label: None,
        tool: "sheaf 0.1.0".into(),
        started_unix_ms: 1,
        finished_unix_ms: 2,
        roots: vec![Root { name: String::new(), path: "/old".into() }],
        stripes: vec![StripeRef { name: path.file_name().unwrap().to_string_lossy().into(), path: path.display().to_string() }],
        options: OptionsUsed { compression: "none".into(), codec: "none".into(), level: 0, transfer_size: ts as u64, buffer_count: 4, readers: 1, threads: 1 },
        entries,
        bytes_read: files.iter().map(|f| f.1.len() as u64).sum(),
        warnings: vec![],
        check_failures: vec![],
        changed_files: vec![],
        vanished_files: vec![],
        source: serde_json::json!({"kind": "directory"}),
        backup_type: Default::default(),
        chain: vec![],
        resumed: None,
    };
    let stored = manifest.to_stored_bytes().unwrap();
    let t = Trailer {
        index_offset: out.len() as u64,
        index_len: index.len() as u64,
        manifest_offset: (out.len() + index.len()) as u64,
        manifest_len: stored.len() as u64,
        frame_count: (index.len() / entry_len) as u64,
        index_crc: crc32c::crc32c(&index),
        manifest_crc: crc32c::crc32c(&stored),
        stripe_index: 0,
        stripe_count: 1,
        backup_id: id,
    };
    out.extend_from_slice(&index);
    out.extend_from_slice(&stored);
    out.extend_from_slice(&t.encode());
    assert!(out.len() > HEADER_LEN + FRAME_HEADER_LEN);
    std::fs::write(path, out).unwrap();
}

#[test]
fn version_1_and_2_sets_still_verify_and_restore() {
    for version in [1, 2] {
        old_version_round_trip(version);
    }
}

fn old_version_round_trip(version: u16) {
    let d = tempfile::tempdir().unwrap();
    let stripe = d.path().join("old.sheaf");
    let big: Vec<u8> = (0..150_000u32).map(|i| (i % 253) as u8).collect();
    let files = [("big", big), ("small", b"version one".to_vec()), ("empty", Vec::new())];
    write_old_set(&stripe, &files, 64 << 10, version);
    let set = BackupSet::open(&[Location::file(&stripe)], &LocalOnly).unwrap();
    assert_eq!(set.stripes[0].header.version, version);
    assert_eq!(set.manifest.backup_type, sheaf_core::manifest::BackupType::Full);
    assert!(set.stripes[0].index.iter().all(|e| e.hash == 0), "no hash before version 3");
    let v = sheaf_core::verify(&set, None, Arc::new(NoProgress), &sheaf_core::stop::Stop::new()).unwrap();
    assert_eq!((v.frames, v.bytes_raw), (4, 150_011));
    let out = d.path().join("out");
    sheaf_core::restore(&set, &RestoreOptions::new(&out), Arc::new(NoProgress)).unwrap();
    for (name, data) in &files {
        assert_eq!(&std::fs::read(out.join(name)).unwrap(), data, "{name}");
    }
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(out.join("small")).unwrap().permissions().mode() & 0o7777, 0o640);

    // A damaged byte in an old frame is still caught and named.
    let mut b = std::fs::read(&stripe).unwrap();
    b[HEADER_LEN + FRAME_HEADER_LEN + 1000] ^= 1;
    std::fs::write(&stripe, b).unwrap();
    let set = BackupSet::open(&[Location::file(&stripe)], &LocalOnly).unwrap();
    let e = sheaf_core::verify(&set, None, Arc::new(NoProgress), &sheaf_core::stop::Stop::new()).unwrap_err();
    assert!(e.to_string().contains("payload checksum mismatch"), "{e}");
}
