//! Any bytes as a manifest's JSON, compressed as a stripe stores it: parsing must fail cleanly or
//! give a manifest whose references hold. The stripe target rarely gets this far, since a
//! stripe's manifest region is checksummed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sheaf_core::manifest::Manifest;

fuzz_target!(|data: &[u8]| {
    let Ok(stored) = zstd::bulk::compress(data, 1) else { return };
    if let Ok(m) = Manifest::from_stored_bytes(&stored) {
        assert!(!m.stripes.is_empty());
        assert!(m.entries.iter().all(|e| (e.root as usize) < m.roots.len()));
    }
});
