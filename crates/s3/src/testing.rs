//! A real S3-compatible server for tests: MinIO on 127.0.0.1, on a free port, with its data in a
//! temporary folder, stopped when dropped. `scripts/install-deps.sh` builds MinIO once (`go
//! install`) into `~/.cache/sheaf/bin`; `SHEAF_MINIO` names another binary.
//!
//! Besides what sheaf itself does through `object_store`, tests need two calls it never makes:
//! creating a bucket and listing the multipart uploads left open (to prove that a failed backup
//! aborted its own). They are signed here with AWS Signature V4 over a plain HTTP/1.1 request.
//!
//! [`FaultProxy`] sits between sheaf and the server and injects what object storage does on a bad
//! day: 503 SlowDown, 500s, connections reset mid-part, slow answers, a permanent 403.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::config::S3Options;

mod emulators;
mod identity;
pub use emulators::{azurite_binary, fake_gcs_binary, Azurite, FakeGcs, AZURITE_ACCOUNT, AZURITE_KEY};
pub use identity::{moto_binary, Identity, Moto};

/// The access key of every test server.
pub const ACCESS_KEY: &str = "sheaftest";
/// Its secret.
pub const SECRET_KEY: &str = "sheaftest-secret-key";
/// Its region.
pub const REGION: &str = "us-east-1";

/// Where the MinIO binary is: `SHEAF_MINIO`, `~/.cache/sheaf/bin/minio`, or `minio` on the PATH.
pub fn minio_binary() -> Option<PathBuf> {
    sheaf_core::host::find_program("SHEAF_MINIO", "bin/minio", "minio")
}

pub use sheaf_core::testing::free_port;

/// The id of the KMS key every test MinIO has (SSE-KMS).
pub const KMS_KEY_ID: &str = "sheaf-test-kms";

/// A running MinIO.
pub struct Minio {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    _data: tempfile::TempDir,
    /// The certificate it serves HTTPS with (its own CA), if started with [`Minio::start_tls`].
    pub ca: Option<PathBuf>,
}

impl Minio {
    /// Start one and wait until it answers.
    ///
    /// # Panics
    /// When MinIO is not installed (run `make deps`) or does not come up in 60 s.
    pub fn start() -> Minio {
        Self::start_with(&[])
    }

