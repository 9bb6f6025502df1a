//! Codec and checksum throughput on seeded data of known compressibility (datagen), one 1 MiB
//! chunk at a time as the pipeline sees them: `cargo bench -p sheaf-core --bench codecs`.
//! Real PostgreSQL pages are measured by `make bench-engine` (docs/bench/engine.md).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sheaf_core::codec::{decompressor, CodecSpec};
use sheaf_core::datagen::{fill, Rng};

const CHUNK: usize = 1 << 20;

fn data(repeat: f64) -> Vec<u8> {
    let mut v = vec![0u8; CHUNK];
    fill(&mut v, &mut Rng::new(42), repeat);
    v
}

fn codecs(c: &mut Criterion) {
    for repeat in [0.3, 0.6, 0.9] {
        let raw = data(repeat);
        let mut g = c.benchmark_group(format!("compress/repeat={repeat}"));
        g.throughput(Throughput::Bytes(CHUNK as u64));
        for name in ["lz4", "deflate:1", "deflate:6", "zstd:low", "zstd:medium", "zstd:high"] {
            let spec = CodecSpec::parse(name).unwrap();
            let mut comp = spec.compressor().unwrap();
            let mut out = vec![0u8; spec.buffer_len(CHUNK)];
            let room = comp.room(CHUNK);
            g.bench_function(name, |b| b.iter(|| comp.compress(&raw, &mut out[..room]).unwrap()));
        }
        g.finish();

        let mut g = c.benchmark_group(format!("decompress/repeat={repeat}"));
        g.throughput(Throughput::Bytes(CHUNK as u64));
        for name in ["lz4", "deflate:1", "zstd:low"] {
            let spec = CodecSpec::parse(name).unwrap();
            let mut comp = spec.compressor().unwrap();
            let mut out = vec![0u8; spec.buffer_len(CHUNK)];
            let room = comp.room(CHUNK);
            let n = comp.compress(&raw, &mut out[..room]).unwrap().expect("compressible");
            let mut d = decompressor(comp.kind()).unwrap();
            let mut back = vec![0u8; CHUNK];
            g.bench_function(name, |b| b.iter(|| d.decompress(&out[..n], &mut back).unwrap()));
        }
        g.finish();
    }
    let raw = data(0.6);
    let mut g = c.benchmark_group("checksum");
    g.throughput(Throughput::Bytes(CHUNK as u64));
    g.bench_function("crc32c", |b| b.iter(|| crc32c::crc32c(&raw)));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(2));
    targets = codecs
}
criterion_main!(benches);
