//! The conformance suite every [`Store`] passes: local files, `nul` (the write side), memory and S3
//! run these same cases (restic's backend suite, object_store's `integration.rs`). Each case panics
//! with the store's name and what broke; call [`check_store`] from a test.

use super::{Holding, Location, Store};
use crate::error::ErrorKind;
use std::io::Read;
use std::sync::Arc;

/// Deterministic, not compressible by accident, not periodic at any power of two.
pub fn payload(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn src_again(loc: &Location) -> Box<dyn super::StripeSource> {
    loc.open().expect("open")
}

/// Run every case against `store`, with names under `base` (a folder for files, a key prefix for
/// objects; it must hold nothing else). `big` is the size of the large case, chosen by the caller to
/// span several upload parts where the store has parts.
///
/// # Panics
/// On the first case that fails, naming it.
pub fn check_store(store: Arc<dyn Store>, base: &str, big: usize) {
    let caps = store.capabilities();
    let kind = format!("{:?}", store);
    let at = |n: &str| Location::new(store.clone(), format!("{base}/{n}"));
    let listed = |prefix: &str| -> Vec<String> { store.list(&format!("{base}/{prefix}")).unwrap_or_else(|e| panic!("{kind}: list: {e}")).into_iter().map(|o| o.name).collect() };

    // A stripe written in pieces publishes whole and reads back exactly, by position and as a stream.
    let loc = at("whole.sheaf");
    let data = payload(big);
    let mut sink = loc.create(false, data.len() as u64).unwrap_or_else(|e| panic!("{kind}: create: {e}"));
    for part in data.chunks(333_333) {
        sink.write_all(part).unwrap_or_else(|e| panic!("{kind}: write: {e}"));
    }
    assert_eq!(sink.written(), data.len() as u64, "{kind}: written counts every byte");
    if caps.readable && caps.atomic_publish {
        assert!(!loc.exists().unwrap(), "{kind}: a stripe is invisible before it is published");
        assert!(listed("whole").is_empty(), "{kind}: nor listed");
    }
    sink.sync().unwrap_or_else(|e| panic!("{kind}: sync: {e}"));
    sink.publish().unwrap_or_else(|e| panic!("{kind}: publish: {e}"));
    drop(sink);
    if !caps.readable {
        assert_eq!(loc.open().err().map(|e| e.kind()), Some(ErrorKind::InvalidInput), "{kind}: nothing to read back");
        return;
    }
    assert!(loc.exists().unwrap(), "{kind}: published stripe exists");
    if caps.list {
        assert_eq!(listed(""), vec![format!("{base}/whole.sheaf")], "{kind}: list shows the published name only");
    }
    let src = loc.open().unwrap_or_else(|e| panic!("{kind}: open: {e}"));
    assert_eq!(src.len(), data.len() as u64, "{kind}: length");
    let mut back = vec![0u8; 1000];
    let mid = data.len() / 2;
    src.read_exact_at(&mut back, mid as u64).unwrap();
    assert_eq!(&back[..], &data[mid..mid + 1000], "{kind}: positional read");
    let e = src.read_exact_at(&mut back, data.len() as u64 - 10).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Incomplete, "{kind}: reading past the end: {e}");
    let mut all = Vec::new();
    src.stream(7, data.len() as u64).unwrap().read_to_end(&mut all).unwrap_or_else(|e| panic!("{kind}: stream: {e}"));
    assert!(all == data[7..], "{kind}: the stream gives every byte in order");
    let e = src.stream(0, data.len() as u64 + 1).err().expect("past the end");
    assert_eq!(e.kind(), ErrorKind::Incomplete, "{kind}: a stream past the end: {e}");
    assert!(src.location().contains("whole.sheaf"), "{kind}: location names the stripe: {}", src.location());
    drop(src);

    // A stream runs forwards only.
    assert!(src_again(&loc).stream(10, 5).is_err(), "{kind}: a backwards stream is refused");

    // The sibling of a stripe is in the same folder or prefix.
    let sib = loc.sibling("other.sheaf");
    assert_eq!(sib.name(), format!("{base}/other.sheaf"), "{kind}: sibling");
    assert!(!sib.exists().unwrap());

    // An existing stripe is refused without overwrite, replaced with it.
    let e = loc.create(false, 10).err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::Target, "{kind}: {e}");
    assert!(e.to_string().contains("--overwrite"), "{kind}: the error names the fix: {e}");
    let tag = |n: &str| -> String {
        let l = store.list(&format!("{base}/{n}")).unwrap_or_else(|e| panic!("{kind}: list: {e}"));
        assert_eq!(l.len(), 1, "{kind}: one object listed as {n}");
        l[0].tag.clone()
    };
    let mut tags = Vec::new();
    for text in [b"second", b"thirds"] {
        let mut s = loc.create(true, 10).unwrap();
        s.write_all(text).unwrap();
        s.publish().unwrap();
        drop(s);
        let src = loc.open().unwrap();
        let mut b = vec![0u8; 6];
        src.read_exact_at(&mut b, 0).unwrap();
        assert_eq!(&b, text, "{kind}: overwritten");
        drop(src);
        if caps.list {
            tags.push(tag("whole.sheaf"));
        }
    }
    // What verify's ledger relies on: an object written again (same name, same size) lists with
    // another tag.
    if caps.list {
        assert!(!tags[0].is_empty() && tags[0] != tags[1], "{kind}: a rewrite of the same size changes the tag: {tags:?}");
    }

    // Dropped unpublished after all of `big` (parts still uploading, where a store has parts):
    // nothing appears, nothing is left.
    {
        let mut s = at("dropped.sheaf").create(false, data.len() as u64).unwrap();
        s.write_all(&data).unwrap();
    }
    assert!(!at("dropped.sheaf").exists().unwrap(), "{kind}: dropped without publish");
    assert!(listed("dropped").is_empty(), "{kind}: dropped leaves nothing listed");

    // Discarded after publishing: gone.
    let mut s = at("discarded.sheaf").create(false, 3).unwrap();
    s.write_all(b"abc").unwrap();
    s.publish().unwrap();
    s.discard();
    drop(s);
    assert!(!at("discarded.sheaf").exists().unwrap(), "{kind}: discard removes a published stripe");

    // An empty stripe is still a stripe.
    let mut s = at("empty.sheaf").create(false, 0).unwrap();
    s.publish().unwrap();
    drop(s);
    assert_eq!(at("empty.sheaf").open().unwrap().len(), 0, "{kind}: empty stripe");

    // Names with folders in them (a repository's layout) are listed at any depth, with sizes.
    if caps.list {
        for (n, len) in [("deep/a/one", 5usize), ("deep/a/two", 7), ("deep/b/c/three", 0), ("deeper", 1)] {
            store.prepare(&format!("{base}/{n}"), None).unwrap_or_else(|e| panic!("{kind}: prepare: {e}"));
            let mut s = at(n).create(false, len as u64).unwrap();
            s.write_all(&data[..len]).unwrap();
            s.publish().unwrap();
        }
        let deep = store.list(&format!("{base}/deep/")).unwrap_or_else(|e| panic!("{kind}: list: {e}"));
        let got: Vec<(String, u64)> = deep.into_iter().map(|o| (o.name, o.size)).collect();
        let want: Vec<(String, u64)> = [("deep/a/one", 5), ("deep/a/two", 7), ("deep/b/c/three", 0)].iter().map(|(n, l)| (format!("{base}/{n}"), *l)).collect();
        assert_eq!(got, want, "{kind}: a listing reaches into folders and gives sizes");
        assert_eq!(listed("deep").len(), 4, "{kind}: a prefix that is not a whole folder name matches too");
        for n in ["deep/a/one", "deep/a/two", "deep/b/c/three", "deeper"] {
            store.delete(&format!("{base}/{n}")).unwrap();
        }
        for d in ["deep/a", "deep/b/c", "deep/b", "deep"] {
            store.prune(&format!("{base}/{d}"));
        }
    }

    if store.can_resume() {
        check_resume(&store, &kind, &at, &data);
    }

    // Missing: a clear Incomplete; deleting it is no error; delete removes.
    let e = at("missing.sheaf").open().err().expect("missing");
    assert_eq!(e.kind(), ErrorKind::Incomplete, "{kind}: {e}");
    assert!(e.to_string().contains("missing.sheaf"), "{kind}: names it: {e}");
    store.delete(&format!("{base}/missing.sheaf")).unwrap();
    store.delete(loc.name()).unwrap();
    store.delete(&format!("{base}/empty.sheaf")).unwrap();
    assert!(!loc.exists().unwrap(), "{kind}: deleted");
    if caps.list {
        assert!(listed("").is_empty(), "{kind}: nothing left: {:?}", listed(""));
    }
    // Nor anything unfinished: no upload left open, no part of an object never published.
    assert_eq!(store.abort_uploads(&format!("{base}/")).unwrap_or_else(|e| panic!("{kind}: abort_uploads: {e}")), 0, "{kind}: nothing unfinished is left");
}

