//! `sheaf demo` stops the servers it started when interrupted.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use super::cluster::assert_no_server_on;
use crate::integration::common::sheaf;

#[test]
fn an_interrupted_demo_stops_its_server_and_cleans_up() {
    let mut child = sheaf().args(["demo", "--scale", "0.01", "--compression", "lz4"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let data = loop {
        let line = lines.next().expect("demo ended before naming its cluster").unwrap();
        if let Some(rest) = line.strip_prefix("sheaf demo: cluster in ") {
            break std::path::PathBuf::from(rest.split(" on port ").next().unwrap());
        }
    };
    assert!(data.join("postmaster.pid").exists(), "the demo's server runs");
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::INT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "exit status after Ctrl-C");
    assert!(!data.exists(), "the demo's cluster directory is removed");
    assert_no_server_on(&data);
}
