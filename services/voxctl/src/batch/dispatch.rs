//! Runs the planned items with at most `concurrency` in flight, in manifest order, and reacts
//! to interruption: on `drain` no new item starts and the running ones finish; on `abort` the
//! running ones are abandoned (their temporary files are deleted as their tasks drop, and
//! nothing is recorded for them, so they are redone next time). A watchdog gives up the run
//! (drain and abort at once) when for `give_up_after` no item settled and no part came back.

use std::{collections::HashMap, sync::Arc, time::Duration};

use tokio::{sync::Semaphore, task::JoinSet};
use tokio_util::{sync::CancellationToken, task::AbortOnDropHandle};

use super::{
    item::{ItemContext, Processed, process},
    plan::Todo,
};
use crate::{
    report::{ItemReport, Status},
    shutdown::Shutdown,
    stats::Stats,
};

/// What the dispatcher produced.
#[derive(Debug, Default)]
pub struct Dispatched {
    /// One report per planned item (unfinished ones as `not_started`).
    pub reports: Vec<ItemReport>,
    /// Whether a signal (or a checkpoint failure) stopped the run early.
    pub interrupted: bool,
    /// Whether the run ended by itself after `give_up_after` without progress.
    pub gave_up: bool,
}

fn not_started(todo: &Todo) -> ItemReport {
    ItemReport {
        id: Some(todo.item.id.clone()),
        line: todo.item.line,
        status: Status::NotStarted,
        resumed: false,
        attempts: 0,
        keys: vec![],
        code: None,
        error: None,
        file: None,
        parts: 0,
        chars: todo.item.chars(),
        chunks: 0,
        cached_chunks: 0,
    }
}

/// Returns once `stats` has shown no progress for `after` (see [`Stats::progress_mark`]);
/// checks every twentieth of `after` (10 ms..1 s).
async fn watch_progress(stats: Arc<Stats>, after: Duration) {
    let period = (after / 20).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut mark = stats.progress_mark();
    let mut since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(period).await;
        let now = stats.progress_mark();
        if now != mark {
            (mark, since) = (now, tokio::time::Instant::now());
        } else if since.elapsed() >= after {
            return;
        }
    }
}

/// Runs `todo` (see the module doc).
pub async fn dispatch(
    todo: Vec<Todo>,
    ctx: Arc<ItemContext>,
    concurrency: usize,
    shutdown: &Shutdown,
    give_up_after: Duration,
) -> Dispatched {
    let give_up = CancellationToken::new();
    let stop = shutdown.drain.child_token();
    let abort = shutdown.abort.child_token();
    let _watchdog = AbortOnDropHandle::new(tokio::spawn({
        let (stats, tokens) = (
            Arc::clone(&ctx.stats),
            [give_up.clone(), stop.clone(), abort.clone()],
        );
        async move {
            watch_progress(stats, give_up_after).await;
            tokens.iter().for_each(CancellationToken::cancel);
        }
    }));
    let slots = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut running: JoinSet<Processed> = JoinSet::new();
    let mut by_task: HashMap<tokio::task::Id, Todo> = HashMap::new();
    let mut out = Dispatched::default();
    let mut queue = todo.into_iter();
    for next in queue.by_ref() {
        let slot = tokio::select! {
            biased;
            _ = stop.cancelled() => {
                out.reports.push(not_started(&next));
                break;
            }
            slot = slots.clone().acquire_owned() => slot,
        };
        let Ok(slot) = slot else {
            out.reports.push(not_started(&next));
            break;
        };
        while let Some(joined) = running.try_join_next_with_id() {
            collect(&mut out, &mut by_task, &stop, joined);
        }
        let ctx = Arc::clone(&ctx);
        let task = next.clone();
        let handle = running.spawn(async move {
            let _slot = slot;
            process(task, ctx).await
        });
        by_task.insert(handle.id(), next);
    }
    out.reports.extend(queue.map(|t| not_started(&t)));
    loop {
        tokio::select! {
            biased;
            _ = abort.cancelled(), if !running.is_empty() => {
                running.abort_all();
                while let Some(joined) = running.join_next_with_id().await {
                    collect(&mut out, &mut by_task, &stop, joined);
                }
                break;
            }
            joined = running.join_next_with_id() => match joined {
                Some(joined) => collect(&mut out, &mut by_task, &stop, joined),
                None => break,
            },
        }
    }
    out.gave_up = give_up.is_cancelled();
    out.interrupted = stop.is_cancelled() && !out.gave_up;
    out
}
type Joined = Result<(tokio::task::Id, Processed), tokio::task::JoinError>;

fn collect(
    out: &mut Dispatched,
    by_task: &mut HashMap<tokio::task::Id, Todo>,
    stop: &CancellationToken,
    joined: Joined,
) {
    match joined {
        Ok((id, processed)) => {
            by_task.remove(&id);
            if processed.journal_failed {
                stop.cancel();
            }
            out.reports.push(processed.report);
        }
        Err(e) => {
            if let Some(todo) = by_task.remove(&e.id()) {
                out.reports.push(not_started(&todo));
            }
        }
    }
}
