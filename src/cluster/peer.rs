//! Calls from one shard (or `tenant move`/`tenant import`) to another over HTTP: a JSON request with the tenant's import token, and the peer's answer or problem as a `MoveError` that names the peer.
use super::MoveError;
use crate::domain::{ShardUrl, TenantId};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::time::Duration;

/// Sends `GET` (no body) or `POST` (`body`) to `path` on `peer` with `token`, and reads the
/// JSON answer; a status other than 200 is the peer's problem detail.
pub(super) fn call<T: DeserializeOwned>(
    peer: &ShardUrl,
    path: &str,
    token: &str,
    body: Option<&serde_json::Value>,
    timeout: Duration,
) -> Result<T, MoveError> {
    let url = format!("{peer}{path}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into();
    let auth = format!("Bearer {token}");
    let sent = match body {
        Some(body) => agent
            .post(&url)
            .header("Authorization", &auth)
            .send_json(body),
        None => agent.get(&url).header("Authorization", &auth).call(),
    };
    let mut res = sent.map_err(|e| MoveError::Unreachable {
        to: peer.clone(),
        reason: e.to_string(),
    })?;
    let status = res.status().as_u16();
    let text = res
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_string()
        .unwrap_or_default();
    if status != 200 {
        let problem: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let mut detail = problem["detail"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| {
                format!(
                    "not a planfiles answer: {}",
                    text.chars().take(120).collect::<String>()
                )
            });
        if status == 401 {
            detail.push_str(
                " (the shards must share auth.secret or auth.secret_file, or the same public key)",
            );
        }
        return Err(MoveError::Target {
            to: peer.clone(),
            status,
            detail,
        });
    }
    serde_json::from_str(&text).map_err(|e| MoveError::Target {
        to: peer.clone(),
        status,
        detail: format!("not the answer expected ({e}): is {peer} a planfiles shard?"),
    })
}

/// The instance id `peer` answers `GET /healthz` with (200) within `timeout`; `None` when
/// it does not answer; empty from a shard that predates instance ids.
pub(super) fn instance(peer: &ShardUrl, timeout: Duration) -> Option<String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .build()
        .into();
    let mut res = agent.get(&format!("{peer}/healthz")).call().ok()?;
    if res.status() != 200 {
        return None;
    }
    let body: serde_json::Value = res.body_mut().read_json().unwrap_or_default();
    Some(body["instance"].as_str().unwrap_or_default().to_owned())
}

/// Where a tenant is on a shard, as `GET /admin/tenants/<id>/placement` says.
#[derive(Debug, Clone, Deserialize)]
pub struct PeerPlacement {
    /// `served`, `moving` or `moved`.
    pub placement: String,
    /// The shard it is moving or moved to.
    pub to: Option<String>,
    pub source_hosting: bool,
    /// Absent from shards that predate proposals.
    #[serde(default)]
    pub required_approvals: u32,
    /// The shard that answered (its `cluster.self_url`), when it says.
    #[serde(default)]
    pub shard: Option<String>,
}

/// Asks the shard `source` where `tenant` is there.
pub fn placement_at(
    source: &ShardUrl,
    tenant: &TenantId,
    token: &str,
) -> Result<PeerPlacement, MoveError> {
    call(
        source,
        &format!("/admin/tenants/{tenant}/placement"),
        token,
        None,
        Duration::from_secs(30),
    )
}

/// Checks that the shard `source` refuses `tenant`'s writes because it is moving it to this
/// shard (`me`, this shard's `cluster.self_url`), so that an import from it can never leave
/// the tenant writable on two shards. `aborting` is not `moving`: an abort has begun.
fn source_refuses_writes(
    source: &ShardUrl,
    tenant: &TenantId,
    token: &str,
    me: Option<&ShardUrl>,
) -> Result<PeerPlacement, MoveError> {
    let Some(me) = me else {
        return Err(MoveError::Abort(
            "this shard's cluster.self_url is not set, so it cannot check that the source \
             moves the tenant here and not to another shard: set it to the URL the other \
             shards reach this one at"
                .into(),
        ));
    };
    let placement = placement_at(source, tenant, token)?;
    if placement.placement != "moving" {
        return Err(MoveError::SourceWritable {
            shard: source.clone(),
            tenant: tenant.clone(),
            placement: placement.placement,
        });
    }
    let to = placement
        .to
        .as_deref()
        .and_then(|t| ShardUrl::parse(t).ok());
    match to {
        Some(to) if &to == me => Ok(placement),
        Some(to) => Err(MoveError::MovingElsewhere {
            shard: source.clone(),
            tenant: tenant.clone(),
            to,
        }),
        None => Err(MoveError::SourceWritable {
            shard: source.clone(),
            tenant: tenant.clone(),
            placement: "moving to no shard it names".into(),
        }),
    }
}

/// [`source_refuses_writes`] as an import's `confirm` (see
/// [`crate::storage::Storage::import_tenant`]): a refusal is a `move_conflict` naming why.
pub fn handed_over(
    source: &ShardUrl,
    tenant: &TenantId,
    token: &str,
    me: Option<&ShardUrl>,
) -> Result<(), crate::storage::StorageError> {
    source_refuses_writes(source, tenant, token, me)
        .map(|_| ())
        .map_err(|e| crate::storage::StorageError::MoveConflict {
            tenant: tenant.clone(),
            reason: e.to_string(),
        })
}
