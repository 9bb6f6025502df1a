//! `sheaf lab`: seed 003's question, on the user's own pages. What does a codec cost per access
//! when the unit it compresses is a page, 64 KiB or 1 MiB?
//!
//! The lab runs in memory over a sample of a relation's pages. For each codec and unit size, it
//! compresses the sample unit by unit, then measures four things:
//! - **ratio**: raw bytes over compressed bytes;
//! - **scan**: decompress every unit, on `threads` cores, against copying every raw page;
//! - **fetch**: one random page, decompressing the unit that holds it (latency p50 and p99),
//!   against copying the page;
//! - **update**: change a tuple's bytes in a random page, which means decompress its unit, change
//!   it, recompress, and store the unit again, against changing and storing the page.
//!
//! Each cost is also given as a multiple of the raw one, as in the seed's table. Every timing is
//! repeated, and the median is kept.

use std::time::{Duration, Instant};

use serde::Serialize;
use sheaf_core::codec::{CodecKind, CodecSpec, DecompressorSet};
use sheaf_core::{Error, Result};

/// PostgreSQL's page.
pub const PAGE: usize = 8192;

/// What to measure.
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// Codecs (`none` is the baseline and always measured).
    pub codecs: Vec<CodecSpec>,
    /// Unit sizes in bytes, multiples of 8 KiB.
    pub units: Vec<usize>,
    /// Timed repeats of each measurement (median kept).
    pub repeat: usize,
    /// Cores for the scan.
    pub threads: usize,
    /// Random pages fetched, and updated, per repeat.
    pub accesses: usize,
}

impl Default for LabOptions {
    fn default() -> Self {
        LabOptions {
            codecs: ["lz4", "deflate:1", "zstd:low", "zstd:medium", "zstd:high"].iter().map(|c| CodecSpec::parse(c).expect("known codec")).collect(),
            units: vec![PAGE, 64 << 10, 1 << 20],
            repeat: 3,
            threads: 1,
            accesses: 2000,
        }
    }
}

/// One codec at one unit size.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LabRow {
    /// Codec as asked.
    pub codec: String,
    /// Unit size in bytes.
    pub unit: usize,
    /// Raw over compressed bytes.
    pub ratio: f64,
    /// Full scan, MB/s of raw pages.
    pub scan_mb_s: f64,
    /// Full scan time as a multiple of copying the raw pages.
    pub scan_x: f64,
    /// Single-page fetch latency, microseconds, median.
    pub fetch_p50_us: f64,
    /// Single-page fetch latency, microseconds, 99th percentile.
    pub fetch_p99_us: f64,
    /// Fetch p50 as a multiple of the raw one.
    pub fetch_x: f64,
    /// In-place update of one tuple, microseconds, median.
    pub update_us: f64,
    /// Update as a multiple of the raw one.
    pub update_x: f64,
}

/// The sample's units, compressed (or kept raw where a codec does not shrink one).
struct Store {
    /// Codec (or none where it did not shrink), stored bytes, raw length.
    units: Vec<(CodecKind, Vec<u8>, usize)>,
    unit: usize,
}

fn compress_all(pages: &[u8], spec: CodecSpec, unit: usize) -> Result<Store> {
    let mut c = spec.compressor()?;
    let mut out = vec![0u8; spec.buffer_len(unit)];
    let mut units = Vec::with_capacity(pages.len().div_ceil(unit));
    for raw in pages.chunks(unit) {
        units.push(encode(c.as_mut(), spec, raw, &mut out)?);
    }
    Ok(Store { units, unit })
}

fn encode(c: &mut dyn sheaf_core::codec::Compressor, spec: CodecSpec, raw: &[u8], out: &mut [u8]) -> Result<(CodecKind, Vec<u8>, usize)> {
    if spec.kind != CodecKind::None {
        let room = c.room(raw.len()).min(out.len());
        if let Some(n) = c.compress(raw, &mut out[..room])? {
            return Ok((spec.kind, out[..n].to_vec(), raw.len()));
        }
    }
    Ok((CodecKind::None, raw.to_vec(), raw.len()))
}

/// The raw bytes of a unit into `buf` (at least its raw length); returns that length.
fn expand(d: &mut DecompressorSet, unit: &(CodecKind, Vec<u8>, usize), buf: &mut [u8]) -> Result<usize> {
    let (kind, bytes, n) = (unit.0, &unit.1, unit.2);
    if kind == CodecKind::None {
        buf[..n].copy_from_slice(bytes);
    } else {
        d.decompress(kind, bytes, &mut buf[..n])?;
    }
    Ok(n)
}

