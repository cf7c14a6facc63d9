//! Maps the parsed command line onto the library and returns the process exit code.

use std::io::Read as _;

use voxpool_runtime::auth::ClientToken;

use crate::{
    batch::{self, BatchConfig},
    breaker::BreakerConfig,
    cli::{
        BatchArgs, CacheArgs, CacheCommand, Cli, Command, JobArgs, JobCommand, PacksArgs,
        PacksCommand, PoolCommand, PoolStatusArgs, ProgressArg, SynthArgs,
    },
    manifest::{self, Voice},
    ops::{
        OpError,
        cache::{Cache, PurgeTarget, render_purge, render_stats},
        packs::{Catalog, NewPack, render_list, render_pack},
        pool,
        synth::{SynthJob, synth},
    },
    progress::ProgressMode,
    retry::RetryPolicy,
    shutdown::Shutdown,
};

/// Runs a command; returns the exit code.
pub async fn run(cli: Cli) -> u8 {
    let token = match crate::connect::client_token(cli.token.as_deref()) {
        Ok(token) => token,
        Err(e) => {
            crate::say!("voxctl: {e}");
            return 2;
        }
    };
    let result = match cli.command {
        Command::Batch(args) => return run_batch(args, token).await,
        Command::Pool { command, status } => {
            let PoolStatusArgs {
                pool,
                watch,
                interval,
                scheduler,
                synthesis,
            } = match command {
                Some(PoolCommand::Status(args)) => args,
                None => status,
            };
            pool::status(
                &scheduler,
                &synthesis,
                &token,
                pool.as_deref(),
                watch.then_some(interval),
            )
            .await
        }
        Command::Packs(args) => run_packs(args).await,
        Command::Synth(args) => run_synth(args, token).await,
        Command::Cache(args) => run_cache(args).await,
        Command::Job(args) => return exit(run_job(args, &token).await),
        Command::Usage(args) => run_usage(args).await,
    };
    exit(result.map(|()| 0))
}

/// The exit code of a command's result; an error is printed first.
fn exit(result: Result<u8, OpError>) -> u8 {
    match result {
        Ok(code) => code,
        Err(e) => {
            crate::say!("voxctl: {e}");
            e.exit_code
        }
    }
}

/// `voxctl job ...`; returns the exit code of a command that has its own (wait, download).
async fn run_job(args: JobArgs, token: &ClientToken) -> Result<u8, OpError> {
    use crate::ops::job::{
        Deleted, Jobs,
        download::{DownloadOptions, download},
        submit::{JobOptions, earlier_job, submit},
        view,
        wait::{WaitOptions, wait},
    };
    let jobs = Jobs::new(&args.jobs, token)?;
    match args.command {
        JobCommand::Submit(s) => {
            let options = JobOptions {
                format: s.format,
                sample_rate_hz: s.sample_rate,
                priority: s.priority.to_pb(),
                tenant: s.tenant,
                webhook_url: s.webhook_url,
                request_id: s.request_id,
            };
            let submitted = submit(&jobs, &s.manifest, &options, s.timeout).await?;
            let job = &submitted.job;
            // stdout is only the name (JOB=$(voxctl job submit ...)); the rest goes to stderr.
            crate::show!("{}", job.name);
            match earlier_job(&submitted, &s.manifest) {
                Some(note) => crate::say!("{note}"),
                None => crate::say!(
                    "voxctl: {}: {} item(s), {}; voxctl job wait {} follows it",
                    job.name,
                    job.total_items,
                    view::job_state(job).as_str_name(),
                    job.name
                ),
            }
        }
        JobCommand::Status { job, json } => {
            let answer = jobs.get(&job).await?;
            if json {
                let text = serde_json::to_string_pretty(&view::JobJson::new(&answer))
                    .map_err(|e| OpError::failed(format!("cannot write the job as JSON: {e}")))?;
                crate::show!("{text}");
            } else {
                crate::show!("{}", view::render_status(&answer));
            }
        }
        JobCommand::Wait {
            job,
            interval,
            timeout,
            progress,
            progress_interval,
        } => {
            let options = WaitOptions {
                interval,
                timeout,
                progress: progress_mode(progress, progress_interval),
            };
            return wait(&jobs, &job, options).await;
        }
        JobCommand::Items { job, state } => {
            let items = jobs
                .items(&job, state.map(crate::cli::ItemStateArg::to_pb))
                .await?;
            if !items.is_empty() {
                crate::show!("{}", view::render_items(&items));
            }
            crate::say!(
                "voxctl: {job}: {} item(s){}{}",
                items.len(),
                if items.is_empty() { "" } else { ": " },
                view::tally_states(&items)
            );
        }
        JobCommand::Cancel { job } => {
            let answer = jobs.cancel(&job).await?;
            crate::show!("{}", view::job_state(&answer).as_str_name());
            crate::say!("voxctl: {job}: {}", view::progress_line(&answer));
        }
        JobCommand::Download {
            job,
            dir,
            report,
            concurrency,
        } => {
            let options = DownloadOptions {
                dir,
                report,
                concurrency: concurrency as usize,
            };
            return download(&jobs, &job, &options).await;
        }
        JobCommand::List { tenant } => {
            let listed = jobs.list(&tenant).await?;
            if !listed.is_empty() {
                crate::show!("{}", view::render_jobs(&listed));
            }
            let whose = match tenant.as_str() {
                "" => "the shared tenant".to_owned(),
                t => format!("tenant {}", view::printable(t)),
            };
            crate::say!(
                "voxctl: {} job(s) of {whose} ({}; --tenant T lists another tenant's)",
                listed.len(),
                jobs.service
            );
        }
        JobCommand::Delete { job } => match jobs.delete(&job).await? {
            Deleted::Now => crate::say!("voxctl: deleted {job}: its record, items and audio"),
            Deleted::AlreadyGone => {
                crate::say!("voxctl: {job} is gone: a try whose answer was lost deleted it");
            }
        },
    }
    Ok(0)
}

