//! Fetching one source's credentials: STS (`AssumeRole`, `AssumeRoleWithWebIdentity`), the
//! container agent, the instance metadata service, a `credential_process`. Errors are words for a
//! person, with no secret in them.

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderValue, Method};
use object_store::aws::{AwsAuthorizer, AwsCredential};
use object_store::client::{HttpClient, HttpRequestBody};
use serde::Deserialize;

use super::{Chain, ContainerToken, Fetched, Role, Source};

type Answer = std::result::Result<Fetched, String>;

/// Fetch what `source` gives. Boxed: a role's base is fetched first, through the same function.
pub(super) fn fetch<'a>(source: &'a Source, chain: &'a Chain, http: &'a HttpClient, local: &'a HttpClient) -> futures::future::BoxFuture<'a, Answer> {
    Box::pin(async move {
        match source {
            Source::Keys { credential, .. } => Ok(Fetched { credential: credential.clone(), expires: None, fetched: SystemTime::now() }),
            Source::Process { command, .. } => process(command).await,
            Source::WebIdentity { token_file, role, .. } => {
                let token = std::fs::read_to_string(token_file).map_err(|e| format!("cannot read the web identity token {}: {e}", token_file.display()))?;
                let token = token.trim();
                if token.is_empty() {
                    return Err(format!("the web identity token file {} is empty", token_file.display()));
                }
                let mut form = role_form("AssumeRoleWithWebIdentity", role);
                form.push(("WebIdentityToken", token.to_string()));
                sts(http, chain, None, &form, role).await
            }
            Source::AssumeRole { role, base, .. } => {
                let base = fetch(base, chain, http, local).await.map_err(|e| format!("the credentials to assume role {} with: {e}", role.arn))?;
                let mut form = role_form("AssumeRole", role);
                if let Some(x) = &role.external_id {
                    form.push(("ExternalId", x.clone()));
                }
                let f = sts(http, chain, Some(&base.credential), &form, role).await?;
                Ok(f)
            }
            Source::Container { url, token } => container(local, url, token).await,
            Source::Instance { endpoint, v1_allowed } => instance(local, endpoint, *v1_allowed).await,
        }
    })
}

fn role_form(action: &'static str, role: &Role) -> Vec<(&'static str, String)> {
    let mut form = vec![("Action", action.to_string()), ("Version", "2011-06-15".to_string()), ("RoleArn", role.arn.clone()), ("RoleSessionName", role.session.clone())];
    if let Some(s) = role.seconds {
        form.push(("DurationSeconds", s.to_string()));
    }
    form
}

