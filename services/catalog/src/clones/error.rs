//! How managed cloning fails, and each failure's status: code, typed reason
//! ([`CatalogReason`]) and a message that says what to do.

use std::collections::HashMap;

use tonic::{Code, Status};
use voxpool_domain::{contract::CatalogReason, status::with_info};

/// A refusal of a clone operation.
#[derive(Debug, thiserror::Error)]
pub enum CloneError {
    /// The pack is no managed clone.
    #[error(
        "voice pack {id:?} is no managed clone: {why}; a managed clone is a CLONED pack with \
         reference clips and no voice_id and no upstream_ids"
    )]
    NotManaged {
        /// The pack.
        id: String,
        /// What is missing or in the way.
        why: String,
    },
    /// The pool has no clone scope, or the pools are unknown.
    #[error("{why}")]
    NoScopes {
        /// The pool.
        pool: String,
        /// What is missing and what to do.
        why: String,
    },
    /// A scope holds as many clones as it has slots and its vendor cannot delete one to free
    /// a slot.
    #[error(
        "clone scope {scope:?} holds {slots} clones, all of its slots, and its vendor frees no \
         slot by deleting a clone (the slots are bought), so none is evicted: delete one there \
         (DeleteClone) so the slot takes the next clone, buy slots, or clone into another scope"
    )]
    SlotsFull {
        /// The scope.
        scope: String,
        /// Its slots.
        slots: u32,
    },
    /// A scope holds as many clones as it has slots and none of them can be evicted now.
    #[error(
        "clone scope {scope:?} holds {slots} clones, all of its slots, and none can be evicted \
         now (each is still being made, already being deleted, or this pack's): retry once one \
         is READY, delete one there (DeleteClone), or clone into another scope"
    )]
    NothingToEvict {
        /// The scope.
        scope: String,
        /// Its slots.
        slots: u32,
    },
    /// A scope holds as many clones as it has slots and every one that could be evicted was
    /// made or used within its `min_residence`.
    #[error(
        "clone scope {scope:?} holds {slots} clones, all of its slots, and every clone in it was \
         made or used within the last {min_residence} (its min_residence), so none is evicted: \
         retry once one has gone unused that long, add slots to the scope, or clone into \
         another scope"
    )]
    AllRecent {
        /// The scope.
        scope: String,
        /// Its slots.
        slots: u32,
        /// The scope's `min_residence`, as humantime writes it.
        min_residence: String,
    },
    /// Every scope of the pool is full.
    #[error(
        "every clone scope of pool {pool:?} is full ({listing}): delete a clone (DeleteClone) or \
         add slots to a scope"
    )]
    AllScopesFull {
        /// The pool.
        pool: String,
        /// `scope (n slots)` for each.
        listing: String,
    },
    /// The pack has no clone in that scope.
    #[error("voice pack {pack_id:?} has no clone in scope {scope:?}; ListClones shows its clones")]
    NotFound {
        /// The pack.
        pack_id: String,
        /// The scope.
        scope: String,
    },
    /// A report's lease token is not the step's.
    #[error(
        "the lease on {what} is no longer this worker's (it ran out and the step was handed \
         out again, or the step changed): drop this result"
    )]
    LeaseLost {
        /// `pack … in scope …` or `import of scope …`.
        what: String,
    },
}

fn metadata(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

impl From<CloneError> for Status {
    fn from(e: CloneError) -> Self {
        let message = e.to_string();
        let (code, reason, meta) = match &e {
            CloneError::NotManaged { id, .. } => (
                Code::FailedPrecondition,
                CatalogReason::CloneNotManaged,
                metadata(&[("pack_id", id)]),
            ),
            CloneError::NoScopes { pool, .. } => (
                Code::FailedPrecondition,
                CatalogReason::NoCloneScopes,
                metadata(&[("pool", pool)]),
            ),
            CloneError::SlotsFull { scope, slots }
            | CloneError::NothingToEvict { scope, slots }
            | CloneError::AllRecent { scope, slots, .. } => (
                Code::ResourceExhausted,
                CatalogReason::CloneSlotsFull,
                metadata(&[("scope", scope), ("slots", &slots.to_string())]),
            ),
            CloneError::AllScopesFull { pool, .. } => (
                Code::ResourceExhausted,
                CatalogReason::CloneSlotsFull,
                metadata(&[("pool", pool)]),
            ),
            CloneError::NotFound { pack_id, scope } => (
                Code::NotFound,
                CatalogReason::CloneNotFound,
                metadata(&[("pack_id", pack_id), ("scope", scope)]),
            ),
            CloneError::LeaseLost { .. } => (
                Code::FailedPrecondition,
                CatalogReason::CloneLeaseLost,
                HashMap::new(),
            ),
        };
        with_info(code, message, reason.as_str(), meta, None)
    }
}
