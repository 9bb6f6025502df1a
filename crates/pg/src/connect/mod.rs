//! Reaching the server.
//!
//! - [`conninfo`]: connection parameters as libpq finds them (URL or keyword/value string, the
//!   service file, the password file, the environment).
//! - [`tls`]: TLS through rustls, as libpq's `sslmode` asks.
//! - [`session`]: a SQL session opened as libpq opens one, and what its failures mean (a
//!   certificate or login refused is [`session::Refusal`], never transient).
//! - [`server`]: the connected server: facts about it, the checks a backup needs, and the
//!   statements that start and stop one; [`catalog`]: its databases, relations and tablespaces
//!   as a backup records them.
//! - [`wire`]: a client of the replication protocol (`BASE_BACKUP`, `START_REPLICATION`).

pub mod catalog;
pub mod conninfo;
pub mod server;
pub mod session;
pub mod tls;
pub mod wire;
