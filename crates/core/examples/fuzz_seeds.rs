//! Seeds for `make fuzz`'s blob target: repository objects, plain and encrypted under the fuzzing
//! key (32 bytes of 0x5e), with a chunk of text, one of zeros and one of noise.
//!
//!   cargo run --release -p sheaf-core --example fuzz_seeds -- DIR

use std::sync::Arc;

use sheaf_core::blob::write_blob;
use sheaf_core::crypto::{Encryption, Kdf, Keys};
use sheaf_core::{CodecSpec, Location};

fn main() {
    let dir = std::env::args().nth(1).expect("usage: fuzz_seeds DIR");
    std::fs::create_dir_all(&dir).expect("seed folder");
    let mut content: Vec<u8> = b"WAL record, ".iter().cycle().take(1 << 20).copied().collect();
    content.extend(std::iter::repeat_n(0u8, 1 << 20));
    let mut x = 1u64;
    content.extend((0..40_000).map(|_| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 56) as u8
    }));
    let keys = Arc::new(Keys::from_key([0x5e; 32]));
    let enc = Encryption { keys, kdf: Kdf::KeyFile };
    for (name, e) in [("plain.wal", None), ("encrypted.wal", Some(&enc))] {
        let at = Location::file(std::path::Path::new(&dir).join(name));
        let sink = at.create(true, 0).expect("seed file");
        write_blob(sink, &mut &content[..], CodecSpec::default(), name, e).expect("seed blob");
    }
}
