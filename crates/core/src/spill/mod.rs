//! Temporary files that keep a backup's per-file bookkeeping out of memory, so that a million
//! files (or ten) cost disk in `TMPDIR`, not RAM: the entries as they are registered
//! ([`EntrySpill`], about 60 bytes each plus the path), what reading each file came to
//! ([`Outcomes`], 9 bytes per entry, written where the entry's id says), chunk references sorted
//! in runs and merged back in file order ([`ChunkSorter`], 22 bytes per chunk), and a stripe's
//! index as it grows ([`IndexSpill`]). The files are unnamed (`O_TMPFILE`): nothing is left
//! behind, whatever way the process ends.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::error::{Error, ErrorKind, Result};

mod bytelog;
mod entries;
mod fifo;
mod index;
mod outcomes;
mod sorter;
pub(crate) use bytelog::*;
pub(crate) use entries::*;
pub(crate) use fifo::*;
pub(crate) use index::*;
pub(crate) use outcomes::*;
pub(crate) use sorter::*;

fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b[at..at + N].try_into().expect("in range")
}

/// Read into `b` from `pos` until it is full or the file ends; how many bytes came.
fn read_at_most(f: &File, b: &mut [u8], pos: u64) -> Result<usize> {
    let mut got = 0;
    while got < b.len() {
        match f.read_at(&mut b[got..], pos + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err("cannot read a temporary file", e)),
        }
    }
    Ok(got)
}

/// A new unnamed temporary file in `TMPDIR` (or `/tmp`).
fn temp() -> Result<File> {
    tempfile::tempfile().map_err(|e| io_err("cannot create a temporary file", e))
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "{what} in {} ({e}): sheaf keeps its lists of files and chunks there rather than in memory; set TMPDIR to a writable folder with room (about 100 bytes per file)",
            std::env::temp_dir().display()
        ),
    )
}
