//! DashScope CosyVoice voice cloning, in the account (main account and region) of the step's
//! key, for one `target_model` (docs/VENDORS.md, "Voice cloning", DashScope;
//! <https://www.alibabacloud.com/help/en/model-studio/cosyvoice-clone-api>). Every call is `POST
//! {base}/api/v1/services/audio/tts/customization`, `Authorization: Bearer <key>`, JSON
//! `{"model": "voice-enrollment", "input": {"action", …}}`; the answer's `output` carries the
//! result, an error is `{"code", "message"}` with its HTTP status.
//! - CREATE: `create_voice` with `target_model` (the recipe's `target_model`, else its model,
//!   else the pool's: a voice speaks only through the model it was enrolled for), `prefix` (the
//!   pack id's first 10 letters and digits: DashScope allows no more) and `url` = the first clip
//!   as a base64 data URI (`data:audio/wav;base64,…`), `language_hints` from its language →
//!   `output.voice_id`, `training` (the voice deploys before use).
//! - POLL: `query_voice` → `OK` `ready`, expiring a year on (DashScope takes a voice offline
//!   after a year unused); `DEPLOYING` `training`; `UNDEPLOYED` `failed`; a voice the account
//!   does not hold `expired`.
//! - KEEPALIVE: one short real synthesis with the voice through the DashScope adapter (open
//!   gate: not metered), which counts as a use: `ready`, a year on again; the adapter's
//!   clone-gone answer is `expired`.
//! - DELETE: `delete_voice`, which frees the slot; a voice already gone is `deleted`.
//! - IMPORT: `list_voice` (pages of 1,000) → the account's voices, unbound: a 10-character
//!   prefix cannot name a pack.
//!
//! Errors by the adapter's code table (`Throttling*` and server errors are tried again,
//! `InvalidApiKey` / `Arrearage` with the scope's next key); `InvalidParameter` (a bad sample,
//! a full account) is `failed`, naming the scope.

use std::time::{Duration, SystemTime};

use base64::Engine as _;
use serde_json::{Value, json};
use voxpool_domain::{provider::Provider, secret::Secret};

use super::{
    Outcome, Work,
    step::{self, Context, Step},
};
use crate::adapters::{
    dashscope as adapter,
    gate::Gate,
    http::{self, ErrorAnswer},
};

const PROVIDER: &str = Provider::DashScope.as_str();
const DEFAULT_BASE: &str = "https://dashscope.aliyuncs.com";
const PATH: &str = "/api/v1/services/audio/tts/customization";
/// DashScope takes a voice offline once unused this long.
pub const UNUSED_LIFETIME: Duration = Duration::from_secs(365 * 86_400);
/// Voices asked for per `list_voice` page.
const PAGE: usize = 1_000;

/// Runs the step (module doc).
pub async fn run(ctx: &Context, step: Step<'_>) -> Outcome {
    let secret = match http::require_secret(PROVIDER, step.key) {
        Ok(s) => s,
        Err(f) => return step::from_failure(f),
    };
    let result = match step.task.work {
        Work::Create => create(ctx, step, secret).await,
        Work::Poll => poll(ctx, step, secret).await,
        Work::KeepAlive => keep_alive(ctx, step).await,
        Work::Delete => delete(ctx, step, secret).await,
        Work::Import => import(ctx, step, secret).await,
    };
    result.unwrap_or_else(|o| o)
}

/// The model a clone of this step is enrolled for and spoken through.
pub fn target_model<'a>(step: &Step<'a>) -> &'a str {
    [
        step.task.target_model.as_str(),
        step.task.model.as_str(),
        step.scope.pool_model.as_str(),
    ]
    .into_iter()
    .find(|m| !m.is_empty())
    .unwrap_or_default()
}

/// The `prefix` of a clone of `pack_id`: its first 10 ASCII letters and digits, lowercased
/// (`vp_0a1b2c3d…` → `vp0a1b2c3d`), or `voxpool` when it has none.
pub fn prefix(pack_id: &str) -> String {
    let p: String = pack_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .take(10)
        .collect();
    if p.is_empty() { "voxpool".into() } else { p }
}

/// Why a call failed: the report, and whether DashScope said the account does not hold the
/// voice.
struct Refused {
    outcome: Outcome,
    gone: bool,
}

/// Sends `input` and returns the answer's `output`, or why not.
async fn call(
    ctx: &Context,
    step: &Step<'_>,
    secret: &Secret,
    input: Value,
) -> Result<Value, Refused> {
    let base = http::base_url(step.upstream.base_url.as_deref(), DEFAULT_BASE);
    let builder = ctx
        .http
        .post(format!("{base}{PATH}"))
        .bearer_auth(secret.expose())
        .json(&json!({"model": "voice-enrollment", "input": input}));
    let reply = http::send(
        PROVIDER,
        builder,
        step.timeout,
        Some(secret),
        &Gate::default(),
    )
    .await
    .map_err(|f| Refused {
        outcome: step::from_failure(f),
        gone: false,
    })?;
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let code = doc["code"].as_str().unwrap_or_default();
    if reply.status.is_success() && code.is_empty() && doc["output"].is_object() {
        return Ok(doc["output"].clone());
    }
    let message = doc["message"].as_str().unwrap_or_default();
    let failure = ErrorAnswer::of(
        &reply,
        code.to_owned(),
        message,
        adapter::outcome_for_code(code),
    )
    .failure(PROVIDER, Some(secret));
    let gone = adapter::clone_gone(Some(reply.status.as_u16()), &failure.message);
    let outcome = match step::from_failure(failure) {
        Outcome::Failed(m) => Outcome::Failed(format!("scope {}: {m}", step.scope.id)),
        other => other,
    };
    Err(Refused { outcome, gone })
}

