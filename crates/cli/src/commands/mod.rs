//! One module per command. Each takes its own arguments and the [`crate::context::Context`],
//! calls the library, and prints; none exits.

pub mod agent;
pub mod annotate;
pub mod backup;
pub mod bench;
pub mod check;
pub mod config;
pub mod consolidate;
pub mod copy;
pub mod demo;
pub mod drill;
pub mod expire;
pub mod extract;
pub mod generate;
pub mod history;
pub mod info;
pub mod init;
pub mod keep;
pub mod key;
pub mod lab;
pub mod load_tpch;
pub mod manual;
pub mod repo;
pub mod restore;
pub mod undelete;
pub mod verify;
pub mod version;
pub mod wal_fetch;
pub mod wal_push;
pub mod wal_receive;
pub mod wal_summarize;
