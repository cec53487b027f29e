//! Query strings, parsed into what the handlers need: `ref`, `limit` and `cursor`.
use super::problem::ApiError;
use crate::domain::{CommitName, Cursor};
use actix_web::web;

/// Default and largest page size of the history endpoints.
pub const DEFAULT_LIMIT: usize = 50;
pub const MAX_LIMIT: usize = 500;

/// The query of a GET on a file: an optional commit to read the file at.
#[derive(Debug, Default)]
pub struct ReadQuery {
    pub at: Option<CommitName>,
}

/// The query of a history request.
#[derive(Debug)]
pub struct HistoryQuery {
    pub limit: usize,
    pub cursor: Option<Cursor>,
}

pub(super) fn pairs(query: &str) -> Result<Vec<(String, String)>, ApiError> {
    web::Query::<Vec<(String, String)>>::from_query(query)
        .map(web::Query::into_inner)
        .map_err(|e| ApiError::InvalidQuery(format!("the query string cannot be read: {e}")))
}

/// The one value of `name`, if present; sent twice is an error.
pub(super) fn single<'a>(
    pairs: &'a [(String, String)],
    name: &str,
) -> Result<Option<&'a str>, ApiError> {
    let mut found = pairs
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str());
    let first = found.next();
    if found.next().is_some() {
        return Err(ApiError::InvalidQuery(format!(
            "{name} is given more than once"
        )));
    }
    Ok(first)
}

/// A commit a query names: 40 hex digits, or a unique prefix of at least 7 (as git and the
/// console abbreviate), resolved by the handler.
fn commit(name: &str, raw: &str) -> Result<CommitName, ApiError> {
    CommitName::parse(raw).map_err(|_| {
        ApiError::InvalidQuery(format!(
            "{name} must be a commit id: 40 hexadecimal digits, or a unique prefix of at least 7"
        ))
    })
}

impl ReadQuery {
    /// Other parameters are ignored (cache busters and the like).
    pub fn parse(query: &str) -> Result<Self, ApiError> {
        if query.is_empty() {
            return Ok(Self::default());
        }
        let pairs = pairs(query)?;
        let at = single(&pairs, "ref")?
            .map(|r| commit("ref", r))
            .transpose()?;
        Ok(Self { at })
    }
}

impl HistoryQuery {
    pub fn parse(query: &str) -> Result<Self, ApiError> {
        let pairs = pairs(query)?;
        let limit = match single(&pairs, "limit")? {
            None => DEFAULT_LIMIT,
            Some(raw) => match raw.parse::<usize>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
                _ => {
                    return Err(ApiError::InvalidQuery(format!(
                        "limit must be a whole number from 1 to {MAX_LIMIT}"
                    )))
                }
            },
        };
        let cursor = single(&pairs, "cursor")?
            .map(|c| Cursor::parse(c).map_err(|e| ApiError::InvalidQuery(format!("cursor {e}"))))
            .transpose()?;
        Ok(Self { limit, cursor })
    }
}

/// The one value of the parameter `name` in a query string, if present (other parameters are
/// ignored); sent twice is an error.
pub fn single_param(query: &str, name: &str) -> Result<Option<String>, ApiError> {
    if query.is_empty() {
        return Ok(None);
    }
    let pairs = pairs(query)?;
    Ok(single(&pairs, name)?.map(str::to_owned))
}

/// `?dry_run=true|false`, absent: false (400 `invalid_query` otherwise; other parameters are
/// ignored).
pub fn dry_run(query: &str) -> Result<bool, ApiError> {
    match single_param(query, "dry_run")?.as_deref() {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(ApiError::InvalidQuery(
            "dry_run must be true or false".into(),
        )),
    }
}

/// The query of a diff: `from` (required) and `to` (default: `main`), commits.
pub fn diff_query(query: &str) -> Result<(CommitName, Option<CommitName>), ApiError> {
    let pairs = pairs(query)?;
    let from = single(&pairs, "from")?
        .ok_or_else(|| ApiError::InvalidQuery("from is required".into()))
        .and_then(|r| commit("from", r))?;
    let to = single(&pairs, "to")?.map(|r| commit("to", r)).transpose()?;
    Ok((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn ref_is_a_commit_id_or_a_prefix_of_7_or_more() {
        assert!(ReadQuery::parse("").unwrap().at.is_none());
        assert_eq!(
            ReadQuery::parse(&format!("ref={C}"))
                .unwrap()
                .at
                .unwrap()
                .to_string(),
            C
        );
        assert_eq!(
            ReadQuery::parse("ref=0123456").unwrap().at,
            Some(CommitName::Prefix("0123456".into()))
        );
        assert!(ReadQuery::parse("x=1").unwrap().at.is_none());
        for bad in ["ref=main", "ref=0123", &format!("ref={C}&ref={C}"), "ref"] {
            assert!(ReadQuery::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limit_defaults_to_50_and_stays_within_1_to_500() {
        assert_eq!(HistoryQuery::parse("").unwrap().limit, DEFAULT_LIMIT);
        assert_eq!(HistoryQuery::parse("limit=500").unwrap().limit, 500);
        assert_eq!(HistoryQuery::parse("limit=1").unwrap().limit, 1);
        for bad in [
            "limit=0",
            "limit=501",
            "limit=-1",
            "limit=abc",
            "limit=",
            "cursor=zz",
        ] {
            assert!(HistoryQuery::parse(bad).is_err(), "{bad}");
        }
    }
}
