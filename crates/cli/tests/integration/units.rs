//! The systemd units sheaf ships (`contrib/systemd`), read as systemd reads them, and run as a
//! unit runs its `ExecStart` on a machine where systemd is not PID 1 (this suite's): the unit's
//! user and group, its environment and working folder, and its hardening, emulated where a test
//! can: `ProtectSystem=strict` (every mount read-only but `ReadWritePaths=` and the state and
//! logs folders), `PrivateTmp=` (empty /tmp and /var/tmp), `NoNewPrivileges=`, an empty
//! `CapabilityBoundingSet=`, `UMask=`. (The system-call and address-family filters are not
//! emulated; `systemd-analyze verify` reads them.)

use std::path::{Path, PathBuf};
use std::process::Command;

/// contrib/systemd.
pub fn folder() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd")
}

/// Every unit file shipped: (file name, text).
pub fn all() -> Vec<(String, String)> {
    let mut units: Vec<(String, String)> = std::fs::read_dir(folder())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(".service") || n.ends_with(".timer")))
        .map(|e| (e.file_name().into_string().unwrap(), std::fs::read_to_string(e.path()).unwrap()))
        .collect();
    units.sort();
    units
}

/// The values `key` takes in `section` of a unit's text, in order (a key may repeat; one line
/// may hold several space-separated values, which stay together here).
pub fn values(text: &str, section: &str, key: &str) -> Vec<String> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == format!("[{section}]");
        } else if inside && !line.starts_with('#') {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == key {
                    out.push(v.trim().to_string());
                }
            }
        }
    }
    out
}

/// One value, which the unit must have.
pub fn value(text: &str, section: &str, key: &str) -> String {
    values(text, section, key).pop().unwrap_or_else(|| panic!("no {key}= in [{section}]"))
}

/// A unit's text for instance `instance` (`%i`) on this machine: every path in `moves` (from, to)
/// rewritten, so that /etc/sheaf, /var/lib/sheaf and /usr/bin/sheaf are the test's own.
pub fn instance(text: &str, instance: &str, moves: &[(&str, &str)]) -> String {
    let mut t = text.replace("%i", instance);
    for (from, to) in moves {
        t = t.replace(from, to);
    }
    t
}

/// `ExecStart` of the service `text` (already an [`instance`]), as the unit runs it: in a mount
/// namespace with the unit's hardening, as its user, with its environment only (plus `env`).
/// `root` stands for `/` where `StateDirectory=` (under var/lib) and `LogsDirectory=` (under
/// var/log) are made, owned by the unit's user, as systemd makes them.
pub fn exec_start(text: &str, root: &Path, env: &[(&str, &str)]) -> Command {
    let user = value(text, "Service", "User");
    let group = value(text, "Service", "Group");
    let uid = id_of("/etc/passwd", &user);
    let gid = id_of("/etc/group", &group);
    let mut writable: Vec<PathBuf> =
        values(text, "Service", "ReadWritePaths").iter().flat_map(|v| v.split_whitespace().map(|p| PathBuf::from(p.trim_start_matches('-')))).collect();
    for (key, under) in [("StateDirectory", "var/lib"), ("LogsDirectory", "var/log")] {
        for name in values(text, "Service", key).iter().flat_map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>()) {
            let dir = root.join(under).join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
            writable.push(dir);
        }
    }
    assert_eq!(value(text, "Service", "ProtectSystem"), "strict");
    assert_eq!(value(text, "Service", "PrivateTmp"), "yes");
    assert_eq!(value(text, "Service", "NoNewPrivileges"), "yes");
    let umask = value(text, "Service", "UMask");
    let dir = value(text, "Service", "WorkingDirectory");
    let exec = shlex::split(&value(text, "Service", "ExecStart")).unwrap();
    let q = |s: &str| shlex::try_quote(s).unwrap().into_owned();
    let mut script = String::from("set -e\n");
    for w in &writable {
        script.push_str(&format!("mount --bind {0} {0}\n", q(w.to_str().unwrap())));
    }
    script.push_str("mount -t tmpfs -o mode=1777 tmpfs /tmp\nmount -t tmpfs -o mode=1777 tmpfs /var/tmp\n");
    let keep: Vec<String> = writable.iter().map(|w| q(w.to_str().unwrap())).collect();
    script.push_str(&format!(
        "findmnt -rno TARGET | while read -r m; do case \"$m\" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*|/tmp|/var/tmp|{}) continue;; esac; \
         mount -o remount,bind,ro \"$m\" || {{ echo \"cannot make $m read-only\" >&2; exit 1; }}; done\n",
        keep.join("|")
    ));
    script.push_str(&format!("cd {}\numask {umask}\n", q(&dir)));
    script.push_str(&format!(
        "exec setpriv --reuid={uid} --regid={gid} --init-groups --no-new-privs --bounding-set=-all -- {}\n",
        exec.iter().map(|a| q(a)).collect::<Vec<_>>().join(" ")
    ));
    let home = std::fs::read_to_string("/etc/passwd").unwrap().lines().find(|l| l.starts_with(&format!("{user}:"))).and_then(|l| l.split(':').nth(5).map(str::to_string)).unwrap();
    let mut c = Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", &script]);
    c.env_clear().env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin").env("USER", &user).env("LOGNAME", &user).env("HOME", home).env("LANG", "C.UTF-8");
    for e in values(text, "Service", "Environment") {
        let (k, v) = e.split_once('=').unwrap();
        c.env(k, v);
    }
    c.envs(env.iter().copied());
    c
}

/// The id `name` has in /etc/passwd or /etc/group.
fn id_of(file: &str, name: &str) -> u32 {
    std::fs::read_to_string(file).unwrap().lines().find(|l| l.starts_with(&format!("{name}:"))).and_then(|l| l.split(':').nth(2)).unwrap().parse().unwrap()
}
