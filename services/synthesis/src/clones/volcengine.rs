//! Volcengine 声音复刻, in the AppID (the key) that bought the slot (docs/VENDORS.md, "Voice
//! cloning", Volcengine; <https://www.volcengine.com/docs/6561/1305191>). Auth
//! `Authorization: Bearer;<token>`, header `Resource-Id` (upstream `params.clone_resource_id`,
//! default `volc.megatts.voiceclone`); answers carry `BaseResp.StatusCode` (0 = success).
//!
//! A slot is a speaker id the AppID bought (`S_…`), so the config names them per key in the
//! upstream's params: `params = { speaker_ids = { "<key id>" = ["S_1", "S_2"] } }`.
//! - CREATE: asks `POST /api/v1/mega_tts/status` for each of the key's speaker ids and trains
//!   the first that holds no voice (status 0) with `POST /api/v1/mega_tts/audio/upload`
//!   (`appid`, `speaker_id`, one `audios` item: the first clip in base64 with its format and
//!   transcript, `source` 2, `model_type` from `params.clone_model_type`, default 1) →
//!   `training`. None free: `failed` naming the scope and its speaker ids (Volcengine has no
//!   delete: a slot is bought). 1107 (slots) and 1105 (trainings used up) are `failed`.
//! - POLL, KEEPALIVE: `status` → 2 Success / 4 Active `ready`, 1 `training`, 3 `failed`, 0
//!   `expired` (`reclaimed` when the answer's `state` says `Reclaimed`).
//! - DELETE: no vendor call (there is none): `deleted`, the slot stays bought and trainable.
//! - IMPORT: `status` of the key's speaker ids; those holding a voice are listed (unnamed:
//!   Volcengine keeps no name, so they stay unbound).

use base64::Engine as _;
use serde_json::{Value, json};
use voxpool_domain::{provider::Provider, secret::Secret};

use super::{
    Outcome, Work,
    step::{self, Context, Step},
};
use crate::adapters::{gate::Gate, http};

const PROVIDER: &str = Provider::Volcengine.as_str();
const DEFAULT_BASE: &str = "https://openspeech.bytedance.com";
const DEFAULT_RESOURCE: &str = "volc.megatts.voiceclone";

/// Runs the step (module doc).
pub async fn run(ctx: &Context, step: Step<'_>) -> Outcome {
    let secret = match http::require_secret(PROVIDER, step.key) {
        Ok(s) => s,
        Err(f) => return step::from_failure(f),
    };
    let result = match step.task.work {
        Work::Create => create(ctx, step, secret).await,
        Work::Poll | Work::KeepAlive => match step.voice_id() {
            Ok(id) => poll(ctx, &step, secret, id).await,
            Err(o) => Err(o),
        },
        Work::Delete => {
            tracing::info!(scope = %step.scope.id, "volcengine has no delete: the clone is forgotten here, its speaker id stays bought and is trained again by a later clone");
            Ok(Outcome::Deleted)
        }
        Work::Import => import(ctx, step, secret).await,
    };
    result.unwrap_or_else(|o| o)
}

