//! The claims a token carries and `Principal`, the caller they describe.
use super::AuthError;
use crate::domain::{Identity, PlanFile, TenantId};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
pub(super) struct Claims {
    /// Checked by jsonwebtoken's validation; required here too.
    exp: serde_json::Number,
    /// A NumericDate (RFC 7519): seconds since the epoch, possibly with a fraction.
    pub(super) iat: Option<NumericDate>,
    tenant_id: String,
    /// Absent and `null` both grant nothing.
    #[serde(default, deserialize_with = "list_or_null")]
    permissions: Vec<String>,
    sub: Option<String>,
    email: Option<String>,
    name: Option<String>,
}

/// An RFC 7519 NumericDate: a non-negative, finite JSON number of seconds since the epoch,
/// whole or fractional (`1700000000`, `1.7e9`, `1700000000.25`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub(super) struct NumericDate(f64);

impl NumericDate {
    /// Whether this instant lies after `secs` (whole seconds since the epoch).
    pub(super) fn is_after(self, secs: u64) -> bool {
        self.0 > secs as f64
    }
}

impl<'de> Deserialize<'de> for NumericDate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = serde_json::Number::deserialize(d)?;
        match n.as_f64() {
            Some(secs) if secs.is_finite() && secs >= 0.0 => Ok(Self(secs)),
            _ => Err(serde::de::Error::custom(
                "a NumericDate must be a non-negative number of seconds",
            )),
        }
    }
}

fn list_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(d)?.unwrap_or_default())
}

#[derive(Debug, Serialize)]
pub(super) struct MintedClaims<'a> {
    pub(super) exp: u64,
    pub(super) iat: u64,
    pub(super) tenant_id: &'a str,
    pub(super) permissions: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sub: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) email: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) name: Option<&'a str>,
}

impl Claims {
    /// `exp` in whole seconds, rounded down (a validated `exp` is a non-negative number).
    pub(super) fn exp_secs(&self) -> u64 {
        self.exp
            .as_u64()
            .unwrap_or_else(|| self.exp.as_f64().unwrap_or(0.0).max(0.0) as u64)
    }

    /// The caller, whose token is accepted until `valid_until` (unix seconds: `exp` plus the
    /// configured leeway).
    pub(super) fn into_principal(self, valid_until: u64) -> Result<Principal, AuthError> {
        let tenant = TenantId::parse(&self.tenant_id)
            .map_err(|e| AuthError::Invalid(format!("tenant_id: {e}")))?;
        Ok(Principal(std::sync::Arc::new(Caller {
            tenant,
            valid_until,
            permissions: self.permissions,
            sub: self.sub,
            email: self.email,
            name: self.name,
        })))
    }
}

/// A verified caller. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Principal(std::sync::Arc<Caller>);

#[derive(Debug)]
struct Caller {
    tenant: TenantId,
    /// The last unix second at which the token is accepted (`exp` plus the leeway).
    valid_until: u64,
    permissions: Vec<String>,
    sub: Option<String>,
    email: Option<String>,
    name: Option<String>,
}

impl Principal {
    pub fn tenant(&self) -> &TenantId {
        &self.0.tenant
    }

    /// When the token stops being accepted (the second after `exp` plus the configured
    /// leeway): what still runs on it, an event stream, ends then.
    pub fn valid_until(&self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(self.0.valid_until + 1)
    }

    /// The token's `sub`, if it has one.
    pub fn sub(&self) -> Option<&str> {
        self.0.sub.as_deref()
    }

    pub fn has(&self, permission: &str) -> bool {
        self.0.permissions.iter().any(|p| p == permission)
    }

    /// Reading a file needs its read permission or its write permission.
    pub fn can_read(&self, file: PlanFile) -> bool {
        self.has(file.read_permission()) || self.has(file.write_permission())
    }

    pub fn can_write(&self, file: PlanFile) -> bool {
        self.has(file.write_permission())
    }

    /// The commit author: `name` and `email`, falling back to `sub` and `<sub>@<tenant>`.
    pub fn author(&self) -> Identity {
        let name = self
            .0
            .name
            .as_deref()
            .or(self.0.sub.as_deref())
            .unwrap_or("");
        let email = match (&self.0.email, &self.0.sub) {
            (Some(e), _) => e.clone(),
            (None, Some(sub)) => format!("{sub}@{}", self.0.tenant),
            (None, None) => String::new(),
        };
        Identity::new(name, &email, self.0.tenant.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(sub: Option<&str>, email: Option<&str>, name: Option<&str>) -> Principal {
        Principal(std::sync::Arc::new(Caller {
            tenant: TenantId::parse("acme").unwrap(),
            valid_until: u64::MAX - 1,
            permissions: vec![
                "jit.integrations.write".into(),
                "jit.preferences.read".into(),
            ],
            sub: sub.map(Into::into),
            email: email.map(Into::into),
            name: name.map(Into::into),
        }))
    }

    #[test]
    fn write_permission_grants_read() {
        let p = principal(None, None, None);
        assert!(p.can_read(PlanFile::Integration) && p.can_write(PlanFile::Integration));
        assert!(p.can_read(PlanFile::Configuration) && !p.can_write(PlanFile::Configuration));
    }

    #[test]
    fn author_falls_back_to_sub_then_unknown() {
        let a = principal(Some("svc"), Some("a@b.c"), Some("Ann")).author();
        assert_eq!((a.name(), a.email()), ("Ann", "a@b.c"));
        let a = principal(Some("svc"), None, None).author();
        assert_eq!((a.name(), a.email()), ("svc", "svc@acme"));
        let a = principal(None, None, None).author();
        assert_eq!((a.name(), a.email()), ("unknown", "unknown@acme"));
    }
}
