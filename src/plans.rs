//! The application layer: the rules of a write in one room, used by every way in (the API's writes and restores, `git push`, `planfiles validate`, the GET views, the change feed's judge), between the transports and `storage`/`validation`.
mod error;
pub mod proposals;
pub mod push;
pub mod rules;
pub mod write;
pub mod writer;

pub use error::PlanError;
pub use rules::{NewDoc, StoredJudge};
pub use write::{parse_put_body, Part, Planned, PutBody};
pub use writer::{PushMove, WriteError, Writers};
