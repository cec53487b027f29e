//! A write's answer: the new state of each file (with the dry run's patch), as its PUT or as `POST /plans/commits` answers it, or the replay of an earlier answer; each built as a typed value and serialized once.
use crate::domain::{json_patch, BlobId, CommitId, PlanFile};
use crate::http::common::json_bytes;
use crate::http::middleware::WrittenCommit;
use crate::http::problem::ApiError;
use crate::http::schema::CommitsAnswer;
use crate::http::views::{self, FileView};
use crate::plans::writer::WriteError;
use crate::plans::NewDoc;
use crate::storage::{CommitOutcome, StorageError};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::HttpResponse;

pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// A write's answer, built where the work is and sent from the worker.
pub(in crate::http) struct Answer {
    body: actix_web::web::Bytes,
    etag: Option<BlobId>,
    written: Option<WrittenCommit>,
}

impl Answer {
    pub fn respond(self) -> HttpResponse {
        let mut res = match self.etag {
            Some(blob) => views::respond(self.body, views::etag(blob)),
            None => json_bytes(self.body),
        };
        if let Some(written) = self.written {
            res.extensions_mut().insert(written);
        }
        res
    }
}

/// The answer of a write that ran (or of its dry run): each file's view of the bytes it
/// holds now, with `commit_sha` and, on a dry run, the patch from the content stored before.
pub(in crate::http) fn render(docs: Vec<NewDoc>, outcome: CommitOutcome, shape: Shape) -> Answer {
    let mut views = Vec::new();
    for (doc, file) in docs.into_iter().zip(&outcome.files) {
        let patch = file.before.as_ref().map(|before| {
            let new = match &doc {
                NewDoc::Integration(d) => d.content(),
                NewDoc::Configuration(d) => d.content(),
            };
            json_patch::diff(
                &views::stored_content(file.file, before),
                &serde_json::Value::Object(new.clone()),
            )
        });
        let mut view = match doc {
            // The text storage holds for it (a JSON content edits the stored text).
            NewDoc::Integration(d) => FileView::integration(d.stored_as(&file.bytes), file.blob),
            NewDoc::Configuration(d) => FileView::configuration(d, file.blob),
        };
        if shape == Shape::Single {
            view = view.commit(outcome.commit);
        }
        if let Some(patch) = patch {
            view = view.patch(patch);
        }
        views.push((file.file, file.blob, view));
    }
    let written = outcome.commit.and_then(|commit| {
        let f = outcome
            .files
            .iter()
            .find(|f| f.changed)
            .or(outcome.files.first())?;
        Some(WrittenCommit {
            commit,
            file: f.file,
            changed: outcome.changed(),
            forced: f.forced,
            made: f.made,
        })
    });
    match shape {
        Shape::Single => {
            let (_, blob, view) = views.pop().expect("one part");
            Answer {
                body: view.to_bytes(),
                etag: Some(blob),
                written,
            }
        }
        Shape::Both => Answer {
            body: both(outcome.commit, views),
            etag: None,
            written,
        },
    }
}

/// The body of `POST /plans/commits`: the commit (`null` on a dry run) and each part sent.
fn both(
    commit: Option<CommitId>,
    views: Vec<(PlanFile, BlobId, FileView)>,
) -> actix_web::web::Bytes {
    let mut answer = CommitsAnswer {
        commit_sha: commit,
        integration_file: None,
        configuration_file: None,
    };
    for (_, _, view) in views {
        match view {
            FileView::Integration(f) => answer.integration_file = Some(f),
            FileView::Configuration(f) => answer.configuration_file = Some(f),
        }
    }
    actix_web::web::Bytes::from(serde_json::to_vec(&answer).expect("answers serialize"))
}

/// The answer a first request with the same key and fingerprint got, from the files as of
/// its commit: `files` read there (bytes and blob id), marked `Idempotent-Replayed: true`.
pub(in crate::http) fn replay(
    commit: CommitId,
    files: Vec<(PlanFile, Vec<u8>, BlobId)>,
    shape: Shape,
) -> HttpResponse {
    let views: Vec<(PlanFile, BlobId, FileView)> = files
        .into_iter()
        .map(|(file, bytes, blob)| {
            // As the first answer had it: the write passed the schemas of its time, so it is
            // not judged again by today's.
            let view = FileView::unjudged(file, &bytes, blob);
            let view = match shape {
                Shape::Single => view.commit(Some(commit)),
                Shape::Both => view,
            };
            (file, blob, view)
        })
        .collect();
    let mut res = match shape {
        Shape::Single => {
            let (_, blob, view) = views.into_iter().next().expect("one file");
            views::respond(view.to_bytes(), views::etag(blob))
        }
        Shape::Both => json_bytes(both(Some(commit), views)),
    };
    res.headers_mut()
        .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    res
}

/// Maps a failed write: an error about one file of `POST /plans/commits` names its part.
pub(in crate::http) fn write_error(e: WriteError, shape: Shape, first: PlanFile) -> ApiError {
    let failed = match &e {
        WriteError::Storage(
            StorageError::ShaMismatch { file, .. } | StorageError::PreconditionFailed { file, .. },
        ) => Some(*file),
        _ => None,
    };
    match (shape, failed) {
        (Shape::Both, Some(file)) => ApiError::from_write(e, file).in_part(file),
        _ => ApiError::from_write(e, first),
    }
}

/// How a write answers: as its file's PUT, or as `POST /plans/commits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::http) enum Shape {
    Single,
    Both,
}