/// A small, seeded generator: the same pages are fetched for every codec.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Decompress every unit on `threads` cores; the time taken.
fn scan(store: &Store, threads: usize) -> Result<Duration> {
    let t = Instant::now();
    let per = store.units.len().div_ceil(threads.max(1));
    std::thread::scope(|s| {
        let hs: Vec<_> = store
            .units
            .chunks(per.max(1))
            .map(|part| {
                s.spawn(move || -> Result<u64> {
                    let mut d = DecompressorSet::default();
                    let mut buf = vec![0u8; store.unit];
                    let mut sum = 0u64;
                    for u in part {
                        let n = expand(&mut d, u, &mut buf)?;
                        // Touch what came out, as a scan reads its tuples.
                        sum = sum.wrapping_add(u64::from(buf[n / 2]));
                    }
                    Ok(sum)
                })
            })
            .collect();
        for h in hs {
            std::hint::black_box(h.join().map_err(|_| Error::new(sheaf_core::ErrorKind::Io, "a lab thread panicked"))??);
        }
        Ok::<(), Error>(())
    })?;
    Ok(t.elapsed())
}

/// Measure every codec at every unit size over `pages` (a whole number of 8 KiB pages).
///
/// # Errors
/// A sample that is not whole pages, a unit that is not a multiple of 8 KiB, codec failures.
pub fn run(pages: &[u8], opts: &LabOptions) -> Result<Vec<LabRow>> {
    if pages.is_empty() || pages.len() % PAGE != 0 {
        return Err(Error::invalid(format!("the sample is {} bytes: the lab needs whole 8 KiB pages", pages.len())));
    }
    if let Some(u) = opts.units.iter().find(|&&u| u == 0 || u % PAGE != 0) {
        return Err(Error::invalid(format!("unit {u} is not a multiple of 8 KiB")));
    }
    let n_pages = pages.len() / PAGE;
    // The raw baseline: copying pages, and changing one in place.
    let mut raw_scan = Vec::new();
    let mut raw_fetch = Vec::new();
    let mut raw_update = Vec::new();
    for _ in 0..opts.repeat.max(1) {
        let base = Store { units: pages.chunks(PAGE).map(|p| (CodecKind::None, p.to_vec(), PAGE)).collect(), unit: PAGE };
        raw_scan.push(scan(&base, opts.threads)?.as_secs_f64());
        let mut rng = Rng(0x5eed);
        let mut page = vec![0u8; PAGE];
        let mut lat = Vec::with_capacity(opts.accesses);
        for _ in 0..opts.accesses {
            let i = rng.below(n_pages);
            let t = Instant::now();
            page.copy_from_slice(&base.units[i].1);
            std::hint::black_box(&page);
            lat.push(t.elapsed().as_secs_f64());
        }
        raw_fetch.push(percentile(&mut lat, 0.5));
        let mut store = base;
        let mut lat = Vec::with_capacity(opts.accesses);
        for _ in 0..opts.accesses {
            let i = rng.below(n_pages);
            let t = Instant::now();
            page.copy_from_slice(&store.units[i].1);
            touch_tuple(&mut page, &mut rng);
            store.units[i].1.copy_from_slice(&page);
            lat.push(t.elapsed().as_secs_f64());
        }
        raw_update.push(percentile(&mut lat, 0.5));
    }
    let (raw_scan, raw_fetch, raw_update) = (median(raw_scan), median(raw_fetch), median(raw_update));
    let mut rows = vec![LabRow {
        codec: "none".into(),
        unit: PAGE,
        ratio: 1.0,
        scan_mb_s: pages.len() as f64 / 1e6 / raw_scan,
        scan_x: 1.0,
        fetch_p50_us: raw_fetch * 1e6,
        fetch_p99_us: raw_fetch * 1e6,
        fetch_x: 1.0,
        update_us: raw_update * 1e6,
        update_x: 1.0,
    }];
    for spec in opts.codecs.iter().filter(|c| c.kind != CodecKind::None) {
        for &unit in &opts.units {
            let store = compress_all(pages, *spec, unit)?;
            let stored: usize = store.units.iter().map(|u| u.1.len()).sum();
            let per_unit = unit / PAGE;
            let (mut scans, mut p50s, mut p99s, mut updates) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for _ in 0..opts.repeat.max(1) {
                scans.push(scan(&store, opts.threads)?.as_secs_f64());
                let mut d = DecompressorSet::default();
                let mut buf = vec![0u8; unit];
                let mut rng = Rng(0x5eed);
                let mut page = vec![0u8; PAGE];
                let mut lat = Vec::with_capacity(opts.accesses);
                for _ in 0..opts.accesses {
                    let i = rng.below(n_pages);
                    let (u, at) = (i / per_unit, (i % per_unit) * PAGE);
                    let t = Instant::now();
                    let (kind, bytes, _) = &store.units[u];
                    if *kind == CodecKind::None {
                        page.copy_from_slice(&bytes[at..at + PAGE]);
                    } else {
                        expand(&mut d, &store.units[u], &mut buf)?;
                        page.copy_from_slice(&buf[at..at + PAGE]);
                    }
                    std::hint::black_box(&page);
                    lat.push(t.elapsed().as_secs_f64());
                }
                p50s.push(percentile(&mut lat, 0.5));
                p99s.push(percentile(&mut lat, 0.99));
                // Updates change the store: work on a copy, compressing again with this codec.
                let mut units = store.units.clone();
                let mut c = spec.compressor()?;
                let mut out = vec![0u8; spec.buffer_len(unit)];
                let mut lat = Vec::with_capacity(opts.accesses);
                for _ in 0..opts.accesses {
                    let i = rng.below(n_pages);
                    let (u, at) = (i / per_unit, (i % per_unit) * PAGE);
                    let t = Instant::now();
                    let n = expand(&mut d, &units[u], &mut buf)?;
                    touch_tuple(&mut buf[at..at + PAGE], &mut rng);
                    units[u] = encode(c.as_mut(), *spec, &buf[..n], &mut out)?;
                    lat.push(t.elapsed().as_secs_f64());
                }
                updates.push(percentile(&mut lat, 0.5));
            }
            let (scan_s, p50, p99, update) = (median(scans), median(p50s), median(p99s), median(updates));
            rows.push(LabRow {
                codec: spec.to_string(),
                unit,
                ratio: pages.len() as f64 / stored as f64,
                scan_mb_s: pages.len() as f64 / 1e6 / scan_s,
                scan_x: scan_s / raw_scan,
                fetch_p50_us: p50 * 1e6,
                fetch_p99_us: p99 * 1e6,
                fetch_x: p50 / raw_fetch,
                update_us: update * 1e6,
                update_x: update / raw_update,
            });
        }
    }
    Ok(rows)
}

