//! S3 credentials from the chain the AWS SDKs walk, in their order, the first source that is
//! configured winning:
//!
//! 1. the environment's keys (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`);
//! 2. the profile (`--s3-profile`, `AWS_PROFILE`, else `default`, in `~/.aws/credentials` and
//!    `~/.aws/config`): a role (`role_arn`) assumed through STS with the keys of its
//!    `source_profile`, its `credential_source` (`Environment`, `Ec2InstanceMetadata`,
//!    `EcsContainer`) or its `web_identity_token_file`; else its keys; else its
//!    `credential_process`;
//! 3. a web identity (`AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN`: EKS's IRSA, any OIDC
//!    federation), exchanged with STS's `AssumeRoleWithWebIdentity`;
//! 4. container credentials (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`: an ECS task role;
//!    `AWS_CONTAINER_CREDENTIALS_FULL_URI` with `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` or
//!    `AWS_CONTAINER_AUTHORIZATION_TOKEN`: EKS Pod Identity);
//! 5. the instance metadata service (IMDSv2: a session token first), unless
//!    `AWS_EC2_METADATA_DISABLED=true`.
//!
//! `--s3-role-arn` then assumes a role on top of whatever the chain gave. STS is reached at
//! `AWS_ENDPOINT_URL_STS` (else `AWS_ENDPOINT_URL`, else `https://sts.REGION.amazonaws.com`), the
//! metadata service at `AWS_EC2_METADATA_SERVICE_ENDPOINT`: the SDKs' own overrides.
//!
//! Why not `object_store`'s providers: it has web identity, ECS, EKS Pod Identity and IMDS, but
//! they are private to its builder, which picks one of them by which variables are set (no chain,
//! no fall-through, no profile roles, no `credential_process`, no `AssumeRole`), and they keep the
//! credentials' expiry to themselves, which `sheaf check` reports and the refresh below needs. What
//! is used from it: its HTTP client (the same TLS roots, proxy and timeouts as every request) and
//! its SigV4 signer for `AssumeRole`.
//!
//! Credentials that expire are fetched again before they do ([`Provider`]): when less than a
//! quarter of their life (at most five minutes) is left, so a backup or a `wal-receive` that runs
//! for hours outlives any one session. A refresh that fails while the old credentials are still
//! valid keeps them and tries again on the next request.

mod fetch;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::aws::AwsCredential;
use object_store::client::HttpClient;
use sheaf_core::{Error, Result};

use crate::profile::{read_profile, Profile};

/// The ECS and EKS agents' link-local address for `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`.
const ECS_HOST: &str = "http://169.254.170.2";
/// The instance metadata service's address.
const IMDS_ENDPOINT: &str = "http://169.254.169.254";

/// One source of the chain, resolved to what it needs to fetch credentials.
#[derive(Clone)]
pub(crate) enum Source {
    /// Keys as given: the environment's or a profile's. They do not expire (as far as sheaf knows).
    Keys { credential: Arc<AwsCredential>, from: String },
    /// A profile's `credential_process`, run by `sh -c`.
    Process { command: String, profile: String },
    /// STS's `AssumeRoleWithWebIdentity` with the token read from `token_file` at each fetch.
    WebIdentity { token_file: PathBuf, role: Role, from: String },
    /// The container agent's endpoint (ECS task role, EKS Pod Identity).
    Container { url: String, token: ContainerToken },
    /// The EC2 instance metadata service.
    Instance { endpoint: String, v1_allowed: bool },
    /// STS's `AssumeRole`, signed with what `base` gives.
    AssumeRole { role: Role, base: Box<Source>, from: String },
}

/// A role to assume and the session to name.
#[derive(Clone, Debug)]
pub(crate) struct Role {
    pub(crate) arn: String,
    pub(crate) session: String,
    pub(crate) external_id: Option<String>,
    /// `DurationSeconds`; `None`: STS's default (an hour on AWS; for a web identity, MinIO ends
    /// the session with the token).
    pub(crate) seconds: Option<u64>,
}

