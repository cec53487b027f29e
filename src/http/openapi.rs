//! The OpenAPI 3.1 document, generated from the handlers' annotations and the body types (utoipa).
use super::admin::{ImportAnswer, ImportRequest, PlacementAnswer};
use super::problem::Problem;
use super::schema::{
    Author, CommitsAnswer, ConfigurationContent, ConfigurationFile, DeliveryList, DiffSide,
    FileDiff, FileEvent, FileProblem, FileStatus, Folder, GitBytes, HeadEvent, Health,
    HistoryEntry, HistoryPage, IntegrationFile, PatchOp, PostCommits, ProposalEvent,
    PutConfigurationFile, PutConfigurationPart, PutIntegrationFile, PutIntegrationPart, Ready,
    RestoreFile, SigningKey, SigningKeys, Ticket, WebhookList, WebhookView,
};
use super::{
    admin, commits, diff, events, git, handlers, history, ops, proposals, restore, schemas,
    signing, webhooks,
};
use actix_web::HttpResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "planfiles",
        description = "Per-tenant integration and configuration files kept in bare git repositories. \
            The hash of a file is its git blob id; every write is a commit."
    ),
    paths(
        handlers::get_integration,
        handlers::put_integration,
        handlers::get_configuration,
        handlers::put_configuration,
        history::integration,
        history::configuration,
        events::stream,
        events::ticket,
        commits::post_commits,
        restore::restore_integration,
        restore::restore_configuration,
        diff::diff_integration,
        diff::diff_configuration,
        git::info_refs,
        git::upload_pack,
        git::receive::receive_pack,
        admin::import,
        admin::placement,
        signing::signing_keys,
        schemas::integration_schema,
        schemas::configuration_schema,
        webhooks::create,
        webhooks::list,
        webhooks::get,
        webhooks::delete,
        webhooks::resume,
        webhooks::deliveries,
        proposals::create,
        proposals::list,
        proposals::get,
        proposals::update,
        proposals::approve,
        proposals::apply,
        proposals::close,
        ops::healthz,
        ops::readyz,
        ops::metrics,
        openapi,
    ),
    components(schemas(
        IntegrationFile, ConfigurationFile, PutIntegrationFile, PutConfigurationFile,
        ConfigurationContent, Folder, FileStatus, Problem, Health, Ready, HistoryPage, HistoryEntry,
        Author, GitBytes, HeadEvent, FileEvent, ProposalEvent, Ticket,
        Author, GitBytes, PostCommits, PutIntegrationPart, PutConfigurationPart, CommitsAnswer,
        RestoreFile, FileDiff, DiffSide, PatchOp, ImportRequest, ImportAnswer, PlacementAnswer,
        SigningKeys, SigningKey, FileProblem, crate::validation::Violation,
        webhooks::CreateWebhook, WebhookView, WebhookList, DeliveryList,
        proposals::ProposalView, proposals::ProposalList, proposals::ProposedFileView,
        proposals::Person, proposals::ApprovalView
    )),
    modifiers(&BearerJwt),
)]
struct ApiDoc;

struct BearerJwt;

impl Modify for BearerJwt {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// The document served at `/openapi.json`.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The OpenAPI 3.1 document of this service.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", security(()),
    responses((status = 200, description = "This document", content_type = "application/json")))]
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok().json(document())
}
