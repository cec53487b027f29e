//! `Cursor`: where a history page resumes, a commit with a tag that proves the service handed it out.
use super::{CommitId, ObjectId};
use std::fmt;

/// `<commit>.<tag>`: the commit the next page starts at, and 32 hex digits that storage made
/// for this tenant and commit. Only storage can make a tag that it accepts, so a client
/// cannot start a page at a commit the history never led it to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub commit: CommitId,
    pub tag: [u8; 16],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("is not a cursor from a history page")]
pub struct CursorError;

impl Cursor {
    pub fn parse(raw: &str) -> Result<Self, CursorError> {
        let (commit, tag) = raw.split_once('.').ok_or(CursorError)?;
        let commit = ObjectId::parse(commit).map_err(|_| CursorError)?;
        if tag.len() != 32 || !tag.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CursorError);
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&tag[2 * i..2 * i + 2], 16).map_err(|_| CursorError)?;
        }
        Ok(Self {
            commit: CommitId(commit),
            tag: bytes,
        })
    }
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.", self.commit)?;
        self.tag.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_a_commit_and_a_32_hex_tag_and_prints_as_parsed() {
        let raw = format!("{}.{}", "ab".repeat(20), "0f".repeat(16));
        assert_eq!(Cursor::parse(&raw).unwrap().to_string(), raw);
        for bad in [
            "ab".repeat(20),
            format!("{}.{}", "ab".repeat(20), "0f".repeat(15)),
            format!("{}.{}", "ab".repeat(19), "0f".repeat(16)),
            format!("{}.{}", "ab".repeat(20), "zz".repeat(16)),
            format!("{}.{}", "ab".repeat(20), "é".repeat(16)),
        ] {
            assert!(Cursor::parse(&bad).is_err(), "{bad}");
        }
    }
}
