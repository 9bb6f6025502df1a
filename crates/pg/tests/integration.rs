//! sheaf-pg's integration suite against real PostgreSQL servers started for the purpose.

mod integration {
    pub mod cluster;
    pub mod demo;
    pub mod faults;
    pub mod online;
}
