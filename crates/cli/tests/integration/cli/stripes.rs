//! A set's stripes as the user hands them over: missing, from another backup, cut short, a byte
//! flipped in any region, a backup killed half-way: each refused, named, and never taken for
//! complete.

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use sheaf_core::format::{IndexEntry, Trailer, FRAME_HEADER_LEN, HEADER_LEN, TRAILER_LEN};

use super::{assert_not_complete, run, runs_with, Fixture};
use crate::integration::common::{assert_fails, s, sheaf, stderr};

#[test]
fn missing_stripe_is_named() {
    let f = Fixture::new();
    let st = f.backup("set", 3);
    fs::remove_file(&st[1]).unwrap();
    for cmd in ["verify", "restore"] {
        let out = f.path("out");
        let mut a = vec![cmd, s(&st[0])];
        if cmd == "restore" {
            a.extend(["--to", s(&out)]);
        }
        assert_fails(&run(&a), 4, &["stripe 2 (b_1.sheaf) is missing"]);
        assert!(!out.exists(), "nothing restored from an incomplete set");
    }
}

#[test]
fn stripes_named_on_the_command_line_need_not_be_side_by_side() {
    let f = Fixture::new();
    let st = f.backup("set", 2);
    let moved = f.path("elsewhere/b_1.sheaf");
    fs::create_dir_all(moved.parent().unwrap()).unwrap();
    fs::rename(&st[1], &moved).unwrap();
    assert_fails(&run(&["verify", s(&st[0])]), 4, &["is missing"]);
    let o = run(&["verify", s(&moved), s(&st[0])]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn stripe_from_another_backup_is_refused() {
    let f = Fixture::new();
    let a = f.backup("a", 2);
    let b = f.backup("b", 2);
    fs::copy(&b[1], &a[1]).unwrap();
    let o = run(&["verify", s(&a[0])]);
    assert_fails(&o, 4, &["b_1.sheaf", "belongs to backup", "do not mix"]);
    let o = run(&["restore", s(&a[0]), "--to", s(&f.path("out"))]);
    assert_fails(&o, 4, &["belongs to backup"]);
    assert!(!f.path("out").exists());
}

#[test]
fn truncated_stripe_is_incomplete() {
    let f = Fixture::new();
    let st = f.backup("set", 2);
    let len = fs::metadata(&st[1]).unwrap().len();
    fs::OpenOptions::new().write(true).open(&st[1]).unwrap().set_len(len / 2).unwrap();
    assert_fails(&run(&["verify", s(&st[0])]), 4, &["b_1.sheaf", "trailer", "truncated"]);
    let out = f.path("out");
    assert_fails(&run(&["restore", s(&st[1]), "--to", s(&out)]), 4, &["b_1.sheaf"]);
    assert_not_complete(&out);
}

struct Regions {
    packed_header: Option<u64>,
    packed_payload: Option<u64>,
    header: u64,
    frame_header: Option<u64>,
    payload: Option<u64>,
    index: u64,
    /// Whether the stripe took any frame (a writer may take none of a small backup's).
    has_index: bool,
    manifest: u64,
    trailer: u64,
}

fn regions(stripe: &Path) -> Regions {
    let bytes = fs::read(stripe).unwrap();
    let t = Trailer::decode(&bytes[bytes.len() - TRAILER_LEN..]).unwrap();
    let index = IndexEntry::decode_all(&bytes[t.index_offset as usize..(t.index_offset + t.index_len) as usize], sheaf_core::format::FORMAT_VERSION).unwrap();
    // A plain (not packed) frame with a payload, if this stripe took one.
    let with_payload = index
        .iter()
        .enumerate()
        .find(|(i, e)| e.stored_len > 16 && index.get(i + 1).is_none_or(|n| n.frame_pos != e.frame_pos) && (*i == 0 || index[i - 1].frame_pos != e.frame_pos))
        .map(|(_, e)| *e);
    // A packed frame: several small files' chunks share its position.
    let packed = index.windows(2).find(|w| w[0].frame_pos == w[1].frame_pos && w[0].stored_len > 16).map(|w| w[0]);
    Regions {
        packed_header: packed.map(|p| p.frame_pos + 9),
        packed_payload: packed.map(|p| p.frame_pos + FRAME_HEADER_LEN as u64 + p.stored_len as u64 / 2),
        header: 20,
        frame_header: with_payload.map(|p| p.frame_pos + 9),
        payload: with_payload.map(|p| p.frame_pos + FRAME_HEADER_LEN as u64 + p.stored_len as u64 / 2),
        index: t.index_offset + 5,
        has_index: t.index_len > 0,
        manifest: t.manifest_offset + t.manifest_len / 2,
        trailer: bytes.len() as u64 - 20,
    }
}

fn flip(path: &Path, at: u64) {
    let mut b = fs::read(path).unwrap();
    b[at as usize] ^= 0x5A;
    fs::write(path, b).unwrap();
}

#[test]
fn a_flipped_byte_in_any_region_is_caught_and_named() {
    let f = Fixture::new();
    let pristine = f.backup("pristine", 2);
    let r = regions(&pristine[1]);
    assert!(r.header < HEADER_LEN as u64);
    // Frames go to whichever stripe's writer is free: find a plain frame and a packed one (the
    // small files) wherever they went.
    let (packed_in, p) = (0..2).map(|k| (k, regions(&pristine[k]))).find(|(_, r)| r.packed_header.is_some()).expect("a packed frame");
    let (plain_in, q) = (0..2).map(|k| (k, regions(&pristine[k]))).find(|(_, r)| r.frame_header.is_some()).expect("a plain frame");
    let (index_in, i) = (0..2).map(|k| (k, regions(&pristine[k]))).find(|(_, r)| r.has_index).expect("an index");
    for (name, stripe, at, needle) in [
        ("header", 1, r.header, "header: checksum mismatch"),
        ("frame header", plain_in, q.frame_header.unwrap(), "frame header: checksum mismatch"),
        ("payload", plain_in, q.payload.unwrap(), "payload checksum mismatch"),
        ("packed frame header", packed_in, p.packed_header.unwrap(), "frame header: checksum mismatch"),
        ("packed payload", packed_in, p.packed_payload.unwrap(), "payload checksum mismatch"),
        ("index", index_in, i.index, "index: checksum mismatch"),
        ("manifest", 1, r.manifest, "manifest: checksum mismatch"),
        ("trailer", 1, r.trailer, "trailer: checksum mismatch"),
    ] {
        let dir = f.path(&format!("case_{}", name.replace(' ', "_")));
        fs::create_dir_all(&dir).unwrap();
        for p in &pristine {
            fs::copy(p, dir.join(p.file_name().unwrap())).unwrap();
        }
        let a = dir.join("b_0.sheaf");
        let damaged = format!("b_{stripe}.sheaf");
        flip(&dir.join(&damaged), at);
        let o = run(&["verify", s(&a)]);
        assert_fails(&o, 3, &[&damaged, needle]);
        let out = dir.join("restored");
        let o = run(&["restore", s(&a), "--to", s(&out)]);
        assert_fails(&o, 3, &[&damaged, needle]);
        assert_not_complete(&out);
    }
}

#[test]
fn restore_refuses_a_non_empty_target_with_exit_5() {
    let f = Fixture::new();
    let st = f.backup("set", 1);
    let out = f.path("busy");
    fs::create_dir_all(&out).unwrap();
    fs::write(out.join("data"), b"x").unwrap();
    assert_fails(&run(&["restore", s(&st[0]), "--to", s(&out)]), 5, &["not empty", "--force"]);
    let o = run(&["restore", s(&st[0]), "--to", s(&out), "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_backup_killed_mid_way_leaves_nothing_restore_accepts() {
    let f = Fixture::new();
    // Slow on purpose: a strong level on one thread over a few tens of MiB.
    sheaf_core::datagen::write_file(&f.src.join("big.dat"), 48 << 20, 3, 0.3).unwrap();
    let target = f.path("killed.sheaf");
    let partial = f.path("killed.sheaf.partial");
    let mut child = sheaf()
        .args(["backup", s(&f.src), "--to", s(&target), "-c", "zstd:19", "--threads", "1", "--buffer-count", "3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while fs::metadata(&partial).map(|m| m.len() < 4096).unwrap_or(true) {
        assert!(t0.elapsed() < Duration::from_secs(60), "backup never started writing");
        assert!(child.try_wait().unwrap().is_none(), "backup finished before it could be killed; make it slower");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(!target.exists(), "a killed backup must not leave a stripe under its final name");
    assert_fails(&run(&["verify", s(&target)]), 4, &["does not exist"]);
    assert_fails(&run(&["verify", s(&partial)]), 4, &["killed.sheaf.partial", "trailer"]);
    let out = f.path("out");
    assert_fails(&run(&["restore", s(&partial), "--to", s(&out)]), 4, &["trailer"]);
    assert_not_complete(&out);
    // The history says it failed (interrupted), never that it completed.
    let recorded: Vec<_> = runs_with(&target).into_iter().filter(|r| r["operation"] == "backup").collect();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0]["status"], "failed");
    assert!(recorded[0]["error"].as_str().unwrap().contains("interrupted"));
    // The leftover .partial's writer is gone (nobody holds its lock): a new backup to the same
    // name takes it over and publishes a whole stripe.
    let again = run(&["backup", s(&f.src), "--to", s(&target)]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert!(target.exists() && !partial.exists());
}