/// What the container endpoint wants in its `Authorization` header.
#[derive(Clone)]
pub(crate) enum ContainerToken {
    /// Nothing (ECS's relative URI).
    None,
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN`.
    Value(String),
    /// `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`, read at each fetch (EKS rotates it).
    File(PathBuf),
}

impl Source {
    /// The source in words, for messages and `sheaf check`; no secret.
    pub(crate) fn describe(&self) -> String {
        match self {
            Source::Keys { from, .. } => format!("keys from {from}"),
            Source::Process { profile, .. } => format!("credential_process of profile '{profile}'"),
            Source::WebIdentity { token_file, role, from } => format!("web identity (token {}, role {}) from {from}", token_file.display(), role.arn),
            Source::Container { url, .. } => format!("container credentials from {url}"),
            Source::Instance { endpoint, .. } => format!("instance metadata at {endpoint}"),
            Source::AssumeRole { role, base, from } => format!("role {} assumed ({from}) with {}", role.arn, base.describe()),
        }
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// Credentials fetched, with their expiry when they have one.
#[derive(Clone)]
pub(crate) struct Fetched {
    pub(crate) credential: Arc<AwsCredential>,
    pub(crate) expires: Option<SystemTime>,
    pub(crate) fetched: SystemTime,
}

impl Fetched {
    fn lasting(credential: AwsCredential, expires: Option<SystemTime>) -> Self {
        Fetched { credential: Arc::new(credential), expires, fetched: SystemTime::now() }
    }

    /// Whether to fetch again at `now`: within a quarter of the credentials' life of their expiry
    /// (at most five minutes; at least a second).
    fn stale(&self, now: SystemTime) -> bool {
        let Some(expires) = self.expires else { return false };
        let life = expires.duration_since(self.fetched).unwrap_or_default();
        let margin = (life / 4).clamp(Duration::from_secs(1), Duration::from_secs(300));
        expires.duration_since(now).map_or(true, |left| left <= margin)
    }

    fn expired(&self, now: SystemTime) -> bool {
        self.expires.is_some_and(|e| e <= now)
    }
}

/// What the chain needs from outside: variables, and where STS is.
pub(crate) struct Settings<'a> {
    pub(crate) env: &'a dyn Fn(&str) -> Option<String>,
    pub(crate) profile: Option<String>,
    pub(crate) role_arn: Option<String>,
    pub(crate) region: String,
    pub(crate) allow_http: bool,
}

/// Where the chain looks, and STS's address.
#[derive(Clone, Debug)]
pub(crate) struct Chain {
    pub(crate) source: Source,
    pub(crate) sts_endpoint: String,
    pub(crate) region: String,
    /// Each source passed over on the way and why (for the error when the last one fails too).
    pub(crate) passed: Vec<String>,
    /// The credentials file, as messages name it.
    credentials_file: String,
}

impl Chain {
    /// The secrets of keys given as they are, to scrub from messages (fetched ones are never in
    /// the store's messages: the signer holds them).
    pub(crate) fn static_secrets(&self) -> Vec<String> {
        let mut source = &self.source;
        while let Source::AssumeRole { base, .. } = source {
            source = base;
        }
        match source {
            Source::Keys { credential, .. } => [Some(credential.secret_key.clone()), credential.token.clone()].into_iter().flatten().collect(),
            _ => Vec::new(),
        }
    }

    /// Walk the chain as far as it can be walked without a network call: every source up to the
    /// instance metadata service, which is the last resort (whether it is there is known only by
    /// asking it).
    ///
    /// # Errors
    /// [`sheaf_core::ErrorKind::InvalidInput`]: a profile file that cannot be read, a named profile
    /// that does not exist, half a key pair, a profile role without a source, a cycle of
    /// `source_profile`s, a container URL that is neither HTTPS nor on this host.
    pub(crate) fn resolve(s: &Settings<'_>) -> Result<Chain> {
        let env = s.env;
        let files = Files::of(env);
        let sts_endpoint = env("AWS_ENDPOINT_URL_STS")
            .or_else(|| env("AWS_ENDPOINT_URL"))
            .map_or_else(|| format!("https://sts.{}.amazonaws.com", s.region), |e| e.trim_end_matches('/').to_string());
        if sts_endpoint.starts_with("http://") && !s.allow_http {
            return Err(Error::invalid(format!("STS endpoint {sts_endpoint} is plain HTTP: pass --s3-allow-http (or set AWS_ALLOW_HTTP=true) to send requests unencrypted")));
        }
        let mut passed = Vec::new();
        let base = Self::walk(s, &files, &mut passed)?;
        let source = match &s.role_arn {
            Some(arn) => Source::AssumeRole { role: Role::new(arn, env("AWS_ROLE_SESSION_NAME"), None, None), base: Box::new(base), from: "--s3-role-arn".into() },
            None => base,
        };
        Ok(Chain { source, sts_endpoint, region: s.region.clone(), passed, credentials_file: files.credentials_shown() })
    }

    fn walk(s: &Settings<'_>, files: &Files, passed: &mut Vec<String>) -> Result<Source> {
        let env = s.env;
        // 1. The environment's keys, unless --s3-profile names a profile (as the AWS CLI's
        // --profile puts the profile first).
        match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
            _ if s.profile.is_some() => passed.push("the environment: passed over, --s3-profile names a profile".into()),
            (Some(key_id), Some(secret_key)) => {
                return Ok(Source::Keys { credential: Arc::new(AwsCredential { key_id, secret_key, token: env("AWS_SESSION_TOKEN") }), from: "the environment".into() })
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::invalid("only one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is set: set both, or neither to use a profile or a role"))
            }
            (None, None) => passed.push("the environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set".into()),
        }
        // 2. The profile.
        let named = s.profile.clone().or_else(|| env("AWS_PROFILE"));
        let name = named.clone().unwrap_or_else(|| "default".into());
        match files.profile(&name)? {
            Some(p) => {
                if let Some(source) = Self::from_profile(&name, &p, files, env, &mut Vec::new())? {
                    return Ok(source);
                }
                passed.push(format!("profile '{name}': it has no keys, role or credential_process"));
            }
            None if named.is_some() => {
                return Err(Error::invalid(format!(
                    "AWS profile '{name}' is in neither {} nor {}: check the name (--s3-profile or AWS_PROFILE)",
                    files.credentials_shown(),
                    files.config_shown()
                )))
            }
            None => passed.push(format!("profile 'default': not in {} or {}", files.credentials_shown(), files.config_shown())),
        }
        // 3. A web identity.
        match (env("AWS_WEB_IDENTITY_TOKEN_FILE"), env("AWS_ROLE_ARN")) {
            (Some(file), Some(arn)) => {
                let role = Role::new(&arn, env("AWS_ROLE_SESSION_NAME"), None, None);
                return Ok(Source::WebIdentity { token_file: file.into(), role, from: "AWS_WEB_IDENTITY_TOKEN_FILE".into() });
            }
            (Some(_), None) => return Err(Error::invalid("AWS_WEB_IDENTITY_TOKEN_FILE is set without AWS_ROLE_ARN: set the role the token is exchanged for")),
            (None, _) => passed.push("web identity: AWS_WEB_IDENTITY_TOKEN_FILE is not set".into()),
        }
        // 4. The container's agent.
        if let Some(source) = Self::container(env)? {
            return Ok(source);
        }
        passed.push("container: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and AWS_CONTAINER_CREDENTIALS_FULL_URI are not set".into());
        // 5. The instance metadata service, unless turned off.
        if env("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            passed.push("instance metadata: AWS_EC2_METADATA_DISABLED=true".into());
            return Err(nothing(passed, &files.credentials_shown()));
        }
        Ok(Self::instance(env, files.profile(&name)?.as_ref()))
    }

    /// The source profile `name` (already read as `p`) gives; `None` when it gives none.
    /// `seen` holds the profiles on the way, to refuse a cycle.
    fn from_profile(name: &str, p: &Profile, files: &Files, env: &dyn Fn(&str) -> Option<String>, seen: &mut Vec<String>) -> Result<Option<Source>> {
        if seen.iter().any(|n| n == name) {
            seen.push(name.into());
            return Err(Error::invalid(format!("AWS profiles name each other as source_profile in a circle: {}; end the chain at a profile with keys", seen.join(" -> "))));
        }
        seen.push(name.into());
        let from = format!("profile '{name}'");
        if let Some(arn) = p.get("role_arn") {
            let seconds = match p.get("duration_seconds") {
                Some(v) => Some(v.parse().map_err(|_| Error::invalid(format!("profile '{name}': duration_seconds = {v} is not a number of seconds")))?),
                None => None,
            };
            let role = Role::new(&arn, p.get("role_session_name"), p.get("external_id"), seconds);
            if let Some(token_file) = p.get("web_identity_token_file") {
                return Ok(Some(Source::WebIdentity { token_file: token_file.into(), role, from }));
            }
            let base = match (p.get("source_profile"), p.get("credential_source")) {
                (Some(_), Some(_)) => return Err(Error::invalid(format!("profile '{name}' has both source_profile and credential_source: keep one"))),
                (Some(src), None) => {
                    // A profile naming itself uses its own keys for the role (the SDKs allow it).
                    let sp = if src == name { Some(p.clone()) } else { files.profile(&src)? };
                    let sp = sp.ok_or_else(|| {
                        Error::invalid(format!("profile '{name}': its source_profile '{src}' is in neither {} nor {}", files.credentials_shown(), files.config_shown()))
                    })?;
                    if src == name {
                        Self::keys(&src, &sp).ok_or_else(|| Error::invalid(format!("profile '{name}' is its own source_profile but has no keys")))?
                    } else {
                        Self::from_profile(&src, &sp, files, env, seen)?
                            .ok_or_else(|| Error::invalid(format!("profile '{name}': its source_profile '{src}' gives no credentials (no keys, role or credential_process)")))?
                    }
                }
                (None, Some(cs)) => match cs.as_str() {
                    "Environment" => match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
                        (Some(key_id), Some(secret_key)) => {
                            Source::Keys { credential: Arc::new(AwsCredential { key_id, secret_key, token: env("AWS_SESSION_TOKEN") }), from: "the environment".into() }
                        }
                        _ => {
                            return Err(Error::invalid(format!(
                                "profile '{name}': credential_source = Environment, but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not both set"
                            )))
                        }
                    },
                    "Ec2InstanceMetadata" => Self::instance(env, Some(p)),
                    "EcsContainer" => Self::container(env)?.ok_or_else(|| {
                        Error::invalid(format!("profile '{name}': credential_source = EcsContainer, but AWS_CONTAINER_CREDENTIALS_RELATIVE_URI and _FULL_URI are not set"))
                    })?,
                    other => return Err(Error::invalid(format!("profile '{name}': credential_source = {other}: use Environment, Ec2InstanceMetadata or EcsContainer"))),
                },
                (None, None) => {
                    return Err(Error::invalid(format!("profile '{name}' has role_arn but no source_profile, credential_source or web_identity_token_file to assume it with")))
                }
            };
            return Ok(Some(Source::AssumeRole { role, base: Box::new(base), from }));
        }
        if let Some(k) = Self::keys(name, p) {
            return Ok(Some(k));
        }
        if p.get("aws_access_key_id").is_some() != p.get("aws_secret_access_key").is_some() {
            return Err(Error::invalid(format!("profile '{name}' has only one of aws_access_key_id and aws_secret_access_key: give both")));
        }
        if let Some(command) = p.get("credential_process") {
            return Ok(Some(Source::Process { command, profile: name.into() }));
        }
        Ok(None)
    }

    fn keys(name: &str, p: &Profile) -> Option<Source> {
        let (key_id, secret_key) = (p.get("aws_access_key_id")?, p.get("aws_secret_access_key")?);
        Some(Source::Keys { credential: Arc::new(AwsCredential { key_id, secret_key, token: p.get("aws_session_token") }), from: format!("profile '{name}'") })
    }

    fn container(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<Source>> {
        let token = match (env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"), env("AWS_CONTAINER_AUTHORIZATION_TOKEN")) {
            (Some(f), _) => ContainerToken::File(f.into()),
            (None, Some(t)) => ContainerToken::Value(t),
            (None, None) => ContainerToken::None,
        };
        if let Some(rel) = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") {
            return Ok(Some(Source::Container { url: format!("{ECS_HOST}{rel}"), token }));
        }
        let Some(url) = env("AWS_CONTAINER_CREDENTIALS_FULL_URI") else { return Ok(None) };
        if !container_url_allowed(&url) {
            return Err(Error::invalid(format!(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI {url}: credentials are fetched only over HTTPS, or over HTTP from this host (loopback) or the ECS/EKS agent's address (169.254.170.2, 169.254.170.23)"
            )));
        }
        Ok(Some(Source::Container { url, token }))
    }

    fn instance(env: &dyn Fn(&str) -> Option<String>, profile: Option<&Profile>) -> Source {
        let endpoint = env("AWS_EC2_METADATA_SERVICE_ENDPOINT")
            .or_else(|| profile.and_then(|p| p.get("ec2_metadata_service_endpoint")))
            .unwrap_or_else(|| IMDS_ENDPOINT.into())
            .trim_end_matches('/')
            .to_string();
        let v1_allowed = !env("AWS_EC2_METADATA_V1_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        Source::Instance { endpoint, v1_allowed }
    }
}

impl Role {
    fn new(arn: &str, session: Option<String>, external_id: Option<String>, seconds: Option<u64>) -> Self {
        let session = session.unwrap_or_else(|| format!("sheaf-{}", SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs()));
        Role { arn: arn.to_string(), session, external_id, seconds }
    }
}

/// The SDKs' rule for a full container URI: HTTPS anywhere, HTTP only to this host or the agents'
/// link-local addresses.
fn container_url_allowed(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else { return false };
    let authority = rest.split('/').next().unwrap_or("");
    // A user part (`http://127.0.0.1:1@evil.example/`) would hide the real host.
    if authority.contains('@') {
        return false;
    }
    let host = if let Some(v6) = authority.strip_prefix('[') { v6.split(']').next().unwrap_or("") } else { authority.rsplit_once(':').map_or(authority, |(h, _)| h) };
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback() || ["169.254.170.2", "169.254.170.23", "fd00:ec2::23"].iter().any(|a| a.parse::<std::net::IpAddr>().ok() == Some(ip)),
        Err(_) => host == "localhost",
    }
}