/// The key's bought speaker ids from the upstream's `params.speaker_ids`.
fn speaker_ids(step: &Step<'_>) -> Vec<String> {
    step.upstream
        .params
        .get("speaker_ids")
        .and_then(|m| m.get(&step.key.app_id))
        .and_then(Value::as_array)
        .map(|ids| {
            ids.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// POSTs `body` to `path`: the document when `BaseResp.StatusCode` is 0, else the report.
async fn call(
    ctx: &Context,
    step: &Step<'_>,
    secret: &Secret,
    path: &str,
    body: &Value,
) -> Result<Value, Outcome> {
    let base = http::base_url(step.upstream.base_url.as_deref(), DEFAULT_BASE);
    let resource =
        http::upstream_str(&step.upstream.params, "clone_resource_id").unwrap_or(DEFAULT_RESOURCE);
    let builder = ctx
        .http
        .post(format!("{base}{path}"))
        .header("authorization", format!("Bearer;{}", secret.expose()))
        .header("resource-id", resource)
        .json(body);
    let reply = http::send(
        PROVIDER,
        builder,
        step.timeout,
        Some(secret),
        &Gate::default(),
    )
    .await
    .map_err(step::from_failure)?;
    let doc: Value = serde_json::from_slice(&reply.body).unwrap_or(Value::Null);
    let code = doc["BaseResp"]["StatusCode"].as_i64();
    if reply.status.is_success() && code == Some(0) {
        return Ok(doc);
    }
    let message = doc["BaseResp"]["StatusMessage"]
        .as_str()
        .unwrap_or_default();
    let label = code.map(|c| format!("code {c}")).unwrap_or_default();
    // A refusal sent with HTTP 200 (slots, trainings used up, a bad sample) is for good.
    let verdict = (reply.status.is_success() && code.is_some())
        .then_some(voxpool_domain::contract::Outcome::ClientError);
    let failure =
        http::ErrorAnswer::of(&reply, label, message, verdict).failure(PROVIDER, Some(secret));
    Err(match step::from_failure(failure) {
        Outcome::Failed(m) => Outcome::Failed(format!("scope {}: {m}", step.scope.id)),
        other => other,
    })
}

/// `(status, state)` of a speaker id.
async fn status(
    ctx: &Context,
    step: &Step<'_>,
    secret: &Secret,
    speaker: &str,
) -> Result<(i64, String), Outcome> {
    let body = json!({"appid": step.key.app_id, "speaker_id": speaker});
    let doc = call(ctx, step, secret, "/api/v1/mega_tts/status", &body).await?;
    Ok((
        doc["status"].as_i64().unwrap_or(0),
        doc["state"].as_str().unwrap_or_default().to_owned(),
    ))
}

async fn create(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let ids = speaker_ids(&step);
    if ids.is_empty() {
        return Err(Outcome::Failed(format!(
            "scope {}: volcengine clones train a speaker id AppID {} bought; list them in upstream \
             {}'s params: speaker_ids = {{ {} = [\"S_…\"] }}",
            step.scope.id, step.key.app_id, step.upstream.id, step.key.app_id
        )));
    }
    let mut free = None;
    for id in &ids {
        if status(ctx, &step, secret, id).await?.0 == 0 {
            free = Some(id.clone());
            break;
        }
    }
    let Some(speaker) = free else {
        return Err(Outcome::Failed(format!(
            "scope {}: all {} speaker ids AppID {} bought hold a voice ({}); volcengine cannot \
             delete a clone: buy a slot and add its speaker id, or clone into another scope",
            step.scope.id,
            ids.len(),
            step.key.app_id,
            ids.join(", ")
        )));
    };
    let clips = step::clips(ctx, step.task).await?;
    let Some(clip) = clips.first() else {
        return Err(Outcome::Failed("no clip to clone from".into()));
    };
    let model_type = http::upstream_u32(&step.upstream.params, "clone_model_type").unwrap_or(1);
    let body = json!({
        "appid": step.key.app_id,
        "speaker_id": speaker,
        "audios": [{
            "audio_bytes": base64::engine::general_purpose::STANDARD.encode(&clip.bytes),
            "audio_format": step::extension(clip),
            "text": clip.reference.transcript,
        }],
        "source": 2,
        "model_type": model_type,
    });
    call(ctx, &step, secret, "/api/v1/mega_tts/audio/upload", &body).await?;
    Ok(Outcome::Training {
        vendor_voice_id: speaker,
        poll_after: ctx.poll_after,
    })
}

async fn poll(
    ctx: &Context,
    step: &Step<'_>,
    secret: &Secret,
    id: &str,
) -> Result<Outcome, Outcome> {
    let (code, state) = status(ctx, step, secret, id).await?;
    Ok(match code {
        2 | 4 => Outcome::Ready {
            vendor_voice_id: id.to_owned(),
            expires_at: None,
        },
        1 => Outcome::Training {
            vendor_voice_id: id.to_owned(),
            poll_after: ctx.poll_after,
        },
        3 => Outcome::Failed(format!(
            "scope {}: volcengine reports the training of speaker id {id} failed; clone again \
             with other clips",
            step.scope.id
        )),
        _ => Outcome::Expired {
            error: format!(
                "volcengine reports speaker id {id} of AppID {} holds no voice ({})",
                step.key.app_id,
                if state.is_empty() { "status 0" } else { &state }
            ),
            reclaimed: state == "Reclaimed",
        },
    })
}

async fn import(ctx: &Context, step: Step<'_>, secret: &Secret) -> Result<Outcome, Outcome> {
    let mut found = Vec::new();
    for id in speaker_ids(&step) {
        if matches!(status(ctx, &step, secret, &id).await?.0, 2 | 4) {
            found.push((id, String::new()));
        }
    }
    Ok(Outcome::Imported(found))
}