/// The batch configuration described by `args`.
pub fn batch_config(args: BatchArgs) -> BatchConfig {
    let mut config = BatchConfig::new(args.manifest, args.out);
    config.format = args.format;
    config.sample_rate_hz = args.sample_rate;
    config.concurrency = args.concurrency as usize;
    config.qps = args.qps;
    config.synthesis = args.synthesis;
    config.catalog = (!args.no_pack_check).then_some(args.catalog);
    config.scheduler = args.scheduler.filter(|_| !args.no_pack_check);
    config.deadline = args.deadline;
    config.give_up_after = args.give_up_after;
    config.retry = RetryPolicy {
        max_attempts: args.max_attempts,
        base: args.backoff_base,
        cap: args.backoff_max,
        ..RetryPolicy::default()
    };
    config.breaker = BreakerConfig {
        window: args.breaker_window as usize,
        min_calls: (args.breaker_window as usize / 2).max(1),
        failure_ratio: args.breaker_ratio,
        open_base: args.breaker_pause,
        ..BreakerConfig::default()
    };
    config.max_chars = args.max_chars as usize;
    config.priority = args.priority.to_pb();
    config.tenant = args.tenant;
    config.cache_policy = args.cache_policy.to_pb();
    config.report = args.report;
    config.dry_run = args.dry_run;
    config.strict = args.strict;
    config.retry_failed = args.retry_failed;
    config.force = args.force;
    config.progress = progress_mode(args.progress, args.progress_interval);
    config
}

fn progress_mode(arg: ProgressArg, interval: std::time::Duration) -> ProgressMode {
    match arg {
        ProgressArg::Auto => ProgressMode::Auto,
        ProgressArg::Bar => ProgressMode::Bar,
        ProgressArg::Lines => ProgressMode::Lines(interval),
        ProgressArg::Quiet => ProgressMode::Quiet,
    }
}

async fn run_batch(args: BatchArgs, token: ClientToken) -> u8 {
    let mut config = batch_config(args);
    config.token = token;
    match batch::run(config, Shutdown::on_signals()).await {
        Ok(outcome) => outcome.exit_code,
        Err(e) => {
            crate::say!("voxctl: {e}");
            e.exit_code()
        }
    }
}