/// "No credentials", listing each source and why it gave none.
fn nothing(passed: &[String], credentials_file: &str) -> Error {
    Error::invalid(format!(
        "no S3 credentials: tried, in order, {}. Set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, put keys or a role under a profile in {} (AWS_PROFILE picks one), or run where a role is given (IRSA, EKS Pod Identity, ECS, an EC2 instance profile)",
        passed.iter().enumerate().map(|(i, p)| format!("({}) {p}", i + 1)).collect::<Vec<_>>().join("; "),
        credentials_file
    ))
}

/// The two AWS files.
struct Files {
    credentials: Option<PathBuf>,
    config: Option<PathBuf>,
}

impl Files {
    fn of(env: &dyn Fn(&str) -> Option<String>) -> Self {
        let home = env("HOME").map(PathBuf::from);
        let file = |var: &str, rel: &str| env(var).map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(rel)));
        Files { credentials: file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"), config: file("AWS_CONFIG_FILE", ".aws/config") }
    }

    /// Profile `name` from both files (the credentials file's keys first).
    fn profile(&self, name: &str) -> Result<Option<Profile>> {
        let creds = read_profile(self.credentials.as_ref(), name, false)?;
        let conf = read_profile(self.config.as_ref(), name, true)?;
        Ok(match (creds, conf) {
            (None, None) => None,
            (a, b) => Some(Profile(a.map(|p| p.0).unwrap_or_default().into_iter().chain(b.map(|p| p.0).unwrap_or_default()).collect())),
        })
    }

    fn credentials_shown(&self) -> String {
        self.credentials.as_ref().map_or_else(|| "~/.aws/credentials".into(), |p| p.display().to_string())
    }

    fn config_shown(&self) -> String {
        self.config.as_ref().map_or_else(|| "~/.aws/config".into(), |p| p.display().to_string())
    }
}