async fn create(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let clips = step::clips(ctx, step.task).await?;
    let Some(clip) = clips.first() else {
        return Err(Outcome::Failed("no clip to clone from".into()));
    };
    let sample = format!(
        "data:{};base64,{}",
        step::media_type(clip),
        base64::engine::general_purpose::STANDARD.encode(&clip.bytes)
    );
    let mut input = json!({
        "action": "create_voice",
        "target_model": target_model(&step),
        "prefix": prefix(&step.task.pack_id),
        "url": sample,
    });
    let language = clip
        .reference
        .language
        .split('-')
        .next()
        .unwrap_or_default();
    if !language.is_empty() {
        input["language_hints"] = json!([language.to_ascii_lowercase()]);
    }
    let output = call(ctx, &step, secret, input)
        .await
        .map_err(|r| r.outcome)?;
    match output["voice_id"].as_str() {
        Some(id) if !id.is_empty() => Ok(Outcome::Training {
            vendor_voice_id: id.to_owned(),
            poll_after: ctx.poll_after,
        }),
        _ => Ok(Outcome::Retry {
            after: Duration::ZERO,
            error: "dashscope: create_voice answered without output.voice_id".into(),
        }),
    }
}

fn ready(id: &str) -> Outcome {
    Outcome::Ready {
        vendor_voice_id: id.to_owned(),
        expires_at: Some(SystemTime::now() + UNUSED_LIFETIME),
    }
}

fn gone(step: &Step<'_>, id: &str, why: &str) -> Outcome {
    Outcome::Expired {
        error: format!(
            "dashscope: the account of scope {} no longer holds voice {id} ({why})",
            step.scope.id
        ),
        reclaimed: false,
    }
}

async fn poll(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let id = step.voice_id()?;
    let input = json!({"action": "query_voice", "voice_id": id});
    let output = match call(ctx, &step, secret, input).await {
        Ok(o) => o,
        Err(r) if r.gone => return Ok(gone(&step, id, "query_voice: voice not found")),
        Err(r) => return Ok(r.outcome),
    };
    let status = output["status"].as_str().unwrap_or_default();
    Ok(match status {
        "OK" => ready(id),
        "DEPLOYING" => Outcome::Training {
            vendor_voice_id: id.to_owned(),
            poll_after: ctx.poll_after,
        },
        "UNDEPLOYED" => Outcome::Failed(format!(
            "scope {}: dashscope did not deploy voice {id} (status UNDEPLOYED); clone again \
             with another clip",
            step.scope.id
        )),
        other => Outcome::Retry {
            after: Duration::ZERO,
            error: format!("dashscope: query_voice answered status {other:?}"),
        },
    })
}

async fn delete(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let id = step.voice_id()?;
    let input = json!({"action": "delete_voice", "voice_id": id});
    match call(ctx, &step, secret, input).await {
        Ok(_) => Ok(Outcome::Deleted),
        Err(r) if r.gone => Ok(Outcome::Deleted),
        Err(r) => Ok(r.outcome),
    }
}

async fn import(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let mut found = Vec::new();
    for page in 0.. {
        let input = json!({"action": "list_voice", "page_index": page, "page_size": PAGE});
        let output = call(ctx, &step, secret, input)
            .await
            .map_err(|r| r.outcome)?;
        let voices = output["voice_list"]
            .as_array()
            .map_or(&[][..], Vec::as_slice);
        found.extend(
            voices
                .iter()
                .filter_map(|v| v["voice_id"].as_str())
                .map(|id| (id.to_owned(), String::new())),
        );
        if voices.len() < PAGE {
            break;
        }
    }
    Ok(Outcome::Imported(found))
}

async fn keep_alive(ctx: &Context, step: Step<'_>) -> Result<Outcome, Outcome> {
    let id = step.voice_id()?;
    match step::speak_once(ctx, &step, Provider::DashScope, target_model(&step), id).await? {
        Ok(_) => Ok(ready(id)),
        Err(f) if adapter::clone_gone(f.http_status, &f.message) => {
            Ok(gone(&step, id, "synthesis: voice not found"))
        }
        Err(f) => Ok(step::from_failure(f)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_keep_dashscope_rules_and_the_pack_ids_start() {
        assert_eq!(prefix("vp_0A1b2c3d4e5f60718293a4b5"), "vp0a1b2c3d");
        assert_eq!(prefix("ab"), "ab");
        assert_eq!(prefix("__"), "voxpool");
        let p = prefix("vp_0123456789abcdef01234567");
        assert!(p.len() <= 10 && p.chars().all(|c| c.is_ascii_alphanumeric()));
    }
}
