//! A real S3-compatible server for tests: MinIO on 127.0.0.1, on a free port, with its data in a
//! temporary folder, stopped when dropped. `scripts/install-deps.sh` builds MinIO once (`go
//! install`) into `~/.cache/sheaf/bin`; `SHEAF_MINIO` names another binary.
//!
//! Besides what sheaf itself does through `object_store`, tests need two calls it never makes:
//! creating a bucket and listing the multipart uploads left open (to prove that a failed backup
//! aborted its own). They are signed here with AWS Signature V4 over a plain HTTP/1.1 request.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::S3Options;

/// The access key of every test server.
pub const ACCESS_KEY: &str = "sheaftest";
/// Its secret.
pub const SECRET_KEY: &str = "sheaftest-secret-key";
/// Its region.
pub const REGION: &str = "us-east-1";

/// Where the MinIO binary is: `SHEAF_MINIO`, `~/.cache/sheaf/bin/minio`, or `minio` on the PATH.
pub fn minio_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SHEAF_MINIO") {
        return Some(PathBuf::from(p));
    }
    if let Some(home) = std::env::var_os("HOME") {
        let p = PathBuf::from(home).join(".cache/sheaf/bin/minio");
        if p.is_file() {
            return Some(p);
        }
    }
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| PathBuf::from(d).join("minio")).find(|p| p.is_file())
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A running MinIO.
pub struct Minio {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    _data: tempfile::TempDir,
}

impl Minio {
    /// Start one and wait until it answers.
    ///
    /// # Panics
    /// When MinIO is not installed (run `make deps`) or does not come up in 60 s.
    pub fn start() -> Minio {
        let bin = minio_binary().expect("MinIO is not installed: run `make deps` (scripts/install-deps.sh builds it with go install)");
        let data = tempfile::tempdir().expect("tempdir");
        for _ in 0..5 {
            let (port, console) = (free_port(), free_port());
            let addr = format!("127.0.0.1:{port}");
            let mut child = Command::new(&bin)
                .args(["server", data.path().to_str().unwrap(), "--quiet", "--address", &addr, "--console-address", &format!("127.0.0.1:{console}")])
                .env("MINIO_ROOT_USER", ACCESS_KEY)
                .env("MINIO_ROOT_PASSWORD", SECRET_KEY)
                .env("MINIO_BROWSER", "off")
                .env("MINIO_UPDATE", "off")
                .env("MINIO_CI_CD", "1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start minio");
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(60) {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // lost the port race: try another
                }
                if matches!(http(&addr, "GET", "/minio/health/live", "", &[]), Ok((200, _))) {
                    return Minio { child, addr, _data: data };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("MinIO did not come up on 127.0.0.1 within 60 s");
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Options that reach this server.
    pub fn options(&self) -> S3Options {
        S3Options { endpoint: Some(self.endpoint()), allow_http: true, ..Default::default() }
    }

    /// The environment a `sheaf` process needs to reach it with the right credentials.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", REGION.into()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// Create `bucket`.
    ///
    /// # Panics
    /// When the server refuses.
    pub fn create_bucket(&self, bucket: &str) {
        let (status, body) = self.signed("PUT", &format!("/{bucket}"), "").expect("create bucket");
        assert_eq!(status, 200, "create bucket {bucket}: {body}");
    }

    /// Keys of the multipart uploads open in `bucket`.
    ///
    /// # Panics
    /// When the server refuses.
    pub fn open_uploads(&self, bucket: &str) -> Vec<String> {
        let (status, body) = self.signed("GET", &format!("/{bucket}"), "uploads=").expect("list uploads");
        assert_eq!(status, 200, "list uploads of {bucket}: {body}");
        body.split("<Upload>").skip(1).filter_map(|u| Some(u.split_once("<Key>")?.1.split_once("</Key>")?.0.to_string())).collect()
    }

    /// Keys of the objects in `bucket`.
    ///
    /// # Panics
    /// When the server refuses.
    pub fn objects(&self, bucket: &str) -> Vec<String> {
        let (status, body) = self.signed("GET", &format!("/{bucket}"), "list-type=2").expect("list objects");
        assert_eq!(status, 200, "list objects of {bucket}: {body}");
        body.split("<Contents>").skip(1).filter_map(|u| Some(u.split_once("<Key>")?.1.split_once("</Key>")?.0.to_string())).collect()
    }

    fn signed(&self, method: &str, path: &str, query: &str) -> std::io::Result<(u16, String)> {
        let amz_date: String = sheaf_core::time::utc_now().chars().filter(|c| *c != '-' && *c != ':').collect();
        let date = &amz_date[..8];
        let payload = hex(&Sha256::digest(b""));
        let headers = format!("host:{}\nx-amz-content-sha256:{payload}\nx-amz-date:{amz_date}\n", self.addr);
        let signed_headers = "host;x-amz-content-sha256;x-amz-date";
        let canonical = format!("{method}\n{path}\n{query}\n{headers}\n{signed_headers}\n{payload}");
        let scope = format!("{date}/{REGION}/s3/aws4_request");
        let to_sign = format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex(&Sha256::digest(canonical.as_bytes())));
        let mut key = hmac(format!("AWS4{SECRET_KEY}").as_bytes(), date.as_bytes());
        for part in [REGION, "s3", "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
        let signature = hex(&hmac(&key, to_sign.as_bytes()));
        let auth = format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{scope}, SignedHeaders={signed_headers}, Signature={signature}");
        http(&self.addr, method, path, query, &[("x-amz-content-sha256", &payload), ("x-amz-date", &amz_date), ("Authorization", &auth)])
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One HTTP/1.1 request with no body; the status and the body.
fn http(addr: &str, method: &str, path: &str, query: &str, headers: &[(&str, &str)]) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let target = if query.is_empty() { path.to_string() } else { format!("{path}?{query}") };
    let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)?;
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}
