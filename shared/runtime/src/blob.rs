//! The one blob store a deployment keeps audio in (`--blob-store URL`, env
//! `VOXPOOL_BLOB_STORE`), opened through the `object_store` crate.
//!
//! URL forms: `file:///abs/dir` (a local directory, created if missing), `s3://bucket/prefix`,
//! `gs://bucket/prefix`, `az://container/prefix`. Cloud credentials, regions and endpoints
//! come from the environment the way `object_store`'s builders read it (`AWS_*`,
//! `GOOGLE_*`, `AZURE_*`; e.g. `AWS_ENDPOINT` + `AWS_ALLOW_HTTP=true` for an S3-compatible
//! server on loopback). Unset: a directory under the user's data directory
//! (`$XDG_DATA_HOME/voxpool/blobs`, else `~/.local/share/voxpool/blobs`).
//!
//! Each user of the store keeps to its own top-level folder (the synthesis cache under
//! `cache/`). Writes are whole-object puts: `object_store` writes a local file under a
//! temporary name and renames it into place, and an S3/GCS/Azure PUT becomes visible only
//! once complete, so a reader never sees half an object and a crash mid-write leaves nothing
//! readable under the object's name.
//!
//! The URL shown in logs and RPCs ([`BlobStore::location`]) carries no credentials: user
//! info and query strings are dropped.

use std::{path::PathBuf, sync::Arc};

use object_store::{ObjectStore, ObjectStoreScheme, local::LocalFileSystem, prefix::PrefixStore};

/// The `--blob-store` flag, for every binary that stores audio.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct BlobFlags {
    /// Where audio blobs live: `file:///abs/dir`, `s3://bucket/prefix`, `gs://bucket/prefix`
    /// or `az://container/prefix` (cloud credentials from the environment, as the
    /// `object_store` crate reads them). Default: `voxpool/blobs` under the user's data
    /// directory.
    #[arg(long = "blob-store", env = "VOXPOOL_BLOB_STORE", value_name = "URL")]
    pub blob_store: Option<String>,
}

/// An opened blob store.
#[derive(Clone)]
pub struct BlobStore {
    /// The store, rooted at the URL's path.
    pub store: Arc<dyn ObjectStore>,
    /// The URL without credentials (see the module doc).
    location: String,
    /// The directory, for a local store.
    local_root: Option<PathBuf>,
}

