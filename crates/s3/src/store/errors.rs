//! What a failed request means: the side it failed on, the service's error code (never its words),
//! whether it may pass on a second try, and error bodies scrubbed of signatures and secrets.

use sheaf_core::{Error, ErrorKind};
use std::sync::Arc;

/// Which side of a request failed: it decides the exit code and what "not found" means.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// Starting an upload: not found means no such bucket.
    Create,
    /// Parts, completion, deletes: not found means the upload (or bucket) went away.
    Write,
    /// HEAD and GET.
    Read,
}

/// Values that must never appear in a message (the secret key, a session token), and the parts of
/// S3 error bodies that can quote signed headers (AWS's SignatureDoesNotMatch echoes the canonical
/// request, token included).
#[derive(Clone, Default)]
pub(crate) struct Redact(pub(super) Arc<Vec<String>>, pub(super) &'static str);

/// Where each cloud's credentials come from, for the messages that say to check them.
pub(crate) const AWS_CREDENTIALS: &str = "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or the profile";
pub(crate) const AZURE_CREDENTIALS: &str =
    "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_SAS_TOKEN, or AZURE_CLIENT_ID / AZURE_CLIENT_SECRET / AZURE_TENANT_ID)";
pub(crate) const GCS_CREDENTIALS: &str = "GOOGLE_APPLICATION_CREDENTIALS or GOOGLE_SERVICE_ACCOUNT (a service account key file)";

impl Redact {
    fn hint(&self) -> &'static str {
        if self.1.is_empty() {
            AWS_CREDENTIALS
        } else {
            self.1
        }
    }

    pub(super) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for tag in ["CanonicalRequest", "CanonicalRequestBytes", "StringToSign", "StringToSignBytes"] {
            let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
            let mut kept = String::with_capacity(out.len());
            let mut rest = out.as_str();
            while let Some(a) = rest.find(&open) {
                kept.push_str(&rest[..a]);
                kept.push_str(&open);
                kept.push_str("(removed)");
                kept.push_str(&close);
                // An unclosed element is cut to the end.
                rest = rest[a..].find(&close).map_or("", |b| &rest[a + b + close.len()..]);
            }
            kept.push_str(rest);
            out = kept;
        }
        for secret in self.0.iter().filter(|s| s.len() >= 4) {
            out = out.replace(secret.as_str(), "(redacted)");
        }
        out
    }
}

/// Whether a failure of the object store may pass if tried again, by the client's error variants
/// (never the text): a connection that failed or was cut, a request that timed out. The client
/// retried these already (with backoff, within its budget); the caller may still try later.
fn is_transient(e: &object_store::Error) -> bool {
    use object_store::client::HttpErrorKind as K;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(h) = c.downcast_ref::<object_store::client::HttpError>() {
            return matches!(h.kind(), K::Connect | K::Request | K::Timeout | K::Interrupted);
        }
        cause = c.source();
    }
    false
}

/// Whether the endpoint's TLS certificate was refused, by rustls's error variant (never the text),
/// wherever it lies in the chain (an I/O error wraps it without naming it as its source).
fn certificate_refused(e: &object_store::Error) -> bool {
    let refused = |c: &(dyn std::error::Error + 'static)| matches!(c.downcast_ref::<rustls::Error>(), Some(rustls::Error::InvalidCertificate(_)));
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if refused(c) {
            return true;
        }
        // An io::Error's source() is its wrapped error's source, skipping the wrapped error
        // itself (TLS errors come wrapped, sometimes twice): step into it instead.
        cause = match c.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => c.source(),
        };
    }
    false
}

/// What went wrong, in words a DBA can act on, with the kind that picks the exit code and whether
/// it is transient. The message holds the whole cause chain, scrubbed of secrets; the raw cause is
/// not kept beside it, since it would show them again.
pub(super) fn map_err(e: object_store::Error, what: &str, side: Side, redact: &Redact) -> Error {
    // A certificate refused is permanent, whatever the connection's failure says: nothing changes
    // by trying again until the CA is given.
    if certificate_refused(&e) {
        let e = classify(e, what, side, redact);
        return Error::new(
            ErrorKind::Denied,
            format!("{}: the endpoint's TLS certificate is not trusted: give its CA with --s3-ca-bundle (or AWS_CA_BUNDLE, or ca_bundle in the profile)", e.message()),
        );
    }
    let transient = is_transient(&e) || matches!(&e, object_store::Error::Unauthenticated { source, .. } if provider_failed(&source.to_string()));
    classify(e, what, side, redact).transient(transient)
}

