//! sheaf-pg: PostgreSQL as a sheaf source.
//!
//! - [`checksum`]: PostgreSQL's page checksum, to verify pages while they are read.
//! - [`layout`]: what a base backup leaves out, and which files are relation forks.

pub mod checksum;
pub mod layout;
