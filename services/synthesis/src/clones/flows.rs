//! One claimed step → one vendor flow (what the flows share is in [`super::step`]).
//!
//! | provider | CREATE | POLL | DELETE | KEEPALIVE | IMPORT |
//! |---|---|---|---|---|---|
//! | elevenlabs | `voices/add` → ready | ready | `DELETE voices/{id}` | ready | `GET voices` (cloned) |
//! | minimax | `files/upload` + `voice_clone` → ready, expires in 7 d | ready | `delete_voice` | one short T2A | `get_voice` |
//! | volcengine | `mega_tts/audio/upload` → training | `mega_tts/status` | deleted here only (slots are bought) | `status` | `status` of the key's speaker ids |
//! | dashscope | `create_voice` (data URI sample) → training | `query_voice`, `OK` → ready, expires in 1 y | `delete_voice` | one short synthesis | `list_voice` |
//! | others | failed: not supported yet | failed | deleted (never made) | failed | failed |
//!
//! Transient failures (429, 5xx, timeouts, a key the vendor refuses) are `retry` with the
//! vendor's `Retry-After` (the catalog backs off further, and the next attempt uses the scope's
//! next key); a refusal for good (a bad sample, full slots) is `failed` with the vendor's
//! scrubbed message.

use std::time::Duration;

use voxpool_domain::provider::Provider;

use super::{
    Outcome, ScopeKeys, Task, Work, dashscope, elevenlabs, minimax,
    step::{Context, Step},
    volcengine,
};

/// Runs `task` in `scope` within `timeout` per vendor call and says what to report.
pub async fn run(ctx: &Context, task: &Task, scope: &ScopeKeys, timeout: Duration) -> Outcome {
    let Some((key, upstream)) = scope.key_for(task.attempt) else {
        return Outcome::Retry {
            after: Duration::ZERO,
            error: format!("no key of scope {} has a credential here", scope.id),
        };
    };
    let step = Step {
        task,
        scope,
        key,
        upstream,
        timeout,
    };
    match scope.provider {
        Provider::ElevenLabs => elevenlabs::run(ctx, step).await,
        Provider::MiniMax => minimax::run(ctx, step).await,
        Provider::Volcengine => volcengine::run(ctx, step).await,
        Provider::DashScope => dashscope::run(ctx, step).await,
        other => match task.work {
            // Nothing was ever made at the vendor.
            Work::Delete => Outcome::Deleted,
            _ => Outcome::Failed(format!(
                "{} clones are not supported by voxpool yet",
                other.as_str()
            )),
        },
    }
}