fn classify(e: object_store::Error, what: &str, side: Side, redact: &Redact) -> Error {
    use object_store::Error as E;
    // The whole chain: "error sending request" alone hides the cause (a certificate, a refusal).
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    let text = redact.scrub(&text);
    let kind = if side == Side::Read { ErrorKind::Io } else { ErrorKind::Target };
    const NO_BUCKET: &str = "the bucket (Azure: the container) does not exist (create it first, or check the name and endpoint)";
    // An archived object (GLACIER, DEEP_ARCHIVE) answers a read with 403 InvalidObjectState until
    // it is thawed: not a credentials problem, and not one that retrying fixes.
    if service_code(&text).as_deref() == Some("InvalidObjectState") {
        let class = xml_field(&text, "StorageClass").unwrap_or_else(|| "an archive class".into());
        return Error::new(
            ErrorKind::Io,
            format!(
                "{what} is in storage class {class}, which S3 keeps offline: restore (thaw) it first (`aws s3api restore-object --restore-request Days=7 ...` on each object of the set, or a Batch Operations job), wait until it is readable, then run this again"
            ),
        );
    }
    match e {
        E::NotFound { .. } if side == Side::Create => Error::new(kind, format!("{what}: {NO_BUCKET}: {text}")),
        E::NotFound { .. } if side == Side::Write => {
            Error::new(kind, format!("{what}: the upload or its bucket no longer exists (a lifecycle rule that aborts uploads, or someone removed it): {text}"))
        }
        E::NotFound { path, .. } => Error::incomplete(format!("{what} does not exist")).with_object(path),
        E::PermissionDenied { .. } => Error::new(
            kind,
            format!("{what}: access denied (403): the credentials are wrong, or lack permission on this bucket (check the keys, the profile and the bucket's policy): {text}"),
        ),
        // The credential provider's own failure (STS, the metadata service, a process): it says
        // what it could not do; worth another try (a link that failed, a service restarting).
        E::Unauthenticated { .. } if provider_failed(&text) => Error::new(kind, format!("{what}: {text}")),
        E::Unauthenticated { .. } => Error::new(kind, format!("{what}: the server rejected the credentials (check {}, and the clock): {text}", redact.hint())),
        E::Precondition { .. } => Error::incomplete(format!("{what}: the object changed while it was being read (it was replaced): read it again")),
        // Otherwise by the service's error code (S3's and Azure's XML error body), never the words.
        _ => match service_code(&text).as_deref() {
            Some("NoSuchBucket" | "ContainerNotFound") => Error::new(kind, format!("{what}: {NO_BUCKET}: {text}")),
            Some("InvalidAccessKeyId" | "SignatureDoesNotMatch" | "AuthenticationFailed" | "AuthorizationFailure") => {
                Error::new(kind, format!("{what}: the server rejected the credentials (check {}): {text}", redact.hint()))
            }
            Some("AccessDenied") => Error::new(kind, format!("{what}: access denied: {text}")),
            Some(c) if c.contains("Quota") || c == "EntityTooLarge" || c == "XMinioStorageFull" => {
                Error::new(ErrorKind::NoSpace, format!("{what}: the bucket's quota or size limit is reached: {text}"))
            }
            _ => Error::new(kind, format!("{what}: {text}")),
        },
    }
}

/// Whether `text` is the credential provider's own failure (it could not get credentials), not
/// the server refusing the ones it was given.
fn provider_failed(text: &str) -> bool {
    text.contains("cannot get S3 credentials") || text.contains("no S3 credentials")
}

/// Field `name` of the S3 XML error body quoted in `text` (`<Error>..<NAME>value</NAME>..`).
fn xml_field(text: &str, name: &str) -> Option<String> {
    let start = text.find("<Error>")?;
    let body = &text[start..];
    let open = format!("<{name}>");
    let at = body.find(&open)? + open.len();
    let end = body[at..].find(&format!("</{name}>"))? + at;
    Some(body[at..end].trim().to_string()).filter(|v| !v.is_empty())
}

