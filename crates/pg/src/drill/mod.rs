//! A backup proven by restoring it, not hoped for.
//!
//! - [`run`]: `sheaf drill`: a backup restored, started, recovered and checked on a scratch
//!   server, timed and recorded in the repository.
//! - [`scratch`]: throwaway clusters (initdb in a temporary folder, a free port, a socket folder of
//!   their own) for drills, `sheaf demo`, `sheaf bench` and the tests.

pub mod run;
pub mod scratch;
