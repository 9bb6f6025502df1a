//! Identity services for tests: [`Identity`] (`identity.py`: an OpenID Connect provider MinIO
//! trusts, the EC2 instance metadata service with IMDSv2 only, a container credentials endpoint,
//! all handing out MinIO's real temporary credentials) and [`Moto`] (moto in server mode: an S3
//! with storage classes, GLACIER's refusal of a read included).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::{free_port, http};

/// The OpenID client id MinIO is told to trust.
pub const CLIENT_ID: &str = "sheaf-client";

/// `identity.py`, running on a free port of 127.0.0.1.
pub struct Identity {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    dir: tempfile::TempDir,
}

impl Identity {
    /// Start it (python3 with `cryptography`, which `make deps` installs).
    ///
    /// # Panics
    /// When python3 or its `cryptography` module is missing, or it does not come up in 30 s.
    pub fn start() -> Identity {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("identity.py");
        std::fs::write(&script, include_str!("identity.py")).expect("write identity.py");
        for _ in 0..5 {
            let port = free_port();
            let ready = dir.path().join(format!("ready-{port}"));
            let err = dir.path().join(format!("stderr-{port}"));
            let mut cmd = Command::new("python3");
            cmd.arg(&script).arg(port.to_string()).arg(&ready).stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(&err).expect("stderr file"));
            if let Some(child) = sheaf_core::testing::start_until(cmd, "identity.py", || ready.exists()) {
                return Identity { child, addr: format!("127.0.0.1:{port}"), dir };
            }
            let err = std::fs::read_to_string(&err).unwrap_or_default();
            assert!(err.contains("Address already in use"), "identity.py exited: {err} (make deps installs python3-cryptography)");
        }
        panic!("identity.py did not come up within 60 s");
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What MinIO needs to trust it: the discovery URL, the client id, and the policy the role
    /// it derives gets.
    pub fn minio_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("MINIO_IDENTITY_OPENID_CONFIG_URL", format!("{}/.well-known/openid-configuration", self.endpoint())),
            ("MINIO_IDENTITY_OPENID_CLIENT_ID", CLIENT_ID.into()),
            ("MINIO_IDENTITY_OPENID_ROLE_POLICY", "readwrite".into()),
        ]
    }

    fn get(&self, path: &str, query: &str) -> String {
        let (status, body) = http(&self.addr, "GET", path, query, &[]).expect("identity.py answers");
        assert_eq!(status, 200, "identity.py {path}?{query}: {body}");
        body
    }

    /// Hand out credentials from `minio` (its STS, for tokens signed here), lasting `seconds`
    /// (MinIO's floor is 900), and want `container_token` from container clients.
    pub fn setup(&self, minio: &str, seconds: u64, container_token: &str) {
        self.get("/setup", &format!("minio={}&cred_seconds={seconds}&container_token={container_token}", enc(minio)));
    }

    /// A token it signed, valid `seconds`.
    pub fn token(&self, seconds: u64) -> String {
        self.get("/token", &format!("seconds={seconds}"))
    }

    /// Keep `file` holding a token valid `seconds`, written anew every `every` seconds.
    pub fn rotate(&self, file: &std::path::Path, seconds: u64, every: f64) {
        self.get("/rotate", &format!("file={}&seconds={seconds}&every={every}", enc(&file.display().to_string())));
    }

    /// The role MinIO derives for [`CLIENT_ID`] (`arn:minio:iam:::role/...`).
    pub fn role_arn(&self) -> String {
        self.get("/role-arn", "")
    }

    /// What it was asked, counted: `tokens`, `imds_session`, `imds_refused`, `imds_credentials`,
    /// `container`, `container_refused`.
    pub fn stats(&self) -> serde_json::Value {
        serde_json::from_str(&self.get("/stats", "")).expect("stats are JSON")
    }

    /// A folder that lives as long as it does.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for Identity {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Where moto's server is: `SHEAF_MOTO`, `~/.cache/sheaf/moto/bin/moto_server`
/// (`scripts/install-deps.sh` installs it there), or `moto_server` on the PATH.
pub fn moto_binary() -> Option<PathBuf> {
    sheaf_core::host::find_program("SHEAF_MOTO", "moto/bin/moto_server", "moto_server")
}

/// moto in server mode on a free port of 127.0.0.1, any credentials accepted.
pub struct Moto {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Moto {
    /// Start it.
    ///
    /// # Panics
    /// When moto is not installed (run `make deps`) or does not come up in 60 s.
    pub fn start() -> Moto {
        let bin = moto_binary().expect("moto is not installed: run `make deps` (scripts/install-deps.sh installs it from PyPI)");
        for _ in 0..5 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let mut cmd = Command::new(&bin);
            cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            if let Some(child) = sheaf_core::testing::start_until(cmd, "moto_server", || matches!(http(&addr, "GET", "/moto-api/", "", &[]), Ok((200, _)))) {
                return Moto { child, addr };
            }
        }
        panic!("moto did not come up on 127.0.0.1 within 60 s");
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Create `bucket` (moto takes unsigned requests).
    ///
    /// # Panics
    /// When it refuses.
    pub fn create_bucket(&self, bucket: &str) {
        let (status, body) = http(&self.addr, "PUT", &format!("/{bucket}"), "", &[]).expect("create bucket");
        assert_eq!(status, 200, "create bucket {bucket}: {body}");
    }

    /// The storage class moto reports for `key` (a HEAD's `x-amz-storage-class`; STANDARD
    /// when it sends none, as S3 does).
    ///
    /// # Panics
    /// When the object is not there.
    pub fn storage_class(&self, bucket: &str, key: &str) -> String {
        let mut s = std::net::TcpStream::connect(&self.addr).expect("moto");
        let req = format!("HEAD /{bucket}/{key} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", self.addr);
        std::io::Write::write_all(&mut s, req.as_bytes()).expect("send");
        let mut resp = String::new();
        std::io::Read::read_to_string(&mut s, &mut resp).expect("read");
        assert!(resp.starts_with("HTTP/1.1 200") || resp.starts_with("HTTP/1.0 200"), "HEAD {key}: {resp}");
        resp.lines()
            .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("x-amz-storage-class")).map(|(_, v)| v.trim().to_string()))
            .unwrap_or_else(|| "STANDARD".into())
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
