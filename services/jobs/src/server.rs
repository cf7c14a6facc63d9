//! Wiring of one jobs replica, shared by the `voxpool-jobs` binary (which turns its flags into
//! [`Settings`]): connect the job store (waiting for it with capped back-off while the port is
//! bound), start the workers, the finalizer and, with the webhook secret, the deliveries; serve
//! the gRPC edge with health (NOT_SERVING while the store does not answer or the workers are
//! paused by a fault of this replica) and reflection; drain the workers on shutdown.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use voxpool_domain::secret::Secret;
use voxpool_runtime::{
    auth::{Authenticated, ClientAuth, ClientToken},
    limits::ServerFlags,
    startup::NotReady,
};

use crate::{
    deliveries::{Deliveries, DeliveryOptions},
    domain::Jobs,
    egress::Policy,
    finalize::Finalizer,
    results::Results,
    service::{JobsService, SERVICE_NAME},
    store::JobStore,
    synth::Synthesizer,
    webhook::Sender,
    worker::{WorkerOptions, Workers},
};

/// Shortest `--visibility-timeout` (the heartbeat runs every third of it).
const MIN_VISIBILITY_TIMEOUT: Duration = Duration::from_millis(300);
/// The job store's response timeout.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// What one replica runs with (the binary's flags, their files read).
pub struct Settings {
    /// Address to serve gRPC on.
    pub listen: String,
    /// The job store's Redis URL (any topology).
    pub store: String,
    /// Prefix of every Redis key of the job store.
    pub key_prefix: String,
    /// Replicas that must acknowledge a new job (`None`: the topology's default).
    pub replica_acks: Option<u32>,
    /// Synthesis endpoints, `URL[,URL...]`.
    pub synthesis: String,
    /// The token presented to synthesis.
    pub client_token: ClientToken,
    /// The callers this API accepts.
    pub callers: ClientAuth,
    /// Items in flight on this replica.
    pub concurrency: usize,
    /// Silence after which another replica reclaims a held item.
    pub visibility_timeout: Duration,
    /// Synthesize calls per item and delivery.
    pub max_attempts: u32,
    /// Workers that may take an item before it fails.
    pub max_deliveries: u32,
    /// Longest pause of a tenant's items on a spent budget.
    pub budget_recheck: Duration,
    /// Deadline of one Synthesize call.
    pub item_timeout: Duration,
    /// How long an ended job is kept.
    pub retention: Duration,
    /// The secret webhooks are signed with, if this replica has it.
    pub webhook_secret: Option<Secret>,
    /// Webhook targets allowed although refused by default (`--webhook-allow`).
    pub webhook_allow: String,
    /// Webhook deliveries in flight on this replica.
    pub webhook_concurrency: usize,
    /// Webhook deliveries in flight to one destination.
    pub webhook_host_concurrency: usize,
    /// Where results are written and manifests read (`None`: the default location).
    pub blob_store: Option<String>,
    /// Serving limits, TLS and connection settings.
    pub server: ServerFlags,
}

/// A consumer name unique to this process: host, pid and a random suffix.
fn consumer_name() -> String {
    format!(
        "{}-{}-{}",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".into()),
        std::process::id(),
        hex::encode(rand::random::<[u8; 4]>())
    )
}

/// Checks what no retry can fix before anything else is read: a malformed `--store`, a
/// `--visibility-timeout` too short. Errors: one line.
pub fn precheck(store: &str, visibility_timeout: Duration) -> Result<(), String> {
    JobStore::check_url(store).map_err(|e| format!("--store: {e}"))?;
    if visibility_timeout < MIN_VISIBILITY_TIMEOUT {
        return Err("--visibility-timeout: at least 300ms".into());
    }
    Ok(())
}

/// This replica's webhook deliveries, signing with `secret`, to the targets `webhooks` allows.
fn deliveries(
    s: &Settings,
    store: &JobStore,
    results: &Results,
    secret: Secret,
    webhooks: Arc<Policy>,
) -> Result<Deliveries, String> {
    let options = DeliveryOptions {
        concurrency: s.webhook_concurrency,
        per_destination: s.webhook_host_concurrency,
        poll: Duration::from_millis(100),
    };
    Ok(Deliveries::new(
        store.clone(),
        results.clone(),
        secret,
        Sender::new(webhooks)?,
        options,
    ))
}

