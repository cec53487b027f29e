//! `planfiles tenant move` and `tenant import`: their arguments, and each run against this shard's storage (the steps are in `crate::cluster`).
use super::{tenant_id, CliError};
use crate::auth::{self, MintRequest};
use crate::config::Config;
use crate::domain::{ShardUrl, TenantId};
use crate::storage::{ImportSource, Storage};
use std::path::PathBuf;

/// `tenant move`'s arguments.
#[derive(Debug, clap::Args)]
pub struct MoveArgs {
    /// The tenant to move.
    pub id: String,
    /// The target shard's base URL (as this host reaches it).
    #[arg(long)]
    pub to: String,
    /// This shard's base URL as the target reaches it (default: cluster.self_url).
    #[arg(long)]
    pub from: Option<String>,
    /// A token for the tenant with planfiles.repos.import (default: one signed with the
    /// configured HS256 secret, which both shards must share).
    #[arg(long, env = "PLANFILES_MOVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// An HAProxy runtime API address (socket path or host:port); repeat for each HAProxy.
    #[arg(long = "haproxy")]
    pub haproxy: Vec<String>,
    /// The tenant map's name in the HAProxy config (its path there).
    #[arg(long)]
    pub map: Option<String>,
    /// The map file to rewrite for HAProxy's restarts (default: --map).
    #[arg(long)]
    pub map_file: Option<PathBuf>,
    /// The target's HAProxy backend (the map's value).
    #[arg(long)]
    pub backend: Option<String>,
    /// Switch the routing yourself: the move stops after step 2; run it again with --routed
    /// once the routing sends the tenant to the target.
    #[arg(long, conflicts_with_all = ["haproxy", "map", "map_file", "backend"])]
    pub no_router: bool,
    /// With --no-router: the routing sends the tenant to the target now; finish the move.
    #[arg(long, requires = "no_router")]
    pub routed: bool,
    /// Undo a move that has not reached the target: writes are taken here again.
    #[arg(long)]
    pub abort: bool,
    /// With --abort: abort even when the target cannot say whether it imported the tenant.
    #[arg(long, requires = "abort")]
    pub force: bool,
}

/// `tenant import`'s arguments.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// The tenant to import.
    pub id: String,
    /// A shard's base URL, or a repository's path.
    #[arg(long)]
    pub from: String,
    /// The commit main must be at.
    #[arg(long)]
    pub head: Option<String>,
    /// A token with planfiles.repos.import, for a shard URL (default: one signed with the
    /// configured HS256 secret).
    #[arg(long, env = "PLANFILES_MOVE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Turn the tenant's source-hosting flag on here (a mirror or backup does not carry it;
    /// from a shard, its flag there is carried over).
    #[arg(long)]
    pub source_hosting: bool,
    /// The approvals its proposals need here (a mirror or backup does not carry it; from a
    /// shard, its setting there is carried over unless this is given).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=10))]
    pub require_approval: Option<u32>,
}

/// Runs `tenant move` (or its `--abort`).
pub(super) fn move_tenant(
    config: &Config,
    storage: &Storage,
    args: MoveArgs,
) -> Result<(), CliError> {
    let MoveArgs {
        id,
        to,
        from,
        token,
        haproxy,
        map,
        map_file,
        backend,
        no_router,
        routed,
        abort,
        force,
    } = args;
    let tenant = tenant_id(&id)?;
    let to = shard_url("--to", &to)?;
    let from = match from {
        Some(f) => shard_url("--from", &f)?,
        None => config
            .cluster
            .self_url()
            .map_err(CliError::Usage)?
            .ok_or_else(|| {
                CliError::Usage(
                    "set cluster.self_url or pass --from: the target imports from there".into(),
                )
            })?,
    };
    let token = import_token(config, &tenant, token)?;
    let map_file = map_file.or_else(|| map.clone().map(PathBuf::from));
    let mv = crate::cluster::Move {
        tenant,
        from,
        to,
        token,
        router: crate::cluster::Router {
            haproxy,
            map,
            map_file,
            backend,
            by_hand: no_router,
            routed,
        },
        grace: std::time::Duration::from_secs(config.cluster.moved_grace_secs),
        // An abort compares nothing: a broken schemas folder must not keep it from running.
        schemas: if abort {
            Default::default()
        } else {
            crate::validation::SchemaSet::load(
                config.validation.dir(),
                config.validation.unknown_integrations,
            )
            .map_err(|e| CliError::Usage(format!("validation.schemas_dir: {e}")))?
            .digests()
            .clone()
        },
    };
    if abort {
        mv.abort(storage, force)?;
        println!("move of {} aborted: it takes writes here again", mv.tenant);
        return Ok(());
    }
    let report = mv.run(storage, &mut |line| {
        use std::io::Write;
        println!("{line}");
        let _ = std::io::stdout().flush();
    })?;
    println!(
        "moved {} at {}: writes refused for {} ms (import {} ms){}",
        mv.tenant,
        report.head,
        report.writes_refused.as_millis(),
        report.import_millis,
        match report.archived {
            Some(p) => format!("; archived to {}", p.display()),
            None => format!(
                "; 421 here for {} s, then the service (or `planfiles maintain`) archives it",
                config.cluster.moved_grace_secs
            ),
        }
    );
    Ok(())
}

