//! The `sheaf` binary against real PostgreSQL servers started for the purpose.

pub mod agent;
pub mod basebackup;
pub mod bench;
pub mod cluster;
pub mod demo;
pub mod extract;
pub mod faults;
pub mod german;
pub mod incremental;
pub mod keep;
pub mod lock;
pub mod monitor;
pub mod online;
pub mod receive;
pub mod repo;
pub mod standby;
pub mod walsum;
