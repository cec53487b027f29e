//! Authentication: bearer JWTs verified with one configured algorithm and key (jsonwebtoken).
mod claims;
mod verified;

pub use claims::Principal;

use crate::config::{Algorithm, AuthConfig};
use crate::domain::TenantId;
use jsonwebtoken::{DecodingKey, EncodingKey, Header, Validation};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use verified::VerifiedTokens;

/// Every permission the service checks, with what it grants: what `planfiles token` accepts
/// without `--custom-permission`.
pub const PERMISSIONS: [(&str, &str); 9] = [
    ("jit.integrations.read", "read the integration file"),
    (
        "jit.integrations.write",
        "read and write the integration file",
    ),
    ("jit.preferences.read", "read the configuration file"),
    (
        "jit.preferences.write",
        "read and write the configuration file",
    ),
    (
        "planfiles.repos.read",
        "clone and fetch the tenant's repository",
    ),
    (
        "planfiles.repos.import",
        "import the tenant into a shard (tenant move)",
    ),
    (
        "planfiles.webhooks.write",
        "manage the tenant's webhook subscriptions",
    ),
    (
        "planfiles.proposals.approve",
        "approve another person's proposals (and read their diffs)",
    ),
    (
        "planfiles.metrics.read",
        "read /metrics when metrics.require_token is on",
    ),
];

/// Why a request is not authenticated. The token itself is never part of the error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header.
    #[error("a bearer token is required")]
    Missing,
    /// An `Authorization` header that is not `Bearer <token>` (another scheme): no bearer
    /// credentials, so as `Missing` (RFC 6750), with what is wrong with it.
    #[error("a bearer token is required: {0}")]
    NotBearer(String),
    /// A token was sent and refused.
    #[error("the token is not valid: {0}")]
    Invalid(String),
}

#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error("reading the public key {path}: {source}")]
    KeyFile {
        path: String,
        source: std::io::Error,
    },
    #[error("the public key is not a valid PEM key for {alg:?}: {message}")]
    BadKey { alg: Algorithm, message: String },
    #[error("the JWT library failed its start-up self-test: {0}")]
    SelfTest(String),
    #[error("cannot sign: {0}")]
    Sign(String),
}

/// Verifies tokens. Cheap to clone.
#[derive(Clone)]
pub struct Verifier {
    key: DecodingKey,
    validation: Validation,
    leeway: u64,
    /// Tokens already verified: most clients send the same token many times.
    verified: Arc<VerifiedTokens>,
}

fn jwt_alg(alg: Algorithm) -> jsonwebtoken::Algorithm {
    match alg {
        Algorithm::HS256 => jsonwebtoken::Algorithm::HS256,
        Algorithm::RS256 => jsonwebtoken::Algorithm::RS256,
        Algorithm::ES256 => jsonwebtoken::Algorithm::ES256,
    }
}

impl Verifier {
    /// Builds the verifier from config, reading the PEM key for RS256/ES256.
    pub fn from_config(config: &AuthConfig) -> Result<Self, AuthSetupError> {
        let key = match config.algorithm {
            Algorithm::HS256 => DecodingKey::from_secret(config.secret.as_bytes()),
            alg @ (Algorithm::RS256 | Algorithm::ES256) => {
                let path = config.public_key_file.clone().unwrap_or_default();
                let pem = std::fs::read(&path).map_err(|source| AuthSetupError::KeyFile {
                    path: path.display().to_string(),
                    source,
                })?;
                let parsed = if alg == Algorithm::RS256 {
                    DecodingKey::from_rsa_pem(&pem)
                } else {
                    DecodingKey::from_ec_pem(&pem)
                };
                parsed.map_err(|e| AuthSetupError::BadKey {
                    alg,
                    message: e.to_string(),
                })?
            }
        };
        let mut validation = Validation::new(jwt_alg(config.algorithm));
        // A configured iss/aud must also be present, not only match when present.
        let mut required = vec!["exp"];
        required.extend(config.issuer.as_ref().map(|_| "iss"));
        required.extend(config.audience.as_ref().map(|_| "aud"));
        validation.set_required_spec_claims(&required);
        validation.leeway = config.leeway_secs;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        match &config.audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &config.issuer {
            validation.set_issuer(&[iss]);
        }
        Ok(Self {
            key,
            validation,
            leeway: config.leeway_secs,
            verified: Arc::default(),
        })
    }

