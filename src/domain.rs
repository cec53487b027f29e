//! Domain types: values that can only be valid once constructed (parse, don't validate).
pub mod commit_message;
pub mod configuration;
pub mod cursor;
pub mod file;
pub mod idempotency;
pub mod identity;
pub mod integration;
pub mod json_guard;
pub mod json_patch;
pub mod object_id;
pub mod proposal;
pub mod request_id;
pub mod shard_url;
pub mod tenant;
pub mod timestamp;
pub mod trailers;
pub mod webhook;
pub mod yaml;

pub use commit_message::CommitMessage;
pub use configuration::ConfigurationDoc;
pub use cursor::Cursor;
pub use file::PlanFile;
pub use idempotency::IdempotencyKey;
pub use identity::Identity;
pub use integration::IntegrationDoc;
pub use object_id::{BlobId, CommitId, CommitName, ObjectId};
pub use proposal::{Proposal, ProposalNumber, ProposalState, Reviewer, StepKind};
pub use request_id::RequestId;
pub use shard_url::ShardUrl;
pub use tenant::TenantId;
pub use webhook::{EventType, WebhookId, WebhookSecret, WebhookUrl};

/// A file as read from storage: a valid document, or what can be shown of a broken one.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored<D> {
    Valid(D),
    Invalid {
        /// What can be shown as `content`: `{}` when the file is not a mapping at all.
        content: yaml::Mapping,
        errors: Vec<String>,
    },
}

/// Why the content of a request cannot be stored: where (a JSON pointer into the request
/// body) and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{pointer}: {message}")]
pub struct ContentError {
    pub pointer: String,
    pub message: String,
}

impl ContentError {
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}
