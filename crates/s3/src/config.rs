//! Where S3 settings come from, in order: flags ([`S3Options`]), the standard AWS environment
//! variables, the AWS profile files, defaults.
//!
//! | setting | flag | environment | profile file |
//! |---|---|---|---|
//! | endpoint | `--s3-endpoint` | `AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL`, `AWS_ENDPOINT` | `endpoint_url` (config) |
//! | region | `--s3-region` | `AWS_REGION`, `AWS_DEFAULT_REGION` | `region` (config); else `us-east-1` |
//! | plain HTTP | `--s3-allow-http` | `AWS_ALLOW_HTTP=true` | |
//! | path-style | `--s3-path-style` | `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=false` | default with an endpoint |
//! | CA bundle (HTTPS with a private CA) | `--s3-ca-bundle` | `AWS_CA_BUNDLE` | `ca_bundle` (config) |
//! | credentials | none, by design | the chain in [`crate::credentials`]: keys, profiles, roles, web identity, containers, instance metadata | |
//! | a role on top | `--s3-role-arn` | | |
//! | storage class | `--s3-storage-class` | | |
//!
//! The profile is `AWS_PROFILE` (or `--s3-profile`), else `default`; the files are
//! `AWS_SHARED_CREDENTIALS_FILE` (`~/.aws/credentials`) and `AWS_CONFIG_FILE` (`~/.aws/config`,
//! where sections read `[profile NAME]`). Secrets never leave [`Resolved`], whose `Debug` hides them.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use sheaf_core::{Error, Result};

use crate::profile::read_profile;

/// S3's smallest part (all but the last).
pub const MIN_PART_SIZE: u64 = 5 << 20;
/// S3's largest part.
pub const MAX_PART_SIZE: u64 = 5 << 30;
/// S3's most parts in one upload.
pub const MAX_PARTS: u64 = 10_000;
/// Default part size.
pub const DEFAULT_PART_SIZE: u64 = 16 << 20;

/// What the command line says about S3. `None` means "from the environment or profile".
#[derive(Clone, Debug)]
pub struct S3Options {
    /// Endpoint URL, e.g. `http://127.0.0.1:9000` (MinIO); none for AWS.
    pub endpoint: Option<String>,
    /// Region.
    pub region: Option<String>,
    /// Allow `http://` endpoints.
    pub allow_http: bool,
    /// Path-style addressing (`ENDPOINT/BUCKET/KEY`) instead of virtual-hosted (`BUCKET.ENDPOINT/KEY`).
    pub path_style: Option<bool>,
    /// Profile in the AWS files.
    pub profile: Option<String>,
    /// PEM file of certificates to trust besides the system's (a private CA, a self-signed server).
    pub ca_bundle: Option<PathBuf>,
    /// Upload part size; raised so that no stripe needs more than [`MAX_PARTS`] parts.
    pub part_size: u64,
    /// Parts uploading at once, per stripe.
    pub parts_in_flight: usize,
    /// Ranged GETs in flight per stripe while reading.
    pub read_ahead: usize,
    /// Bytes per ranged GET.
    pub read_block: u64,
    /// Retries of one request (429, 5xx, timeouts, resets), with exponential backoff and jitter.
    pub max_retries: usize,
    /// The longest one request is retried for.
    pub retry_timeout: Duration,
    /// One request's time limit.
    pub request_timeout: Duration,
    /// Server-side encryption to ask for.
    pub sse: Sse,
    /// A role to assume (STS `AssumeRole`) with whatever credentials the chain gives.
    pub role_arn: Option<String>,
    /// The storage class stripes and WAL are written in; `None`: the bucket's default.
    pub storage_class: Option<StorageClass>,
}

impl Default for S3Options {
    fn default() -> Self {
        S3Options {
            endpoint: None,
            region: None,
            allow_http: false,
            path_style: None,
            profile: None,
            ca_bundle: None,
            part_size: DEFAULT_PART_SIZE,
            parts_in_flight: 2,
            read_ahead: 4,
            read_block: 4 << 20,
            max_retries: 8,
            retry_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(60),
            sse: Sse::None,
            role_arn: None,
            storage_class: None,
        }
    }
}

/// Server-side encryption S3 applies to what sheaf stores, besides (or instead of) sheaf's own.
#[derive(Clone, Default)]
pub enum Sse {
    /// The bucket's default.
    #[default]
    None,
    /// SSE-KMS with this key id (pgBackRest's repo-s3-kms-key-id).
    Kms(String),
    /// SSE-C with this 256-bit key, sent with every request and kept by nobody but the caller
    /// (pgBackRest's repo-s3-sse-customer-key).
    Customer(zeroize::Zeroizing<[u8; 32]>),
}