/// The error code in an S3 or Azure XML error body quoted in `text` (`<Error><Code>..</Code>`).
fn service_code(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Body {
        code: Option<String>,
    }
    let start = text.find("<Error>")?;
    let end = text[start..].find("</Error>")? + start + "</Error>".len();
    quick_xml::de::from_str::<Body>(&text[start..end]).ok()?.code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archived_object_is_named_with_its_class_not_blamed_on_the_credentials() {
        let body = "Client error with status 403 Forbidden: <?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InvalidObjectState</Code><Message>The operation is not valid for the object's storage class</Message><StorageClass>DEEP_ARCHIVE</StorageClass></Error>";
        let e = object_store::Error::PermissionDenied { path: "r/backups/a_1.sheaf".into(), source: body.into() };
        let e = map_err(e, "stripe s3://b/r/backups/a_1.sheaf", Side::Read, &Redact::default());
        assert_eq!(e.kind(), ErrorKind::Io, "not Incomplete, which callers read as not there");
        assert!(!e.is_transient());
        assert!(e.message().contains("storage class DEEP_ARCHIVE") && e.message().contains("restore-object"), "{}", e.message());
        assert!(!e.message().contains("credentials"), "{}", e.message());
    }

    #[test]
    fn the_service_code_is_read_from_the_error_body_not_the_words() {
        let chain = "Error performing PUT http://x/b/o in 1ms - Server returned non-2xx status code: 507: <?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>XMinioStorageFull</Code><Message>Storage backend has reached its minimum free drive threshold. Quota AccessDenied</Message><Key>o</Key></Error>";
        assert_eq!(service_code(chain).as_deref(), Some("XMinioStorageFull"));
        assert_eq!(service_code("connection reset by peer (Quota, AccessDenied, NoSuchBucket)"), None, "words outside a body are no code");
        assert_eq!(service_code("<Error><Message>no code</Message></Error>"), None);
    }

    #[test]
    fn error_bodies_lose_signed_headers_and_secrets() {
        let r = Redact(Arc::new(vec!["SeCrEtKeY123".into(), "FQoGZXIvYXdzEToken".into()]), AWS_CREDENTIALS);
        let body = "<Error><Code>SignatureDoesNotMatch</Code><AWSAccessKeyId>AKIAEXAMPLE</AWSAccessKeyId>\
            <StringToSign>AWS4-HMAC-SHA256\n20261122T000000Z</StringToSign><CanonicalRequest>PUT\n/b/k\n\
            x-amz-security-token:FQoGZXIvYXdzEToken\n</CanonicalRequest><CanonicalRequestBytes>50 55</CanonicalRequestBytes>\
            <Message>key SeCrEtKeY123</Message></Error>";
        let out = r.scrub(body);
        assert!(!out.contains("FQoGZXIvYXdzEToken") && !out.contains("SeCrEtKeY123"), "{out}");
        assert!(!out.contains("x-amz-security-token") && !out.contains("20261122T000000Z") && !out.contains("50 55"), "{out}");
        assert!(out.contains("SignatureDoesNotMatch") && out.contains("<CanonicalRequest>(removed)</CanonicalRequest>"), "{out}");
        // An element cut short by a truncated body is removed to the end.
        assert_eq!(r.scrub("a<StringToSign>xyz"), "a<StringToSign>(removed)</StringToSign>");

        let e = object_store::Error::Generic { store: "S3", source: body.into() };
        let mapped = map_err(e, "uploading part of s3://b/k", Side::Write, &r);
        assert_eq!(mapped.kind(), ErrorKind::Target);
        let text = mapped.to_string();
        assert!(text.contains("rejected the credentials") && !text.contains("FQoGZXIvYXdzEToken"), "{text}");
    }

    #[test]
    fn transience_comes_from_the_clients_error_kind_not_the_text() {
        use object_store::client::{HttpError, HttpErrorKind as K};
        let http = |kind, text: &str| object_store::Error::Generic { store: "S3", source: Box::new(HttpError::new(kind, std::io::Error::other(text.to_string()))) };
        let r = Redact::default();
        for kind in [K::Connect, K::Request, K::Timeout, K::Interrupted] {
            assert!(map_err(http(kind, "reset"), "reading s3://b/k", Side::Read, &r).is_transient(), "{kind:?}");
        }
        // A timeout named in a body is not one: only the kind counts.
        assert!(!map_err(http(K::Decode, "operation timed out"), "reading s3://b/k", Side::Read, &r).is_transient());
        let denied = object_store::Error::PermissionDenied { path: "k".into(), source: "timed out".into() };
        assert!(!map_err(denied, "reading s3://b/k", Side::Read, &r).is_transient());
    }
}