async fn run_packs(args: PacksArgs) -> Result<(), OpError> {
    let mut catalog = Catalog::new(&args.catalog, args.admin.admin_token.as_deref())?;
    match args.command {
        PacksCommand::List { filter, all } => {
            crate::show!("{}", render_list(&catalog.list(&filter, all).await?));
        }
        PacksCommand::Show { id } => crate::show!("{}", render_pack(&catalog.show(&id).await?)),
        PacksCommand::Create(c) => {
            let new = NewPack {
                display_name: c.display_name,
                description: c.description,
                provider: c.provider,
                model: c.model,
                voice_id: c.voice_id,
                tts_model_id: c.tts_model_id,
                kind: c.kind,
                tier: c.tier,
                upstream_ids: c.upstream_ids,
                locales: c.locales,
                pitch_pct: c.pitch_pct,
                rate: c.rate,
                volume_pct: c.volume_pct,
                extra: c.extra,
            };
            let pack = catalog.create(new.to_pb()?).await?;
            crate::show!("{}", pack.id);
            crate::say!(
                "voxctl: created pack {} (version {})",
                pack.id,
                pack.version
            );
        }
        PacksCommand::Disable { id } => {
            let pack = catalog.set_enabled(&id, false).await?;
            crate::say!(
                "voxctl: disabled pack {} (version {})",
                pack.id,
                pack.version
            );
        }
        PacksCommand::Enable { id } => {
            let pack = catalog.set_enabled(&id, true).await?;
            crate::say!(
                "voxctl: enabled pack {} (version {})",
                pack.id,
                pack.version
            );
        }
        PacksCommand::AddReference {
            pack,
            file,
            transcript,
            language,
            emotion,
            weight,
        } => {
            let clip = crate::ops::references::NewClip {
                file: &file,
                transcript: &transcript,
                language: &language,
                emotion: &emotion,
                weight,
            };
            let added = catalog.add_reference(&pack, &clip).await?;
            crate::say!(
                "voxctl: added clip {} to pack {pack}",
                crate::ops::references::describe(&added)
            );
            crate::show!("{}", added.digest);
        }
        PacksCommand::References { pack, removed } => {
            let clips = catalog.references(&pack, removed).await?;
            crate::show!("{}", crate::ops::references::render(&clips));
        }
        PacksCommand::RemoveReference { pack, digest } => {
            let gone = catalog.remove_reference(&pack, &digest).await?;
            crate::say!("voxctl: removed clip {} from pack {pack}", gone.digest);
        }
        PacksCommand::CloneVoice(a) => crate::ops::clones::clone(&mut catalog, a).await?,
        PacksCommand::Clones(a) => crate::ops::clones::clones(&mut catalog, a).await?,
        PacksCommand::Import(a) => crate::ops::clones::import(&mut catalog, a).await?,
    }
    Ok(())
}

async fn run_usage(args: crate::cli::UsageArgs) -> Result<(), OpError> {
    use crate::ops::usage::{Ask, fetch, render_json, render_table};
    let ask = Ask {
        tenant: args.tenant,
        by: args.by,
        month: args.month,
    };
    let rows = fetch(&args.catalog, args.admin.admin_token.as_deref(), &ask).await?;
    if args.json {
        crate::show!("{}", render_json(&rows));
    } else {
        crate::show!("{}", render_table(&rows, args.by));
    }
    Ok(())
}

async fn run_cache(args: CacheArgs) -> Result<(), OpError> {
    let mut cache = Cache::new(&args.synthesis, args.admin.admin_token.as_deref())?;
    match args.command {
        CacheCommand::Stats => crate::show!("{}", render_stats(&cache.stats().await?)),
        CacheCommand::Purge {
            pack,
            snapshot_digest,
        } => {
            let target = PurgeTarget::new(pack, snapshot_digest)?;
            let purged = cache.purge(&target).await?;
            crate::say!("voxctl: {}", render_purge(&purged, &target));
        }
    }
    Ok(())
}

async fn run_synth(args: SynthArgs, token: ClientToken) -> Result<(), OpError> {
    let voice = match (&args.pack, &args.snapshot, &args.card) {
        (Some(pack), _, _) => Voice::PackId(pack.clone()),
        (_, Some(file), _) => manifest::from_snapshot_file(file).map_err(OpError::usage)?,
        (_, _, Some(card)) => manifest::from_card_file(card).map_err(OpError::usage)?,
        _ => return Err(OpError::usage("give one of --pack, --snapshot, --card")),
    };
    let text = if args.text == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| OpError::usage(format!("cannot read the text from stdin: {e}")))?;
        text
    } else {
        args.text
    };
    synth(SynthJob {
        voice,
        text,
        out: args.out,
        format: args.format,
        sample_rate_hz: args.sample_rate,
        synthesis: args.synthesis,
        deadline: args.deadline,
        retry: RetryPolicy {
            max_attempts: args.max_attempts,
            ..RetryPolicy::default()
        },
        max_chars: args.max_chars as usize,
        priority: args.priority.to_pb(),
        tenant: args.tenant,
        cache_policy: args.cache_policy.to_pb(),
        token,
        force: args.force,
        progress: progress_mode(args.progress, args.progress_interval),
        emotion: args.emotion,
        // One seed for every part, so a split text speaks with one clip.
        seed: args.seed.unwrap_or_else(rand::random),
    })
    .await
}