/// Change a tuple's worth of bytes somewhere past the page header, as an UPDATE in place would.
fn touch_tuple(page: &mut [u8], rng: &mut Rng) {
    let at = 64 + rng.below(PAGE - 64 - 32);
    for b in &mut page[at..at + 32] {
        *b = b.wrapping_add(1);
    }
}

/// The seed's table: each cost as a multiple of raw, with the ratio it buys.
pub fn table(rows: &[LabRow]) -> String {
    let mut out = format!(
        "{:<12} {:>8} {:>7} {:>10} {:>7} {:>10} {:>10} {:>7} {:>10} {:>7}\n",
        "codec", "unit", "ratio", "scan MB/s", "scan ×", "fetch p50", "fetch p99", "fetch ×", "update", "update ×"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<12} {:>8} {:>7.2} {:>10.0} {:>7.2} {:>8.1}µs {:>8.1}µs {:>7.1} {:>8.1}µs {:>7.1}\n",
            r.codec,
            sheaf_core::size::format_size(r.unit as u64),
            r.ratio,
            r.scan_mb_s,
            r.scan_x,
            r.fetch_p50_us,
            r.fetch_p99_us,
            r.fetch_x,
            r.update_us,
            r.update_x
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages that look like a table's: a header, then rows of text and numbers.
    fn pages(n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n * PAGE];
        for (i, p) in v.chunks_mut(PAGE).enumerate() {
            p[..8].copy_from_slice(&(i as u64).to_le_bytes());
            for (j, b) in p[24..].iter_mut().enumerate() {
                *b = b"order 1234, shipped by truck; "[(j + i) % 30].wrapping_add((j / 97) as u8);
            }
        }
        v
    }

    #[test]
    fn the_lab_measures_every_codec_and_unit_and_bigger_units_cost_more_per_fetch() {
        let opts = LabOptions {
            codecs: vec![CodecSpec::parse("lz4").unwrap(), CodecSpec::parse("zstd:low").unwrap()],
            units: vec![PAGE, 256 << 10],
            repeat: 1,
            threads: 2,
            accesses: 200,
        };
        let rows = run(&pages(256), &opts).unwrap();
        assert_eq!(rows.len(), 1 + 2 * 2);
        assert_eq!(rows[0].codec, "none");
        for r in &rows[1..] {
            assert!(r.ratio > 2.0, "{r:?}");
            assert!(r.scan_mb_s > 0.0 && r.fetch_p50_us > 0.0 && r.update_us > 0.0, "{r:?}");
        }
        // Fetching one page out of a 256 KiB unit decompresses 32 pages: it costs more than out
        // of a page-sized unit (by far more than timing noise on 200 fetches).
        let by = |c: &str, u: usize| rows.iter().find(|r| r.codec == c && r.unit == u).unwrap();
        assert!(by("zstd:low", 256 << 10).fetch_p50_us > 4.0 * by("zstd:low", PAGE).fetch_p50_us, "{rows:?}");
        assert!(table(&rows).contains("zstd:low"));
    }

    #[test]
    fn bad_samples_and_units_are_refused() {
        assert!(run(&[0u8; 100], &LabOptions::default()).is_err());
        let opts = LabOptions { units: vec![1000], ..LabOptions::default() };
        assert!(run(&pages(4), &opts).unwrap_err().to_string().contains("multiple of 8 KiB"));
    }
}
