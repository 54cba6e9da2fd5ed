//! Client keys and tenants: the key table is held by SHA-256 digest, and a tenant is
//! named in metrics, logs and budgets by its label.

use std::collections::HashMap;
use std::net::SocketAddr;

use axum::http::{HeaderMap, header};

use crate::Scope;

/// Who a client key belongs to, and which policy's stacks serve it.
#[derive(Clone, Debug)]
pub(crate) struct Tenant {
    pub(crate) scope: Scope,
    /// As the metrics and the logs name it: "org", or "org:domain".
    pub(crate) label: String,
    /// The index of its policy's stacks.
    pub(crate) stacks: usize,
    /// Its own body limit, in place of the server's.
    pub(crate) max_body_bytes: Option<usize>,
}

/// The tenant of a request's key, `Ok(None)` when there is no key table, or the 401
/// message.
pub(crate) fn tenant<'a>(
    keys: Option<&'a HashMap<[u8; 32], Tenant>>,
    headers: &HeaderMap,
) -> Result<Option<&'a Tenant>, &'static str> {
    let Some(keys) = keys else {
        return Ok(None);
    };
    let key = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
        .ok_or("an API key is required (Authorization: Bearer, or x-api-key)")?;
    keys.get(&key_digest(key.trim()))
        .map(Some)
        .ok_or("the API key is not known to this server")
}

/// A tenant as the metrics, the logs and the config's `[budgets]` name it: `org`, or
/// `org:domain`; `-` for a request without a tenant (no key table). Within each part a
/// `%`, a `:` and a leading `-` are percent-encoded (`%25`, `%3A`, `%2D`), so that
/// distinct tenants never share a label: org `acme:support` is `acme%3Asupport`, org
/// `acme` with domain `support` is `acme:support`, and an org named `-` is `%2D`.
/// (Percent-encoding, unlike a backslash, needs no escaping in Prometheus text.)
pub fn tenant_label(scope: &Scope) -> String {
    match (&scope.org, &scope.domain) {
        (Some(org), Some(domain)) => format!("{}:{}", escaped(org), escaped(domain)),
        (Some(org), None) => escaped(org),
        _ => "-".to_owned(),
    }
}

/// One part of a label, escaped as [`tenant_label`] says.
fn escaped(part: &str) -> String {
    let mut out = String::with_capacity(part.len());
    for (i, c) in part.char_indices() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            '-' if i == 0 => out.push_str("%2D"),
            c => out.push(c),
        }
    }
    out
}

/// The longest session id kept as the client sent it; a longer one is replaced by its
/// digest.
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// The session id every per-session store keys by: the client's, or for one longer than
/// [`MAX_SESSION_ID_BYTES`] `sha256:` and its digest in hex (71 bytes), so that a client
/// cannot make each session's entries as large as it likes.
pub(crate) fn session_id(sent: &str) -> std::borrow::Cow<'_, str> {
    if sent.len() <= MAX_SESSION_ID_BYTES {
        return std::borrow::Cow::Borrowed(sent);
    }
    let digest = key_digest(sent);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in digest {
        use std::fmt::Write;
        let _ = write!(out, "{byte:02x}");
    }
    std::borrow::Cow::Owned(out)
}

/// The SHA-256 digest of a client key, as the key table holds it.
pub fn key_digest(key: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(key.as_bytes()).into()
}

/// A digest written as 64 hex digits (the config's `sha256`), or what is wrong with it.
pub fn parse_digest(hex: &str) -> Result<[u8; 32], String> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return Err(format!(
            "a key digest must be 64 hex digits (SHA-256), not {} characters",
            hex.chars().count()
        ));
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("a key digest must be hex digits: {hex:?}"))?;
    }
    Ok(out)
}

/// Refuses an address other than loopback: a server without a key table serves whoever
/// reaches it, on the operator's upstream keys.
pub fn check_listen(addr: SocketAddr) -> Result<(), String> {
    if addr.ip().is_loopback() {
        Ok(())
    } else {
        Err(format!(
            "refusing to listen on {addr}: without a key table the server is single-tenant and \
             serves only loopback (127.0.0.1 or ::1)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_tenants_never_share_a_label() {
        let label = |org: &str, domain: Option<&str>| {
            let mut scope = Scope::org(org);
            if let Some(d) = domain {
                scope = scope.with_domain(d);
            }
            tenant_label(&scope)
        };
        assert_eq!(label("acme", None), "acme");
        assert_eq!(label("acme", Some("support")), "acme:support");
        assert_eq!(label("acme:support", None), "acme%3Asupport");
        assert_eq!(label("-", None), "%2D");
        assert_eq!(label("a-b", None), "a-b");
        assert_eq!(tenant_label(&Scope::default()), "-");
        let all = [
            label("acme", Some("support")),
            label("acme:support", None),
            label("acme%3Asupport", None),
            label("acme", Some(":support")),
            label("-", None),
            tenant_label(&Scope::default()),
        ];
        let distinct: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
    }

    #[test]
    fn a_long_session_id_is_its_digest() {
        assert_eq!(session_id("build-42"), "build-42");
        let edge = "é".repeat(MAX_SESSION_ID_BYTES / 2);
        assert_eq!(session_id(&edge), edge.as_str());
        let long = "s".repeat(100_000);
        let hashed = session_id(&long);
        assert!(
            hashed.starts_with("sha256:") && hashed.len() == 71,
            "{hashed}"
        );
        // Distinct ids stay distinct, however long their common prefix.
        let other = format!("{}t", "s".repeat(99_999));
        assert_ne!(session_id(&other), hashed);
        assert_eq!(session_id(&long), hashed);
    }
}
