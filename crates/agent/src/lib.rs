//! sheaf-agent: read-only access to a PostgreSQL cluster's files over mutual TLS, so that a backup
//! host can take the backup (`sheaf backup URL --agent HOST:PORT`) while the database host only
//! serves its files.
//!
//! - [`certs`]: the private CA, the agent's and the backup host's certificates, and the allow-list
//!   of client certificates (`sheaf agent --init-certs DIR`).
//! - [`tls`]: rustls configurations from those files: the agent demands a client certificate
//!   signed by the CA and on the list; the client checks the agent's against the CA and the name
//!   it dialled.
//! - [`proto`]: the frames on the wire: requests as JSON, file bytes as data frames.
//! - [`server`]: the agent: list, stat and ranged reads inside the data directory and the
//!   tablespaces, nothing outside them, and no call that writes; `squeeze`: its compressors, for
//!   reads the backup host asks to have compressed (`--compress-on agent`).
//! - [`client`]: the backup host's side; [`files`]: the agent's host's files as the backup engine
//!   opens them, streamed, with several reads in flight.

pub mod certs;
pub mod client;
pub mod files;
pub mod proto;
pub mod repos;
pub mod server;
mod squeeze;
pub mod store;
pub mod tls;

pub use client::AgentClient;
pub use files::{AgentAt, AgentFiles};
pub use server::{Agent, AgentConfig};
pub use store::{ServedSchemes, ServedStore};
