//! `TenantId`: the only way a tenant name reaches storage, so it can never escape the data dir.
use std::fmt;

/// A tenant identifier: 1-64 of `[A-Za-z0-9._-]`, starting with a letter or digit,
/// never containing `..`, never ending in `.git` (any case).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TenantIdError {
    #[error("tenant id must be 1 to 64 characters long")]
    Length,
    #[error("tenant id must start with a letter or a digit")]
    Start,
    #[error("tenant id may only contain letters, digits, '.', '_' and '-'")]
    Character,
    #[error("tenant id must not contain '..'")]
    DotDot,
    #[error("tenant id must not end in '.git'")]
    GitSuffix,
}

impl TenantId {
    pub const MAX_LEN: usize = 64;

    pub fn parse(raw: &str) -> Result<Self, TenantIdError> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN {
            return Err(TenantIdError::Length);
        }
        if !raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(TenantIdError::Character);
        }
        if !raw.as_bytes()[0].is_ascii_alphanumeric() {
            return Err(TenantIdError::Start);
        }
        if raw.contains("..") {
            return Err(TenantIdError::DotDot);
        }
        if raw.to_ascii_lowercase().ends_with(".git") {
            return Err(TenantIdError::GitSuffix);
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for TenantId {
    type Err = TenantIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for ok in [
            "acme",
            "a",
            "A1",
            "0day",
            "acme-corp_eu.prod",
            &"x".repeat(64),
        ] {
            assert_eq!(TenantId::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn refuses_each_rule() {
        let cases: &[(&str, TenantIdError)] = &[
            ("", TenantIdError::Length),
            (&"x".repeat(65), TenantIdError::Length),
            ("-acme", TenantIdError::Start),
            (".acme", TenantIdError::Start),
            ("_acme", TenantIdError::Start),
            ("a/b", TenantIdError::Character),
            ("a\\b", TenantIdError::Character),
            ("a\0b", TenantIdError::Character),
            ("acmé", TenantIdError::Character),
            ("аcme", TenantIdError::Character), // Cyrillic а
            ("%2e%2e", TenantIdError::Character),
            ("a b", TenantIdError::Character),
            ("a..b", TenantIdError::DotDot),
            ("acme.git", TenantIdError::GitSuffix),
            ("acme.GIT", TenantIdError::GitSuffix),
            ("acme.Git", TenantIdError::GitSuffix),
        ];
        for (raw, want) in cases {
            assert_eq!(TenantId::parse(raw).unwrap_err(), *want, "{raw:?}");
        }
    }
}
