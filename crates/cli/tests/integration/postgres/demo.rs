//! `sheaf demo` stops the servers it started and removes its cluster when interrupted, by SIGINT
//! and by SIGTERM alike (the one interrupt policy, issue 50).

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use super::cluster::assert_no_server_on;
use super::interrupt::SIGNALS;
use crate::integration::common::sheaf;

#[test]
fn an_interrupted_demo_stops_its_server_and_cleans_up() {
    for (signal, code) in SIGNALS {
        let mut child = sheaf().args(["demo", "--scale", "0.01", "--compression", "lz4"]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let data = loop {
            let line = lines.next().expect("demo ended before naming its cluster").unwrap();
            if let Some(rest) = line.strip_prefix("sheaf demo: cluster in ") {
                break std::path::PathBuf::from(rest.split(" on port ").next().unwrap());
            }
        };
        assert!(data.join("postmaster.pid").exists(), "the demo's server runs");
        rustix::process::kill_process(rustix::process::Pid::from_child(&child), signal).unwrap();
        // Its messages drain while it unwinds (a full pipe would stall it).
        let said: Vec<String> = lines.map_while(Result::ok).collect();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "exit status after {signal:?}: {said:?}");
        assert!(!data.exists(), "the demo's cluster directory is removed after {signal:?}");
        assert_no_server_on(&data);
    }
}
