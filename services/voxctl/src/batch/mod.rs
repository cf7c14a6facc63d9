//! `voxctl batch`: a manifest in, one audio file per item out, resumable.
//!
//! Order of work: parse the manifest (every bad line reported with its number), optionally
//! check pack ids against the catalog, stop here for `--dry-run` (or on problems with
//! `--strict`), take the output directory (lock + checkpoint replay + identity check), remove
//! temporary files a killed run left, plan (skip what earlier runs settled), run the rest with
//! the shared breaker / rate limit / retries, then write the report and print the summary.

mod config;
mod dispatch;
mod item;
mod plan;

use std::{
    collections::{BTreeMap, BTreeSet},
    num::NonZeroU32,
    sync::{Arc, atomic::Ordering::Relaxed},
    time::{Duration, Instant},
};

use governor::{Quota, RateLimiter};
use voxpool_proto::{
    catalog::v1::voice_catalog_client::VoiceCatalogClient,
    scheduler::v1::{ListPoolsRequest, pool_scheduler_client::PoolSchedulerClient},
    synthesis::v1::synthesis_client::SynthesisClient,
};

pub use self::{
    config::{BatchConfig, BatchError, BatchOutcome},
    plan::fingerprint,
};
use self::{dispatch::dispatch, item::ItemContext, plan::plan};
use crate::{
    breaker::Breaker,
    call::Caller,
    checkpoint::{Checkpoint, RunIdentity},
    connect,
    manifest::{
        Manifest, Voice,
        packs::{KnownPools, check_packs},
    },
    output,
    progress::Progress,
    report::{self, ItemReport, Report, Status, Summary},
    shutdown::Shutdown,
    stats::Stats,
};

/// Runs a batch (see the module doc). Progress and the summary go to stderr.
pub async fn run(config: BatchConfig, shutdown: Shutdown) -> Result<BatchOutcome, BatchError> {
    let started = Instant::now();
    if let Some(q) = config.qps.filter(|q| !(q.is_finite() && *q > 0.0)) {
        return Err(BatchError::Usage(format!("--qps must be > 0, got {q}")));
    }
    if config.retry.base > config.retry.cap {
        return Err(BatchError::Usage(format!(
            "--backoff-base ({}) is above --backoff-max ({}): the first wait cannot exceed the longest",
            humantime::format_duration(config.retry.base),
            humantime::format_duration(config.retry.cap)
        )));
    }
    let mut manifest = Manifest::load(&config.manifest)?;
    tokio::select! {
        biased;
        () = shutdown.drain.cancelled() => {}
        checked = check_pack_ids(&config, &mut manifest) => checked?,
    }
    for problem in &manifest.problems {
        crate::say!("voxctl: {}: {problem}", config.manifest.display());
    }
    let invalid: Vec<ItemReport> = manifest.problems.iter().map(invalid_report).collect();
    if config.dry_run {
        crate::say!(
            "voxctl: {}: {} valid item(s), {} invalid line(s)",
            config.manifest.display(),
            manifest.items.len(),
            invalid.len()
        );
        let mut summary = Summary::default();
        report::tally(&invalid, started.elapsed(), &mut summary);
        summary.items += manifest.items.len();
        let exit_code = if invalid.is_empty() { 0 } else { 2 };
        return Ok(BatchOutcome {
            summary,
            items: invalid,
            exit_code,
        });
    }
    if config.strict && !invalid.is_empty() {
        return Err(BatchError::Strict(invalid.len()));
    }
    let out_err = |source| BatchError::OutDir {
        path: config.out.clone(),
        source,
    };
    std::fs::create_dir_all(&config.out).map_err(out_err)?;
    let checkpoint = open_checkpoint(&config, &manifest).await?;
    let stale = output::remove_stale_temps(&config.out).map_err(out_err)?;
    if stale > 0 {
        crate::say!("voxctl: removed {stale} unfinished temporary file(s) of an interrupted run");
    }
    let plan = plan(
        std::mem::take(&mut manifest.items),
        &checkpoint.replayed,
        &config.out,
        config.format,
        config.sample_rate_hz,
        config.retry_failed,
    );
    if !plan.settled.is_empty() {
        crate::say!(
            "voxctl: resuming: {} item(s) settled by earlier runs, {} to do",
            plan.settled.len(),
            plan.todo.len()
        );
    }
    let stats = Arc::new(Stats::default());
    stats.total.store(plan.todo.len() as u64, Relaxed);
    stats.chars_total.store(
        plan.todo.iter().map(|t| t.item.chars() as u64).sum(),
        Relaxed,
    );
    let breaker = Arc::new(Breaker::new(config.breaker));
    let journal = Arc::new(checkpoint.journal);
    let ctx = Arc::new(ItemContext {
        caller: caller(&config, &breaker, &stats)?,
        journal: Arc::clone(&journal),
        out: config.out.clone(),
        request: crate::request::CallSettings {
            format: config.format,
            sample_rate_hz: config.sample_rate_hz,
            priority: config.priority,
            tenant: config.tenant.clone(),
            cache_policy: config.cache_policy,
        },
        max_chars: crate::call::PartLimit::new(config.max_chars),
        stats: Arc::clone(&stats),
    });
    let run_started = Instant::now();
    let progress = Progress::start(config.progress, Arc::clone(&stats), Arc::clone(&breaker));
    let dispatched = dispatch(
        plan.todo,
        ctx,
        config.concurrency,
        &shutdown,
        config.give_up_after,
    )
    .await;
    progress.finish().await;
    if dispatched.gave_up {
        let not_done = dispatched
            .reports
            .iter()
            .filter(|r| r.status == Status::NotStarted)
            .count();
        crate::say!(
            "voxctl: giving up: no item finished and no part came back for {} (--give-up-after); last failure: {}; {not_done} item(s) not done are reported as not started: run the same command again to resume them",
            humantime::format_duration(config.give_up_after),
            breaker.last_failure().unwrap_or_else(|| format!(
                "none recorded (synthesis at {} is slow or stalled)",
                config.synthesis
            )),
        );
    }
    let run_wall = run_started.elapsed();
    if let Some(journal) = Arc::into_inner(journal) {
        let _ = tokio::task::spawn_blocking(move || journal.close()).await;
    }
    let _ = output::sync_dir(&config.out);

    let mut items = invalid;
    items.extend(plan.settled);
    items.extend(dispatched.reports);
    items.sort_by_key(|r| r.line);
    let view = stats.view();
    let mut summary = Summary {
        calls: view.calls,
        retries: view.retries,
        chunks: view.chunks,
        cached_chunks: view.cached_chunks,
        breaker_trips: breaker.trips(),
        interrupted: dispatched.interrupted,
        gave_up: dispatched.gave_up,
        items_per_second: (view.done + view.failed) as f64 / run_wall.as_secs_f64().max(1e-9),
        chars_per_second: view.chars_done as f64 / run_wall.as_secs_f64().max(1e-9),
        ..Summary::default()
    };
    report::tally(&items, started.elapsed(), &mut summary);
    let mut report_written = true;
    if let Some(path) = &config.report {
        let doc = Report {
            manifest: config.manifest.display().to_string(),
            manifest_digest: manifest.digest.clone(),
            out: config.out.display().to_string(),
            summary: summary.clone(),
            items: items.clone(),
        };
        if let Err(e) = doc.write(path) {
            crate::say!(
                "voxctl: cannot write the report {}: {e}: give --report a file in a directory you can write to (the audio files are in {})",
                path.display(),
                config.out.display()
            );
            report_written = false;
        }
    }
    crate::say!("{}", report::render(&summary));
    // A report asked for and not written fails the run, as an item would: a script reads it.
    let exit_code = match (summary.all_ok() && report_written, summary.interrupted) {
        (true, _) => 0,
        (false, true) => 130,
        (false, false) => 1,
    };
    Ok(BatchOutcome {
        summary,
        items,
        exit_code,
    })
}