/// Runs `tenant import`.
pub(super) fn import_tenant(
    config: &Config,
    storage: &Storage,
    args: ImportArgs,
) -> Result<(), CliError> {
    let ImportArgs {
        id,
        from,
        head,
        token,
        source_hosting,
        require_approval,
    } = args;
    let tenant = tenant_id(&id)?;
    let source = if from.starts_with("http://") || from.starts_with("https://") {
        ImportSource::Shard {
            url: shard_url("--from", &from)?,
            token: import_token(config, &tenant, token)?,
        }
    } else {
        ImportSource::Path(PathBuf::from(from))
    };
    let head = match head {
        None => None,
        Some(h) => Some(crate::domain::CommitId(
            crate::domain::ObjectId::parse(&h)
                .map_err(|e| CliError::Usage(format!("--head {e}")))?,
        )),
    };
    // From a shard: only while it is moving the tenant here (`import_tenant` asks before the
    // fetch and again just before the tenant becomes writable here), with the flag it has
    // there.
    let me = config.cluster.self_url().map_err(CliError::Usage)?;
    let confirm = || match &source {
        ImportSource::Shard { url, token } => {
            crate::cluster::handed_over(url, &tenant, token, me.as_ref())
        }
        ImportSource::Path(_) => Ok(()),
    };
    let there = match &source {
        ImportSource::Shard { url, token } => {
            crate::cluster::placement_at(url, &tenant, token).ok()
        }
        ImportSource::Path(_) => None,
    };
    let source_hosting = source_hosting || there.as_ref().is_some_and(|p| p.source_hosting);
    let settings = crate::storage::Settings {
        source_hosting,
        required_approvals: require_approval
            .or(there.map(|p| p.required_approvals))
            .unwrap_or(0),
    };
    let done = storage.import_tenant(&tenant, &source, head, settings, None, &confirm)?;
    println!(
        "{} {tenant} at {} ({} ms); source hosting {}",
        if done.already {
            "already here:"
        } else {
            "imported"
        },
        done.head,
        done.millis,
        if source_hosting {
            "on"
        } else {
            "off (--source-hosting sets it)"
        }
    );
    Ok(())
}

fn shard_url(flag: &str, raw: &str) -> Result<ShardUrl, CliError> {
    ShardUrl::parse(raw).map_err(|e| CliError::Usage(format!("{flag} {raw:?}: {e}")))
}

/// The token a move or import clones with: the one given, else one minted with the HS256
/// secret for the tenant with `planfiles.repos.import`, valid an hour.
fn import_token(
    config: &Config,
    tenant: &TenantId,
    given: Option<String>,
) -> Result<String, CliError> {
    if let Some(token) = given {
        return Ok(token);
    }
    if config.auth.algorithm != crate::config::Algorithm::HS256 {
        return Err(CliError::Usage(
            "pass --token (or PLANFILES_MOVE_TOKEN): the service is configured for another algorithm than HS256, so no token can be signed here".into(),
        ));
    }
    Ok(auth::mint_hs256(
        config.hs256_secret()?,
        &MintRequest {
            tenant: tenant.clone(),
            permissions: vec!["planfiles.repos.import".into()],
            sub: Some("planfiles-move".into()),
            email: None,
            name: None,
            ttl_secs: 3600,
        },
    )?)
}
