//! Verify the page checksums of every relation file in a (stopped) data directory, as a backup does
//! while reading: `cargo run --example verify_pages -- PGDATA`.

use std::path::Path;

use sheaf_pg::cluster::checksum::{verify_page, Verdict, PAGE_SIZE};
use sheaf_pg::cluster::layout::{is_relation_path, BLOCKS_PER_SEGMENT};
use sheaf_pg::Lsn;

fn main() {
    let root = std::env::args().nth(1).expect("usage: verify_pages PGDATA");
    let mut warnings = Vec::new();
    let listed = sheaf_core::source::list_tree(Path::new(&root), 0, &mut warnings).expect("list");
    let (mut ok, mut new, mut bad) = (0u64, 0u64, 0u64);
    for l in &listed {
        let Some(rel) = is_relation_path(&l.entry.path, false) else { continue };
        // Page by page: a relation segment is up to 1 GiB.
        let mut f = std::io::BufReader::new(std::fs::File::open(&l.abs).expect("open"));
        let mut page = [0u8; PAGE_SIZE];
        let mut i = 0u32;
        while std::io::Read::read_exact(&mut f, &mut page).is_ok() {
            let blk = rel.segment * BLOCKS_PER_SEGMENT + i;
            i += 1;
            match verify_page(&page, blk, Lsn(u64::MAX)) {
                Verdict::Ok => ok += 1,
                Verdict::New | Verdict::Recent => new += 1,
                Verdict::Mismatch { stored, computed } => {
                    bad += 1;
                    if bad <= 3 {
                        println!("{} block {blk}: stored {stored} computed {computed}", l.entry.path);
                    }
                }
            }
        }
    }
    println!("pages ok {ok}, new {new}, mismatched {bad}");
}