fn invalid_report(problem: &crate::manifest::Problem) -> ItemReport {
    ItemReport {
        id: problem.id.clone(),
        line: problem.line,
        status: Status::Invalid,
        resumed: false,
        attempts: 0,
        keys: vec![],
        code: Some("MANIFEST".into()),
        error: Some(problem.message.clone()),
        file: None,
        parts: 0,
        chars: 0,
        chunks: 0,
        cached_chunks: 0,
    }
}

async fn check_pack_ids(config: &BatchConfig, manifest: &mut Manifest) -> Result<(), BatchError> {
    let Some(url) = &config.catalog else {
        return Ok(());
    };
    let served = synthesis_pools(&config.synthesis, &config.token).await;
    let known = match &config.scheduler {
        Some(scheduler) => scheduler_pools(scheduler, &config.token)
            .await?
            .map(|pools| KnownPools {
                source: "scheduler",
                pools,
            }),
        None => served.as_ref().map(|(pools, _)| KnownPools {
            source: "synthesis",
            pools: pools.clone(),
        }),
    };
    let not_serving = served
        .map(|(_, not_serving)| not_serving)
        .unwrap_or_default();
    let uses_packs = manifest
        .items
        .iter()
        .any(|i| matches!(i.voice, Voice::PackId(_)));
    let client = if uses_packs {
        Some(VoiceCatalogClient::new(connect::channel(url)?))
    } else {
        None
    };
    let check = check_packs(manifest, client, known.as_ref(), &not_serving);
    match tokio::time::timeout(Duration::from_secs(10), check).await {
        Ok(Ok(_)) => {}
        Ok(Err(status)) => crate::say!(
            "voxctl: warning: cannot check pack ids against the catalog at {url} ({}); synthesis will judge them per item",
            status.message()
        ),
        Err(_) => crate::say!(
            "voxctl: warning: the catalog at {url} did not answer within 10s; synthesis will judge pack ids per item"
        ),
    }
    Ok(())
}

