//! Reaching the server.
//!
//! - [`conninfo`]: connection parameters as libpq finds them (URL or keyword/value string, the
//!   service file, the password file, the environment).
//! - [`tls`]: TLS through rustls, as libpq's `sslmode` asks.
//! - [`server`]: the SQL connection: facts about the server, the checks a backup needs, and the
//!   statements that start and stop one.
//! - [`wire`]: a client of the replication protocol (`BASE_BACKUP`, `START_REPLICATION`).

pub mod conninfo;
pub mod server;
pub mod tls;
pub mod wire;
