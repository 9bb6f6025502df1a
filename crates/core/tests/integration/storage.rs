//! The conformance suite over every store core has: local files, memory and `nul` (write side).
//! S3 runs the same suite in the sheaf-s3 crate, against a real server.

use std::sync::Arc;

use sheaf_core::storage::conformance::check_store;
use sheaf_core::storage::{LocalStore, MemoryStore, NullStore};
use sheaf_core::{ErrorKind, Location};

#[test]
fn local_files_conform() {
    let d = tempfile::tempdir().unwrap();
    check_store(Arc::new(LocalStore), d.path().to_str().unwrap(), 3 << 20);
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "no .partial or other leftovers");
}

#[test]
fn memory_conforms() {
    check_store(Arc::new(MemoryStore::new()), "prefix/sub", 3 << 20);
}

#[test]
fn a_throttled_store_conforms() {
    use sheaf_core::storage::{RateLimit, Throttled};
    let d = tempfile::tempdir().unwrap();
    let limit = RateLimit::new(1 << 30).unwrap();
    check_store(Arc::new(Throttled::new(Arc::new(LocalStore), limit.clone())), d.path().to_str().unwrap(), 3 << 20);
    check_store(Arc::new(Throttled::new(Arc::new(MemoryStore::new()), limit)), "prefix/sub", 3 << 20);
}

#[test]
fn nul_conforms_on_the_write_side() {
    check_store(Arc::new(NullStore), "nowhere", 1 << 20);
}

#[test]
fn a_local_stripe_is_written_under_a_temporary_name() {
    let d = tempfile::tempdir().unwrap();
    let t = Location::file(d.path().join("stripe.sheaf"));
    let mut s = t.create(false, 0).unwrap();
    s.write_all(b"abc").unwrap();
    let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec!["stripe.sheaf.partial"]);
    assert!(t.store().list(d.path().join("stripe").to_str().unwrap()).unwrap().is_empty(), "a .partial is never listed");
}

#[test]
fn a_partial_held_by_a_writer_is_refused_and_one_left_by_a_dead_writer_taken_over() {
    let d = tempfile::tempdir().unwrap();
    let t = Location::file(d.path().join("s.sheaf"));
    let mut first = t.create(false, 0).unwrap();
    first.write_all(b"first").unwrap();
    let e = t.create(false, 0).err().expect("a live writer's .partial is not shared");
    assert_eq!(e.kind(), ErrorKind::Target);
    assert!(e.to_string().contains("being written by another process"), "{e}");
    assert!(e.is_transient(), "waiting for the other writer resolves it: {e}");
    first.publish().unwrap();
    drop(first);
    // A .partial nobody holds (its writer was killed): taken over, its old bytes gone.
    std::fs::write(d.path().join("t.sheaf.partial"), b"stale bytes of a killed writer").unwrap();
    let t2 = Location::file(d.path().join("t.sheaf"));
    let mut s = t2.create(false, 0).unwrap();
    s.write_all(b"new").unwrap();
    s.publish().unwrap();
    assert_eq!(std::fs::read(d.path().join("t.sheaf")).unwrap(), b"new");
}

#[test]
fn missing_folder_is_a_clear_target_error() {
    let e = Location::file("/nonexistent/sheaf/dir/x.sheaf").create(false, 0).err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::Target);
    assert!(e.to_string().contains("does not exist"), "{e}");
}

#[test]
fn locations_parse_once() {
    let l = |t: &str| Location::parse(t, &sheaf_core::LocalOnly);
    assert!(l("nul").unwrap().is_null() && l("NUL:").unwrap().is_null());
    assert_eq!(l("/a/b.sheaf").unwrap().file_name(), "b.sheaf");
    assert_eq!(l("file:///a/b.sheaf").unwrap().name(), "/a/b.sheaf");
    assert_eq!(l("/a/b.sheaf").unwrap().sibling("c.sheaf").name(), "/a/c.sheaf");
    let e = l("s3://bucket/x.sheaf").unwrap_err();
    assert!(e.to_string().contains("S3 support"), "{e}");
    for bad in ["s3://", "s3://bucket", "s3://bucket/", "s3://bucket/a//b", "s3://bucket/../x", ""] {
        assert_eq!(l(bad).unwrap_err().kind(), ErrorKind::InvalidInput, "{bad}");
    }
}
