//! Single-core speed of sheaf's own codecs on a file, chunk by chunk, timing only the codec call:
//! the in-process counterpart of `zstd -b1 -B1M` / `lz4 -b1 -B1M`, used to split a gap between the
//! pipeline and the reference CLI into "library speed" and "pipeline overhead".
//!
//!     cargo run --release --example codec_speed -- FILE [CHUNK_BYTES] CODEC...

use std::fs::File;
use std::time::{Duration, Instant};

use sheaf_core::codec::{decompressor, CodecKind, CodecSpec};
use sheaf_core::pipeline::read_full;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (path, rest) = args.split_first().expect("usage: codec_speed FILE [CHUNK] CODEC...");
    let (chunk, codecs) = match rest.first().and_then(|c| c.parse::<usize>().ok()) {
        Some(c) => (c, &rest[1..]),
        None => (1 << 20, rest),
    };
    println!("| codec | ratio | compress MB/s | decompress MB/s | crc32c MB/s |");
    println!("|---|---|---|---|---|");
    for name in codecs {
        let spec = CodecSpec::parse(name).expect("codec");
        let mut c = spec.compressor().expect("compressor");
        let mut f = File::open(path).expect("open");
        let mut raw = vec![0u8; chunk];
        let mut out = vec![0u8; spec.buffer_len(chunk)];
        let mut back = vec![0u8; chunk];
        let (mut tc, mut td, mut tcrc) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        let (mut raw_bytes, mut stored) = (0u64, 0u64);
        loop {
            let n = read_full(&mut f, &mut raw).expect("read");
            if n == 0 {
                break;
            }
            let t = Instant::now();
            let crc = crc32c::crc32c(&raw[..n]);
            tcrc += t.elapsed();
            let room = c.room(n);
            let t = Instant::now();
            let r = c.compress(&raw[..n], &mut out[..room]).expect("compress");
            tc += t.elapsed();
            let (kind, payload) = match r {
                Some(m) => (c.kind(), &out[..m]),
                None => (CodecKind::None, &raw[..n]),
            };
            let mut d = decompressor(kind).expect("decompressor");
            let t = Instant::now();
            d.decompress(payload, &mut back[..n]).expect("decompress");
            td += t.elapsed();
            assert_eq!(crc32c::crc32c(&back[..n]), crc);
            raw_bytes += n as u64;
            stored += payload.len() as u64;
        }
        let mbs = |d: Duration| raw_bytes as f64 / d.as_secs_f64() / 1e6;
        println!("| {spec} | {:.2} | {:.0} | {:.0} | {:.0} |", raw_bytes as f64 / stored as f64, mbs(tc), mbs(td), mbs(tcrc));
    }
}
