//! sheaf-bench: the harness the seed authors each built by hand. This crate holds its pure parts:
//!
//! - [`matrix`]: the sweep from flags (`--compression lz4,zstd:low --stripes 1,2 ...`) expanded
//!   into permutations in a stable order;
//! - [`stats`]: medians and ranges across repeats;
//! - [`report`]: the results table as CSV, JSON and Markdown, one row per permutation and tool.

pub mod matrix;
pub mod report;
pub mod stats;
