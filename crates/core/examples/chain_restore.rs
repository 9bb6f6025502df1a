//! A chain of a full and an incremental of a large tree, restored with its sets opened lean or
//! whole: the measurement behind docs/bench/million-files (a chain's restore in bounded memory).
//! The incremental says one file in `EVERY` (by a hash of its path) changed in its first KiB and
//! names every other file unchanged, as WAL summaries do for a cluster's relations.
//!
//!     cargo run --release --example chain_restore -- backup SRC DIR [EVERY]
//!     cargo run --release --example chain_restore -- restore lean|whole DIR OUT [delta]
//!
//! `delta` restores onto OUT as it is (`--delta`): restore the full alone there first with
//! `restore-full`.
//!
//!     cargo run --release --example chain_restore -- restore-full DIR OUT
//!
//! Each phase is its own process, so that `/usr/bin/time` gives its peak RSS.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use sheaf_core::backup::{Changes, FileChanges, Lineage};
use sheaf_core::manifest::{BackupType, Root};
use sheaf_core::source::Walk;
use sheaf_core::{restore_chain, Backup, BackupOptions, BackupSet, LocalOnly, Location, NoProgress, RestoreOptions, Tuning};

/// One file in `every` changed in its first KiB; the rest unchanged.
struct EveryNth(u64);

impl Changes for EveryNth {
    fn of(&self, _root: &str, rel: &str, size: u64) -> FileChanges {
        let h = rel.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
        FileChanges::Ranges(if h % self.0 == 0 && size > 0 { vec![Range { start: 0, end: size.min(1024) }] } else { Vec::new() })
    }
}

fn stripes(dir: &Path, name: &str) -> Vec<Location> {
    (1..=2).map(|k| Location::file(dir.join(format!("{name}_{k}.sheaf")))).collect()
}

fn take(src: &Path, dir: &Path, name: &str, on: Option<(Lineage, u64)>) -> String {
    let opts = BackupOptions::new(stripes(dir, name));
    let tuning = Tuning::resolve(&opts, 1).expect("tuning");
    let mut b = Backup::start(&opts, tuning, Arc::new(NoProgress)).expect("start");
    if let Some((lineage, every)) = on {
        b.incremental(lineage, Arc::new(EveryNth(every)));
    }
    let mut walk = Walk::new(src, 0).expect("walk");
    b.add_tree_streamed(Root { name: String::new(), path: src.display().to_string() }, &mut walk).expect("read");
    let r = b.finish(serde_json::json!({ "kind": "directory" })).expect("finish");
    println!("{name}: {} bytes read, {} written, {:.2} s", r.bytes_read, r.bytes_written, r.seconds);
    r.backup_id
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["backup", src, dir, rest @ ..] => {
            let every = rest.first().map_or(100, |e| e.parse().expect("EVERY"));
            let (src, dir) = (Path::new(src), Path::new(dir));
            std::fs::create_dir_all(dir).expect("dir");
            let full = take(src, dir, "full", None);
            take(src, dir, "incr", Some((Lineage { backup_type: BackupType::Incr, chain: vec![full] }, every)));
        }
        ["restore-full", dir, out] => {
            let full = BackupSet::open_lean(&stripes(Path::new(dir), "full"), &LocalOnly, None).expect("open");
            let r = restore_chain(&[&full], &RestoreOptions::new(out), Arc::new(NoProgress)).expect("restore");
            println!("full: {} files, {:.2} s", r.files, r.seconds);
        }
        ["restore", mode, dir, out, rest @ ..] => {
            let dir = Path::new(dir);
            let open = |name: &str| {
                match *mode {
                    "lean" => BackupSet::open_lean(&stripes(dir, name), &LocalOnly, None),
                    _ => BackupSet::open(&stripes(dir, name), &LocalOnly),
                }
                .expect("open")
            };
            let (full, incr) = (open("full"), open("incr"));
            let mut o = RestoreOptions::new(out);
            o.delta = rest.first() == Some(&"delta");
            let r = restore_chain(&[&full, &incr], &o, Arc::new(NoProgress)).expect("restore");
            println!("{mode}: {} files, {} bytes written, {} read, {:.2} s, delta {:?}", r.files, r.bytes_written, r.bytes_read, r.seconds, r.delta);
        }
        _ => eprintln!("usage: chain_restore backup SRC DIR [EVERY] | restore lean|whole DIR OUT [delta] | restore-full DIR OUT"),
    }
}