/// Send a request, retried (three tries, 200 ms then 400 ms apart) when the link fails or the
/// server answers 5xx or 429.
async fn send(client: &HttpClient, make: impl Fn() -> std::result::Result<http::Request<HttpRequestBody>, String>) -> std::result::Result<(u16, Bytes), String> {
    let mut wait = Duration::from_millis(200);
    let mut tries = 0;
    loop {
        tries += 1;
        let answer = match client.execute(make()?).await {
            Ok(r) => {
                let status = r.status().as_u16();
                match r.into_body().bytes().await {
                    Ok(b) => Ok((status, b)),
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        let again = match &answer {
            Ok((s, _)) => *s >= 500 || *s == 429,
            Err(_) => true,
        };
        if !again || tries >= 3 {
            return answer;
        }
        tokio::time::sleep(wait).await;
        wait *= 2;
    }
}

fn form_body(form: &[(&str, String)]) -> String {
    use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
    const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    form.iter().map(|(k, v)| format!("{k}={}", utf8_percent_encode(v, UNRESERVED))).collect::<Vec<_>>().join("&")
}

/// One STS call, signed with `signer` when given (`AssumeRole`) or not (`AssumeRoleWithWebIdentity`).
async fn sts(http: &HttpClient, chain: &Chain, signer: Option<&AwsCredential>, form: &[(&str, String)], role: &Role) -> Answer {
    let body = form_body(form);
    let action = form.iter().find(|(k, _)| *k == "Action").map_or("", |(_, v)| v.as_str());
    let make = || {
        let mut request = http::Request::builder()
            .method(Method::POST)
            .uri(chain.sts_endpoint.as_str())
            .header(http::header::CONTENT_TYPE, HeaderValue::from_static("application/x-www-form-urlencoded"))
            .header(http::header::ACCEPT, HeaderValue::from_static("application/xml"))
            .body(HttpRequestBody::from(Bytes::from(body.clone())))
            .map_err(|e| format!("STS request: {e}"))?;
        if let Some(c) = signer {
            AwsAuthorizer::new(c, "sts", &chain.region).try_authorize(&mut request, None).map_err(|e| format!("cannot sign the STS request: {e}"))?;
        }
        Ok(request)
    };
    let (status, answer) = send(http, make).await.map_err(|e| format!("STS at {} ({action}) did not answer: {e}", chain.sts_endpoint))?;
    if status != 200 {
        let why = quick_xml::de::from_reader::<_, StsError>(answer.as_ref())
            .map(|e| format!("{}: {}", e.error.code, e.error.message))
            .unwrap_or_else(|_| String::from_utf8_lossy(&answer[..answer.len().min(300)]).into_owned());
        return Err(format!("STS at {} refused {action} of role {}: HTTP {status}: {why}", chain.sts_endpoint, role.arn));
    }
    let r: StsAnswer = quick_xml::de::from_reader(answer.as_ref()).map_err(|e| format!("STS at {} answered {action} with what is not its XML: {e}", chain.sts_endpoint))?;
    let c = r.result.credentials;
    Ok(Fetched::lasting(AwsCredential { key_id: c.access_key_id, secret_key: c.secret_access_key, token: Some(c.session_token) }, Some(time(&c.expiration)?)))
}

#[derive(Deserialize)]
struct StsAnswer {
    #[serde(alias = "AssumeRoleResult", alias = "AssumeRoleWithWebIdentityResult")]
    result: StsResult,
}

#[derive(Deserialize)]
struct StsResult {
    #[serde(rename = "Credentials")]
    credentials: StsCredentials,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct StsCredentials {
    access_key_id: String,
    secret_access_key: String,
    session_token: String,
    expiration: String,
}

#[derive(Deserialize)]
struct StsError {
    #[serde(rename = "Error")]
    error: StsErrorBody,
}

#[derive(Deserialize)]
struct StsErrorBody {
    #[serde(rename = "Code", default)]
    code: String,
    #[serde(rename = "Message", default)]
    message: String,
}

/// An RFC 3339 time.
fn time(s: &str) -> std::result::Result<SystemTime, String> {
    let t = chrono::DateTime::parse_from_rfc3339(s).map_err(|e| format!("an expiration that is not a time ({s}): {e}"))?;
    let secs = t.timestamp();
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0)) + Duration::from_nanos(u64::from(t.timestamp_subsec_nanos())))
}

/// The JSON the container agent, the instance metadata service and `credential_process` answer.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Json {
    #[serde(default)]
    version: Option<u32>,
    access_key_id: String,
    secret_access_key: String,
    #[serde(default, alias = "SessionToken")]
    token: Option<String>,
    #[serde(default)]
    expiration: Option<String>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

impl Json {
    fn read(body: &[u8], what: &str) -> Answer {
        let j: Json = serde_json::from_slice(body).map_err(|e| format!("{what} answered with what is not credentials: {e}"))?;
        if j.version.is_some_and(|v| v != 1) {
            return Err(format!("{what} answered Version {}; sheaf reads Version 1", j.version.unwrap_or_default()));
        }
        if let Some(code) = j.code.as_deref().filter(|c| *c != "Success") {
            return Err(format!("{what} answered {code}: {}", j.message.as_deref().unwrap_or("")));
        }
        let expires = j.expiration.as_deref().map(time).transpose()?;
        Ok(Fetched::lasting(AwsCredential { key_id: j.access_key_id, secret_key: j.secret_access_key, token: j.token }, expires))
    }
}

async fn container(local: &HttpClient, url: &str, token: &ContainerToken) -> Answer {
    let auth = match token {
        ContainerToken::None => None,
        ContainerToken::Value(t) => Some(t.clone()),
        ContainerToken::File(f) => {
            Some(std::fs::read_to_string(f).map_err(|e| format!("cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {}: {e}", f.display()))?.trim().to_string())
        }
    };
    let make = || {
        let mut b = http::Request::builder().method(Method::GET).uri(url);
        if let Some(a) = &auth {
            b = b.header(http::header::AUTHORIZATION, HeaderValue::from_str(a).map_err(|_| "the container authorization token is not a header value".to_string())?);
        }
        b.body(HttpRequestBody::from(Bytes::new())).map_err(|e| format!("container credentials request: {e}"))
    };
    let (status, body) = send(local, make).await.map_err(|e| format!("the container agent at {url} did not answer: {e}"))?;
    if status != 200 {
        return Err(format!("the container agent at {url} answered HTTP {status}: {}", String::from_utf8_lossy(&body[..body.len().min(300)])));
    }
    Json::read(&body, &format!("the container agent at {url}"))
}

/// IMDSv2: a session token (PUT), the role's name, its credentials. Version 1 (no token) only when
/// the service does not give tokens and `v1_allowed`.
async fn instance(local: &HttpClient, endpoint: &str, v1_allowed: bool) -> Answer {
    const TOKEN: &str = "x-aws-ec2-metadata-token";
    let token_url = format!("{endpoint}/latest/api/token");
    let make = || {
        http::Request::builder()
            .method(Method::PUT)
            .uri(token_url.as_str())
            .header("x-aws-ec2-metadata-token-ttl-seconds", "21600")
            .body(HttpRequestBody::from(Bytes::new()))
            .map_err(|e| e.to_string())
    };
    let (status, body) = send(local, make).await.map_err(|e| format!("no answer: {e}"))?;
    let token = match status {
        200 => Some(String::from_utf8_lossy(&body).trim().to_string()),
        403..=405 if v1_allowed => None,
        _ => return Err(format!("the IMDSv2 session token was refused: HTTP {status}{}", if v1_allowed { "" } else { " (IMDSv1 is off: AWS_EC2_METADATA_V1_DISABLED)" })),
    };
    let get = |url: String| {
        let token = token.clone();
        async move {
            let make = || {
                let mut b = http::Request::builder().method(Method::GET).uri(url.as_str());
                if let Some(t) = &token {
                    b = b.header(TOKEN, HeaderValue::from_str(t).map_err(|_| "the IMDS token is not a header value".to_string())?);
                }
                b.body(HttpRequestBody::from(Bytes::new())).map_err(|e| e.to_string())
            };
            match send(local, make).await {
                Ok((200, body)) => Ok(body),
                Ok((404, _)) => Err(format!("{url}: not found (no instance profile attached to this instance?)")),
                Ok((s, _)) => Err(format!("{url}: HTTP {s}")),
                Err(e) => Err(format!("{url}: {e}")),
            }
        }
    };
    let base = format!("{endpoint}/latest/meta-data/iam/security-credentials/");
    let roles = get(base.clone()).await?;
    let role = String::from_utf8_lossy(&roles).lines().next().unwrap_or("").trim().to_string();
    if role.is_empty() {
        return Err("the instance has no role (no instance profile attached)".into());
    }
    let creds = get(format!("{base}{role}")).await?;
    Json::read(&creds, &format!("the instance metadata service (role {role})"))
}

/// Run `command` by `sh -c`, at most a minute, and read its JSON (version 1).
async fn process(command: &str) -> Answer {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run credential_process: {e}"))?;
    let out = tokio::time::timeout(Duration::from_secs(60), async {
        use tokio::io::AsyncReadExt as _;
        let (mut so, mut se) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let (a, b) = tokio::join!(so.read_to_end(&mut out), se.read_to_end(&mut err));
        a.and(b).map_err(|e| e.to_string())?;
        let status = child.wait().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, out, err))
    })
    .await
    .map_err(|_| "credential_process ran for a minute without answering; it was stopped".to_string())?;
    let (status, out, err) = out.map_err(|e| format!("credential_process: {e}"))?;
    if !status.success() {
        let err = String::from_utf8_lossy(&err);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!("credential_process failed ({status}): {last}"));
    }
    if serde_json::from_slice::<serde_json::Value>(&out).ok().and_then(|v| v.get("Version").cloned()).is_none() {
        return Err("credential_process answered without \"Version\": 1 (the format the AWS CLI reads)".into());
    }
    Json::read(&out, "credential_process")
}