    /// Start one with `env` added to its environment (an OpenID provider to trust, say).
    ///
    /// # Panics
    /// As [`Minio::start`].
    pub fn start_with(env: &[(&str, String)]) -> Minio {
        let bin = minio_binary().expect("MinIO is not installed: run `make deps` (scripts/install-deps.sh builds it with go install)");
        let dir = tempfile::tempdir().expect("tempdir");
        let data_path = dir.path().join("data");
        std::fs::create_dir(&data_path).expect("data dir");
        let data = dir;
        for _ in 0..5 {
            let (port, console) = (free_port(), free_port());
            let addr = format!("127.0.0.1:{port}");
            let mut child = spawn(&bin, &data_path, &addr, console, None, env);
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(60) {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // lost the port race: try another
                }
                if matches!(http(&addr, "GET", "/minio/health/ready", "", &[]), Ok((200, _))) {
                    return Minio { child, addr, _data: data, ca: None };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("MinIO did not come up on 127.0.0.1 within 60 s");
    }

    /// A server answering HTTPS only, with a self-signed certificate for 127.0.0.1 (made with
    /// `openssl`), holding `buckets`. Its certificate is in [`Minio::ca`]. The calls this module
    /// signs itself (create bucket, list uploads) speak plain HTTP, so the buckets are made first,
    /// over HTTP, and the server is then restarted on the same data with TLS.
    ///
    /// # Panics
    /// As [`Minio::start`], or when `openssl` fails.
    pub fn start_tls(buckets: &[&str]) -> Minio {
        let mut plain = Minio::start();
        for b in buckets {
            plain.create_bucket(b);
        }
        let _ = plain.child.kill();
        let _ = plain.child.wait();
        let certs = plain._data.path().join(".certs");
        std::fs::create_dir_all(&certs).expect("certs dir");
        // A CA, and a server certificate for 127.0.0.1 signed by it (TLS libraries refuse a CA
        // certificate used as the server's own).
        let ext = certs.join("server.ext");
        std::fs::write(&ext, "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n").expect("ext file");
        let p = |n: &str| certs.join(n).display().to_string();
        let steps: [Vec<String>; 3] = [
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=sheaf test CA", "-keyout", &p("ca.key"), "-out", &p("ca.crt")].map(String::from).to_vec(),
            ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", &p("private.key"), "-out", &p("server.csr")].map(String::from).to_vec(),
            [
                "x509",
                "-req",
                "-in",
                &p("server.csr"),
                "-CA",
                &p("ca.crt"),
                "-CAkey",
                &p("ca.key"),
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                &p("server.ext"),
                "-out",
                &p("public.crt"),
            ]
            .map(String::from)
            .to_vec(),
        ];
        for args in steps {
            let ok = Command::new("openssl").args(&args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success());
            assert!(ok, "openssl {args:?} failed (make deps installs openssl)");
        }
        // MinIO reads only public.crt and private.key from the folder; the CA lives beside it.
        let ca = plain._data.path().join("ca.crt");
        std::fs::rename(certs.join("ca.crt"), &ca).expect("move the CA out");
        let bin = minio_binary().expect("MinIO");
        let data = plain._data.path().join("data");
        let console = free_port();
        plain.child = spawn(&bin, &data, &plain.addr, console, Some(&certs), &[]);
        let t0 = Instant::now();
        while TcpStream::connect(&plain.addr).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(60), "MinIO with TLS did not listen within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        plain.ca = Some(ca);
        plain
    }

    /// The folder MinIO keeps its buckets' objects in, as it lays them out on disk.
    pub fn data_dir(&self) -> PathBuf {
        self._data.path().join("data")
    }

    /// `http://127.0.0.1:PORT`, or `https://` when started with TLS.
    pub fn endpoint(&self) -> String {
        format!("{}://{}", if self.ca.is_some() { "https" } else { "http" }, self.addr)
    }

    /// Options that reach this server.
    pub fn options(&self) -> S3Options {
        S3Options { endpoint: Some(self.endpoint()), allow_http: self.ca.is_none(), ca_bundle: self.ca.clone(), ..Default::default() }
    }

    /// The environment a `sheaf` process needs to reach it with the right credentials.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env =
            vec![("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()), ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()), ("AWS_REGION", REGION.into()), ("AWS_ENDPOINT_URL", self.endpoint())];
        match &self.ca {
            Some(ca) => env.push(("AWS_CA_BUNDLE", ca.display().to_string())),
            None => env.push(("AWS_ALLOW_HTTP", "true".into())),
        }
        env
    }

    /// Create `bucket`.
    ///
    /// # Panics
    /// When the server refuses.
    pub fn create_bucket(&self, bucket: &str) {
        self.make_bucket(bucket, false);
    }

    /// Create `bucket` with Object Lock enabled (and so versioning), as `mc mb --with-lock` does.
    ///
    /// # Panics
    /// When the server refuses.
    pub fn create_locked_bucket(&self, bucket: &str) {
        self.make_bucket(bucket, true);
    }

    fn make_bucket(&self, bucket: &str, locked: bool) {
        let extra: &[(&str, &str)] = if locked { &[("x-amz-bucket-object-lock-enabled", "true")] } else { &[] };
        // A server that says it is ready may still answer 503 "not initialized" for a moment.
        let t0 = Instant::now();
        loop {
            let (status, body) = self.signed_with("PUT", &format!("/{bucket}"), "", extra).expect("create bucket");
            if status == 503 && t0.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            assert_eq!(status, 200, "create bucket {bucket}: {body}");
            return;
        }
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
        self.signed_with(method, path, query, &[])
    }

    /// A signed request with `extra` headers (lower-case `x-amz-` names, which sort after the
    /// date), signed too.
    fn signed_with(&self, method: &str, path: &str, query: &str, extra: &[(&str, &str)]) -> std::io::Result<(u16, String)> {
        let amz_date: String = sheaf_core::time::utc_now().chars().filter(|c| *c != '-' && *c != ':').collect();
        let date = &amz_date[..8];
        let payload = hex(&Sha256::digest(b""));
        let mut headers = format!("host:{}\n", self.addr);
        let mut signed_headers = "host".to_string();
        let mut all: Vec<(&str, &str)> = vec![("x-amz-content-sha256", &payload), ("x-amz-date", &amz_date)];
        all.extend_from_slice(extra);
        all.sort();
        for (k, v) in &all {
            headers.push_str(&format!("{k}:{v}\n"));
            signed_headers.push(';');
            signed_headers.push_str(k);
        }
        let canonical = format!("{method}\n{path}\n{query}\n{headers}\n{signed_headers}\n{payload}");
        let scope = format!("{date}/{REGION}/s3/aws4_request");
        let to_sign = format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", hex(&Sha256::digest(canonical.as_bytes())));
        let mut key = hmac(format!("AWS4{SECRET_KEY}").as_bytes(), date.as_bytes());
        for part in [REGION, "s3", "aws4_request"] {
            key = hmac(&key, part.as_bytes());
        }
        let signature = hex(&hmac(&key, to_sign.as_bytes()));
        let auth = format!("AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/{scope}, SignedHeaders={signed_headers}, Signature={signature}");
        let mut sent = all.clone();
        sent.push(("Authorization", &auth));
        http(&self.addr, method, path, query, &sent)
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A MinIO serving `data` on `addr` with the test credentials; HTTPS with the certificates in
/// `certs`, if given.
fn spawn(bin: &std::path::Path, data: &std::path::Path, addr: &str, console: u16, certs: Option<&std::path::Path>, env: &[(&str, String)]) -> Child {
    let mut c = Command::new(bin);
    c.arg("server").arg(data).args(["--quiet", "--address", addr, "--console-address", &format!("127.0.0.1:{console}")]);
    if let Some(certs) = certs {
        c.arg("--certs-dir").arg(certs);
    }
    c.env("MINIO_ROOT_USER", ACCESS_KEY)
        .env("MINIO_ROOT_PASSWORD", SECRET_KEY)
        .env("MINIO_BROWSER", "off")
        .env("MINIO_UPDATE", "off")
        .env("MINIO_CI_CD", "1")
        // A built-in KMS key, so that SSE-KMS (key id KMS_KEY_ID) can be tested.
        .env("MINIO_KMS_SECRET_KEY", format!("{KMS_KEY_ID}:MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start minio")
}

pub(crate) fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One HTTP/1.1 request with no body; the status and the body.
pub(crate) fn http(addr: &str, method: &str, path: &str, query: &str, headers: &[(&str, &str)]) -> std::io::Result<(u16, String)> {
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

/// What a [`FaultProxy`] does to requests, as shares of them (drawn from a seeded generator).
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Answer `503 SlowDown` (S3's throttling).
    pub slow_down: f64,
    /// Answer `500 InternalError`.
    pub server_error: f64,
    /// Close the connection while the request body is half read (a reset mid-part).
    pub reset: f64,
    /// Wait this share of requests 300 ms before forwarding (a slow server).
    pub slow: f64,
    /// Answer `403 AccessDenied` to every part upload (a permanent error after the upload began).
    pub deny_parts: bool,
    /// Forward with the upstream's own address as `Host` (for a server that routes by host, as
    /// fake-gcs-server does; never for a signed one, whose signature covers it).
    pub upstream_host: bool,
    /// Seed of the draws.
    pub seed: u64,
}

/// How many requests each fault hit, and how many went through.
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// 503 answers.
    pub slow_down: AtomicU64,
    /// 500 answers.
    pub server_error: AtomicU64,
    /// Connections closed mid-request.
    pub reset: AtomicU64,
    /// Delayed requests.
    pub slow: AtomicU64,
    /// 403 answers.
    pub denied: AtomicU64,
    /// Requests forwarded to the server.
    pub forwarded: AtomicU64,
}

/// An HTTP proxy on 127.0.0.1 between sheaf and a server, injecting [`Faults`]. One request per
/// connection (it answers `Connection: close`), which keeps it small; clients simply reconnect.
pub struct FaultProxy {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// What it did.
    pub counts: Arc<FaultCounts>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Listen on a free port and forward to `upstream` (`127.0.0.1:PORT`).
    ///
    /// # Panics
    /// When it cannot listen.
    pub fn start(upstream: &str, faults: Faults) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("listen");
        let addr = listener.local_addr().expect("address").to_string();
        let counts = Arc::new(FaultCounts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let rng = Arc::new(Mutex::new(faults.seed | 1));
        let (c, s, up) = (counts.clone(), stop.clone(), upstream.to_string());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (c, up, rng) = (c.clone(), up.clone(), rng.clone());
                std::thread::spawn(move || {
                    let _ = serve(conn, &up, faults, &rng, &c);
                });
            }
        });
        FaultProxy { addr, counts, stop, thread: Some(thread) }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Faults injected so far, all kinds.
    pub fn injected(&self) -> u64 {
        let c = &self.counts;
        [&c.slow_down, &c.server_error, &c.reset, &c.slow, &c.denied].iter().map(|a| a.load(Ordering::SeqCst)).sum()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn draw(rng: &Mutex<u64>) -> f64 {
    let mut x = rng.lock().unwrap_or_else(|p| p.into_inner());
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    (*x >> 11) as f64 / (1u64 << 53) as f64
}

fn s3_error(status: &str, code: &str) -> String {
    let body = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>injected by the test proxy</Message></Error>");
    format!("HTTP/1.1 {status}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
}

fn serve(mut client: TcpStream, upstream: &str, f: Faults, rng: &Mutex<u64>, counts: &FaultCounts) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    // The request head, and whatever of the body came with it.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    let head_end = loop {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > 1 << 20 {
            return Ok(());
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let mut length = 0usize;
    let mut kept = Vec::new();
    for l in lines.filter(|l| !l.is_empty()) {
        let (name, value) = l.split_once(':').unwrap_or((l, ""));
        if name.eq_ignore_ascii_case("content-length") {
            length = value.trim().parse().unwrap_or(0);
        }
        if name.eq_ignore_ascii_case("host") && f.upstream_host {
            kept.push(format!("Host: {upstream}"));
        } else if !name.eq_ignore_ascii_case("connection") {
            kept.push(l.to_string());
        }
    }
    let mut body = buf[head_end..].to_vec();
    let mut fill = |client: &mut TcpStream, body: &mut Vec<u8>, upto: usize| -> std::io::Result<()> {
        while body.len() < upto {
            let want = (upto - body.len()).min(chunk.len());
            let n = client.read(&mut chunk[..want])?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        Ok(())
    };
    let is_part = request_line.starts_with("PUT ") && request_line.contains("partNumber=");
    if f.deny_parts && is_part {
        fill(&mut client, &mut body, length)?;
        counts.denied.fetch_add(1, Ordering::SeqCst);
        return client.write_all(s3_error("403 Forbidden", "AccessDenied").as_bytes());
    }
    let x = draw(rng);
    let mut edge = f.slow_down;
    if x < edge {
        fill(&mut client, &mut body, length)?;
        counts.slow_down.fetch_add(1, Ordering::SeqCst);
        return client.write_all(s3_error("503 Slow Down", "SlowDown").as_bytes());
    }
    edge += f.server_error;
    if x < edge {
        fill(&mut client, &mut body, length)?;
        counts.server_error.fetch_add(1, Ordering::SeqCst);
        return client.write_all(s3_error("500 Internal Server Error", "InternalError").as_bytes());
    }
    edge += f.reset;
    if x < edge && length > 0 {
        fill(&mut client, &mut body, length / 2)?;
        counts.reset.fetch_add(1, Ordering::SeqCst);
        return client.shutdown(std::net::Shutdown::Both);
    }
    edge += f.slow;
    if x < edge {
        counts.slow.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
    }
    fill(&mut client, &mut body, length)?;
    let mut server = TcpStream::connect(upstream)?;
    let mut out = format!("{request_line}\r\n");
    for k in &kept {
        out.push_str(k);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    server.write_all(out.as_bytes())?;
    server.write_all(&body)?;
    counts.forwarded.fetch_add(1, Ordering::SeqCst);
    std::io::copy(&mut server, &mut client)?;
    client.shutdown(std::net::Shutdown::Write)
}
