//! Redis errors as [`StoreError`]s, and URLs with their secrets taken out.

use llm_context_layers::{StoreError, StoreErrorKind};

/// A store error for a failed Redis operation. Redis' own messages carry no URL, but a
/// password is scrubbed anyway in case a future version echoes one.
pub(crate) fn store_error(
    what: &str,
    error: &redis_client::RedisError,
    secret: Option<&str>,
) -> StoreError {
    let kind = if is_auth_error(error) {
        StoreErrorKind::Authentication
    } else if error.is_timeout() {
        StoreErrorKind::Timeout
    } else if error.is_connection_refusal() || error.is_io_error() || error.is_connection_dropped()
    {
        StoreErrorKind::Unavailable
    } else {
        StoreErrorKind::Other
    };
    let mut message = format!("redis {what}: {error}");
    if let Some(secret) = secret.filter(|s| !s.is_empty()) {
        message = message.replace(secret, "***");
    }
    StoreError::new(kind, message)
}

/// Whether the server refused the credentials: a wrong password or user
/// (`WRONGPASS`, redis-rs' own authentication failure), none given where one is required
/// (`NOAUTH`), or an ACL user without the permission a command needs (`NOPERM`).
pub(crate) fn is_auth_error(error: &redis_client::RedisError) -> bool {
    error.kind() == redis_client::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("NOAUTH" | "WRONGPASS" | "NOPERM"))
}

/// Whether `error` says the server could not be reached or answered that it is not ready
/// (loading its data set, a failover in progress): an outage, which passes.
pub(crate) fn is_outage(error: &redis_client::RedisError) -> bool {
    use redis_client::{ErrorKind, ServerErrorKind};
    error.is_io_error()
        || error.is_timeout()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || matches!(
            error.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ClusterDown
            )
        )
}

/// The password of a Redis URL (`redis://user:PASSWORD@host` or `?pass=PASSWORD`).
pub(crate) fn url_password(url: &str) -> Option<String> {
    let parts = UrlParts::split(url)?;
    if let Some((_, password)) = parts.userinfo.and_then(|u| u.split_once(':'))
        && !password.is_empty()
    {
        return Some(password.to_owned());
    }
    parts
        .query
        .and_then(|q| {
            q.split('&').find_map(|pair| {
                pair.strip_prefix("pass=")
                    .or_else(|| pair.strip_prefix("password="))
            })
        })
        .map(str::to_owned)
}

/// `url` with its password replaced by `***`, fit for logs and error messages. A string
/// that does not look like a URL is not shown at all: it may be a bare secret.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(parts) = UrlParts::split(url) else {
        return "(an unreadable URL)".to_owned();
    };
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.scheme);
    out.push_str("://");
    if let Some(userinfo) = parts.userinfo {
        match userinfo.split_once(':') {
            Some((user, password)) if !password.is_empty() => {
                out.push_str(user);
                out.push_str(":***");
            }
            _ => out.push_str(userinfo),
        }
        out.push('@');
    }
    out.push_str(parts.rest);
    if let Some(query) = parts.query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name @ ("pass" | "password"), _)) => format!("{name}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

struct UrlParts<'a> {
    scheme: &'a str,
    userinfo: Option<&'a str>,
    /// Host, port and path.
    rest: &'a str,
    query: Option<&'a str>,
}

impl<'a> UrlParts<'a> {
    fn split(url: &'a str) -> Option<Self> {
        let (scheme, after) = url.split_once("://")?;
        let (before_query, query) = match after.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (after, None),
        };
        let authority_end = before_query.find('/').unwrap_or(before_query.len());
        // The password may itself contain '@': the userinfo ends at the last one.
        let (userinfo, rest) = match before_query[..authority_end].rfind('@') {
            Some(at) => (Some(&before_query[..at]), &before_query[at + 1..]),
            None => (None, before_query),
        };
        Some(Self {
            scheme,
            userinfo,
            rest,
            query,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://:hunter2@cache.internal:6380/2"),
            "redis://:***@cache.internal:6380/2"
        );
        assert_eq!(
            redact_url("rediss://app:p@ss:w0rd@cache:6379/"),
            "rediss://app:***@cache:6379/"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=1&pass=hunter2"),
            "redis+unix:///run/redis.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
        assert_eq!(redact_url("redis://user@host/"), "redis://user@host/");
        assert_eq!(redact_url("hunter2"), "(an unreadable URL)");
    }

    #[test]
    fn the_password_is_found_wherever_it_is() {
        assert_eq!(
            url_password("redis://:hunter2@h/").as_deref(),
            Some("hunter2")
        );
        assert_eq!(url_password("redis://u:p@ss@h/").as_deref(), Some("p@ss"));
        assert_eq!(
            url_password("redis+unix:///s?pass=x1").as_deref(),
            Some("x1")
        );
        assert_eq!(url_password("redis://h/"), None);
    }
}
