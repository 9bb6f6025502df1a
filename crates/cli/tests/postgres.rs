//! The `sheaf` binary against real PostgreSQL servers started for the purpose. These live with
//! the binary so that cargo always rebuilds it before they run.

mod postgres {
    pub mod bench;
    pub mod cluster;
    pub mod demo;
    pub mod extract;
    pub mod faults;
    pub mod online;
    pub mod repo;
}