impl fmt::Debug for Sse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sse::None => f.write_str("None"),
            Sse::Kms(id) => write!(f, "Kms({id})"),
            Sse::Customer(_) => f.write_str("Customer(..)"),
        }
    }
}

impl Sse {
    /// The key of SSE-C in base64, as S3's headers carry it.
    pub(crate) fn customer_key_base64(&self) -> Option<String> {
        use base64::Engine as _;
        match self {
            Sse::Customer(k) => Some(base64::engine::general_purpose::STANDARD.encode(k.as_ref())),
            _ => None,
        }
    }

    /// The headers a request that starts an upload carries for it.
    pub(crate) fn upload_headers(&self) -> Vec<(&'static str, String)> {
        use base64::Engine as _;
        use md5::Digest as _;
        match self {
            Sse::None => Vec::new(),
            Sse::Kms(id) => vec![("x-amz-server-side-encryption", "aws:kms".into()), ("x-amz-server-side-encryption-aws-kms-key-id", id.clone())],
            Sse::Customer(k) => vec![
                ("x-amz-server-side-encryption-customer-algorithm", "AES256".into()),
                ("x-amz-server-side-encryption-customer-key", self.customer_key_base64().expect("a customer key")),
                ("x-amz-server-side-encryption-customer-key-md5", base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(k.as_ref()))),
            ],
        }
    }
}

/// An S3 storage class (`x-amz-storage-class`) for a repository's bulk: its stripes and WAL
/// segments. Its records (backup and key records, `repo.json`, WAL summaries) and its lock stay in
/// STANDARD: they are small and read by every `info`, `expire`, `backup` and `restore`, and the
/// infrequent-access classes bill at least 128 KiB and a retrieval fee per read of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageClass {
    /// `STANDARD`.
    Standard,
    /// `STANDARD_IA`: infrequent access, retrieval billed per GB.
    StandardIa,
    /// `ONEZONE_IA`: as STANDARD_IA in one availability zone.
    OnezoneIa,
    /// `INTELLIGENT_TIERING`.
    IntelligentTiering,
    /// `GLACIER_IR`: Glacier Instant Retrieval, read like STANDARD_IA.
    GlacierIr,
    /// `GLACIER`: Glacier Flexible Retrieval; an object must be restored (thawed) before a read.
    Glacier,
    /// `DEEP_ARCHIVE`: thawed before a read, in hours.
    DeepArchive,
    /// `REDUCED_REDUNDANCY` (MinIO's other class).
    ReducedRedundancy,
}

impl StorageClass {
    const ALL: [(StorageClass, &'static str); 8] = [
        (StorageClass::Standard, "STANDARD"),
        (StorageClass::StandardIa, "STANDARD_IA"),
        (StorageClass::OnezoneIa, "ONEZONE_IA"),
        (StorageClass::IntelligentTiering, "INTELLIGENT_TIERING"),
        (StorageClass::GlacierIr, "GLACIER_IR"),
        (StorageClass::Glacier, "GLACIER"),
        (StorageClass::DeepArchive, "DEEP_ARCHIVE"),
        (StorageClass::ReducedRedundancy, "REDUCED_REDUNDANCY"),
    ];

    /// The name S3 gives it.
    pub fn as_str(self) -> &'static str {
        Self::ALL.iter().find(|(c, _)| *c == self).map_or("STANDARD", |(_, n)| n)
    }
}

impl std::str::FromStr for StorageClass {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let up = s.trim().to_ascii_uppercase().replace('-', "_");
        Self::ALL
            .iter()
            .find(|(_, n)| *n == up)
            .map(|(c, _)| *c)
            .ok_or_else(|| Error::invalid(format!("--s3-storage-class {s}: use one of {}", Self::ALL.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(", "))))
    }
}

/// Settings resolved from every source. `Debug` shows no secret.
#[derive(Clone)]
pub struct Resolved {
    /// Endpoint URL, if not AWS.
    pub endpoint: Option<String>,
    /// Region.
    pub region: String,
    /// Plain HTTP allowed.
    pub allow_http: bool,
    /// Path-style addressing.
    pub path_style: bool,
    /// Extra certificates to trust.
    pub ca_bundle: Option<PathBuf>,
    /// Where the credentials come from.
    pub(crate) chain: crate::credentials::Chain,
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resolved")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("path_style", &self.path_style)
            .field("ca_bundle", &self.ca_bundle)
            .field("credentials", &self.chain.source)
            .finish()
    }
}

/// The process environment, as [`S3Options::resolve`] reads it.
pub fn process_env(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.is_empty())
}

impl S3Options {
    /// The part size for a stripe of about `expected` bytes: the configured size, raised (to whole
    /// MiB) so that the stripe fits in [`MAX_PARTS`] parts with room to spare.
    pub fn part_size_for(&self, expected: u64) -> u64 {
        let needed = expected.div_ceil(MAX_PARTS * 9 / 10).next_multiple_of(1 << 20);
        self.part_size.max(needed).min(MAX_PART_SIZE)
    }