/// Health: the store answers a PING, and the workers are not paused by a fault of this
/// replica (an unreachable synthesis pauses them without NOT_SERVING: see `crate::worker`).
fn health_probe(
    store: JobStore,
    workers: Arc<Workers>,
) -> impl FnMut(bool) -> BoxFuture<'static, Result<(), String>> + Send + 'static {
    move |_: bool| {
        let (store, workers) = (store.clone(), workers.clone());
        Box::pin(async move {
            store.ping().await.map_err(|e| e.to_string())?;
            workers
                .fault()
                .filter(|f| f.not_serving)
                .map_or(Ok(()), |f| Err(format!("workers paused: {}", f.why)))
        })
    }
}

/// Runs one replica until shutdown (module doc). Errors: a one-line reason no retry can fix
/// (a malformed `--store`, a bad setting, a port in use).
pub async fn serve(s: Settings) -> Result<(), String> {
    precheck(&s.store, s.visibility_timeout)?;
    if !s.client_token.is_set() {
        tracing::warn!(
            "no client token for synthesis (VOXPOOL_CLIENT_TOKEN or --client-token-file): a synthesis that checks tokens refuses this replica, which then pauses its workers and reports NOT_SERVING (its items go to other replicas)"
        );
    }
    let webhooks = Arc::new(Policy::parse(&s.webhook_allow)?);
    let results = Results::new(voxpool_runtime::blob::BlobStore::open(
        s.blob_store.as_deref(),
    )?);
    let synth = Synthesizer::new(
        &s.synthesis,
        s.client_token.clone(),
        s.item_timeout,
        s.server.max_message_bytes,
    )?;
    let (listener, bound) = voxpool_runtime::serve::bind(&s.listen).await?;
    let shutdown = voxpool_runtime::serve::shutdown_token();
    let connect = || async {
        JobStore::connect(
            &s.store,
            &s.key_prefix,
            s.replica_acks,
            s.retention,
            STORE_TIMEOUT,
        )
        .await
        .map_err(NotReady::Unreachable)
    };
    let Some(store) = voxpool_runtime::startup::wait_for("job store", connect, &shutdown).await?
    else {
        return Ok(());
    };
    let consumer = consumer_name();
    let options = WorkerOptions {
        concurrency: s.concurrency,
        visibility_timeout: s.visibility_timeout,
        max_attempts: s.max_attempts.max(1),
        max_deliveries: s.max_deliveries.max(1),
        budget_recheck: s.budget_recheck.max(Duration::from_millis(100)),
        poll: Duration::from_millis(200),
    };
    let workers = Workers::new(
        store.clone(),
        synth,
        results.clone(),
        consumer.clone(),
        options,
    );
    let finalizer = Arc::new(Finalizer::new(store.clone(), results.clone()));
    if let Some(secret) = s.webhook_secret.clone() {
        let deliveries = deliveries(&s, &store, &results, secret, webhooks.clone())?;
        tokio::spawn(Arc::new(deliveries).run(shutdown.clone()));
    }
    let work = tokio::spawn(workers.clone().run(shutdown.clone(), s.item_timeout));
    tokio::spawn(finalizer.run(Duration::from_millis(250), shutdown.clone()));
    let jobs = Jobs::new(
        store.clone(),
        results.clone(),
        workers.clone(),
        s.webhook_secret.is_some(),
    );
    let service = JobsService::new(jobs, webhooks).into_server(s.server.max_message_bytes);
    let service = Authenticated::new(service, s.callers, &[]);
    tracing::info!(
        listen = %bound,
        store = %voxpool_redis::redact(&s.store),
        synthesis = %s.synthesis,
        blob_store = %results.location(),
        consumer = %consumer,
        concurrency = s.concurrency,
        webhooks = s.webhook_secret.is_some(),
        webhook_allow = %s.webhook_allow,
        "voxpool-jobs serving"
    );
    if s.webhook_secret.is_none() {
        tracing::warn!(
            "no webhook secret (VOXPOOL_JOBS_WEBHOOK_SECRET or --webhook-secret-file): this replica refuses CreateJob with a webhook_url and delivers no webhook (the replicas that have the secret deliver them)"
        );
    }
    voxpool_runtime::serve::announce("voxpool-jobs", bound)?;
    let health = voxpool_runtime::serve::Health {
        dependency: "job store and workers",
        interval: Duration::from_secs(1),
        probe: health_probe(store, workers),
    };
    let served = voxpool_runtime::serve::serve_grpc(
        listener,
        &s.server,
        &[SERVICE_NAME],
        health,
        |router| router.add_service(service),
        shutdown.clone(),
    )
    .await;
    shutdown.cancel();
    let _ = work.await;
    served
}
