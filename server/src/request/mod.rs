//! The request vocabulary: what a REST request becomes before any partition sees it.
//!
//! Everything here is pure: it turns wire shapes (`cairn-api`) into validated values —
//! collection settings ([`settings`]), points ready to commit ([`points`]), query and scroll
//! plans ([`query`]) — and evaluates payload filters ([`filter`], with [`geo`] for geo conditions). Every rejection is a
//! [`ServerError`](crate::error::ServerError) whose message names the offending field, and
//! nothing is committed unless the whole request is valid.
//!
//! It sits below every layer that handles requests (`http`, `catalog`, `collection`,
//! `partition`, `cluster`) and imports none of them: only `config` (limits), `error` and the
//! engine crates.

pub mod filter;
pub mod geo;
pub mod groups;
pub mod hybrid;
pub mod mmr;
pub mod payload;
pub mod points;
pub mod query;
pub mod recommend;
pub mod settings;

pub use hybrid::QueryTree;
pub use mmr::MmrPlan;
pub use points::{
    check_vector, check_vector_deletion, prepare_delete_ids, prepare_points, prepare_vector_updates,
};
pub use query::{FanOut, QueryPlan};
pub use settings::CollectionSettings;
