//! Every path the service answers, in one table: its methods and their handlers, its name in the request log and the metrics, and whether the OpenAPI document describes it. [`configure`] registers the table; a test checks the OpenAPI document against it.
use super::problem::ApiError;
use super::{
    admin, commits, console, diff, events, git, handlers, history, openapi, ops, proposals,
    restore, schemas, signing, webhooks,
};
use actix_web::{web, HttpResponse};

/// One path of the service.
pub struct Route {
    pub path: &'static str,
    /// Its name in the request log and the metrics' `route` label (the path itself, or a
    /// shorter one); `None`: the pattern is used.
    pub name: Option<&'static str>,
    /// Its methods as an `Allow` header lists them (a 405 names them).
    pub allow: &'static str,
    /// A route per method in `allow`, in that order.
    pub handlers: fn() -> Vec<actix_web::Route>,
    /// In the OpenAPI document: every path but the console's (`/` is its way in).
    pub documented: bool,
}

/// The paths, the hot ones first (static paths match without the pattern matching that the
/// git routes' `{repo}` segment needs).
pub const ROUTES: &[Route] = &[
    Route {
        path: "/plans/integration-file",
        name: Some("/plans/integration-file"),
        allow: "GET, PUT",
        handlers: || {
            vec![
                web::get().to(handlers::get_integration),
                web::put().to(handlers::put_integration),
            ]
        },
        documented: true,
    },
    Route {
        path: "/plans/configuration-file",
        name: Some("/plans/configuration-file"),
        allow: "GET, PUT",
        handlers: || {
            vec![
                web::get().to(handlers::get_configuration),
                web::put().to(handlers::put_configuration),
            ]
        },
        documented: true,
    },
    Route {
        path: "/plans/integration-file/history",
        name: Some("/plans/integration-file/history"),
        allow: "GET",
        handlers: || vec![web::get().to(history::integration)],
        documented: true,
    },
    Route {
        path: "/plans/configuration-file/history",
        name: Some("/plans/configuration-file/history"),
        allow: "GET",
        handlers: || vec![web::get().to(history::configuration)],
        documented: true,
    },
    Route {
        path: "/plans/schemas/integration-file",
        name: Some("/plans/schemas/integration-file"),
        allow: "GET",
        handlers: || vec![web::get().to(schemas::integration_schema)],
        documented: true,
    },
    Route {
        path: "/plans/schemas/configuration-file",
        name: Some("/plans/schemas/configuration-file"),
        allow: "GET",
        handlers: || vec![web::get().to(schemas::configuration_schema)],
        documented: true,
    },
    Route {
        path: "/plans/signing-keys",
        name: Some("/plans/signing-keys"),
        allow: "GET",
        handlers: || vec![web::get().to(signing::signing_keys)],
        documented: true,
    },
    Route {
        path: "/admin/tenants/{tenant}/import",
        name: Some("/admin/tenants/{tenant}/import"),
        allow: "POST",
        handlers: || vec![web::post().to(admin::import)],
        documented: true,
    },
    Route {
        path: "/admin/tenants/{tenant}/placement",
        name: Some("/admin/tenants/{tenant}/placement"),
        allow: "GET",
        handlers: || vec![web::get().to(admin::placement)],
        documented: true,
    },
    Route {
        path: "/plans/events",
        name: Some("/plans/events"),
        allow: "GET",
        handlers: || vec![web::get().to(events::stream)],
        documented: true,
    },
    Route {
        path: "/plans/events/tickets",
        name: Some("/plans/events/tickets"),
        allow: "POST",
        handlers: || vec![web::post().to(events::ticket)],
        documented: true,
    },
    Route {
        path: "/plans/webhooks",
        name: Some("/plans/webhooks"),
        allow: "GET, POST",
        handlers: || {
            vec![
                web::get().to(webhooks::list),
                web::post().to(webhooks::create),
            ]
        },
        documented: true,
    },
    Route {
        path: "/plans/webhooks/{id}",
        name: None,
        allow: "GET, DELETE",
        handlers: || {
            vec![
                web::get().to(webhooks::get),
                web::delete().to(webhooks::delete),
            ]
        },
        documented: true,
    },
    Route {
        path: "/plans/webhooks/{id}/resume",
        name: None,
        allow: "POST",
        handlers: || vec![web::post().to(webhooks::resume)],
        documented: true,
    },
    Route {
        path: "/plans/webhooks/{id}/deliveries",
        name: None,
        allow: "GET",
        handlers: || vec![web::get().to(webhooks::deliveries)],
        documented: true,
    },
    Route {
        path: "/plans/proposals",
        name: Some("/plans/proposals"),
        allow: "GET, POST",
        handlers: || {
            vec![
                web::get().to(proposals::list),
                web::post().to(proposals::create),
            ]
        },
        documented: true,
    },
    Route {
        path: "/plans/proposals/{number}",
        name: None,
        allow: "GET, PUT",
        handlers: || {
            vec![
                web::get().to(proposals::get),
                web::put().to(proposals::update),
            ]
        },
        documented: true,
    },
    Route {
        path: "/plans/proposals/{number}/approve",
        name: None,
        allow: "POST",
        handlers: || vec![web::post().to(proposals::approve)],
        documented: true,
    },
    Route {
        path: "/plans/proposals/{number}/apply",
        name: None,
        allow: "POST",
        handlers: || vec![web::post().to(proposals::apply)],
        documented: true,
    },
    Route {
        path: "/plans/proposals/{number}/close",
        name: None,
        allow: "POST",
        handlers: || vec![web::post().to(proposals::close)],
        documented: true,
    },
    Route {
        path: "/plans/commits",
        name: Some("/plans/commits"),
        allow: "POST",
        handlers: || vec![web::post().to(commits::post_commits)],
        documented: true,
    },
    Route {
        path: "/plans/integration-file/restore",
        name: Some("/plans/integration-file/restore"),
        allow: "POST",
        handlers: || vec![web::post().to(restore::restore_integration)],
        documented: true,
    },
    Route {
        path: "/plans/configuration-file/restore",
        name: Some("/plans/configuration-file/restore"),
        allow: "POST",
        handlers: || vec![web::post().to(restore::restore_configuration)],
        documented: true,
    },
    Route {
        path: "/plans/integration-file/diff",
        name: Some("/plans/integration-file/diff"),
        allow: "GET",
        handlers: || vec![web::get().to(diff::diff_integration)],
        documented: true,
    },
    Route {
        path: "/plans/configuration-file/diff",
        name: Some("/plans/configuration-file/diff"),
        allow: "GET",
        handlers: || vec![web::get().to(diff::diff_configuration)],
        documented: true,
    },
    Route {
        path: "/git/{repo}/info/refs",
        name: None,
        allow: "GET",
        handlers: || vec![web::get().to(git::info_refs)],
        documented: true,
    },
    Route {
        path: "/git/{repo}/git-upload-pack",
        name: None,
        allow: "POST",
        handlers: || vec![web::post().to(git::upload_pack)],
        documented: true,
    },
    Route {
        path: "/git/{repo}/git-receive-pack",
        name: None,
        allow: "POST",
        handlers: || vec![web::post().to(git::receive_pack)],
        documented: true,
    },
    Route {
        path: "/healthz",
        name: None,
        allow: "GET",
        handlers: || vec![web::get().to(ops::healthz)],
        documented: true,
    },
    Route {
        path: "/readyz",
        name: None,
        allow: "GET",
        handlers: || vec![web::get().to(ops::readyz)],
        documented: true,
    },
    Route {
        path: "/metrics",
        name: None,
        allow: "GET",
        handlers: || vec![web::get().to(ops::metrics)],
        documented: true,
    },
    Route {
        path: "/openapi.json",
        name: None,
        allow: "GET",
        handlers: || vec![web::get().to(openapi::openapi)],
        documented: true,
    },
    Route {
        path: "/",
        name: None,
        allow: "GET",
        handlers: || vec![web::get().to(console::root)],
        documented: false,
    },
    Route {
        path: "/ui",
        name: None,
        allow: "GET",
        handlers: || vec![web::get().to(console::to_index)],
        documented: false,
    },
    Route {
        path: "/ui/",
        name: Some("/ui/"),
        allow: "GET",
        handlers: || vec![web::get().to(console::index)],
        documented: false,
    },
    Route {
        path: "/ui/assets/{version}/{name}",
        name: Some("/ui/assets"),
        allow: "GET",
        handlers: || vec![web::get().to(console::asset)],
        documented: false,
    },
];