/// The credentials every request of a store signs with: fetched from the chain's source, kept,
/// and fetched again before they expire.
pub struct Provider {
    chain: Chain,
    http: HttpClient,
    /// For the metadata service and container agents: plain HTTP allowed, a short connect timeout.
    local: HttpClient,
    current: tokio::sync::Mutex<Held>,
}

/// What the provider holds: the credentials, and when a refresh last failed.
#[derive(Default)]
struct Held {
    fetched: Option<Fetched>,
    failed_at: Option<std::time::Instant>,
}

/// How long valid credentials are used as they are after a refresh failed, before the next try:
/// an outage of STS or the metadata service costs one attempt per this, not one per request.
const RETRY_REFRESH: Duration = Duration::from_secs(15);

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider").field("source", &self.chain.source).finish_non_exhaustive()
    }
}

impl Provider {
    pub(crate) fn new(chain: Chain, http: HttpClient, local: HttpClient) -> Self {
        Provider { chain, http, local, current: tokio::sync::Mutex::new(Held::default()) }
    }

    /// The source in use, in words.
    pub fn source(&self) -> String {
        self.chain.source.describe()
    }

    /// When the credentials held now expire (`None`: they do not, or none were fetched yet).
    pub async fn expires(&self) -> Option<SystemTime> {
        self.current.lock().await.fetched.as_ref().and_then(|f| f.expires)
    }

