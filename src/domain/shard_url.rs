//! `ShardUrl`: the base URL of a planfiles shard (`http://10.0.0.2:8080`), as a tenant move names its source and target.
use std::fmt;

/// `http://` or `https://`, then a host (and port) and optionally a path, without spaces,
/// controls, a query, a fragment or user info, at most 512 bytes; a trailing `/` is dropped so
/// that `<url>/git/<tenant>.git` is the clone URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardUrl(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardUrlError {
    #[error("a shard URL starts with http:// or https://")]
    Scheme,
    #[error("a shard URL names a host")]
    NoHost,
    #[error("a shard URL has no spaces, control characters, '?', '#' or '@'")]
    Character,
    #[error("a shard URL is at most 512 bytes")]
    Length,
}

impl ShardUrl {
    pub const MAX_LEN: usize = 512;

    pub fn parse(raw: &str) -> Result<Self, ShardUrlError> {
        if raw.len() > Self::MAX_LEN {
            return Err(ShardUrlError::Length);
        }
        let rest = raw
            .strip_prefix("http://")
            .or_else(|| raw.strip_prefix("https://"))
            .ok_or(ShardUrlError::Scheme)?;
        if raw
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "?#@".contains(c))
        {
            return Err(ShardUrlError::Character);
        }
        if rest.is_empty() || rest.starts_with('/') || rest.starts_with(':') {
            return Err(ShardUrlError::NoHost);
        }
        Ok(Self(raw.trim_end_matches('/').to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Where this shard serves the tenant's repository to git (`/git/<tenant>.git`).
    pub fn clone_url(&self, tenant: &super::TenantId) -> String {
        format!("{}/git/{tenant}.git", self.0)
    }
}

impl fmt::Display for ShardUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_url_is_http_or_https_with_a_host() {
        assert_eq!(
            ShardUrl::parse("http://10.0.0.2:8080/").unwrap().as_str(),
            "http://10.0.0.2:8080"
        );
        assert!(ShardUrl::parse("https://shard-b.internal/planfiles").is_ok());
        let cases = [
            ("ftp://x", ShardUrlError::Scheme),
            ("10.0.0.2:8080", ShardUrlError::Scheme),
            ("http://", ShardUrlError::NoHost),
            ("http:///x", ShardUrlError::NoHost),
            ("http://a b", ShardUrlError::Character),
            ("http://a\n", ShardUrlError::Character),
            ("http://user@host", ShardUrlError::Character),
            ("http://host/?q", ShardUrlError::Character),
        ];
        for (raw, want) in cases {
            assert_eq!(ShardUrl::parse(raw), Err(want), "{raw:?}");
        }
        let long = format!("http://{}", "a".repeat(600));
        assert_eq!(ShardUrl::parse(&long), Err(ShardUrlError::Length));
    }

    #[test]
    fn the_clone_url_is_under_git() {
        let url = ShardUrl::parse("http://b:8080/").unwrap();
        let tenant = crate::domain::TenantId::parse("acme").unwrap();
        assert_eq!(url.clone_url(&tenant), "http://b:8080/git/acme.git");
    }
}
