//! Runs the planned items with at most `concurrency` in flight, in manifest order, and reacts
//! to interruption: on `drain` no new item starts and the running ones finish; on `abort` the
//! running ones are abandoned (their temporary files are deleted as their tasks drop, and
//! nothing is recorded for them, so they are redone next time).

use std::{collections::HashMap, sync::Arc};

use tokio::{sync::Semaphore, task::JoinSet};
use tokio_util::sync::CancellationToken;

use super::{
    item::{ItemContext, Processed, process},
    plan::Todo,
};
use crate::{
    report::{ItemReport, Status},
    shutdown::Shutdown,
};

/// What the dispatcher produced.
#[derive(Debug, Default)]
pub struct Dispatched {
    /// One report per planned item (unfinished ones as `not_started`).
    pub reports: Vec<ItemReport>,
    /// Whether a signal (or a checkpoint failure) stopped the run early.
    pub interrupted: bool,
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
    }
}

/// Runs `todo` (see the module doc).
pub async fn dispatch(
    todo: Vec<Todo>,
    ctx: Arc<ItemContext>,
    concurrency: usize,
    shutdown: &Shutdown,
) -> Dispatched {
    let stop = shutdown.drain.child_token();
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
            _ = shutdown.abort.cancelled(), if !running.is_empty() => {
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
    out.interrupted = stop.is_cancelled();
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
