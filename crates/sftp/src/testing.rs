//! OpenSSH's `sshd` for tests (Debian's `openssh-server`, which `make deps` installs), on a free
//! port of 127.0.0.1 with its own host key, a client key that it accepts for any user, and a
//! known_hosts file that names its key; stopped when dropped. Its SFTP is OpenSSH's own
//! (`internal-sftp`), with `fsync@openssh.com`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running `sshd`.
pub struct Sshd {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
    dir: tempfile::TempDir,
}

fn keygen(kind: &str, file: &Path) {
    let ok = Command::new("ssh-keygen").args(["-q", "-t", kind, "-N", "", "-C", "sheaf-test", "-f"]).arg(file).stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    assert!(ok, "ssh-keygen -t {kind} failed (make deps installs openssh-client)");
}

/// Where `sshd` is: `SHEAF_SSHD`, else `/usr/sbin/sshd`.
pub fn sshd_binary() -> Option<PathBuf> {
    let p = std::env::var_os("SHEAF_SSHD").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/usr/sbin/sshd"));
    p.exists().then_some(p)
}

impl Sshd {
    /// Start one (as root: sshd changes to the user who logs in).
    ///
    /// # Panics
    /// When sshd is missing (run `make deps`) or does not listen within 30 s.
    pub fn start() -> Sshd {
        Self::start_with("")
    }

    /// Start one with `extra` lines in its configuration (`Subsystem sftp ...` to replace its SFTP).
    ///
    /// # Panics
    /// As [`Sshd::start`].
    pub fn start_with(extra: &str) -> Sshd {
        let bin = sshd_binary().expect("sshd is not installed: run `make deps` (it installs openssh-server)");
        let dir = tempfile::Builder::new().prefix("sheaf-sshd.").tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let p = |n: &str| dir.path().join(n);
        keygen("ed25519", &p("host_key"));
        keygen("ed25519", &p("client_key"));
        // The client key readable by whichever user runs sheaf in a test (libssh2 asks nothing of
        // its mode); a real key stays 0600.
        std::fs::set_permissions(p("client_key"), std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
        std::fs::copy(p("client_key.pub"), p("authorized_keys")).expect("authorized_keys");
        // sshd's privilege separation folder.
        let _ = std::fs::create_dir_all("/run/sshd");
        for _ in 0..5 {
            let port = sheaf_core::testing::free_port();
            let host_pub = std::fs::read_to_string(p("host_key.pub")).expect("host key");
            let key: Vec<&str> = host_pub.split_whitespace().take(2).collect();
            std::fs::write(p("known_hosts"), format!("[127.0.0.1]:{port} {}\n", key.join(" "))).expect("known_hosts");
            // UsePAM: Debian's postgres account has a locked password ("!"), which sshd without
            // PAM takes for a locked account even for a key; a backup host's own user would not.
            let config = format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile {}\nAuthorizedKeysFile {}\nStrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM yes\nPermitRootLogin prohibit-password\nLogLevel ERROR\n{extra}\n",
                p("host_key").display(),
                p("sshd.pid").display(),
                p("authorized_keys").display()
            );
            let config = if extra.contains("Subsystem") { config } else { format!("{config}Subsystem sftp internal-sftp\n") };
            std::fs::write(p("sshd_config"), config).expect("sshd_config");
            let mut cmd = Command::new(&bin);
            cmd.arg("-D").arg("-e").arg("-f").arg(p("sshd_config")).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            if let Some(child) = sheaf_core::testing::start_until(cmd, "sshd", || sheaf_core::testing::listening(port)) {
                return Sshd { child, port, dir };
            }
        }
        panic!("sshd did not listen on 127.0.0.1 within 60 s");
    }

    /// The private key it accepts, for any user.
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client_key")
    }

    /// A known_hosts file that names its key.
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.path().join("known_hosts")
    }

    /// Its host key's public half (`ssh-ed25519 AAAA...`).
    pub fn host_key(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("host_key.pub")).expect("host key").split_whitespace().take(2).collect::<Vec<_>>().join(" ")
    }

    /// A folder next to its files, for tests' own.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
