//! sheaf-bench: the harness the seed authors each built by hand, and the tooling that makes data
//! for it, so that the engine's PostgreSQL crate carries no data generator.
//!
//! - [`matrix`]: the sweep from flags (`--compression lz4,zstd:low --stripes 1,2 ...`) expanded
//!   into permutations in a stable order; [`plan`]: the same from a TOML file; [`source`]: what
//!   the bench backs up;
//! - [`runner`]: each permutation's backup, verify and restore as child processes of sheaf, then
//!   the [`peers`] (pg_basebackup, pgBackRest) on the same source; [`measure`] times each
//!   operation until durable, with its CPU (wait4) and the host's (/proc/stat);
//! - [`results`]: what a bench measured (samples, rows, how it ran), which the runner makes and
//!   the report and plots read; [`stats`]: medians and ranges across repeats;
//! - [`report`]: the results table as CSV, JSON, Markdown and text; [`plot`]: SVG and PNG plots.
//!
//! - [`lab`]: seed 003's question, what a codec costs per scan, page fetch and update;
//!   [`dblab`]: the same experiment through PostgreSQL (TOAST pglz, lz4 and none).
//! - [`change`]: the change between a full and an incremental (`--type full,incr --change 5%`).
//! - [`tpch`]: TPC-H data (tpchgen) loaded into PostgreSQL; [`demo`]: `sheaf demo`, a throwaway
//!   cluster with TPC-H backed up with each codec, restored, started and checked.
//!
//! Like the other libraries it prints nothing: progress reaches the caller as [`runner::Event`]s.

pub mod change;
pub mod dblab;
pub mod demo;
pub mod lab;
pub mod matrix;
pub mod measure;
pub mod peers;
pub mod plan;
pub mod plot;
pub mod report;
pub mod results;
pub mod runner;
pub mod source;
pub mod stats;
pub mod tpch;
