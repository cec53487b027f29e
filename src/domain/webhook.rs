//! Webhook vocabulary: `WebhookId`, `EventType`, `WebhookSecret` (Standard Webhooks' `whsec_` key, never printed) and `WebhookUrl` (an absolute http(s) URL without credentials).
use base64::Engine as _;
use rand::RngCore as _;
use std::fmt;

/// A subscription's id: `wh_` and 26 characters of `a-z0-9` (about 134 bits of randomness).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WebhookId(String);

const ID_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
const ID_LEN: usize = 26;

impl WebhookId {
    pub fn generate() -> Self {
        let mut rng = rand::rng();
        let tail: String = (0..ID_LEN)
            .map(|_| ID_ALPHABET[(rng.next_u32() % ID_ALPHABET.len() as u32) as usize] as char)
            .collect();
        Self(format!("wh_{tail}"))
    }

    /// `None` for anything that is not an id this service makes (so a path segment can never
    /// name a file outside the subscription's folder).
    pub fn parse(raw: &str) -> Option<Self> {
        let tail = raw.strip_prefix("wh_")?;
        (tail.len() == ID_LEN && tail.bytes().all(|b| ID_ALPHABET.contains(&b)))
            .then(|| Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WebhookId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a subscription can ask to be told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventType {
    IntegrationFileUpdated,
    ConfigurationFileUpdated,
    MainReset,
    /// A step of a proposal: `proposal.opened` and the others.
    Proposal(super::StepKind),
}

impl EventType {
    pub const ALL: [EventType; 8] = [
        EventType::IntegrationFileUpdated,
        EventType::ConfigurationFileUpdated,
        EventType::MainReset,
        EventType::Proposal(super::StepKind::Opened),
        EventType::Proposal(super::StepKind::Updated),
        EventType::Proposal(super::StepKind::Approved),
        EventType::Proposal(super::StepKind::Applied),
        EventType::Proposal(super::StepKind::Closed),
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::IntegrationFileUpdated => "integration-file.updated",
            Self::ConfigurationFileUpdated => "configuration-file.updated",
            Self::MainReset => "main.reset",
            Self::Proposal(step) => step.event(),
        }
    }

    /// Whether a subscription to `events` is told of any proposal's step.
    pub fn any_proposal(events: &[EventType]) -> bool {
        events.iter().any(|e| matches!(e, Self::Proposal(_)))
    }

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == raw)
    }

    /// The event a change of `file` is.
    pub fn updated(file: super::PlanFile) -> Self {
        match file {
            super::PlanFile::Integration => Self::IntegrationFileUpdated,
            super::PlanFile::Configuration => Self::ConfigurationFileUpdated,
        }
    }
}

/// The key deliveries are signed with: `whsec_` and the base64 of 32 random bytes. Its
/// `Debug` names no byte of it; its bytes are wiped when it is dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(zeroize::Zeroizing<String>);

impl WebhookSecret {
    pub const PREFIX: &'static str = "whsec_";

    pub fn generate() -> Self {
        let mut key = zeroize::Zeroizing::new([0u8; 32]);
        rand::rng().fill_bytes(key.as_mut());
        Self(zeroize::Zeroizing::new(format!(
            "{}{}",
            Self::PREFIX,
            base64::engine::general_purpose::STANDARD.encode(key.as_ref())
        )))
    }

    /// A stored secret: the prefix and the base64 of 24 to 64 bytes (the Standard Webhooks
    /// libraries accept those).
    pub fn parse(raw: &str) -> Option<Self> {
        let key = raw.strip_prefix(Self::PREFIX)?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(key).ok()?;
        (24..=64)
            .contains(&bytes.len())
            .then(|| Self(zeroize::Zeroizing::new(raw.to_owned())))
    }

    /// The text shown once, at creation, and stored.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The HMAC key: the bytes after the prefix.
    pub fn key(&self) -> zeroize::Zeroizing<Vec<u8>> {
        let key = &self.0[Self::PREFIX.len()..];
        zeroize::Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(key)
                .expect("checked when made"),
        )
    }
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

