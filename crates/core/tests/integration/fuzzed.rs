//! Inputs `make fuzz` found (scripts/fuzz.sh), replayed as the fuzz targets run them: each must
//! now be refused, or read, without a panic and without asking for memory it does not hold. To add
//! one, copy it from fuzz/artifacts/TARGET/ into crates/core/tests/fuzzed/TARGET/.

use std::path::Path;
use std::sync::Arc;

use sheaf_core::storage::{MemoryStore, Store};
use sheaf_core::{BackupSet, LocalOnly, Location, NoProgress};

fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzzed").join(target);
    let mut v: Vec<_> =
        std::fs::read_dir(&dir).map(|rd| rd.flatten().map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())).collect()).unwrap_or_default();
    v.sort();
    v
}

/// The stripe target's path: open the bytes as a one-stripe set and verify it, as they are and
/// resealed (their own checksums made to match, as the target also tries them).
fn read_stripe(data: &[u8]) -> sheaf_core::Result<()> {
    let store = Arc::new(MemoryStore::new());
    let mut sink = store.create("s.sheaf", &sheaf_core::storage::WriteOptions { overwrite: true, ..Default::default() })?;
    sink.write_all(data)?;
    sink.publish()?;
    let set = BackupSet::open(&[Location::new(store, "s.sheaf")], &LocalOnly)?;
    sheaf_core::verify(&set, Some(1), Arc::new(NoProgress), &sheaf_core::stop::Stop::new()).map(|_| ())
}

#[test]
fn stripes_the_fuzzer_found_are_refused_cleanly() {
    let found = inputs("stripe");
    assert!(!found.is_empty(), "the stripe findings are in the tree");
    for (name, data) in found {
        let mut resealed = data.clone();
        sheaf_core::format::reseal(&mut resealed);
        for (how, bytes) in [("as found", &data), ("resealed", &resealed)] {
            // The first: a header claiming a 2 GiB transfer size had verify allocate that for each
            // buffer. Refused now, by name.
            let err = read_stripe(bytes).expect_err(&name);
            assert!(!err.message().is_empty(), "{name} ({how})");
            if how == "resealed" && name.starts_with("oom-93cc") {
                assert!(err.message().contains("transfer size"), "{name}: {}", err.message());
            }
        }
    }
}
