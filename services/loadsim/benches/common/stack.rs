//! The in-process servers the loadsim benches measure against: a scheduler ([`scheduler`]) and
//! a synthesis server ([`synthesis`]) for a config, and [`start`], both for one fake
//! OpenAI-compatible vendor (pool `openai-fake`, one key, memory store), with or without the
//! audio cache on a local blob store.

use std::{net::SocketAddr, path::Path, sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use voxpool_config::Config;
use voxpool_runtime::{auth::AdminAuth, blob::BlobStore};
use voxpool_synthesis::{
    adapters::registry::{self, AdapterOptions},
    cache::Cache,
    server::{self, Options},
};

/// Whether synthesis runs with the audio cache (on `dir/blobs`).
#[derive(Clone, Copy, PartialEq, Eq)]
#[allow(
    dead_code,
    reason = "each bench that includes this module uses one of the two"
)]
pub enum AudioCache {
    On,
    Off,
}

/// Starts the stack for the vendor at `base_url` (its key's `capacity` leases), keeping its
/// files in `dir`; answers synthesis's address. Everything stops at `shutdown`.
pub async fn start(
    base_url: &str,
    dir: &Path,
    capacity: u32,
    cache: AudioCache,
    shutdown: &CancellationToken,
) -> String {
    let credential = dir.join("key");
    std::fs::write(&credential, "k0\n").expect("credential file");
    let toml = format!(
        "[[pools]]\nid = \"openai-fake\"\nprovider = \"openai\"\nmodel = \"tts-1\"\n\
         [[pools.upstreams]]\nid = \"u\"\nbase_url = \"{base_url}\"\n\
         [[pools.upstreams.keys]]\nid = \"k0\"\ncapacity = {capacity}\ncredential = {{ file = \"{}\" }}\n\
         [scheduler]\nrecovery_window_ms = 0\n",
        credential.display()
    );
    let config = Config::from_toml_str(&toml).expect("config");
    let scheduler = scheduler(&config, "memory", shutdown).await;
    let cache = (cache == AudioCache::On).then(|| {
        let blobs = BlobStore::open(Some(&format!("file://{}", dir.join("blobs").display())))
            .expect("blob store");
        Arc::new(Cache::new(
            &blobs,
            1,
            config.synthesis.cache_max_bytes,
            Duration::from_millis(config.synthesis.cache_fill_ttl_ms),
        ))
    });
    synthesis(&config, scheduler, cache, shutdown)
        .await
        .to_string()
}

/// A scheduler server for `config` on `store` (`memory` or a Redis URL), in this process on
/// 127.0.0.1:0; answers its address.
pub async fn scheduler(config: &Config, store: &str, shutdown: &CancellationToken) -> SocketAddr {
    let store = voxpool_scheduler::server::open_store(store, config)
        .await
        .expect("store");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (c, s) = (config.clone(), shutdown.clone());
    tokio::spawn(async move {
        voxpool_scheduler::server::serve(listener, store, &c, AdminAuth::disabled(), s).await
    });
    addr
}

/// A synthesis server for `config` leasing from the scheduler at `scheduler` (which
/// authenticates no one), with `cache` or none, in this process on 127.0.0.1:0; answers its
/// address.
pub async fn synthesis(
    config: &Config,
    scheduler: SocketAddr,
    cache: Option<Arc<Cache>>,
    shutdown: &CancellationToken,
) -> SocketAddr {
    synthesis_metered(config, scheduler, cache, None, shutdown).await
}

/// [`synthesis`] writing usage records to the Redis at `usage_store` (`--usage-store`).
pub async fn synthesis_metered(
    config: &Config,
    scheduler: SocketAddr,
    cache: Option<Arc<Cache>>,
    usage_store: Option<&str>,
    shutdown: &CancellationToken,
) -> SocketAddr {
    let usage_store = usage_store.map(|url| {
        voxpool_synthesis::usage::Writer::start(
            url,
            voxpool_synthesis::usage::writer::DEFAULT_CAPACITY,
            config.usage.on_store_down,
        )
        .expect("usage store")
    });
    let options = Options {
        scheduler_url: format!("http://{scheduler}"),
        catalog_url: "http://127.0.0.1:1".into(),
        lease_ttl: server::DEFAULT_LEASE_TTL,
        client_token: voxpool_runtime::auth::ClientToken::none(),
        cache,
        references: None,
        admin: AdminAuth::disabled(),
        usage_store,
    };
    let core = server::build(
        config,
        registry::builtin(&AdapterOptions::default()),
        &options,
    )
    .expect("synthesis core");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let s = shutdown.clone();
    tokio::spawn(async move { server::serve(listener, core, s).await });
    addr
}
