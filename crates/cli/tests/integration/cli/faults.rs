//! The machine's faults: a folder missing, a file that cannot be read or changes while read, a
//! disk that fills; each with its exit code, and nothing half-written left behind.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use super::{on_small_tmpfs, run, Fixture};
use crate::integration::common::{assert_fails, catalog, s, sheaf, stderr, stdout, SHEAF};

#[test]
fn target_folder_missing_exits_8() {
    let f = Fixture::new();
    let o = run(&["backup", s(&f.src), "--to", "/nonexistent/sheaf/x.sheaf"]);
    assert_fails(&o, 8, &["/nonexistent/sheaf", "does not exist"]);
}

#[test]
fn unreadable_source_file_exits_7_and_names_it() {
    // A plain tree: everything readable by anyone but the one file.
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let f = Fixture { src: dir.path().join("src"), dir };
    fs::create_dir_all(f.src.join("sub")).unwrap();
    fs::set_permissions(&f.src, fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(f.src.join("sub"), fs::Permissions::from_mode(0o755)).unwrap();
    sheaf_core::datagen::write_file(&f.src.join("sub/readable"), 300_000, 1, 0.5).unwrap();
    fs::set_permissions(f.src.join("sub/readable"), fs::Permissions::from_mode(0o644)).unwrap();
    let secret = f.src.join("secret");
    fs::write(&secret, b"no peeking").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o000)).unwrap();
    let out = f.path("out");
    fs::create_dir_all(&out).unwrap();
    fs::set_permissions(&out, fs::Permissions::from_mode(0o777)).unwrap();
    let target = out.join("x.sheaf");
    let mut cmd = if sheaf_core::host::is_root() {
        // root reads anything; drop to nobody so that mode 000 means what it says.
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", SHEAF]);
        c
    } else {
        sheaf()
    };
    let o = cmd.env("SHEAF_CATALOG", catalog()).args(["backup", s(&f.src), "--to", s(&target)]).output().unwrap();
    assert_fails(&o, 7, &["cannot read source file", "secret", "Permission denied"]);
    assert!(fs::read_dir(&out).unwrap().next().is_none(), "no stripe or partial left behind");
}

#[test]
fn disk_full_exits_6_and_leaves_nothing() {
    let f = Fixture::new();
    sheaf_core::datagen::write_file(&f.src.join("big.dat"), 4 << 20, 9, 0.0).unwrap();
    let mnt = f.path("small_fs");
    fs::create_dir_all(&mnt).unwrap();
    let target = mnt.join("x.sheaf");
    let o = on_small_tmpfs(&mnt, &format!("backup {} --to {} -c none", s(&f.src), s(&target)));
    assert_fails(&o, 6, &["x.sheaf", "the device or quota is full"]);
    assert_eq!(stdout(&o).trim(), "", "the full filesystem holds no stripe and no partial afterwards");
}

#[test]
fn restore_into_a_full_disk_exits_6_and_removes_what_it_wrote() {
    let f = Fixture::new();
    sheaf_core::datagen::write_file(&f.src.join("big.dat"), 4 << 20, 9, 0.0).unwrap();
    let st = f.backup("set", 2);
    let mnt = f.path("small_fs");
    fs::create_dir_all(&mnt).unwrap();
    let o = on_small_tmpfs(&mnt, &format!("restore {} --to {}", s(&st[0]), s(&mnt)));
    // Refused before a byte is written: the data cannot fit, and the message says how much.
    assert_fails(&o, 6, &["the restore writes 4", "free", "what it wrote was removed"]);
    assert_eq!(stdout(&o).trim(), "", "the full filesystem is left empty");
}

#[test]
fn a_file_changing_while_read_is_reported() {
    let f = Fixture::new();
    let growing = f.src.join("growing.log");
    sheaf_core::datagen::write_file(&growing, 16 << 20, 4, 0.3).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, growing) = (stop.clone(), growing.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut fh = fs::OpenOptions::new().append(true).open(&growing).unwrap();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                fh.write_all(b"another log line\n").unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let o = run(&["backup", s(&f.src), "--to", s(&f.path("c.sheaf")), "--json", "-c", "zstd:12", "--threads", "1", "--buffer-count", "2", "--transfer-size", "64KiB"]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(o.status.success(), "a changing file is reported, not fatal: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("growing.log") && warnings.contains("changed while being read"), "{warnings}");
    assert!(stderr(&o).contains("warning: ") && stderr(&o).contains("growing.log"));
    // What was backed up is consistent: it verifies.
    assert!(run(&["verify", s(&f.path("c.sheaf"))]).status.success());
}