    /// Credentials valid now: the ones held, or fresh ones when those are near their expiry.
    ///
    /// # Errors
    /// The source's failure in words (no secret in it), naming the source; when the chain fell
    /// through to the instance metadata service and that failed too, every source tried.
    pub async fn current(&self) -> std::result::Result<Arc<AwsCredential>, String> {
        let mut held = self.current.lock().await;
        let now = SystemTime::now();
        let valid = held.fetched.as_ref().filter(|f| !f.expired(now)).map(|f| f.credential.clone());
        if let Some(f) = held.fetched.as_ref().filter(|f| !f.stale(now)) {
            return Ok(f.credential.clone());
        }
        // A refresh failed a moment ago and the held ones still work: use them, try later.
        if let (Some(c), Some(at)) = (&valid, held.failed_at) {
            if at.elapsed() < RETRY_REFRESH {
                return Ok(c.clone());
            }
        }
        match fetch::fetch(&self.chain.source, &self.chain, &self.http, &self.local).await {
            Ok(f) => {
                let left = f.expires.and_then(|e| e.duration_since(now).ok()).map_or_else(|| "none".into(), |d| format!("{} s", d.as_secs()));
                tracing::debug!("S3 credentials fetched from {}, expiring in {left}", self.source());
                let c = f.credential.clone();
                *held = Held { fetched: Some(f), failed_at: None };
                Ok(c)
            }
            Err(e) => {
                held.failed_at = Some(std::time::Instant::now());
                match valid {
                    // Still valid: keep them, and try again in a while.
                    Some(c) => {
                        tracing::warn!("S3 credentials ({}) could not be refreshed; the current ones are kept until they expire: {e}", self.source());
                        Ok(c)
                    }
                    None => Err(self.failed(e, held.fetched.is_some())),
                }
            }
        }
    }

    /// Why no credentials are at hand; `before`: some were fetched earlier (a refresh failed, not
    /// the first fetch, so the chain's other sources are not the question).
    fn failed(&self, e: String, before: bool) -> String {
        let source = self.source();
        if !before && matches!(self.chain.source, Source::Instance { .. }) && !self.chain.passed.is_empty() {
            let mut passed = self.chain.passed.clone();
            passed.push(format!("{source}: {e}"));
            return nothing(&passed, &self.chain.credentials_file).to_string();
        }
        format!("cannot get S3 credentials from {source}: {e}")
    }
}

#[async_trait::async_trait]
impl object_store::CredentialProvider for Provider {
    type Credential = AwsCredential;

    async fn get_credential(&self) -> object_store::Result<Arc<AwsCredential>> {
        self.current().await.map_err(|e| object_store::Error::Unauthenticated { path: String::new(), source: e.into() })
    }
}

#[cfg(test)]
mod tests;
