//! The `want` lines of an upload-pack request, and the rule that each names a ref tip or a
//! commit reachable from one (git's protocol v2 would serve any object id it has).
use crate::domain::ObjectId;
use git2::{Oid, Repository};
use std::collections::HashSet;
use std::path::Path;

/// A request that is not a sequence of pkt-lines, or a `want` without an object id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a git upload-pack request: {0}")]
pub struct Malformed(pub &'static str);

/// The object ids of the request's `want` lines (protocol v0 and v2 alike), in order.
pub fn parse(request: &[u8]) -> Result<Vec<ObjectId>, Malformed> {
    let mut wants = Vec::new();
    let mut rest = request;
    while !rest.is_empty() {
        let len = rest
            .get(..4)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| usize::from_str_radix(h, 16).ok())
            .ok_or(Malformed("a pkt-line without a length"))?;
        // 0000 flush, 0001 delimiter, 0002 response end: no data.
        if len <= 2 {
            rest = &rest[4..];
            continue;
        }
        if len < 4 || len > rest.len() {
            return Err(Malformed("a pkt-line of a wrong length"));
        }
        let line = &rest[4..len];
        rest = &rest[len..];
        if let Some(args) = line.strip_prefix(b"want ") {
            let hex = args
                .get(..40)
                .filter(|_| matches!(args.get(40), None | Some(b' ' | b'\n')))
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| ObjectId::parse(h).ok())
                .ok_or(Malformed("a want without an object id"))?;
            wants.push(hex);
        }
    }
    Ok(wants)
}

/// The first of `wants` that is neither a ref tip nor a commit reachable from one; `None` when
/// all may be served. Walks the history at most once, and only when a want is not a tip.
pub fn first_unreachable(repo: &Path, wants: &[ObjectId]) -> Result<Option<ObjectId>, git2::Error> {
    if wants.is_empty() {
        return Ok(None);
    }
    let repo = Repository::open_bare(repo)?;
    let mut tips = HashSet::new();
    let mut starts = Vec::new();
    for reference in repo.references()? {
        let reference = reference?;
        tips.extend(reference.target());
        starts.extend(reference.peel_to_commit().ok().map(|c| c.id()));
    }
    let mut wanted = HashSet::new();
    for want in wants {
        let oid = Oid::from_str(want.as_str())?;
        if tips.contains(&oid) {
            continue;
        }
        // Only commits are looked for in the history: a tree or blob id is not served.
        match repo.find_commit(oid) {
            Ok(_) => {
                wanted.insert(oid);
            }
            Err(_) => return Ok(Some(*want)),
        }
    }
    if wanted.is_empty() {
        return Ok(None);
    }
    let mut walk = repo.revwalk()?;
    for start in starts {
        walk.push(start)?;
    }
    for seen in walk {
        wanted.remove(&seen?);
        if wanted.is_empty() {
            return Ok(None);
        }
    }
    let first = wants
        .iter()
        .find(|w| Oid::from_str(w.as_str()).is_ok_and(|o| wanted.contains(&o)))
        .copied();
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(text: &str) -> String {
        format!("{:04x}{text}", text.len() + 4)
    }

    const A: &str = "0123456789abcdef0123456789abcdef01234567";
    const B: &str = "89abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn wants_are_read_from_v0_and_v2_requests() {
        let v0 = format!(
            "{}{}0000{}{}",
            pkt(&format!(
                "want {A} multi_ack_detailed side-band-64k ofs-delta\n"
            )),
            pkt(&format!("want {B}\n")),
            pkt(&format!("have {B}\n")),
            pkt("done\n")
        );
        let v2 = format!(
            "{}{}0001{}{}{}0000",
            pkt("command=fetch\n"),
            pkt("agent=git/2.47\n"),
            pkt("thin-pack\n"),
            pkt(&format!("want {A}\n")),
            pkt(&format!("want {B}"))
        );
        let ids = |v: &[&str]| -> Vec<ObjectId> {
            v.iter().map(|h| ObjectId::parse(h).unwrap()).collect()
        };
        assert_eq!(parse(v0.as_bytes()).unwrap(), ids(&[A, B]));
        assert_eq!(parse(v2.as_bytes()).unwrap(), ids(&[A, B]));
        assert_eq!(parse(b"").unwrap(), vec![]);
        assert_eq!(
            parse(format!("{}0000", pkt("command=ls-refs\n")).as_bytes()).unwrap(),
            vec![]
        );
    }

    #[test]
    fn malformed_requests_are_refused() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"zzzz".to_vec(), "a pkt-line without a length"),
            (b"00".to_vec(), "a pkt-line without a length"),
            (b"0003".to_vec(), "a pkt-line of a wrong length"),
            (b"0010want".to_vec(), "a pkt-line of a wrong length"),
            (
                pkt("want 0123\n").into_bytes(),
                "a want without an object id",
            ),
            (
                pkt(&format!("want {A}x\n")).into_bytes(),
                "a want without an object id",
            ),
            (b"+fff".to_vec(), "a pkt-line without a length"),
        ];
        for (request, why) in cases {
            assert_eq!(
                parse(&request),
                Err(Malformed(why)),
                "{}",
                String::from_utf8_lossy(&request)
            );
        }
    }
}
