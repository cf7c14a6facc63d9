//! A repository whose database is still being opened at start-up: the catalog serves (health
//! NOT_SERVING) while `server::open_repository_waiting` retries the database and its
//! migrations in the background, and every call answers [`CatalogError::Unavailable`] until
//! the migrated repository is in place. Then every call goes to it.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use sea_orm::DbErr;

use super::{ClipEdit, Edit, ListQuery, PackRepository};
use crate::{
    error::CatalogError,
    model::{Action, ListedReference, PackSpec, Revision, VoicePack},
};

/// The repository being opened (module doc).
pub struct Connecting {
    repo: OnceLock<Arc<dyn PackRepository>>,
    why: Mutex<String>,
}

impl Connecting {
    /// A repository not open yet, for `why` (the reason calls log until [`Connecting::ready`]).
    pub fn new(why: String) -> Self {
        Self {
            repo: OnceLock::new(),
            why: Mutex::new(why),
        }
    }

    /// Records why the last try failed (one line, no password).
    pub fn not_yet(&self, why: String) {
        *self.why.lock().unwrap_or_else(PoisonError::into_inner) = why;
    }

    /// Puts the open, migrated repository in place (once; later calls are ignored).
    pub fn ready(&self, repo: Arc<dyn PackRepository>) {
        let _ = self.repo.set(repo);
    }

    fn open(&self) -> Result<&Arc<dyn PackRepository>, CatalogError> {
        self.repo.get().ok_or_else(|| {
            let why = self.why.lock().unwrap_or_else(PoisonError::into_inner);
            CatalogError::Unavailable {
                source: DbErr::Custom(format!("not open yet (start-up): {why}")),
            }
        })
    }
}

#[async_trait]
impl PackRepository for Connecting {
    async fn create(&self, spec: PackSpec) -> Result<VoicePack, CatalogError> {
        self.open()?.create(spec).await
    }

    async fn get(&self, id: &str) -> Result<VoicePack, CatalogError> {
        self.open()?.get(id).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Vec<VoicePack>, CatalogError> {
        self.open()?.list(query).await
    }

    async fn update(
        &self,
        id: &str,
        expected_version: Option<i64>,
        edit: &Edit<'_>,
    ) -> Result<VoicePack, CatalogError> {
        self.open()?.update(id, expected_version, edit).await
    }

    async fn set_enabled(&self, id: &str, enabled: bool) -> Result<VoicePack, CatalogError> {
        self.open()?.set_enabled(id, enabled).await
    }

    async fn revisions(&self, id: &str) -> Result<Vec<Revision>, CatalogError> {
        self.open()?.revisions(id).await
    }

    async fn set_references(
        &self,
        id: &str,
        action: Action,
        edit: &ClipEdit<'_>,
    ) -> Result<VoicePack, CatalogError> {
        self.open()?.set_references(id, action, edit).await
    }

    async fn references(
        &self,
        id: &str,
        include_removed: bool,
    ) -> Result<Vec<ListedReference>, CatalogError> {
        self.open()?.references(id, include_removed).await
    }

    async fn ping(&self) -> Result<(), CatalogError> {
        self.open()?.ping().await
    }

    fn database(&self) -> Option<sea_orm::DatabaseConnection> {
        self.repo.get().and_then(|r| r.database())
    }
}
