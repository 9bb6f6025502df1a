//! Single-core speed of the page checksum over a file of pages: `checksum_speed FILE`.

use sheaf_pg::checksum::{page_checksum, PAGE_SIZE};

fn main() {
    let path = std::env::args().nth(1).expect("usage: checksum_speed FILE");
    let data = std::fs::read(path).expect("read");
    let t = std::time::Instant::now();
    let mut x = 0u32;
    for (i, p) in data.chunks_exact(PAGE_SIZE).enumerate() {
        x ^= u32::from(page_checksum(p.try_into().unwrap(), i as u32));
    }
    let s = t.elapsed().as_secs_f64();
    println!("{:.0} MB/s ({x})", data.len() as f64 / s / 1e6);
}
