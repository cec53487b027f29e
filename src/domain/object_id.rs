//! `ObjectId`: a 40-hex-digit git object name as clients send it (`file_sha`, `If-Match`).
use std::fmt;

/// A SHA-1 object id in canonical lower-case hex. Upper case input is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ObjectId([u8; 40]);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be a string of 40 hexadecimal digits")]
pub struct ObjectIdError;

impl ObjectId {
    /// Forty zeros: git's name for "no object" (in a ref update), never an object's id.
    pub const ZERO: ObjectId = ObjectId([b'0'; 40]);

    pub fn parse(raw: &str) -> Result<Self, ObjectIdError> {
        let bytes = raw.as_bytes();
        if bytes.len() != 40 || !bytes.iter().all(u8::is_ascii_hexdigit) {
            return Err(ObjectIdError);
        }
        let mut out = [0u8; 40];
        for (o, b) in out.iter_mut().zip(bytes) {
            *o = b.to_ascii_lowercase();
        }
        Ok(Self(out))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits are ever stored.
        std::str::from_utf8(&self.0).expect("hex is ascii")
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ObjectId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_forty_hex_digits_in_any_case() {
        let lower = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(ObjectId::parse(lower).unwrap().as_str(), lower);
        let upper = lower.to_ascii_uppercase();
        assert_eq!(ObjectId::parse(&upper).unwrap().as_str(), lower);
    }

    #[test]
    fn refuses_wrong_length_or_non_hex() {
        for bad in [
            "",
            "abc",
            "0123456789abcdef0123456789abcdef0123456",
            "0123456789abcdef0123456789abcdef012345678",
            "g123456789abcdef0123456789abcdef01234567",
            " 123456789abcdef0123456789abcdef01234567",
            "0123456789abcdef0123456789abcdef0123456é",
        ] {
            assert!(ObjectId::parse(bad).is_err(), "{bad:?}");
        }
    }
}

macro_rules! object_kind {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub struct $name(pub ObjectId);

        impl $name {
            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.0.serialize(s)
            }
        }
    };
}

object_kind!(
    /// The git blob id of a file's content: what clients see as `file_sha` / `sha`.
    BlobId
);
object_kind!(
    /// The id of a commit on a tenant's `main`.
    CommitId
);

/// A commit as a person names it: its whole id, or a prefix of 7 to 39 hex digits, as git
/// and the console abbreviate it (the prefix must name one object of the repository).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitName {
    Full(CommitId),
    Prefix(String),
}

impl std::fmt::Display for CommitName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitName::Full(id) => write!(f, "{id}"),
            CommitName::Prefix(prefix) => f.write_str(prefix),
        }
    }
}

/// The shortest prefix taken: git's default abbreviation.
pub const MIN_PREFIX: usize = 7;

impl CommitName {
    pub fn parse(raw: &str) -> Result<Self, ObjectIdError> {
        if let Ok(id) = ObjectId::parse(raw) {
            return Ok(CommitName::Full(CommitId(id)));
        }
        let hex = raw.bytes().all(|b| b.is_ascii_hexdigit());
        if hex && (MIN_PREFIX..40).contains(&raw.len()) {
            return Ok(CommitName::Prefix(raw.to_ascii_lowercase()));
        }
        Err(ObjectIdError)
    }
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn a_commit_is_named_whole_or_by_seven_to_thirty_nine_hex_digits() {
        let full = "0123456789abcdef0123456789abcdef01234567";
        assert!(matches!(CommitName::parse(full), Ok(CommitName::Full(_))));
        assert_eq!(
            CommitName::parse("ABCDEF1"),
            Ok(CommitName::Prefix("abcdef1".into()))
        );
        assert!(matches!(
            CommitName::parse(&full[..39]),
            Ok(CommitName::Prefix(_))
        ));
        for bad in [
            "",
            "abcdef",
            "abcdefg",
            "abc def1",
            "0123456789abcdef0123456789abcdef012345678",
        ] {
            assert!(CommitName::parse(bad).is_err(), "{bad:?}");
        }
    }
}
