//! Single-core speed of the page checksum over a file of pages: `checksum_speed FILE`.

use sheaf_pg::cluster::checksum::{page_checksum, PAGE_SIZE};

fn main() {
    let path = std::env::args().nth(1).expect("usage: checksum_speed FILE");
    // 8 MiB at a time; only the checksum is timed.
    let mut f = std::fs::File::open(path).expect("open");
    let mut buf = vec![0u8; 8 << 20];
    let (mut x, mut bytes, mut blk, mut busy) = (0u32, 0u64, 0u32, std::time::Duration::ZERO);
    loop {
        let n = sheaf_core::pipeline::read_full(&mut f, &mut buf).expect("read");
        if n == 0 {
            break;
        }
        let t = std::time::Instant::now();
        for p in buf[..n].chunks_exact(PAGE_SIZE) {
            x ^= u32::from(page_checksum(p.try_into().unwrap(), blk));
            blk += 1;
        }
        busy += t.elapsed();
        bytes += n as u64;
    }
    println!("{:.0} MB/s ({x})", bytes as f64 / busy.as_secs_f64() / 1e6);
}
