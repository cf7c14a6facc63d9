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
//!
//! A `file://` store stays inside its directory: `object_store`'s `LocalFileSystem` follows
//! symlinks wherever they point, so every object path is checked first ([`Confined`]) and
//! one that leads out of the directory through a symlink (or through one that does not
//! resolve) is refused (`PermissionDenied`), and left out of listings. Symlinks that stay
//! inside work as before. The check and the file operation are two steps: someone who can
//! replace a folder of the directory by a symlink between them is not stopped (keep the
//! directory writable by the service alone).

use std::{path::PathBuf, sync::Arc};

use futures::{StreamExt as _, TryStreamExt as _, stream::BoxStream};
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreScheme, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
    local::LocalFileSystem, path::Path as ObjectPath, prefix::PrefixStore,
};

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
                let root = std::fs::canonicalize(&dir).map_err(|e| {
                    format!(
                        "--blob-store {location}: cannot resolve {}: {e}",
                        dir.display()
                    )
                })?;
                let confined = Confined {
                    fs: Arc::new(fs),
                    root: Arc::new(root),
                };
                (Arc::new(confined), Some(dir))
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

/// A local store that refuses object paths leading out of its root through a symlink (module
/// doc). Cheap to clone.
#[derive(Clone, Debug)]
struct Confined {
    fs: Arc<LocalFileSystem>,
    /// The directory, canonical (as `LocalFileSystem` resolves it).
    root: Arc<PathBuf>,
}

impl std::fmt::Display for Confined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Confined({})", self.fs)
    }
}

impl Confined {
    /// Why `location` is refused, if it is (see [`escape`]).
    async fn escapes(&self, location: &ObjectPath) -> object_store::Result<Option<String>> {
        let file = self.fs.path_to_filesystem(location)?;
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || escape(&root, &file))
            .await
            .map_err(|source| object_store::Error::JoinError { source })
    }

    /// `PermissionDenied` naming `location` when it leads out of the root.
    async fn check(&self, location: &ObjectPath) -> object_store::Result<()> {
        match self.escapes(location).await? {
            None => Ok(()),
            Some(why) => Err(object_store::Error::PermissionDenied {
                path: location.to_string(),
                source: why.into(),
            }),
        }
    }

    /// Whether `location` stays inside the root (a listing drops the others).
    async fn inside(&self, location: &ObjectPath) -> object_store::Result<bool> {
        Ok(self.escapes(location).await?.is_none())
    }
}

/// Where `file` (a path under `root`) leaves `root` through a symlink, if it does: the first
/// symlink on its way that resolves outside `root` or does not resolve. Parts that do not
/// exist yet cannot lead anywhere.
fn escape(root: &std::path::Path, file: &std::path::Path) -> Option<String> {
    let Ok(rel) = file.strip_prefix(root) else {
        return Some("not under the blob store's root".into());
    };
    let mut at = root.to_path_buf();
    for part in rel.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return None,
            Ok(meta) if meta.file_type().is_symlink() => {
                let shown = at.strip_prefix(root).unwrap_or(&at).display().to_string();
                match std::fs::canonicalize(&at) {
                    Ok(real) if real.starts_with(root) => {}
                    Ok(_) => {
                        return Some(format!(
                            "{shown} is a symlink to a place outside the blob store's root: refused; keep the store's files inside its directory"
                        ));
                    }
                    Err(_) => {
                        return Some(format!(
                            "{shown} is a symlink that does not resolve, possibly outside the blob store's root: refused"
                        ));
                    }
                }
            }
            Ok(_) => {}
        }
    }
    None
}

#[tonic::async_trait]
impl ObjectStore for Confined {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.check(location).await?;
        self.fs.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.check(location).await?;
        self.fs.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.check(location).await?;
        self.fs.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        let this = self.clone();
        locations
            .and_then(move |location| {
                let this = this.clone();
                async move {
                    this.check(&location).await?;
                    let one = futures::stream::once(async { Ok(location) }).boxed();
                    let mut deleted = this.fs.delete_stream(one);
                    deleted.next().await.unwrap_or_else(|| {
                        Err(object_store::Error::Generic {
                            store: "LocalFileSystem",
                            source: "the delete answered nothing".into(),
                        })
                    })
                }
            })
            .boxed()
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let this = self.clone();
        self.fs
            .list(prefix)
            .try_filter_map(move |meta| {
                let this = this.clone();
                async move { Ok(this.inside(&meta.location).await?.then_some(meta)) }
            })
            .boxed()
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        let mut listed = self.fs.list_with_delimiter(prefix).await?;
        let mut prefixes = Vec::with_capacity(listed.common_prefixes.len());
        for p in std::mem::take(&mut listed.common_prefixes) {
            if self.inside(&p).await? {
                prefixes.push(p);
            }
        }
        let mut objects = Vec::with_capacity(listed.objects.len());
        for meta in std::mem::take(&mut listed.objects) {
            if self.inside(&meta.location).await? {
                objects.push(meta);
            }
        }
        listed.common_prefixes = prefixes;
        listed.objects = objects;
        Ok(listed)
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.check(from).await?;
        self.check(to).await?;
        self.fs.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.check(from).await?;
        self.check(to).await?;
        self.fs.rename_opts(from, to, options).await
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

    #[tokio::test]
    async fn a_symlink_out_of_a_file_root_is_neither_read_nor_written_through() {
        use futures::TryStreamExt as _;
        let dir = tempfile::tempdir().unwrap();
        let (root, outside) = (dir.path().join("blobs"), dir.path().join("outside"));
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), b"secret").unwrap();
        let blobs = BlobStore::open(Some(&format!("file://{}", root.display()))).unwrap();
        // A folder and a file of the root that are symlinks out of it.
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("leak.txt")).unwrap();
        let refused = |e: object_store::Error| {
            assert!(
                matches!(e, object_store::Error::PermissionDenied { .. }),
                "{e}"
            );
            assert!(e.to_string().contains("outside"), "says why: {e}");
        };
        for path in ["escape/secret.txt", "leak.txt"] {
            let path = Path::from(path);
            refused(blobs.store.get(&path).await.unwrap_err());
            refused(blobs.store.head(&path).await.unwrap_err());
            refused(blobs.store.delete(&path).await.unwrap_err());
            refused(
                blobs
                    .store
                    .copy(&path, &Path::from("copied.txt"))
                    .await
                    .unwrap_err(),
            );
        }
        refused(
            blobs
                .folder("escape")
                .put(&Path::from("new.wav"), PutPayload::from_static(b"x"))
                .await
                .unwrap_err(),
        );
        assert!(!outside.join("new.wav").exists(), "nothing written outside");
        assert_eq!(
            std::fs::read(outside.join("secret.txt")).unwrap(),
            b"secret"
        );
        assert!(!root.join("copied.txt").exists());
        // Listing shows nothing that lives outside.
        blobs
            .store
            .put(&Path::from("inside.txt"), PutPayload::from_static(b"in"))
            .await
            .unwrap();
        let listed: Vec<String> = blobs
            .store
            .list(None)
            .map_ok(|m| m.location.to_string())
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed, vec!["inside.txt".to_owned()]);
        // A symlink that stays inside the root works as before.
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("alias")).unwrap();
        let alias = blobs.folder("alias");
        alias
            .put(&Path::from("x"), PutPayload::from_static(b"ok"))
            .await
            .unwrap();
        assert_eq!(std::fs::read(root.join("real/x")).unwrap(), b"ok");
        let got = alias.get(&Path::from("x")).await.unwrap().bytes().await;
        assert_eq!(got.unwrap().as_ref(), b"ok");
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
