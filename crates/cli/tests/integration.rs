//! The `sheaf` binary's integration suite: one binary, one module per concern, with the helpers
//! they share in [`integration::common`]. The tests live with the binary so that cargo always
//! rebuilds it before they run.

mod integration {
    pub mod cli;
    pub mod common;
    pub mod crash;
    pub mod mariadb;
    pub mod postgres;
    pub mod s3;
    pub mod units;
}
