//! Azure's and Google's storage emulators for tests: Azurite (npm package `azurite`) and
//! fake-gcs-server (`go install github.com/fsouza/fake-gcs-server`), each on a free port of
//! 127.0.0.1 with its data in a temporary folder, stopped when dropped. `scripts/install-deps.sh`
//! installs both into `~/.cache/sheaf`; `SHEAF_AZURITE` and `SHEAF_FAKE_GCS` name other binaries.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use base64::Engine;

use super::{free_port, hmac, http};

/// Azurite's well-known development account.
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
/// Its well-known key (public: it is in every Azure SDK's documentation).
pub const AZURITE_KEY: &str = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Where Azurite's blob server is.
pub fn azurite_binary() -> Option<PathBuf> {
    sheaf_core::host::find_program("SHEAF_AZURITE", "azurite/node_modules/.bin/azurite-blob", "azurite-blob")
}

/// Where fake-gcs-server is.
pub fn fake_gcs_binary() -> Option<PathBuf> {
    sheaf_core::host::find_program("SHEAF_FAKE_GCS", "bin/fake-gcs-server", "fake-gcs-server")
}

/// Start `cmd` (whose port is `port`) and wait until it accepts connections; `None` when it
/// exited first (it lost the race for the port).
fn started(mut cmd: Command, port: u16, what: &str) -> Option<Child> {
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    sheaf_core::testing::start_until(cmd, what, || sheaf_core::testing::listening(port))
}

/// Azurite's blob service.
pub struct Azurite {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    _data: tempfile::TempDir,
}

impl Azurite {
    /// Start one.
    ///
    /// # Panics
    /// When Azurite is not installed (run `make deps`) or does not come up.
    pub fn start() -> Azurite {
        let bin = azurite_binary().expect("Azurite is not installed: run `make deps` (scripts/install-deps.sh installs it with npm)");
        let data = tempfile::tempdir().expect("tempdir");
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = Command::new(&bin);
            cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string(), "--location"]).arg(data.path()).args(["--silent", "--skipApiVersionCheck", "--loose"]);
            if let Some(child) = started(cmd, port, "azurite") {
                return Azurite { child, addr: format!("127.0.0.1:{port}"), _data: data };
            }
        }
        panic!("Azurite did not come up on 127.0.0.1 within 60 s");
    }

    /// Its blob endpoint (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The variables that reach `endpoint` (this server, or a proxy in front of it), as a user
    /// sets them: the account, its key, and the endpoint (path-style, as Azurite serves it).
    pub fn env_for(&self, endpoint: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AZURE_STORAGE_ACCOUNT_NAME", AZURITE_ACCOUNT.into()),
            ("AZURE_STORAGE_ACCOUNT_KEY", AZURITE_KEY.into()),
            ("AZURE_STORAGE_ENDPOINT", format!("{endpoint}/{AZURITE_ACCOUNT}")),
        ]
    }

    /// Create `container` (a call sheaf never makes: signed here with the account's shared key).
    ///
    /// # Panics
    /// When Azurite refuses.
    pub fn create_container(&self, container: &str) {
        let date = rfc1123(sheaf_core::time::now_ms() / 1000);
        let version = "2021-08-06";
        let path = format!("/{AZURITE_ACCOUNT}/{container}");
        // The verb, eleven standard headers left empty, the x-ms- headers, the resource.
        let to_sign = format!("PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{AZURITE_ACCOUNT}{path}\nrestype:container");
        let key = base64::engine::general_purpose::STANDARD.decode(AZURITE_KEY).expect("the key is base64");
        let signature = base64::engine::general_purpose::STANDARD.encode(hmac(&key, to_sign.as_bytes()));
        let auth = format!("SharedKey {AZURITE_ACCOUNT}:{signature}");
        let (status, body) =
            http(&self.addr, "PUT", &path, "restype=container", &[("x-ms-date", &date), ("x-ms-version", version), ("Authorization", &auth)]).expect("create container");
        assert_eq!(status, 201, "create container {container}: {body}");
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `Sat, 21 Nov 2026 10:30:45 GMT` for seconds since the epoch.
fn rfc1123(secs: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let iso = sheaf_core::time::utc(secs); // YYYY-MM-DDTHH:MM:SSZ
    let month: usize = iso[5..7].parse().expect("month");
    format!("{}, {} {} {} {} GMT", DAYS[secs.div_euclid(86_400).rem_euclid(7) as usize], &iso[8..10], MONTHS[month - 1], &iso[..4], &iso[11..19])
}

/// fake-gcs-server, over plain HTTP.
pub struct FakeGcs {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    data: tempfile::TempDir,
}

impl FakeGcs {
    /// Start one holding `buckets` (empty).
    ///
    /// # Panics
    /// When fake-gcs-server is not installed (run `make deps`) or does not come up.
    pub fn start(buckets: &[&str]) -> FakeGcs {
        let data = tempfile::tempdir().expect("tempdir");
        for b in buckets {
            std::fs::create_dir_all(data.path().join("preload").join(b)).expect("bucket folder");
        }
        Self::serve(data)
    }

    /// Start one holding bucket `bucket` with object `name` of `body` (fake-gcs-server takes no
    /// multipart upload, so objects to read are given to it this way).
    ///
    /// # Panics
    /// As [`FakeGcs::start`].
    pub fn start_with(bucket: &str, name: &str, body: &[u8]) -> FakeGcs {
        let data = tempfile::tempdir().expect("tempdir");
        let path = data.path().join("preload").join(bucket).join(name);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("object folder");
        std::fs::write(&path, body).expect("object");
        Self::serve(data)
    }

    fn serve(data: tempfile::TempDir) -> FakeGcs {
        let bin = fake_gcs_binary().expect("fake-gcs-server is not installed: run `make deps` (scripts/install-deps.sh builds it with go install)");
        let preload = data.path().join("preload");
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = Command::new(&bin);
            cmd.args([
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-port",
                &port.to_string(),
                "-public-host",
                &format!("127.0.0.1:{port}"),
                "-backend",
                "filesystem",
                "-log-level",
                "error",
            ])
            .arg("-filesystem-root")
            .arg(data.path().join("root"))
            .arg("-data")
            .arg(&preload);
            if let Some(child) = started(cmd, port, "fake-gcs-server") {
                return FakeGcs { child, addr: format!("127.0.0.1:{port}"), data };
            }
        }
        panic!("fake-gcs-server did not come up on 127.0.0.1 within 60 s");
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The variables that reach `endpoint` (this server, or a proxy in front of it), as a user
    /// sets them: a service account key file that names the endpoint and asks for no OAuth, as
    /// emulators take it.
    pub fn env_for(&self, endpoint: &str) -> Vec<(&'static str, String)> {
        let key = self.data.path().join(format!("key-{}.json", endpoint.rsplit(':').next().unwrap_or("0")));
        let json = format!(
            r#"{{"private_key": "", "private_key_id": "", "client_email": "sheaf-test@example.iam.gserviceaccount.com", "disable_oauth": true, "gcs_base_url": "{endpoint}"}}"#
        );
        std::fs::write(&key, json).expect("key file");
        vec![("GOOGLE_SERVICE_ACCOUNT", key.display().to_string())]
    }
}

impl Drop for FakeGcs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_for_shared_key_signing() {
        assert_eq!(super::rfc1123(1_795_257_045), "Sat, 21 Nov 2026 10:30:45 GMT");
        assert_eq!(super::rfc1123(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }
}
