//! `planfiles webhook add|list|remove|resume TENANT …`: an operator's hands on a tenant's subscriptions, in the data dir (a running service reads the change within 10 s).
use super::{tenant_id, CliError};
use crate::config::Config;
use crate::domain::{EventType, WebhookId, WebhookUrl};
use crate::http::schema::WebhookView;
use crate::startup::SigningKey;
use crate::storage::NewWebhook;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum WebhookAction {
    /// Subscribe URL to TENANT's commits; prints the subscription with its secret (shown
    /// only here) as JSON. The URL is held to the [webhooks] destination rules.
    Add {
        /// The tenant's id.
        tenant: String,
        /// Where deliveries go (https://...).
        url: String,
        /// An event to deliver (integration-file.updated, configuration-file.updated,
        /// main.reset, proposal.opened, proposal.updated, proposal.approved,
        /// proposal.applied, proposal.closed); repeat for several. Default: all.
        #[arg(long = "event")]
        events: Vec<String>,
        /// What it is for (at most 500 characters).
        #[arg(long)]
        description: Option<String>,
    },
    /// List TENANT's subscriptions (no secrets): id, state, events, URL.
    List {
        /// The tenant's id.
        tenant: String,
    },
    /// Remove a subscription.
    Remove {
        /// The tenant's id.
        tenant: String,
        /// The subscription's id (wh_...).
        id: String,
    },
    /// Start a failing subscription again from where it stopped.
    Resume {
        /// The tenant's id.
        tenant: String,
        /// The subscription's id (wh_...).
        id: String,
    },
}

pub fn run(config: &Config, action: WebhookAction) -> Result<(), CliError> {
    let storage = super::open_storage(config, SigningKey::ReadIfPresent)?;
    match action {
        WebhookAction::Add {
            tenant,
            url,
            events,
            description,
        } => {
            let tenant = tenant_id(&tenant)?;
            let url =
                WebhookUrl::parse(&url).map_err(|e| CliError::Usage(format!("{url}: {e}")))?;
            let mut kinds = if events.is_empty() {
                EventType::ALL.to_vec()
            } else {
                events
                    .iter()
                    .map(|e| {
                        EventType::parse(e).ok_or_else(|| {
                            CliError::Usage(format!(
                                "--event {e}: not one of {}",
                                EventType::ALL.map(EventType::as_str).join(", ")
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?
            };
            kinds.sort();
            kinds.dedup();
            if let Some(d) = &description {
                if d.chars().count() > 500 || d.chars().any(char::is_control) {
                    return Err(CliError::Usage(
                        "--description: at most 500 characters, no control characters".into(),
                    ));
                }
            }
            let rules = crate::webhooks::Destinations::from_config(&config.webhooks);
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| CliError::Io(e.to_string()))?;
            runtime
                .block_on(rules.check_resolved(&url))
                .map_err(|e| match e {
                    crate::webhooks::CheckError::Refused(refused) => {
                        CliError::Usage(format!("{url}: refused: {refused}"))
                    }
                    busy => CliError::Io(busy.to_string()),
                })?;
            let (hook, _) = storage.add_webhook(
                &tenant,
                NewWebhook {
                    url,
                    events: kinds,
                    description,
                    key: None,
                },
                config.webhooks.max_per_tenant,
            )?;
            println!(
                "{}",
                serde_json::to_string_pretty(&WebhookView::new(&hook, true)).expect("plain data")
            );
        }
        WebhookAction::List { tenant } => {
            let tenant = tenant_id(&tenant)?;
            for hook in storage.webhooks(&tenant)? {
                println!(
                    "{}  {:<7}  {:<60}  {}",
                    hook.id,
                    hook.state.as_str(),
                    hook.events
                        .iter()
                        .map(|e| e.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                    hook.url
                );
            }
        }
        WebhookAction::Remove { tenant, id } => {
            let (tenant, id) = (tenant_id(&tenant)?, webhook_id(&id)?);
            storage.remove_webhook(&tenant, &id)?;
            println!("{tenant}: removed {id}");
        }
        WebhookAction::Resume { tenant, id } => {
            let (tenant, id) = (tenant_id(&tenant)?, webhook_id(&id)?);
            storage.resume_webhook(&tenant, &id)?;
            println!("{tenant}: {id} is active");
        }
    }
    Ok(())
}

fn webhook_id(raw: &str) -> Result<WebhookId, CliError> {
    WebhookId::parse(raw).ok_or_else(|| {
        CliError::Usage(format!(
            "{raw:?} is not a webhook id (wh_ and 26 of a-z0-9)"
        ))
    })
}
