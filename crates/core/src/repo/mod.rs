//! A repository: a folder or an object prefix where sheaf lays out backups and archived files
//! itself, written only through the [`crate::storage::Store`] (so the same code runs on disks and
//! buckets).
//!
//! ```text
//!  REPO/repo.json            what it holds (kind, system identifier, ...), written once at init
//!  REPO/backups/ID.json      a finished backup's record; published after every stripe is
//!  REPO/backups/ID.lock      a backup being written (host, pid, start), removed when it ends
//!  REPO/backups/ID/ID_k.sheaf  its stripes
//!  REPO/wal/TTTTTTTT/NAME.wal  archived WAL files by timeline (segments, .history, .backup, .partial)
//! ```
//! Everything but stripes is a [`crate::blob`]: checksummed, published whole. What a record means
//! is the caller's business (PostgreSQL's lives in sheaf-pg); this module knows places and bytes.
//!
//! A repository comes in two states (rustic_core's `Repository` states):
//!
//! - [`Place`]: where it is, not opened: a store seen through its root ([`Prefixed`]). What can be
//!   done before opening is here: make one ([`Place::init`]), read or write its key records,
//!   look at its versions (after a wipe).
//! - [`Repo`]: opened ([`Place::open`]): its `repo.json` read into the caller's [`Meta`] type and
//!   checked, the keys checked against it and its key ring opened, the owner compared with who
//!   runs sheaf, its Object Lock put around its store ([`crate::storage::Locked`]): all once, at
//!   the open, with nothing resolved later and nothing set as a side effect.
//!
//! An encrypted repository is one whose `repo.json` is encrypted. Its keys are in `keys/ID.key`
//! ([`crate::keyring`]): any one of them opens the key ring ([`ring`]), whose newest generation
//! every object and backup written from then on uses, each with a data key of its own. A
//! repository made before key rings has no `keys/`: `repo.json`'s key block names its one KDF (a
//! passphrase's salt and cost, or a key file), which everything in it used, until `sheaf key
//! migrate` adopts it. Encryption is not a store wrapper: a small object carries its key block in
//! its own header, and a stripe is sealed frame by frame in the backup's pipeline.
//!
//! [`Prefixed`]: crate::storage::Prefixed

pub mod opened;
mod owner;
pub mod place;
pub mod ring;

pub use opened::{Meta, Repo};
pub use place::Place;
pub use ring::Unlocked;

/// The repository's description, `repo.json`.
pub const META: &str = "repo.json";