/// Registers every route of [`ROUTES`]; any other method on a path is 405 with `Allow`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    for route in ROUTES {
        let mut resource = web::resource(route.path);
        if let Some(name) = route.name {
            resource = resource.name(name);
        }
        for handler in (route.handlers)() {
            resource = resource.route(handler);
        }
        let allow = route.allow;
        cfg.service(resource.default_service(web::to(move || async move {
            Err::<HttpResponse, _>(ApiError::MethodNotAllowed(allow))
        })));
    }
}

#[cfg(test)]
mod tests {
    use super::ROUTES;
    use std::collections::BTreeMap;

    /// The OpenAPI document describes exactly the documented routes of the table, each with
    /// the methods the table lets through: a path added to one and not the other fails here.
    #[test]
    fn the_openapi_document_lists_exactly_the_documented_routes() {
        let doc = serde_json::to_value(super::super::openapi::document()).unwrap();
        let described: BTreeMap<String, Vec<String>> = doc["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .map(|(path, ops)| {
                let mut methods: Vec<String> = ops
                    .as_object()
                    .unwrap()
                    .keys()
                    .filter(|k| ["get", "put", "post", "delete", "patch"].contains(&k.as_str()))
                    .map(|k| k.to_uppercase())
                    .collect();
                methods.sort();
                (path.clone(), methods)
            })
            .collect();
        let routed: BTreeMap<String, Vec<String>> = ROUTES
            .iter()
            .filter(|r| r.documented)
            .map(|r| {
                let mut methods: Vec<String> = r.allow.split(", ").map(str::to_owned).collect();
                methods.sort();
                (r.path.to_owned(), methods)
            })
            .collect();
        assert_eq!(described, routed);
    }

    #[test]
    fn each_route_has_a_handler_per_allowed_method_and_a_unique_path() {
        let mut seen = std::collections::HashSet::new();
        for r in ROUTES {
            assert!(seen.insert(r.path), "{} twice", r.path);
            assert_eq!(
                (r.handlers)().len(),
                r.allow.split(", ").count(),
                "{}",
                r.path
            );
        }
    }
}
