//! `ResponseCache`: the serialized GET body of each tenant's files at a known head commit, so
//! that a GET whose head has not moved skips git and YAML entirely.
use crate::domain::{CommitId, PlanFile, TenantId};
use actix_web::http::header::HeaderValue;
use actix_web::web::Bytes;
use foldhash::fast::RandomState;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// At most this many body bytes are kept; past it, entries are dropped to make room.
const MAX_BYTES: usize = 64 * 1024 * 1024;

/// A GET body as it was rendered for one head commit.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub commit: CommitId,
    /// The generation of the schema set that judged the file (`Validators::generation`).
    pub schemas: u64,
    /// The blob id as an `ETag` header value.
    pub etag: HeaderValue,
    pub body: Bytes,
}

/// Shared by every worker; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ResponseCache {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each tenant's two files, by [`slot`].
    /// (Tenant ids come from verified tokens: a fast hasher is safe from chosen collisions.)
    entries: HashMap<TenantId, [Option<Rendered>; 2], RandomState>,
    bytes: usize,
}

fn slot(file: PlanFile) -> usize {
    match file {
        PlanFile::Integration => 0,
        PlanFile::Configuration => 1,
    }
}

impl ResponseCache {
    pub fn get(&self, tenant: &TenantId, file: PlanFile) -> Option<Rendered> {
        let inner = self.inner.lock().expect("not poisoned");
        inner.entries.get(tenant)?[slot(file)].clone()
    }

    pub fn put(&self, tenant: &TenantId, file: PlanFile, rendered: Rendered) {
        let size = rendered.body.len();
        if size > MAX_BYTES / 8 {
            return;
        }
        let mut inner = self.inner.lock().expect("not poisoned");
        let old = inner
            .entries
            .get_mut(tenant)
            .and_then(|files| files[slot(file)].take());
        if let Some(old) = old {
            inner.bytes -= old.body.len();
        }
        while inner.bytes + size > MAX_BYTES {
            let Some(key) = inner.entries.keys().next().cloned() else {
                break;
            };
            let files = inner.entries.remove(&key).expect("the key was just listed");
            let freed: usize = files.iter().flatten().map(|r| r.body.len()).sum();
            inner.bytes -= freed;
        }
        inner.bytes += size;
        inner.entries.entry(tenant.clone()).or_default()[slot(file)] = Some(rendered);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ObjectId;

    fn rendered(n: u8, len: usize) -> Rendered {
        let id = ObjectId::parse(&format!("{n:02x}").repeat(20)).unwrap();
        Rendered {
            commit: CommitId(id),
            schemas: 0,
            etag: HeaderValue::from_static("\"x\""),
            body: Bytes::from(vec![b'x'; len]),
        }
    }

    #[test]
    fn keeps_one_entry_per_tenant_and_file_within_the_byte_budget() {
        let cache = ResponseCache::default();
        let a = TenantId::parse("a").unwrap();
        cache.put(&a, PlanFile::Integration, rendered(1, 10));
        cache.put(&a, PlanFile::Integration, rendered(2, 10));
        assert_eq!(
            cache.get(&a, PlanFile::Integration).unwrap().commit,
            rendered(2, 0).commit
        );
        assert!(cache.get(&a, PlanFile::Configuration).is_none());
        for i in 0..20u8 {
            let t = TenantId::parse(&format!("t{i}")).unwrap();
            cache.put(&t, PlanFile::Integration, rendered(i, MAX_BYTES / 10));
        }
        assert!(cache.inner.lock().unwrap().bytes <= MAX_BYTES);
    }
}
