//! The Debian package (issue 52): `scripts/make-deb.sh` (what `make deb` runs) packages this
//! binary, lintian reports no error, and on this machine `dpkg -i` gives a sheaf that runs, whose
//! man pages `man` finds and whose bash completion completes; `dpkg -r` keeps /etc/sheaf and
//! `dpkg --purge` removes it.

use std::path::Path;
use std::process::Command;

use super::super::common::{stderr, stdout, SHEAF};

fn sh(script: &str) -> std::process::Output {
    Command::new("bash").args(["-c", script]).output().unwrap()
}

fn dpkg(args: &[&str]) {
    let o = Command::new("dpkg").args(args).output().unwrap();
    assert!(o.status.success(), "dpkg {args:?}: {}{}", stdout(&o), stderr(&o));
}

#[test]
fn the_package_installs_works_and_goes() {
    assert!(sheaf_core::host::is_root(), "dpkg -i needs root, as the suite runs");
    let installed = Command::new("dpkg-query").args(["-W", "-f=${Status}", "sheaf"]).output().unwrap();
    assert!(!stdout(&installed).contains("installed"), "a sheaf package is installed on this machine already: the test would replace it");
    assert!(!Path::new("/etc/sheaf").exists(), "/etc/sheaf exists already: the test's purge would touch it");
    let out = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new(root.join("scripts/make-deb.sh")).args(["--binary", SHEAF, "--out", out.path().to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "make-deb.sh (with lintian --fail-on error): {}", stderr(&o));
    let deb = stdout(&o).lines().last().unwrap().to_string();
    assert!(!stderr(&o).lines().any(|l| l.starts_with("E: ")), "lintian: {}", stderr(&o));

    // What it holds, by the package's own list.
    let list = Command::new("dpkg-deb").args(["-c", &deb]).output().unwrap();
    let list = stdout(&list);
    for path in [
        "./usr/bin/sheaf",
        "./usr/share/man/man1/sheaf-restore.1.gz",
        "./usr/share/bash-completion/completions/sheaf",
        "./usr/share/zsh/vendor-completions/_sheaf",
        "./usr/share/fish/vendor_completions.d/sheaf.fish",
        "./lib/systemd/system/sheaf-wal-receive@.service",
        "./lib/systemd/system/sheaf-backup-full@.timer",
        "./etc/sheaf/sheaf.toml",
        "./etc/logrotate.d/sheaf",
    ] {
        assert!(list.contains(path), "{path} missing: {list}");
    }
    let conffiles = Command::new("dpkg-deb").args(["-e", &deb, out.path().join("control").to_str().unwrap()]).output().unwrap();
    assert!(conffiles.status.success());
    assert!(std::fs::read_to_string(out.path().join("control/conffiles")).unwrap().contains("/etc/sheaf/sheaf.toml"));

    dpkg(&["-i", &deb]);
    let o = sh("/usr/bin/sheaf --version");
    assert_eq!(stdout(&o).trim(), format!("sheaf {}", env!("CARGO_PKG_VERSION")));
    let o = sh("man -w sheaf-backup");
    assert!(o.status.success() && stdout(&o).contains("/usr/share/man/man1/sheaf-backup.1.gz"), "{}{}", stdout(&o), stderr(&o));
    // bash-completion's own loader finds the script by the command's name, and it completes.
    let o = sh("source /usr/share/bash-completion/bash_completion; _completion_loader sheaf; \
                COMP_WORDS=(sheaf res); COMP_CWORD=1; COMP_LINE='sheaf res'; COMP_POINT=9; \
                $(complete -p sheaf | sed -n 's/.*-F \\([^ ]*\\) .*/\\1/p') sheaf res sheaf; printf '%s\\n' \"${COMPREPLY[@]}\"");
    assert_eq!(stdout(&o).trim(), "restore", "{}", stderr(&o));
    // The example settings file changes nothing: every key in it is commented out.
    let o = sh("/usr/bin/sheaf config");
    assert!(o.status.success(), "{}", stderr(&o));

    dpkg(&["-r", "sheaf"]);
    assert!(!Path::new("/usr/bin/sheaf").exists());
    assert!(Path::new("/etc/sheaf/sheaf.toml").exists(), "dpkg -r keeps the settings");
    dpkg(&["--purge", "sheaf"]);
    assert!(!Path::new("/etc/sheaf").exists(), "dpkg --purge removes /etc/sheaf");
}