/// Where deliveries go: an absolute `http`/`https` URL with a host, without user info or a
/// fragment, at most 2,048 bytes. Whether this service may send to it (https, private
/// networks, allowed hosts) is the dispatcher's rule (`webhooks/destination.rs`): it depends
/// on the configuration and on what the name resolves to at each connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl(reqwest::Url);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookUrlError {
    #[error("a webhook URL is at most 2048 bytes")]
    Length,
    #[error("not an absolute URL: {0}")]
    Syntax(String),
    #[error("a webhook URL starts with https:// (or http://)")]
    Scheme,
    #[error("a webhook URL names a host")]
    NoHost,
    #[error("a webhook URL carries no user name or password (they would be listed with it); put credentials in the path or verify the signature")]
    Credentials,
    #[error("a webhook URL has no fragment ('#')")]
    Fragment,
}

impl WebhookUrl {
    pub const MAX_LEN: usize = 2048;

    pub fn parse(raw: &str) -> Result<Self, WebhookUrlError> {
        if raw.len() > Self::MAX_LEN {
            return Err(WebhookUrlError::Length);
        }
        let url = reqwest::Url::parse(raw).map_err(|e| WebhookUrlError::Syntax(e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(WebhookUrlError::Scheme);
        }
        if url.host().is_none() {
            return Err(WebhookUrlError::NoHost);
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(WebhookUrlError::Credentials);
        }
        if url.fragment().is_some() {
            return Err(WebhookUrlError::Fragment);
        }
        Ok(Self(url))
    }

    pub fn url(&self) -> &reqwest::Url {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_made_and_parsed_and_nothing_else_is_an_id() {
        let id = WebhookId::generate();
        assert_eq!(WebhookId::parse(id.as_str()), Some(id.clone()));
        assert_ne!(WebhookId::generate(), id);
        for bad in [
            "",
            "wh_",
            "wh_../../etc/passwd",
            "wh_ABCDEFGHIJKLMNOPQRSTUVWXYZ",
            "xx_abcdefghijklmnopqrstuvwxyz",
            "wh_abcdefghijklmnopqrstuvwxy",
            "wh_abcdefghijklmnopqrstuvwxyz0",
        ] {
            assert_eq!(WebhookId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn secrets_are_32_random_bytes_and_never_printed() {
        let s = WebhookSecret::generate();
        assert!(s.expose().starts_with("whsec_"));
        assert_eq!(s.key().len(), 32);
        assert_eq!(WebhookSecret::parse(s.expose()), Some(s.clone()));
        assert_eq!(format!("{s:?}"), "WebhookSecret(..)");
        assert!(!format!("{s:?}").contains(&s.expose()[6..12]));
        assert_eq!(WebhookSecret::parse("whsec_c2hvcnQ="), None, "5 bytes");
        assert_eq!(
            WebhookSecret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            None
        );
    }

    #[test]
    fn event_types_round_trip() {
        for e in EventType::ALL {
            assert_eq!(EventType::parse(e.as_str()), Some(e));
        }
        assert_eq!(EventType::parse("push"), None);
    }

    #[test]
    fn urls_are_absolute_http_without_credentials() {
        assert!(WebhookUrl::parse("https://hooks.example.com/planfiles?x=1").is_ok());
        assert!(WebhookUrl::parse("http://10.0.0.1:8080/h").is_ok());
        let cases = [
            ("ftp://example.com/", WebhookUrlError::Scheme),
            ("https://user:pw@example.com/", WebhookUrlError::Credentials),
            ("https://example.com/#frag", WebhookUrlError::Fragment),
            ("file:///etc/passwd", WebhookUrlError::Scheme),
        ];
        for (raw, want) in cases {
            assert_eq!(WebhookUrl::parse(raw), Err(want), "{raw}");
        }
        assert!(matches!(
            WebhookUrl::parse("/relative"),
            Err(WebhookUrlError::Syntax(_))
        ));
        let long = format!("https://example.com/{}", "a".repeat(2048));
        assert_eq!(WebhookUrl::parse(&long), Err(WebhookUrlError::Length));
    }
}
