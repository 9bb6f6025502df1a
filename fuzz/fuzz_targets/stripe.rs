//! Any bytes as a one-stripe set: open it (header, trailer, index, manifest) and, where that
//! succeeds, verify every frame. Each input is tried as it is and again with the stripe's own
//! checksums (header, index and manifest regions, trailer) made to match, so that the fuzzer gets
//! past them to the index, the manifest and the frames. Errors are fine; a panic, a hang or an
//! allocation the bytes ask for without holding it is a finding. The reader holds the fuzzing key
//! (`FUZZ_KEY`), so encrypted stripes (seeded with one under that key) are opened, authenticated
//! and decrypted too; a plain stripe ignores it.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sheaf_core::storage::{MemoryStore, Store};
use sheaf_core::{BackupSet, Keys, LocalOnly, Location, NoProgress};

/// The key the encrypted seeds were made with (scripts/fuzz.sh writes it as a key file).
const FUZZ_KEY: [u8; 32] = [0x5e; 32];

fn keys() -> &'static Keys {
    static K: std::sync::OnceLock<Keys> = std::sync::OnceLock::new();
    K.get_or_init(|| Keys::from_key(FUZZ_KEY))
}

fn read(data: &[u8]) {
    let store = Arc::new(MemoryStore::new());
    let mut sink = store.create("s.sheaf", &sheaf_core::storage::WriteOptions { overwrite: true, ..Default::default() }).expect("memory store");
    sink.write_all(data).expect("memory store");
    sink.publish().expect("memory store");
    let at = Location::new(store, "s.sheaf");
    if let Ok(set) = BackupSet::open_with(&[at], &LocalOnly, Some(keys())) {
        let _ = sheaf_core::verify(&set, Some(1), Arc::new(NoProgress), &sheaf_core::stop::Stop::new());
    }
}

fuzz_target!(|data: &[u8]| {
    read(data);
    let mut resealed = data.to_vec();
    sheaf_core::format::reseal(&mut resealed);
    read(&resealed);
});
