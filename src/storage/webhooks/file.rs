//! The subscriptions file (`webhooks/subscriptions.json`, mode 0600) and its folder: read, parsed, written aside and synced, under a `flock`; the cursor table's place, and the adoption of an earlier version's cursor files.
use super::*;

#[derive(Serialize, Deserialize)]
struct StoredFile {
    version: u32,
    subscriptions: Vec<StoredWebhook>,
}

#[derive(Serialize, Deserialize)]
struct StoredWebhook {
    id: String,
    url: String,
    events: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    description: Option<String>,
    secret: String,
    state: WebhookState,
    created: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    resumed_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<WebhookKey>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

pub(super) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

pub(super) fn dir(repo: &Path) -> PathBuf {
    repo.join(DIR)
}

/// The cursors of the tenant's subscriptions, one table.
pub(super) fn table(repo: &Path) -> PathBuf {
    dir(repo).join(CURSORS)
}

/// Makes the cursor table from the cursor files of an earlier version (`<id>.cursor`), once,
/// under the subscriptions' lock: written aside and renamed, then the old files removed.
pub(super) fn adopt_legacy_cursors(tenant: &TenantId, repo: &Path) -> Result<(), StorageError> {
    let dir = dir(repo);
    if table(repo).exists() || !dir.join(FILE).exists() {
        return Ok(());
    }
    let err = |e| StorageError::io("adopt the webhooks' cursor files", &dir, e);
    let live: Vec<WebhookId> = read_all(tenant, repo)?.into_iter().map(|h| h.id).collect();
    let found = cursor::legacy(&dir, &live).map_err(err)?;
    cursor::create(&table(repo), &found).map_err(err)?;
    for (id, _) in &found {
        disk::remove_synced(
            &dir.join(format!("{id}.cursor")),
            "remove an old webhook cursor",
        )?;
    }
    Ok(())
}

pub(super) fn not_found(tenant: &TenantId, id: &WebhookId) -> StorageError {
    StorageError::WebhookNotFound {
        tenant: tenant.clone(),
        id: id.clone(),
    }
}

/// The tenant takes writes here (read again under the lock a move's export takes).
pub(super) fn served_here(tenant: &TenantId, repo: &Path) -> Result<(), StorageError> {
    match placement::read(repo)? {
        None => Ok(()),
        Some(p) => Err(placement::refusal(tenant, &p)),
    }
}

/// The subscriptions' lock, held until the file is dropped.
pub(super) fn lock(repo: &Path) -> Result<File, StorageError> {
    use std::os::fd::AsRawFd as _;
    let dir = dir(repo);
    disk::create_dir_synced(&dir)
        .map_err(|e| StorageError::io("create the webhooks folder", &dir, e))?;
    let path = dir.join(LOCK);
    let file =
        disk::open_or_create(&path).map_err(|e| StorageError::io("open a lock", &path, e))?;
    // SAFETY: the descriptor is open for the call. A blocking lock: every holder keeps it
    // for one small file's read and rewrite.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(StorageError::io(
            "lock webhook subscriptions",
            &path,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(file)
}

pub(super) fn read_all(tenant: &TenantId, repo: &Path) -> Result<Vec<Webhook>, StorageError> {
    let file = dir(repo).join(FILE);
    match std::fs::read_to_string(&file) {
        Ok(text) => parse_all(tenant, &text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(StorageError::io("read webhook subscriptions", &file, e)),
    }
}

pub(super) fn parse_all(tenant: &TenantId, text: &str) -> Result<Vec<Webhook>, StorageError> {
    let bad = |what: String| StorageError::Io {
        op: "read webhook subscriptions",
        path: format!("{tenant}.git/{DIR}/{FILE}").into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, what),
    };
    let stored: StoredFile = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
    stored
        .subscriptions
        .into_iter()
        .map(|s| {
            Ok(Webhook {
                id: WebhookId::parse(&s.id).ok_or_else(|| bad(format!("id {:?}", s.id)))?,
                url: WebhookUrl::parse(&s.url).map_err(|e| bad(e.to_string()))?,
                events: s
                    .events
                    .iter()
                    .map(|e| EventType::parse(e).ok_or_else(|| bad(format!("event {e:?}"))))
                    .collect::<Result<_, _>>()?,
                description: s.description,
                secret: WebhookSecret::parse(&s.secret)
                    .ok_or_else(|| bad(format!("the secret of {}", s.id)))?,
                state: s.state,
                created: UNIX_EPOCH + Duration::from_secs(s.created),
                resumed_ms: s.resumed_ms,
                key: s.key,
            })
        })
        .collect()
}

pub(super) fn write_all(repo: &Path, all: &[Webhook]) -> Result<(), StorageError> {
    if all.is_empty() {
        // No file: the dispatcher's scan passes the tenant by.
        return disk::remove_synced(&dir(repo).join(FILE), "remove webhook subscriptions");
    }
    let stored = StoredFile {
        version: 1,
        subscriptions: all
            .iter()
            .map(|h| StoredWebhook {
                id: h.id.to_string(),
                url: h.url.to_string(),
                events: h.events.iter().map(|e| e.as_str().to_owned()).collect(),
                description: h.description.clone(),
                secret: h.secret.expose().to_owned(),
                state: h.state,
                resumed_ms: h.resumed_ms,
                key: h.key.clone(),
                created: h
                    .created
                    .duration_since(UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_secs(),
            })
            .collect(),
    };
    let text = zeroize::Zeroizing::new(serde_json::to_vec_pretty(&stored).expect("plain data"));
    // tempfile makes its files 0600: the secrets are readable by the service's user only.
    disk::replace_synced(&dir(repo).join(FILE), &text, "write webhook subscriptions")
}
