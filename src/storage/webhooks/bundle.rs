//! What a move carries of a tenant's subscriptions (`WebhookBundle`: the file, each cursor and its latest attempts): exported under the subscriptions' lock with each cursor claimed, installed in place of the target's folder.
use super::file::{dir, lock, parse_all, table, write_all};
use super::*;

/// A tenant's subscriptions and cursors as a move carries them to the target (secrets
/// included: it travels only between shards, with the import's token). Its `Debug` shows
/// no secret.
#[derive(Clone, Serialize, Deserialize)]
pub struct WebhookBundle {
    /// The subscriptions file as it is; empty: none.
    pub subscriptions: String,
    /// Each subscription's cursor.
    pub cursors: Vec<BundledCursor>,
}

impl std::fmt::Debug for WebhookBundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookBundle")
            .field(
                "subscriptions",
                &format_args!("{} bytes", self.subscriptions.len()),
            )
            .field("cursors", &self.cursors)
            .finish()
    }
}

/// A cursor in a [`WebhookBundle`], with the subscription's latest attempts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BundledCursor {
    pub id: String,
    pub through: String,
    #[serde(default)]
    pub partial: Option<String>,
    /// Where it stands on the proposals' records line (forty zeros: before the first step);
    /// absent from a bundle of an earlier version (the target starts at the records' head).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<String>,
    /// Its latest attempts (at most [`MOVED_ATTEMPTS`]), oldest first: its deliveries log on
    /// the target starts with them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<Attempt>,
}

/// How many of a subscription's latest attempts a move carries (each at most about 800 bytes
/// of JSON: its detail is cut at 200 characters).
pub const MOVED_ATTEMPTS: usize = 20;

impl Storage {
    /// What a move carries of the tenant's subscriptions (none is said too: a tenant coming
    /// back to a shard it left must not find the old ones there). Read under the
    /// subscriptions' lock after the move began, each cursor claimed (waiting up to 30 s for
    /// an attempt under way): no change and no delivery lands here after it.
    pub fn export_webhooks(&self, tenant: &TenantId) -> Result<WebhookBundle, StorageError> {
        let path = self.locate(tenant, Access::Manage)?;
        let _lock = lock(&path)?;
        let file = dir(&path).join(FILE);
        let subscriptions = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(WebhookBundle {
                    subscriptions: String::new(),
                    cursors: Vec::new(),
                })
            }
            Err(e) => return Err(StorageError::io("read webhook subscriptions", &file, e)),
        };
        let mut cursors = Vec::new();
        let mut claimed = Vec::new();
        adopt_legacy_cursors(tenant, &path)?;
        let file = table(&path);
        for hook in parse_all(tenant, &subscriptions)? {
            let err = |e| StorageError::io("read a webhook's cursor", &file, e);
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let at = loop {
                match DeliveryCursor::claim(&file, &hook.id).map_err(err)? {
                    Some(c) => {
                        let at = c.position();
                        claimed.push(c);
                        break at;
                    }
                    None if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    // Held past an attempt's longest: read as it stands (at worst an event
                    // is delivered twice, never skipped).
                    None => break cursor::read(&file, &hook.id).map_err(err)?,
                }
            };
            // The log as it stands (attempts of the last second not appended yet stay behind).
            let mut recent = log::recent(&dir(&path), &hook.id, MOVED_ATTEMPTS)
                .unwrap_or_else(|e| {
                    tracing::warn!(%tenant, webhook = %hook.id, error = %e, "a move leaves a webhook's deliveries log behind");
                    Vec::new()
                });
            recent.reverse();
            // Read as it stands: a step delivered meanwhile is delivered again there.
            let steps = match cursor::read(&super::steps::steps_table(&path), &hook.id) {
                Ok(at) => Some(at.through.to_string()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(err(e)),
            };
            cursors.push(BundledCursor {
                id: hook.id.to_string(),
                through: at.through.to_string(),
                partial: at.partial.map(|c| c.to_string()),
                steps,
                recent,
            });
        }
        Ok(WebhookBundle {
            subscriptions,
            cursors,
        })
    }
}

/// Puts a move's bundle in place of the `webhooks/` folder of the repository at `repo` (an
/// import, before the tenant is writable there): what was there before (a tenant coming
/// back) goes, logs included. Synced.
pub(in crate::storage) fn install(
    tenant: &TenantId,
    repo: &Path,
    bundle: &WebhookBundle,
) -> Result<(), StorageError> {
    let dir = dir(repo);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => disk::sync_dir(repo)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io("remove the old webhooks", &dir, e)),
    }
    if bundle.subscriptions.is_empty() {
        return Ok(());
    }
    let hooks = parse_all(tenant, &bundle.subscriptions)?;
    disk::create_dir_all_synced(&dir)?;
    let mut cursors = Vec::with_capacity(hooks.len());
    let mut steps = Vec::new();
    for hook in &hooks {
        let bundled = bundle.cursors.iter().find(|c| c.id == hook.id.as_str());
        let recent = bundled.map_or(&[][..], |c| &c.recent[..]);
        let recent = &recent[..recent.len().min(MOVED_ATTEMPTS)];
        if let Err(e) = log::append(&dir, &hook.id, recent) {
            tracing::warn!(%tenant, webhook = %hook.id, error = %e, "could not write a moved webhook's deliveries log");
        }
        let at = bundled
            .and_then(|c| CursorPosition::parse(&c.through, c.partial.as_deref()))
            .ok_or_else(|| StorageError::Import {
                tenant: tenant.clone(),
                reason: format!("the webhook {} came without a valid cursor", hook.id),
            })?;
        cursors.push((hook.id.clone(), at));
        if let Some(at) = bundled
            .and_then(|c| c.steps.as_deref())
            .and_then(|s| CursorPosition::parse(s, None))
        {
            steps.push((hook.id.clone(), at));
        }
    }
    cursor::create(&table(repo), &cursors)
        .map_err(|e| StorageError::io("write the webhooks' cursors", &dir, e))?;
    if !steps.is_empty() {
        cursor::create(&super::steps::steps_table(repo), &steps)
            .map_err(|e| StorageError::io("write the webhooks' steps cursors", &dir, e))?;
    }
    write_all(repo, &hooks)
}
