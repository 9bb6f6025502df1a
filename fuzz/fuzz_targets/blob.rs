//! Any bytes as a repository object (a WAL segment, a record): its header, key block, frames and
//! trailer read and checked, plain or encrypted under the fuzzing key (seeds: `fuzz_seeds`).
//! Errors are fine; a panic, a hang or an allocation the bytes ask for is a finding.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use sheaf_core::storage::{MemoryStore, Store};
use sheaf_core::Keys;

fn keys() -> &'static Keys {
    static K: std::sync::OnceLock<Keys> = std::sync::OnceLock::new();
    K.get_or_init(|| Keys::from_key([0x5e; 32]))
}

fuzz_target!(|data: &[u8]| {
    let store = Arc::new(MemoryStore::new());
    let mut sink = store.create("b.wal", &sheaf_core::storage::WriteOptions { overwrite: true, ..Default::default() }).expect("memory store");
    sink.write_all(data).expect("memory store");
    sink.publish().expect("memory store");
    let src = store.open("b.wal").expect("memory store");
    let _ = sheaf_core::blob::read_blob(src.as_ref(), Some(keys()), &mut |_| Ok(()));
});