    /// Verifies an `Authorization` header value and returns who is calling.
    pub fn verify_header(&self, header: Option<&[u8]>) -> Result<Principal, AuthError> {
        let header = header.ok_or(AuthError::Missing)?;
        match bearer_token(header) {
            Some(token) => self.verify_bytes(token),
            None => Err(not_bearer(header)),
        }
    }

    /// Verifies a token: signature with the configured algorithm, `exp`, `nbf`, `iat`,
    /// `iss`/`aud` when configured, and the service's own claims.
    pub fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        self.verify_bytes(token.as_bytes())
    }

    /// [`Verifier::verify`] on a token's bytes: a remembered token (valid UTF-8 when it was
    /// verified) is found by comparing bytes; bytes that are not UTF-8 are a token that was
    /// sent and is not valid.
    fn verify_bytes(&self, token: &[u8]) -> Result<Principal, AuthError> {
        let now = now();
        if let Some(principal) = self.verified.get(token, now, self.leeway) {
            return Ok(principal);
        }
        let token = std::str::from_utf8(token)
            .map_err(|_| AuthError::Invalid("the token is not UTF-8".into()))?;
        let data = jsonwebtoken::decode::<claims::Claims>(token, &self.key, &self.validation)
            .map_err(|e| AuthError::Invalid(self.explain(&e, token)))?;
        let claims = data.claims;
        if let Some(iat) = claims.iat {
            if iat.is_after(now + self.leeway) {
                return Err(AuthError::Invalid("issued in the future".into()));
            }
        }
        let exp = claims.exp_secs();
        let principal = claims.into_principal(exp.saturating_add(self.leeway))?;
        self.verified.insert(token, principal.clone(), exp);
        Ok(principal)
    }
}

impl Verifier {
    /// Why `token` was refused, in words a caller can act on: the library's error kinds are
    /// its own business. The token's claims are read (unverified) only to name a moment.
    fn explain(&self, e: &jsonwebtoken::errors::Error, token: &str) -> String {
        use jsonwebtoken::errors::ErrorKind as K;
        let claim_time = |name: &str| {
            jsonwebtoken::dangerous::insecure_decode::<serde_json::Value>(token)
                .ok()
                .and_then(|d| d.claims.get(name).and_then(serde_json::Value::as_u64))
                .map(crate::domain::timestamp::unix)
        };
        let expected = format!("{:?}", self.validation.algorithms[0]);
        match e.kind() {
            K::InvalidToken => "it is not a JWT (three base64url parts separated by dots)".into(),
            K::InvalidSignature => "its signature does not match: it was signed with another \
                 key than this service's (auth.secret, or the public key)"
                .into(),
            K::InvalidAlgorithm | K::InvalidAlgorithmName | K::UnsupportedAlgorithm => {
                let got = jsonwebtoken::decode_header(token)
                    .map(|h| format!("{:?}", h.alg))
                    .unwrap_or_else(|_| "another algorithm".into());
                format!("it is signed with {got}; this service accepts {expected} only")
            }
            K::ExpiredSignature => match claim_time("exp") {
                Some(at) => format!("it expired at {at} (with {} s of leeway)", self.leeway),
                None => "it has expired".into(),
            },
            K::ImmatureSignature => match claim_time("nbf") {
                Some(at) => format!("it is not valid before {at}"),
                None => "it is not valid yet".into(),
            },
            K::MissingRequiredClaim(claim) => format!("it has no `{claim}` claim"),
            K::InvalidClaimFormat(claim) => format!("its `{claim}` claim has the wrong type"),
            K::InvalidIssuer => "its issuer (`iss`) is not the one this service accepts".into(),
            K::InvalidAudience => "its audience (`aud`) is not the one this service accepts".into(),
            K::InvalidSubject => "its subject (`sub`) is not accepted".into(),
            K::Base64(_) => "a part of it is not base64url text".into(),
            K::Utf8(_) => "its header or claims are not UTF-8 text".into(),
            K::Json(detail) => {
                let detail = detail.to_string();
                let detail = detail.split(" at line").next().unwrap_or_default();
                match detail
                    .strip_prefix("missing field `")
                    .and_then(|rest| rest.split('`').next())
                {
                    Some(claim) => format!("it has no `{claim}` claim"),
                    None => format!(
                        "its header or claims are not JSON of the expected shape ({detail})"
                    ),
                }
            }
            K::InvalidEcdsaKey | K::InvalidEddsaKey | K::InvalidRsaKey(_) | K::InvalidKeyFormat => {
                "this service's key cannot verify it".into()
            }
            _ => "it could not be verified".into(),
        }
    }
}