/// The pools synthesis lists, and those of them it says it cannot serve (no key with a
/// credential, no adapter) with why; `None` when it does not answer (the run will find out
/// per item).
async fn synthesis_pools(
    url: &str,
    token: &voxpool_runtime::auth::ClientToken,
) -> Option<(BTreeSet<String>, BTreeMap<String, String>)> {
    let channel = connect::authed(url, token).ok()?;
    let mut client = SynthesisClient::new(channel);
    let listed = tokio::time::timeout(
        Duration::from_secs(5),
        client.list_pools(voxpool_proto::synthesis::v1::ListPoolsRequest {}),
    )
    .await;
    let response = match listed {
        Ok(Ok(response)) => response,
        Ok(Err(status)) => {
            crate::say!(
                "voxctl: warning: cannot ask synthesis at {url} which pools it serves ({}); credentials are not checked",
                status.message()
            );
            return None;
        }
        Err(_) => {
            crate::say!(
                "voxctl: warning: synthesis at {url} did not answer within 5s; credentials are not checked"
            );
            return None;
        }
    };
    let pools = response.into_inner().pools;
    let listed = pools.iter().map(|p| p.pool.clone()).collect();
    let not_serving = pools
        .into_iter()
        .filter(|p| !p.serving)
        .map(|p| {
            let why = if p.adapter_available {
                let missing: Vec<String> = p
                    .keys
                    .iter()
                    .filter(|k| !k.usable)
                    .map(|k| format!("{}: {}", k.key_id, k.problem))
                    .collect();
                format!("no key has a credential there ({})", missing.join("; "))
            } else {
                format!("it has no {} adapter", p.provider)
            };
            (p.pool, why)
        })
        .collect();
    Some((listed, not_serving))
}

/// The scheduler's pool ids, or `None` (with a warning) when it cannot answer.
async fn scheduler_pools(
    url: &str,
    token: &voxpool_runtime::auth::ClientToken,
) -> Result<Option<BTreeSet<String>>, BatchError> {
    let mut client = PoolSchedulerClient::new(connect::authed(url, token)?);
    let listed = tokio::time::timeout(
        Duration::from_secs(10),
        client.list_pools(ListPoolsRequest {}),
    )
    .await;
    match listed {
        Ok(Ok(response)) => Ok(Some(
            response
                .into_inner()
                .pools
                .into_iter()
                .map(|p| p.pool)
                .collect(),
        )),
        Ok(Err(status)) => {
            crate::say!(
                "voxctl: warning: cannot list the scheduler's pools at {url} ({}); packs' pools are not checked",
                status.message()
            );
            Ok(None)
        }
        Err(_) => {
            crate::say!(
                "voxctl: warning: the scheduler at {url} did not answer within 10s; packs' pools are not checked"
            );
            Ok(None)
        }
    }
}

async fn open_checkpoint(
    config: &BatchConfig,
    manifest: &Manifest,
) -> Result<Checkpoint, BatchError> {
    let identity = RunIdentity {
        manifest: manifest.digest.clone(),
        format: config.format.as_str().to_owned(),
        sample_rate_hz: config.sample_rate_hz,
    };
    let (out, force) = (config.out.clone(), config.force);
    let checkpoint = tokio::task::spawn_blocking(move || Checkpoint::open(&out, identity, force))
        .await
        .map_err(|e| BatchError::Usage(format!("checkpoint open stopped: {e}")))??;
    let replayed = &checkpoint.replayed;
    if replayed.torn_tail {
        crate::say!("voxctl: the checkpoint ended in a torn record (a killed run); it was dropped");
    }
    if !replayed.corrupt_lines.is_empty() {
        crate::say!(
            "voxctl: warning: ignored unreadable checkpoint line(s) {:?}; their items are redone",
            replayed.corrupt_lines
        );
    }
    Ok(checkpoint)
}

fn caller(
    config: &BatchConfig,
    breaker: &Arc<Breaker>,
    stats: &Arc<Stats>,
) -> Result<Caller, BatchError> {
    let client = SynthesisClient::new(connect::authed(&config.synthesis, &config.token)?)
        .max_decoding_message_size(connect::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(connect::MAX_MESSAGE_BYTES);
    let limiter = match config.qps {
        None => None,
        Some(q) => {
            let quota = Quota::with_period(Duration::from_secs_f64(1.0 / q))
                .ok_or_else(|| BatchError::Usage(format!("--qps {q} is too high")))?
                .allow_burst(NonZeroU32::MIN);
            Some(Arc::new(RateLimiter::direct(quota)))
        }
    };
    Ok(Caller {
        client,
        url: config.synthesis.clone(),
        breaker: Arc::clone(breaker),
        limiter,
        policy: config.retry,
        deadline: config.deadline,
        stats: Arc::clone(stats),
        audio_budget: crate::call::AudioBudget::for_format(config.format),
    })
}