impl std::fmt::Debug for BlobStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStore")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl BlobStore {
    /// Opens the store `url` names (module doc), or the default local directory when `None`.
    ///
    /// Errors (one line naming the flag and what to change): an unparsable URL, an
    /// unsupported scheme, a relative `file:` path, a directory that cannot be created, a
    /// cloud builder that refuses its environment (e.g. no region or bucket).
    pub fn open(url: Option<&str>) -> Result<Self, String> {
        let url = match url {
            Some(u) if !u.trim().is_empty() => u.trim().to_owned(),
            _ => {
                let dir = default_dir().ok_or(
                    "--blob-store: no data directory for this user (HOME unset); pass --blob-store file:///abs/dir",
                )?;
                format!("file://{}", dir.display())
            }
        };
        let parsed = url::Url::parse(&url).map_err(|e| {
            format!("--blob-store {:?}: not a URL ({e}); use file:///abs/dir, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix", redact(&url))
        })?;
        let location = redact_url(&parsed);
        let (scheme, path) = ObjectStoreScheme::parse(&parsed).map_err(|e| {
            format!("--blob-store {location}: {e}; use file://, s3://, gs:// or az://")
        })?;
        let complain = |e: object_store::Error| format!("--blob-store {location}: {e}");
        let (store, local_root): (Arc<dyn ObjectStore>, _) = match scheme {
            ObjectStoreScheme::Local => {
                let dir = parsed.to_file_path().map_err(|()| {
                    format!("--blob-store {location}: a file URL needs an absolute path (file:///abs/dir)")
                })?;
                std::fs::create_dir_all(&dir).map_err(|e| {
                    format!(
                        "--blob-store {location}: cannot create {}: {e}",
                        dir.display()
                    )
                })?;
                // Deleting a folder's last object removes the emptied folders too (a deleted
                // or expired job leaves no `jobs/<id>/` behind).
                let fs = LocalFileSystem::new_with_prefix(&dir)
                    .map_err(complain)?
                    .with_automatic_cleanup(true);
                (Arc::new(fs), Some(dir))
            }
            ObjectStoreScheme::AmazonS3 => {
                let s3 = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(url.as_str())
                    .build()
                    .map_err(complain)?;
                (prefixed(s3, path), None)
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                let gcs = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(url.as_str())
                    .build()
                    .map_err(complain)?;
                (prefixed(gcs, path), None)
            }
            ObjectStoreScheme::MicrosoftAzure => {
                let az = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(url.as_str())
                    .build()
                    .map_err(complain)?;
                (prefixed(az, path), None)
            }
            other => {
                return Err(format!(
                    "--blob-store {location}: {other:?} stores are not supported; use file://, s3://, gs:// or az://"
                ));
            }
        };
        Ok(Self {
            store,
            location,
            local_root,
        })
    }

    /// The store's URL without credentials.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// The directory of a local (`file://`) store; `None` for a cloud store.
    pub fn local_root(&self) -> Option<&std::path::Path> {
        self.local_root.as_deref()
    }

    /// The store rooted at `folder/` (e.g. `cache`): what one user of the store sees.
    pub fn folder(&self, folder: &str) -> Arc<dyn ObjectStore> {
        Arc::new(PrefixStore::new(self.store.clone(), folder))
    }
}

fn prefixed<S: ObjectStore>(store: S, path: object_store::path::Path) -> Arc<dyn ObjectStore> {
    if path.as_ref().is_empty() {
        Arc::new(store)
    } else {
        Arc::new(PrefixStore::new(store, path))
    }
}

/// `$XDG_DATA_HOME/voxpool/blobs` or the platform's equivalent.
fn default_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("voxpool").join("blobs"))
}

fn redact_url(url: &url::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

/// What of an unparsable URL may be shown: no user info (anything up to the last `@`), no
/// query or fragment, at most 80 chars.
fn redact(raw: &str) -> String {
    let (scheme, rest) = match raw.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), raw),
    };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    format!("{scheme}{rest}").chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::{ObjectStoreExt as _, PutPayload, path::Path};

    #[tokio::test]
    async fn a_file_url_opens_the_directory_and_creates_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("nested").join("blobs");
        let blobs = BlobStore::open(Some(&format!("file://{}", root.display()))).unwrap();
        assert_eq!(blobs.local_root(), Some(root.as_path()));
        blobs
            .folder("cache")
            .put(&Path::from("a/b"), PutPayload::from_static(b"x"))
            .await
            .unwrap();
        assert_eq!(std::fs::read(root.join("cache/a/b")).unwrap(), b"x");
    }

    #[test]
    fn bad_urls_name_the_flag_and_the_forms() {
        let err = BlobStore::open(Some("not a url")).unwrap_err();
        assert!(err.starts_with("--blob-store"), "{err}");
        assert!(err.contains("file:///abs/dir"), "{err}");
        let err = BlobStore::open(Some("ftp://host/x")).unwrap_err();
        assert!(err.contains("file://, s3://"), "{err}");
    }

    #[test]
    fn credentials_in_a_url_are_never_shown() {
        let url = url::Url::parse("s3://user:hunter2@bucket/prefix?token=abc").unwrap();
        let shown = redact_url(&url);
        assert!(
            !shown.contains("hunter2") && !shown.contains("abc"),
            "{shown}"
        );
        assert!(!redact("s3://user:hunter2@bucket").contains("hunter2"));
    }
}