/// An `Authorization` header that is not `Bearer <token>`: the scheme it names (a short word
/// only; the rest may be a credential and is never echoed).
fn not_bearer(header: &[u8]) -> AuthError {
    let header = header.trim_ascii();
    let word: String = String::from_utf8_lossy(header)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .chars()
        .take(20)
        .collect();
    if header.is_empty() {
        return AuthError::NotBearer("the Authorization header is empty".into());
    }
    let says = if word.eq_ignore_ascii_case("bearer") {
        "the `Bearer` scheme is there but no token follows it".to_owned()
    } else if word.chars().all(|c| c.is_ascii_alphabetic()) && header.contains(&b' ') {
        format!("the Authorization header names the `{word}` scheme; it must be `Bearer <token>`")
    } else {
        "the Authorization header must be `Bearer <token>` (the `Bearer ` is missing)".to_owned()
    };
    AuthError::NotBearer(says)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The token of an `Authorization: Bearer <token>` header value (the scheme in any case),
/// or `None` for another scheme or no token.
pub fn bearer_token(header: &[u8]) -> Option<&[u8]> {
    let header = header.trim_ascii();
    let space = header.iter().position(|&b| b == b' ')?;
    header[..space]
        .eq_ignore_ascii_case(b"bearer")
        .then(|| header[space + 1..].trim_ascii())
}

/// What `planfiles token` puts in a token.
#[derive(Debug, Clone)]
pub struct MintRequest {
    pub tenant: TenantId,
    pub permissions: Vec<String>,
    pub sub: Option<String>,
    pub email: Option<String>,
    pub name: Option<String>,
    pub ttl_secs: u64,
}

/// Signs a token with an HS256 secret.
pub fn mint_hs256(secret: &str, req: &MintRequest) -> Result<String, AuthSetupError> {
    let iat = now();
    let claims = claims::MintedClaims {
        exp: iat + req.ttl_secs,
        iat,
        tenant_id: req.tenant.as_str(),
        permissions: &req.permissions,
        sub: req.sub.as_deref(),
        email: req.email.as_deref(),
        name: req.name.as_deref(),
    };
    jsonwebtoken::encode(
        &Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .map_err(|e| AuthSetupError::Sign(e.to_string()))
}

/// Signs and verifies a token with a throwaway key. jsonwebtoken panics at run time when no
/// crypto backend was compiled in; this turns that into a start-up error instead.
pub fn self_test() -> Result<(), AuthSetupError> {
    let outcome = std::panic::catch_unwind(|| {
        let config = AuthConfig {
            secret: "self-test-secret-0123456789".into(),
            ..AuthConfig::default()
        };
        let verifier = Verifier::from_config(&config)?;
        let tenant = TenantId::parse("self-test").expect("valid id");
        let req = MintRequest {
            tenant: tenant.clone(),
            permissions: vec!["p".into()],
            sub: None,
            email: None,
            name: None,
            ttl_secs: 60,
        };
        let token = mint_hs256(&config.secret, &req)?;
        let who = verifier
            .verify(&token)
            .map_err(|e| AuthSetupError::SelfTest(e.to_string()))?;
        if who.tenant() != &tenant {
            return Err(AuthSetupError::SelfTest(
                "the verified tenant differs".into(),
            ));
        }
        let forged = format!("{}x", &token[..token.len() - 1]);
        match verifier.verify(&forged) {
            Err(_) => Ok(()),
            Ok(_) => Err(AuthSetupError::SelfTest(
                "a forged signature was accepted".into(),
            )),
        }
    });
    outcome.unwrap_or_else(|_| Err(AuthSetupError::SelfTest("the JWT library panicked".into())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_test_passes_with_the_compiled_backend() {
        self_test().unwrap();
    }

    #[test]
    fn header_parsing() {
        let config = AuthConfig::default();
        let v = Verifier::from_config(&config).unwrap();
        assert_eq!(v.verify_header(None).unwrap_err(), AuthError::Missing);
        assert_eq!(
            v.verify_header(Some(b"Basic abc")).unwrap_err(),
            AuthError::NotBearer(
                "the Authorization header names the `Basic` scheme; it must be `Bearer <token>`"
                    .into()
            )
        );
        assert!(matches!(
            v.verify_header(Some(b"eyJhbGciOi.x.y")),
            Err(AuthError::NotBearer(m)) if m.contains("the `Bearer ` is missing")
        ));
        assert!(matches!(
            v.verify_header(Some(b"Bearer abc")),
            Err(AuthError::Invalid(_))
        ));
        let req = MintRequest {
            tenant: TenantId::parse("acme").unwrap(),
            permissions: vec![],
            sub: Some("ci".into()),
            email: None,
            name: None,
            ttl_secs: 60,
        };
        let token = mint_hs256(&config.secret, &req).unwrap();
        let who = v
            .verify_header(Some(format!("bearer  {token}").as_bytes()))
            .unwrap();
        assert_eq!(who.tenant().as_str(), "acme");
    }

    fn mint(config: &AuthConfig, ttl_secs: u64) -> String {
        let req = MintRequest {
            tenant: TenantId::parse("acme").unwrap(),
            permissions: vec!["jit.integrations.write".into()],
            sub: None,
            email: None,
            name: None,
            ttl_secs,
        };
        mint_hs256(&config.secret, &req).unwrap()
    }

    #[test]
    fn a_remembered_token_expires_as_a_verified_one_would() {
        let config = AuthConfig::default();
        let v = Verifier::from_config(&config).unwrap();
        let token = mint(&config, 60);
        // The token's own exp (a second may tick between minting and now).
        let claims = jsonwebtoken::dangerous::insecure_decode::<serde_json::Value>(&token).unwrap();
        let exp = claims.claims["exp"].as_u64().unwrap();
        assert!(v.verify(&token).is_ok());
        let leeway = config.leeway_secs;
        assert!(v
            .verified
            .get(token.as_bytes(), exp + leeway, leeway)
            .is_some());
        assert!(
            v.verified
                .get(token.as_bytes(), exp + leeway + 1, leeway)
                .is_none(),
            "past exp and the leeway, the full check runs again"
        );
    }

    #[test]
    fn a_remembered_token_is_matched_whole_through_the_header() {
        let config = AuthConfig::default();
        let v = Verifier::from_config(&config).unwrap();
        let token = mint(&config, 60);
        let header = |t: &str| format!("Bearer {t}\t").into_bytes();
        assert!(v.verify_header(Some(&header(&token))).is_ok());
        assert!(v.verified.get(token.as_bytes(), now(), 0).is_some());
        // Same signature, another payload: the remembered token must not vouch for it.
        let (head, rest) = token.split_once('.').unwrap();
        let (payload, signature) = rest.split_once('.').unwrap();
        let other = mint(&config, 120);
        let other_payload = other.split('.').nth(1).unwrap();
        assert_ne!(payload, other_payload);
        let spliced = format!("{head}.{other_payload}.{signature}");
        assert!(matches!(
            v.verify_header(Some(&header(&spliced))),
            Err(AuthError::Invalid(_))
        ));
        // Bytes that are not UTF-8 are a token sent and refused.
        assert!(matches!(
            v.verify_header(Some(b"Bearer \xff\xfe")),
            Err(AuthError::Invalid(_))
        ));
    }

    #[test]
    fn refused_tokens_are_not_remembered() {
        let config = AuthConfig::default();
        let v = Verifier::from_config(&config).unwrap();
        let token = mint(&config, 60);
        let forged = format!("{}x", &token[..token.len() - 1]);
        for _ in 0..2 {
            assert!(v.verify(&forged).is_err());
        }
        assert!(v.verified.get(forged.as_bytes(), now(), 30).is_none());
        // Another secret: the same token is refused by a verifier that never saw it.
        let other = Verifier::from_config(&AuthConfig {
            secret: "another-secret-0123456789".into(),
            ..AuthConfig::default()
        })
        .unwrap();
        assert!(v.verify(&token).is_ok());
        assert!(other.verify(&token).is_err());
    }
}
