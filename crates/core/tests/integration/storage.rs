//! The conformance suite every storage target passes: the same cases for each kind.

use sheaf_core::storage::{open_source, StripeSink};
use sheaf_core::{ErrorKind, TargetSpec};

struct Kind {
    name: &'static str,
    make: fn(&std::path::Path) -> TargetSpec,
    readable: bool,
}

const KINDS: [Kind; 2] = [
    Kind { name: "local", make: |d| TargetSpec::File(d.join("stripe.sheaf")), readable: true },
    Kind { name: "null", make: |_| TargetSpec::Null, readable: false },
];

fn payload() -> Vec<u8> {
    (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect()
}

fn leftovers(d: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

#[test]
fn published_stripe_reads_back_exactly() {
    for k in KINDS {
        let d = tempfile::tempdir().unwrap();
        let t = (k.make)(d.path());
        let mut s = t.create(false).unwrap();
        let data = payload();
        for part in data.chunks(70_000) {
            s.write_all(part).unwrap();
        }
        assert_eq!(s.written(), data.len() as u64, "{}", k.name);
        s.sync().unwrap();
        s.publish().unwrap();
        if k.readable {
            let TargetSpec::File(p) = &t else { unreachable!() };
            let src = open_source(p).unwrap();
            assert_eq!(src.len(), data.len() as u64);
            let mut back = vec![0u8; 1000];
            src.read_exact_at(&mut back, 123_456).unwrap();
            assert_eq!(&back[..], &data[123_456..124_456], "{}", k.name);
            let e = src.read_exact_at(&mut back, data.len() as u64 - 10).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Incomplete, "{}: reading past the end", k.name);
            assert_eq!(leftovers(d.path()), vec!["stripe.sheaf".to_string()], "{}", k.name);
        }
    }
}

#[test]
fn unpublished_stripe_leaves_nothing() {
    for k in KINDS {
        let d = tempfile::tempdir().unwrap();
        let t = (k.make)(d.path());
        {
            let mut s: Box<dyn StripeSink> = t.create(false).unwrap();
            s.write_all(&payload()).unwrap();
            if k.readable {
                assert_eq!(leftovers(d.path()), vec!["stripe.sheaf.partial".to_string()], "{}: written under a temporary name", k.name);
            }
        }
        assert!(leftovers(d.path()).is_empty(), "{}: dropped without publish leaves nothing", k.name);
    }
}

#[test]
fn discard_after_publish_removes_the_stripe() {
    for k in KINDS {
        let d = tempfile::tempdir().unwrap();
        let mut s = (k.make)(d.path()).create(false).unwrap();
        s.write_all(b"abc").unwrap();
        s.publish().unwrap();
        s.discard();
        assert!(leftovers(d.path()).is_empty(), "{}", k.name);
    }
}

#[test]
fn existing_stripe_is_not_replaced_without_overwrite() {
    for k in KINDS.iter().filter(|k| k.readable) {
        let d = tempfile::tempdir().unwrap();
        let t = (k.make)(d.path());
        let mut s = t.create(false).unwrap();
        s.write_all(b"first").unwrap();
        s.publish().unwrap();
        let e = t.create(false).err().expect("refused");
        assert_eq!(e.kind(), ErrorKind::Target, "{}", k.name);
        assert!(e.to_string().contains("--overwrite"), "{e}");
        let mut s = t.create(true).unwrap();
        s.write_all(b"second").unwrap();
        s.publish().unwrap();
        let TargetSpec::File(p) = &t else { unreachable!() };
        assert_eq!(std::fs::read(p).unwrap(), b"second");
    }
}

#[test]
fn missing_folder_is_a_clear_target_error() {
    let t = TargetSpec::File("/nonexistent/sheaf/dir/x.sheaf".into());
    let e = t.create(false).err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::Target);
    assert!(e.to_string().contains("does not exist"), "{e}");
}
