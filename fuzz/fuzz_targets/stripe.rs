//! Any bytes as a one-stripe set: open it (header, trailer, index, manifest) and, where that
//! succeeds, verify every frame. Each input is tried as it is and again with the stripe's own
//! checksums (header, index and manifest regions, trailer) made to match, so that the fuzzer gets
//! past them to the index, the manifest and the frames. Errors are fine; a panic, a hang or an
//! allocation the bytes ask for without holding it is a finding.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sheaf_core::storage::{MemoryStore, Store};
use sheaf_core::{BackupSet, LocalOnly, Location, NoProgress};

fn read(data: &[u8]) {
    let store = Arc::new(MemoryStore::new());
    let mut sink = store.create("s.sheaf", true, 0).expect("memory store");
    sink.write_all(data).expect("memory store");
    sink.publish().expect("memory store");
    let at = Location::new(store, "s.sheaf");
    if let Ok(set) = BackupSet::open(&[at], &LocalOnly) {
        let _ = sheaf_core::verify(&set, Some(1), Arc::new(NoProgress));
    }
}

fuzz_target!(|data: &[u8]| {
    read(data);
    let mut resealed = data.to_vec();
    sheaf_core::format::reseal(&mut resealed);
    read(&resealed);
});
