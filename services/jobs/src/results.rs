//! Where job results live in the blob store: `jobs/{job}/<id>.<ext>` (one object per item, the
//! extension `voxctl batch` gives the format) and `jobs/{job}/summary.json`; and reading a
//! `manifest_uri` from the same store.
//!
//! Invariant: an item's object is written whole or not at all (`object_store` puts are
//! atomic), so an object under an item's name is a finished item: a reclaimed item whose
//! object exists is recorded SUCCEEDED without synthesizing it again.

use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _, stream::BoxStream};
use object_store::{ObjectStore, ObjectStoreExt as _, PutPayload, path::Path};
use voxpool_runtime::blob::BlobStore;

use crate::model::Format;

/// The folder of the blob store jobs write under.
pub const FOLDER: &str = "jobs";

/// Why a blob call failed.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// No such object.
    #[error("not found")]
    NotFound,
    /// The store refused or did not answer.
    #[error("blob store: {0}")]
    Failed(String),
    /// The caller named something that is not a path in this blob store.
    #[error("{0}")]
    NotAPath(String),
}

fn map_err(e: object_store::Error) -> BlobError {
    match e {
        object_store::Error::NotFound { .. } => BlobError::NotFound,
        other => BlobError::Failed(other.to_string()),
    }
}

/// The jobs' part of the blob store. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Results {
    root: BlobStore,
    jobs: Arc<dyn ObjectStore>,
}

impl Results {
    /// The jobs folder of `root`.
    pub fn new(root: BlobStore) -> Self {
        let jobs = root.folder(FOLDER);
        Self { root, jobs }
    }

    /// The store's location (no credentials), for messages.
    pub fn location(&self) -> &str {
        self.root.location()
    }

    /// Item `id`'s object path inside the jobs folder.
    pub fn item_path(job: &str, id: &str, format: Format) -> String {
        format!("{job}/{id}.{}", format.extension())
    }

    /// The URI shown for a path inside the jobs folder.
    pub fn uri(&self, path: &str) -> String {
        format!("{}/{FOLDER}/{path}", self.location().trim_end_matches('/'))
    }

    /// Writes `bytes` at `path` (jobs folder).
    pub async fn put(&self, path: &str, bytes: Bytes) -> Result<(), BlobError> {
        self.jobs
            .put(&Path::from(path), PutPayload::from_bytes(bytes))
            .await
            .map(drop)
            .map_err(map_err)
    }

    /// Whether this replica can write results: writes and deletes a small object under
    /// `_probe/` (named by `consumer`). Errors: the store's, as a message.
    pub async fn probe_write(&self, consumer: &str) -> Result<(), BlobError> {
        let path = Path::from(format!("_probe/{consumer}"));
        self.jobs
            .put(&path, PutPayload::from_static(b"voxpool-jobs write probe"))
            .await
            .map_err(map_err)?;
        match self.jobs.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(map_err(e)),
        }
    }

    /// The size of the object at `path`, or `None` when there is none.
    pub async fn size(&self, path: &str) -> Result<Option<u64>, BlobError> {
        match self.jobs.head(&Path::from(path)).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(BlobError::Failed(e.to_string())),
        }
    }

    /// The object at `path` as a stream of chunks.
    pub async fn read(
        &self,
        path: &str,
    ) -> Result<BoxStream<'static, Result<Bytes, BlobError>>, BlobError> {
        let got = self.jobs.get(&Path::from(path)).await.map_err(map_err)?;
        Ok(got.into_stream().map_err(map_err).boxed())
    }

    /// Deletes every object of job `job`; returns how many.
    pub async fn delete_job(&self, job: &str) -> Result<usize, BlobError> {
        let prefix = Path::from(job);
        let paths: Vec<Path> = self
            .jobs
            .list(Some(&prefix))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(map_err)?;
        let n = paths.len();
        for path in paths {
            match self.jobs.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(BlobError::Failed(e.to_string())),
            }
        }
        Ok(n)
    }

    /// The manifest `uri` names (a path in the store, or the store's location followed by
    /// one): its size and its bytes as they stream. Errors: `NotFound`; `NotAPath` for a path
    /// outside the store, with `..`, or leading out of a `file://` store through a symlink.
    pub async fn open_manifest(
        &self,
        uri: &str,
    ) -> Result<(u64, BoxStream<'static, Result<Bytes, BlobError>>), BlobError> {
        let location = self.location().trim_end_matches('/');
        let path = uri
            .strip_prefix(location)
            .map_or(uri, |rest| rest.trim_start_matches('/'));
        if path.contains("://") || path.split('/').any(|part| part == "..") || path.is_empty() {
            return Err(BlobError::NotAPath(format!(
                "not a path in the blob store {location}: give e.g. manifests/book.jsonl"
            )));
        }
        let got = self
            .root
            .store
            .get(&Path::from(path))
            .await
            .map_err(|e| match e {
                object_store::Error::PermissionDenied { source, .. } => BlobError::NotAPath(
                    format!("{source}: give a path inside the blob store {location}"),
                ),
                other => map_err(other),
            })?;
        let size = got.meta.size;
        Ok((size, got.into_stream().map_err(map_err).boxed()))
    }
}