/// What a store that can take over a stopped writer's stripe ([`Store::resume`]) promises: the
/// stripe stays unfinished when its writer stops, what it holds is a prefix of what was written
/// that ends where a frame did, the next writer goes on from a frame's end and publishes the
/// whole, and a stripe given up leaves nothing.
fn check_resume(store: &Arc<dyn Store>, kind: &str, at: &dyn Fn(&str) -> Location, data: &[u8]) {
    // Frames of uneven sizes, so that a store that cuts only at frame ends is tested at them.
    let mut ends = Vec::new();
    let mut end = 0usize;
    for k in 0.. {
        end = (end + 700_001 + 37_919 * (k % 5)).min(data.len());
        ends.push(end as u64);
        if end == data.len() {
            break;
        }
    }
    let loc = at("resumed.sheaf");
    assert!(nothing(loc.resume(data.len() as u64).unwrap_or_else(|e| panic!("{kind}: resume: {e}"))), "{kind}: nothing to take over where nothing was written");
    let stop = ends.len() / 2 + 1;
    {
        let mut s = loc.create_resumable(false, data.len() as u64).unwrap_or_else(|e| panic!("{kind}: create_resumable: {e}"));
        let mut from = 0usize;
        for &e in &ends[..stop] {
            s.write_all(&data[from..e as usize]).unwrap_or_else(|e| panic!("{kind}: write: {e}"));
            s.frame_end().unwrap_or_else(|e| panic!("{kind}: frame_end: {e}"));
            from = e as usize;
        }
        // Dropped unpublished, as a writer that stopped: kept, and still not visible.
    }
    assert!(!loc.exists().unwrap(), "{kind}: an unfinished stripe is not published");
    let u = loc.resume(data.len() as u64).unwrap_or_else(|e| panic!("{kind}: resume: {e}")).unwrap_or_else(|| panic!("{kind}: the stopped writer's stripe is kept"));
    let keep = match u.holds() {
        Holding::Bytes(src) => {
            let held = src.len() as usize;
            assert!(held <= ends[stop - 1] as usize, "{kind}: it holds no more than was written ({held})");
            let mut back = vec![0u8; held];
            src.read_exact_at(&mut back, 0).unwrap_or_else(|e| panic!("{kind}: reading what it holds: {e}"));
            assert!(back == data[..held], "{kind}: what it holds is what was written");
            // All but the last whole frame, as when the last is found damaged.
            let whole: Vec<u64> = ends.iter().copied().filter(|&e| e <= held as u64).collect();
            whole.get(whole.len().saturating_sub(2)).copied().unwrap_or(0)
        }
        Holding::Parts(parts) => {
            assert!(parts.iter().all(|p| ends.contains(p)), "{kind}: its parts end where frames did: {parts:?}");
            parts.get(parts.len().saturating_sub(2)).copied().unwrap_or(0)
        }
    };
    assert!(keep > 0, "{kind}: at least a frame is kept of {} written", ends[stop - 1]);
    // Another, short ending: what it held past `keep` must be gone, not shine through.
    let tail: Vec<u8> = data[..4099].iter().rev().copied().collect();
    let mut s = u.go_on(keep).unwrap_or_else(|e| panic!("{kind}: go_on: {e}"));
    s.write_all(&tail).unwrap_or_else(|e| panic!("{kind}: write after go_on: {e}"));
    assert_eq!(s.written(), tail.len() as u64, "{kind}: written counts from where it went on");
    s.sync().unwrap_or_else(|e| panic!("{kind}: sync: {e}"));
    s.publish().unwrap_or_else(|e| panic!("{kind}: publish of a resumed stripe: {e}"));
    drop(s);
    let want = [&data[..keep as usize], &tail[..]].concat();
    let src = loc.open().unwrap();
    assert_eq!(src.len(), want.len() as u64, "{kind}: a resumed stripe's length");
    let mut all = Vec::new();
    src.stream(0, want.len() as u64).unwrap().read_to_end(&mut all).unwrap();
    assert!(all == want, "{kind}: a resumed stripe reads back as kept and written on");
    drop(src);
    store.delete(loc.name()).unwrap();
    assert!(nothing(loc.resume(10).unwrap()), "{kind}: nothing is left to take over once published");

    // Given up: nothing left, nothing to take over.
    let gone = at("given-up.sheaf");
    {
        let mut s = gone.create_resumable(false, data.len() as u64).unwrap();
        s.write_all(&data[..ends[0] as usize]).unwrap();
        s.frame_end().unwrap();
    }
    if let Some(u) = gone.resume(10).unwrap_or_else(|e| panic!("{kind}: resume: {e}")) {
        u.abandon();
    }
    assert!(nothing(gone.resume(10).unwrap()), "{kind}: an abandoned stripe is gone");
    assert!(!gone.exists().unwrap(), "{kind}: and never published");
}

/// Nothing to take over: none, or one that holds nothing (a store may hand over an empty one, so
/// that a backup whose other stripes hold frames goes on with this one from its start).
fn nothing(u: Option<Box<dyn super::UnfinishedStripe>>) -> bool {
    u.is_none_or(|u| {
        let empty = match u.holds() {
            Holding::Bytes(src) => src.is_empty(),
            Holding::Parts(parts) => parts.is_empty(),
        };
        u.abandon();
        empty
    })
}