    /// Check the numbers.
    ///
    /// # Errors
    /// [`sheaf_core::ErrorKind::InvalidInput`] naming the flag and the range.
    pub fn check(&self) -> Result<()> {
        if !(MIN_PART_SIZE..=MAX_PART_SIZE).contains(&self.part_size) {
            return Err(Error::invalid(format!("--s3-part-size {}: S3 parts are 5MiB .. 5GiB (default 16MiB)", sheaf_core::size::format_size(self.part_size))));
        }
        if self.parts_in_flight == 0 || self.parts_in_flight > 64 {
            return Err(Error::invalid(format!("--s3-parts-in-flight {}: use 1 .. 64 (default 2)", self.parts_in_flight)));
        }
        if self.read_ahead == 0 || self.read_ahead > 64 {
            return Err(Error::invalid(format!("--s3-read-ahead {}: use 1 .. 64 (default 4)", self.read_ahead)));
        }
        Ok(())
    }

    /// Combine flags, `env` and the profile files.
    ///
    /// # Errors
    /// [`sheaf_core::ErrorKind::InvalidInput`] for a plain-HTTP endpoint without `--s3-allow-http`,
    /// an unreadable profile file, a named profile that does not exist, or no credentials at all.
    pub fn resolve(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<Resolved> {
        self.check()?;
        let profile_name = self.profile.clone().or_else(|| env("AWS_PROFILE")).unwrap_or_else(|| "default".into());
        let home = env("HOME").map(PathBuf::from);
        let file = |var: &str, rel: &str| env(var).map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(rel)));
        let credentials_file = file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
        let config_file = file("AWS_CONFIG_FILE", ".aws/config");
        let creds = read_profile(credentials_file.as_ref(), &profile_name, false)?;
        let conf = read_profile(config_file.as_ref(), &profile_name, true)?;
        if (self.profile.is_some() || env("AWS_PROFILE").is_some()) && creds.is_none() && conf.is_none() {
            return Err(Error::invalid(format!(
                "AWS profile '{profile_name}' is in neither {} nor {}: check the name (--s3-profile or AWS_PROFILE)",
                shown(&credentials_file),
                shown(&config_file)
            )));
        }
        let from_profile = |key: &str| creds.as_ref().and_then(|p| p.get(key)).or_else(|| conf.as_ref().and_then(|p| p.get(key)));

        let endpoint = self
            .endpoint
            .clone()
            .or_else(|| env("AWS_ENDPOINT_URL_S3"))
            .or_else(|| env("AWS_ENDPOINT_URL"))
            .or_else(|| env("AWS_ENDPOINT"))
            .or_else(|| from_profile("endpoint_url"))
            .map(|e| e.trim_end_matches('/').to_string());
        let region =
            self.region.clone().or_else(|| env("AWS_REGION")).or_else(|| env("AWS_DEFAULT_REGION")).or_else(|| from_profile("region")).unwrap_or_else(|| "us-east-1".into());
        let allow_http = self.allow_http || env("AWS_ALLOW_HTTP").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if let Some(e) = &endpoint {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(Error::invalid(format!("S3 endpoint '{e}': give a URL, e.g. https://s3.example.com or http://127.0.0.1:9000")));
            }
            if e.starts_with("http://") && !allow_http {
                return Err(Error::invalid(format!("S3 endpoint {e} is plain HTTP: pass --s3-allow-http (or set AWS_ALLOW_HTTP=true) to send requests unencrypted")));
            }
            if e.starts_with("http://") && matches!(self.sse, Sse::Customer(_)) {
                return Err(Error::invalid(format!(
                    "S3 endpoint {e} is plain HTTP, and SSE-C (--s3-sse-customer-key-file) sends its key with every request: S3 servers refuse that; use an https:// endpoint"
                )));
            }
        }
        let path_style = self.path_style.unwrap_or_else(|| match env("AWS_VIRTUAL_HOSTED_STYLE_REQUEST") {
            Some(v) => !v.eq_ignore_ascii_case("true"),
            // Other stores (MinIO, Ceph, versitygw) are addressed by path; AWS by host.
            None => endpoint.is_some(),
        });

        let chain = crate::credentials::Chain::resolve(&crate::credentials::Settings {
            env,
            profile: self.profile.clone(),
            role_arn: self.role_arn.clone(),
            region: region.clone(),
            allow_http,
        })?;
        let ca_bundle = self.ca_bundle.clone().or_else(|| env("AWS_CA_BUNDLE").map(PathBuf::from)).or_else(|| from_profile("ca_bundle").map(PathBuf::from));
        Ok(Resolved { endpoint, region, allow_http, path_style, ca_bundle, chain })
    }
}

