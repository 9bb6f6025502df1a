//! sheaf-core's integration suite: one binary, one module per concern.

mod integration {
    pub mod auto;
    pub mod compat;
    pub mod encryption;
    pub mod fuzzed;
    pub mod incremental;
    pub mod partial;
    pub mod resume;
    pub mod roundtrip;
    pub mod storage;
    pub mod tuning;
}