fn shown(p: &Option<PathBuf>) -> String {
    p.as_ref().map_or_else(|| "~/.aws/credentials".into(), |p| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn flags_beat_environment_beats_profile() {
        let d = tempfile::tempdir().unwrap();
        let creds = d.path().join("credentials");
        let conf = d.path().join("config");
        std::fs::write(
            &creds,
            "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = SDEFAULT\n\n[backup]\naws_access_key_id=AKBACKUP\naws_secret_access_key=SBACKUP\n",
        )
        .unwrap();
        std::fs::write(&conf, "[profile backup]\nregion = eu-west-3\nendpoint_url = https://s3.backup.example\n").unwrap();
        let c = creds.to_str().unwrap();
        let f = conf.to_str().unwrap();

        let env = env_of(&[("AWS_SHARED_CREDENTIALS_FILE", c), ("AWS_CONFIG_FILE", f), ("AWS_PROFILE", "backup")]);
        let r = S3Options::default().resolve(&env).unwrap();
        assert!(matches!(&r.chain.source, crate::credentials::Source::Keys { credential, .. } if credential.key_id == "AKBACKUP"), "{:?}", r.chain.source);
        assert_eq!(r.region, "eu-west-3");
        assert_eq!(r.endpoint.as_deref(), Some("https://s3.backup.example"));
        assert!(r.path_style, "an endpoint means path-style by default");
        assert!(r.chain.source.describe().contains("profile 'backup'"));

        let env =
            env_of(&[("AWS_SHARED_CREDENTIALS_FILE", c), ("AWS_CONFIG_FILE", f), ("AWS_ACCESS_KEY_ID", "AKENV"), ("AWS_SECRET_ACCESS_KEY", "SENV"), ("AWS_REGION", "ap-south-1")]);
        let o = S3Options { region: Some("us-west-2".into()), ..Default::default() };
        let r = o.resolve(&env).unwrap();
        assert!(matches!(&r.chain.source, crate::credentials::Source::Keys { credential, .. } if credential.key_id == "AKENV"));
        assert_eq!(r.region.as_str(), "us-west-2");
        assert_eq!(r.endpoint, None);
        assert!(!r.path_style, "AWS itself is addressed by host");
        let shown = format!("{r:?}");
        assert!(!shown.contains("SENV") && !shown.contains("AKENV"), "Debug hides credentials: {shown}");
    }

    #[test]
    fn mistakes_are_named() {
        let none = env_of(&[("HOME", "/nonexistent"), ("AWS_EC2_METADATA_DISABLED", "true")]);
        let e = S3Options::default().resolve(&none).unwrap_err();
        assert!(e.to_string().contains("no S3 credentials") && e.to_string().contains("AWS_ACCESS_KEY_ID"), "{e}");
        let keys = env_of(&[("AWS_ACCESS_KEY_ID", "a"), ("AWS_SECRET_ACCESS_KEY", "b")]);
        let o = S3Options { endpoint: Some("http://127.0.0.1:9000".into()), ..Default::default() };
        assert!(o.resolve(&keys).unwrap_err().to_string().contains("--s3-allow-http"));
        let o = S3Options { endpoint: Some("http://127.0.0.1:9000".into()), allow_http: true, ..Default::default() };
        assert!(o.resolve(&keys).is_ok());
        let o = S3Options { endpoint: Some("127.0.0.1:9000".into()), ..Default::default() };
        assert!(o.resolve(&keys).unwrap_err().to_string().contains("give a URL"));
        let half = env_of(&[("AWS_ACCESS_KEY_ID", "a")]);
        assert!(S3Options::default().resolve(&half).unwrap_err().to_string().contains("only one of"));
        let o = S3Options { part_size: 1 << 20, ..Default::default() };
        assert!(o.resolve(&keys).unwrap_err().to_string().contains("--s3-part-size"));
        let o = S3Options { profile: Some("nope".into()), ..Default::default() };
        assert!(o.resolve(&env_of(&[("HOME", "/nonexistent")])).unwrap_err().to_string().contains("profile 'nope'"));
    }

    #[test]
    fn part_size_grows_to_fit_ten_thousand_parts() {
        let o = S3Options::default();
        assert_eq!(o.part_size_for(0), 16 << 20);
        assert_eq!(o.part_size_for(100 << 30), 16 << 20, "100 GiB fits in 6400 parts of 16 MiB");
        let p = o.part_size_for(1 << 40);
        assert!(p > 16 << 20 && (1u64 << 40).div_ceil(p) <= MAX_PARTS && p % (1 << 20) == 0, "{p}");
        assert_eq!(o.part_size_for(u64::MAX / 2), MAX_PART_SIZE);
    }
}
